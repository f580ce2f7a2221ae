// Writes the seed corpora of the fuzz harnesses: OUT/<harness>/<name> for every harness of
// tests/fuzz/CMakeLists.txt.   usage: fuzz_make_corpus OUT [DATA_DIR]
// Without DATA_DIR only synthetic seeds are written (this is what tests/fuzz/corpus/ holds, so the
// committed seeds contain nothing of the model files). With DATA_DIR (the folder of stories260K/
// and text/; CI passes $BARATO_DATA_DIR) seeds cut from the real files are added: the tok512
// tokenizer whole and truncated, the stories260K checkpoint's header with a few hundred bytes of
// its weights, lines of the TinyStories text. Nothing is random: a fixed-seed generator.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "models/gguf_export.hpp"
#include "models/gguf_writer.hpp"
#include "models/llama_weights.hpp"
#include "models/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

std::uint64_t g_state = 0x9E3779B97F4A7C15ull;
std::uint64_t next() {  // xorshift64*
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 0x2545F4914F6CDD1Dull;
}

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class T>
void append(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

/// A llama2.c tokenizer file: 3 specials, 256 byte pieces, then `merges` (scores descending).
std::string tokenizer_file(const std::vector<std::string>& merges) {
  std::string f;
  std::int32_t max_len = 6;
  for (const auto& m : merges) max_len = std::max<std::int32_t>(max_len, static_cast<std::int32_t>(m.size()));
  append(f, max_len);
  const auto rec = [&](const std::string& p, float score) {
    append(f, score);
    append(f, static_cast<std::int32_t>(p.size()));
    f += p;
  };
  rec("<unk>", 0);
  rec("\n<s>\n", 0);
  rec("\n</s>\n", 0);
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    rec(buf, 0);
  }
  float s = -1;
  for (const auto& m : merges) rec(m, s -= 1);
  return f;
}

/// A llama2.c checkpoint with the given header and small random weights.
std::string checkpoint(std::int32_t dim, std::int32_t hidden, std::int32_t layers, std::int32_t heads, std::int32_t kv_heads,
                       std::int32_t vocab, std::int32_t seq_len) {
  std::string f;
  for (const std::int32_t v : {dim, hidden, layers, heads, kv_heads, vocab, seq_len}) append(f, v);
  const std::size_t head = static_cast<std::size_t>(dim / heads), kv_dim = static_cast<std::size_t>(kv_heads) * head;
  const std::size_t d = static_cast<std::size_t>(dim), h = static_cast<std::size_t>(hidden), L = static_cast<std::size_t>(layers);
  const std::size_t v = static_cast<std::size_t>(vocab < 0 ? -vocab : vocab);
  const std::size_t floats = v * d + L * (2 * d + 2 * d * d + 2 * kv_dim * d + 3 * h * d) + d +
                             static_cast<std::size_t>(seq_len) * head + (vocab < 0 ? v * d : 0);
  for (std::size_t i = 0; i < floats; ++i) append(f, static_cast<float>(static_cast<int>(next() % 200) - 100) / 256.0f);
  return f;
}

/// A version-1 (fp32) or version-2 (int8 values, fp32 scales per `group`) checkpoint in export.py's
/// layout: the 256-byte "ak42" header, the norm gains, then the matrices (examples/models/llama2c.hpp).
std::string versioned_checkpoint(std::int32_t version, std::int32_t dim, std::int32_t hidden, std::int32_t layers, std::int32_t heads,
                                 std::int32_t kv_heads, std::int32_t vocab, std::int32_t seq_len, bool shared, std::int32_t group) {
  std::string f;
  append(f, std::uint32_t{0x616b3432});
  append(f, version);
  for (const std::int32_t v : {dim, hidden, layers, heads, kv_heads, vocab, seq_len}) append(f, v);
  f.push_back(shared ? '\1' : '\0');
  if (version == 2) append(f, group);
  f.resize(256, '\0');
  const std::size_t head = static_cast<std::size_t>(dim / heads), kv_dim = static_cast<std::size_t>(kv_heads) * head;
  const std::size_t d = static_cast<std::size_t>(dim), h = static_cast<std::size_t>(hidden), L = static_cast<std::size_t>(layers);
  const std::size_t v = static_cast<std::size_t>(vocab);
  const auto floats = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) append(f, static_cast<float>(static_cast<int>(next() % 200) - 100) / 256.0f);
  };
  floats(2 * L * d + d);  // rms_att, rms_ffn, rms_final
  std::vector<std::size_t> mats{v * d};
  for (const std::size_t n : {d * d, kv_dim * d, kv_dim * d, d * d, h * d, d * h, h * d})
    for (std::size_t l = 0; l < L; ++l) mats.push_back(n);
  if (!shared) mats.push_back(v * d);
  for (const std::size_t n : mats) {
    if (version == 1) {
      floats(n);
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) f.push_back(static_cast<char>(next() & 0xFF));
    floats(n / static_cast<std::size_t>(group));
  }
  return f;
}

std::string random_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(next() & 0xFF);
  return s;
}

}  // namespace

/// Tiny GGUF llama files with Q8_0 and Q4_0 matrices (random weights, a 270-token vocabulary,
/// tied classifier), and a file with one metadata value of every type and one tensor of each type.
void gguf_seeds(const fs::path& dir) {
  using namespace barato_examples;
  LlamaConfig c;
  c.dim = 32, c.hidden_dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.vocab_size = 270,
  c.seq_len = 8, c.shared_classifier = true;
  const auto w = random_llama_weights(c, 7);
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.emplace_back(buf);
  }
  for (const char* m : {" ", "e", "t", "h", "th", "he", "the", " the", "a", " a", "n"}) pieces.emplace_back(m);
  std::vector<float> scores(pieces.size(), 0.0f);
  for (std::size_t i = 259; i < scores.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  const Tokenizer tok(pieces, scores, 6);
  const auto to_string = [](const std::vector<std::byte>& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); };
  for (const char* t : {"q8_0", "q4_0"})
    put(dir, std::string("tiny_llama_") + t + ".gguf", to_string(export_llama_gguf(w, tok, parse_gguf_type(t), nullptr).writer.bytes()));
  GgufWriter all;
  const std::vector<GgufWriteValue> ints = {GgufWriteValue::i32(1), GgufWriteValue::i32(-2)};
  const std::vector<GgufWriteValue> strs = {GgufWriteValue::string("a"), GgufWriteValue::string("")};
  const std::vector<GgufWriteValue> nested = {GgufWriteValue::array(GgufValueType::i32, ints),
                                              GgufWriteValue::array(GgufValueType::i32, ints)};
  all.add("u8", GgufWriteValue::u8(1)).add("i8", GgufWriteValue::i8(-1)).add("u16", GgufWriteValue::u16(2))
      .add("i16", GgufWriteValue::i16(-2)).add("u32", GgufWriteValue::u32(3)).add("i32", GgufWriteValue::i32(-3))
      .add("u64", GgufWriteValue::u64(4)).add("i64", GgufWriteValue::i64(-4)).add("f32", GgufWriteValue::f32(0.5f))
      .add("f64", GgufWriteValue::f64(0.25)).add("bool", GgufWriteValue::boolean(true)).add("str", GgufWriteValue::string("x"))
      .add("ints", GgufWriteValue::array(GgufValueType::i32, ints)).add("strs", GgufWriteValue::array(GgufValueType::string, strs))
      .add("nested", GgufWriteValue::array(GgufValueType::array, nested)).add("general.alignment", GgufWriteValue::u32(64));
  std::vector<std::byte> zeros(210, std::byte{0});
  all.add_tensor("f32", GgmlType::f32, {4, 2}, std::span(zeros).first(32));
  all.add_tensor("f16", GgmlType::f16, {4}, std::span(zeros).first(8));
  all.add_tensor("bf16", GgmlType::bf16, {2, 2}, std::span(zeros).first(8));
  all.add_tensor("q8_0", GgmlType::q8_0, {32, 2}, std::span(zeros).first(68));
  all.add_tensor("q4_0", GgmlType::q4_0, {32}, std::span(zeros).first(18));
  all.add_tensor("q4_1", GgmlType::q4_1, {32}, std::span(zeros).first(20));
  all.add_tensor("q5_0", GgmlType::q5_0, {32}, std::span(zeros).first(22));
  all.add_tensor("q5_1", GgmlType::q5_1, {32}, std::span(zeros).first(24));
  all.add_tensor("q2_k", GgmlType::q2_k, {256}, std::span(zeros).first(84));
  all.add_tensor("q3_k", GgmlType::q3_k, {256}, std::span(zeros).first(110));
  all.add_tensor("q4_k", GgmlType::q4_k, {256}, std::span(zeros).first(144));
  all.add_tensor("q5_k", GgmlType::q5_k, {256}, std::span(zeros).first(176));
  all.add_tensor("q6_k", GgmlType::q6_k, {256}, std::span(zeros).first(210));
  all.add_tensor("iq4_nl", GgmlType::iq4_nl, {32}, std::span(zeros).first(18));
  all.add_tensor("iq4_xs", GgmlType::iq4_xs, {256}, std::span(zeros).first(136));
  put(dir, "every_type.gguf", to_string(all.bytes()));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT [DATA_DIR]\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  // ---- tokenizer_load: synthetic files, one with a " " piece and merges, one with 259 records only
  put(out / "tokenizer_load", "merges.bin", tokenizer_file({" ", "e", "t", "h", "th", "he", "the", " the", "é", "€"}));
  put(out / "tokenizer_load", "bytes_only.bin", tokenizer_file({}));
  // ---- tokenizer_codec: mode byte 0 = encode the rest, 1 = decode the rest as int16 ids
  const char* texts[] = {"Once upon a time, there was a little girl.", "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac 100",
                         "\xff\xfe\xc3(\xe2\x28\xa1 invalid", "tab\there\nnewline  two  spaces", "\xf0\x9f\x98\x80\xf0\x9f\x98"};
  int i = 0;
  for (const char* t : texts) put(out / "tokenizer_codec", "text" + std::to_string(i++), std::string(1, '\0') + t);
  {
    std::string ids(1, '\1');
    for (std::int16_t id : {1, 365, 2, 3, 258, 259, 511, 0, 100})  // BOS, pieces, EOS, byte pieces, ends
      append(ids, id);
    put(out / "tokenizer_codec", "ids", ids);
  }
  // ---- llama2c: tiny checkpoints, shared and unshared classifier, GQA
  put(out / "llama2c", "tiny_shared.bin", checkpoint(8, 12, 1, 2, 1, 6, 4));
  put(out / "llama2c", "tiny_unshared.bin", checkpoint(4, 4, 2, 2, 2, -5, 2));
  put(out / "llama2c", "tiny_v1.bin", versioned_checkpoint(1, 8, 12, 1, 2, 1, 6, 4, true, 0));
  put(out / "llama2c", "tiny_v2_g16.bin", versioned_checkpoint(2, 16, 32, 1, 2, 1, 6, 4, true, 16));
  put(out / "llama2c", "tiny_v2_unshared_g8.bin", versioned_checkpoint(2, 8, 12, 2, 2, 2, 5, 2, false, 8));
  // ---- requests: JSON Lines covering every key, escapes, blank lines
  put(out / "requests", "basic.jsonl",
      "{\"id\": \"r1\", \"prompt\": \"Once upon a time\", \"max_tokens\": 64, \"temperature\": 0, \"seed\": 7, \"arrival\": 0}\n"
      "\n"
      "{\"prompt_ids\": [1, 365, 2], \"max_tokens\": 3, \"top_k\": 40, \"top_p\": 0.9, \"min_p\": 0.05, \"priority\": -2, "
      "\"stop\": [2, 13]}\n");
  put(out / "requests", "escapes.jsonl",
      "{\"id\": \"\\u00e9\\ud83d\\ude00\\n\\t\\\"\", \"prompt\": \"a\\/b\\\\c\", \"max_tokens\": 1, \"temperature\": 1.5e-1}\r\n");
  // ---- paged_pool and scheduler: the harnesses read any bytes as a program; a few random ones
  for (int k = 0; k < 6; ++k) put(out / "paged_pool", "random" + std::to_string(k), random_bytes(32 + 48 * static_cast<std::size_t>(k)));
  for (int k = 0; k < 6; ++k) put(out / "scheduler", "random" + std::to_string(k), random_bytes(24 + 40 * static_cast<std::size_t>(k)));
  gguf_seeds(out / "gguf");

  if (argc >= 3) {  // seeds cut from the real files (never committed)
    const fs::path data = argv[2];
    const std::string tok = slurp(data / "stories260K/tok512.bin");
    if (!tok.empty()) {
      put(out / "tokenizer_load", "tok512.bin", tok);
      put(out / "tokenizer_load", "tok512_cut.bin", tok.substr(0, 300));
    }
    const std::string ck = slurp(data / "stories260K/stories260K.bin");
    if (ck.size() > 400) put(out / "llama2c", "stories260K_head.bin", ck.substr(0, 28 + 372));
    const std::string q80 = slurp(data / "stories260K/stories260K_q80.bin");
    if (q80.size() > 700) put(out / "llama2c", "stories260K_q80_head.bin", q80.substr(0, 700));
    std::ifstream text(data / "text/tinystories-valid-sample.txt", std::ios::binary);
    std::string line;
    for (int k = 0; k < 8 && std::getline(text, line); ++k)
      if (!line.empty()) put(out / "tokenizer_codec", "story" + std::to_string(k), std::string(1, '\0') + line.substr(0, 400));
  }
  std::printf("fuzz corpus written to %s\n", out.string().c_str());
  return 0;
}
