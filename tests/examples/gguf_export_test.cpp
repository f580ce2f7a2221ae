// Tests of writing a Llama decoder back as GGUF (examples/models/gguf_export.hpp, barato_quantize):
// a written file reads back as the same model (weights bit for bit, the same vocabulary, run.c's greedy
// ids); Q8_0 / Q4_0 tensor data equals, byte for byte, what llama.cpp's quantizer wrote for the same F32
// tensors; matrices of a width that is not a multiple of 32 fall back to F16 and are named; the export
// streamed from a GGUF file or a llama2.c checkpoint tensor by tensor writes the same file holding one
// tensor at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "models/generate.hpp"
#include "models/gguf.hpp"
#include "models/gguf_export.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_writer.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/ggml_pack.hpp"
#include "support/greedy.hpp"
#include "support/reference_file.hpp"
#include "support/scratch_dir.hpp"

using namespace barato_examples;

using barato::test::greedy_ids;

namespace {

GgufFile round_trip(const GgufExport& e, const std::string& name) {
  const auto bytes = e.writer.bytes();
  return GgufFile::from_bytes(name, std::vector<std::byte>(bytes.begin(), bytes.end()));
}

bool same_floats(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Every weight of `a` and `b`, bit for bit.
bool same_weights(const LlamaWeights<barato::nn::DenseLinear>& a, const LlamaWeights<barato::nn::DenseLinear>& b) {
  bool ok = same_floats(a.token_embedding.span(), b.token_embedding.span()) && same_floats(a.rms_final.span(), b.rms_final.span()) &&
            same_floats(a.classifier.weights(), b.classifier.weights()) && a.layers.size() == b.layers.size();
  for (std::size_t l = 0; ok && l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    ok = same_floats(x.rms_att.span(), y.rms_att.span()) && same_floats(x.rms_ffn.span(), y.rms_ffn.span()) &&
         same_floats(x.wq.weights(), y.wq.weights()) && same_floats(x.wk.weights(), y.wk.weights()) &&
         same_floats(x.wv.weights(), y.wv.weights()) && same_floats(x.wo.weights(), y.wo.weights()) &&
         same_floats(x.w1.weights(), y.w1.weights()) && same_floats(x.w2.weights(), y.w2.weights()) &&
         same_floats(x.w3.weights(), y.w3.weights());
  }
  return ok;
}


}  // namespace

TEST_CASE("gguf export: --type names") {
  CHECK(parse_gguf_type("f32") == GgmlType::f32);
  CHECK(parse_gguf_type("f16") == GgmlType::f16);
  CHECK(parse_gguf_type("q8_0") == GgmlType::q8_0);
  CHECK(parse_gguf_type("q4_0") == GgmlType::q4_0);
  CHECK_THROWS_WITH_AS((void)parse_gguf_type("q4_k"), doctest::Contains("expected f32, f16, q8_0 or q4_0"), barato::value_error);
}

TEST_CASE("gguf export: stories260K.bin as F32 GGUF reads back as the same model, vocabulary and greedy ids") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  const GgufExport e = export_llama_gguf(w, tok, GgmlType::f32, nullptr, "stories260K");
  CHECK(e.fallbacks.empty());
  CHECK(e.copied == 0);
  CHECK(e.tensors == 2 + 9 * w.config.n_layers);  // tied classifier: no output.weight
  const GgufFile f = round_trip(e, "written.gguf");
  CHECK(f.tensor("output.weight") == nullptr);
  const LlamaConfig c = gguf_llama_config(f);
  CHECK(c.seq_len == w.config.seq_len);
  CHECK(c.hidden_dim == w.config.hidden_dim);
  CHECK(c.shared_classifier);
  const auto back = load_gguf_llama_fp32(f, c);
  CHECK(same_weights(w, back));

  const Tokenizer g = gguf_tokenizer(f);
  REQUIRE(g.vocab_size() == tok.vocab_size());
  for (const char* s : {"Once upon a time", "Lily wanted to", "  two  spaces\nnewline, ünïcödé 日本 🙂", ""}) {
    CAPTURE(s);
    CHECK(g.encode(s) == tok.encode(s));
    const auto ids = tok.encode(s);
    CHECK(g.decode_text(ids) == tok.decode_text(ids));
  }
  const auto r = barato::test::read_reference_file(dir / "stories260K/reference/greedy_lily_wanted_to.txt");
  const auto prompt = g.encode(barato::test::parse_json_string(r.at("prompt_json")), true);
  CHECK(greedy_ids(load_gguf_llama(f, c), prompt, std::stoul(r.at("steps"))) == r.ids("generated_ids"));
}

TEST_CASE("gguf export: Q8_0 / Q4_0 tensor data equals llama.cpp's quantizer on the same F32 tensors") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-h192-f32.gguf");
  if (dir.empty()) return;
  const GgufFile src = GgufFile::open(dir / "stories260K/stories260K-h192-f32.gguf");
  const LlamaConfig c = gguf_llama_config(src, 512);
  const auto w = load_gguf_llama_fp32(src, c);
  const Tokenizer tok = gguf_tokenizer(src);
  for (const std::string q : {"q8_0", "q4_0"}) {
    INFO(q);
    const GgmlType type = parse_gguf_type(q);
    const GgufExport e = export_llama_gguf(w, tok, type, &src);
    CHECK(e.fallbacks.empty());  // every width of the padded model is a multiple of 32
    const GgufFile mine = round_trip(e, "mine.gguf");
    const GgufFile theirs = GgufFile::open(dir / ("stories260K/stories260K-h192-" + q + ".gguf"));
    REQUIRE(mine.tensors().size() == theirs.tensors().size());
    std::size_t same_type = 0, equal = 0;
    for (const auto& t : theirs.tensors()) {
      const GgufTensor* m = mine.tensor(t.name);
      REQUIRE(m != nullptr);
      CHECK(m->ne == t.ne);
      if (m->type != t.type) {
        // llama-quantize keeps output.weight in Q8_0 for a Q4_0 file; barato writes what it was asked.
        CHECK(std::string(t.name) == "output.weight");
        continue;
      }
      ++same_type;
      equal += std::ranges::equal(m->data, t.data);
    }
    CHECK(equal == same_type);
    CHECK(same_type >= theirs.tensors().size() - 1);
    // The metadata is the source's, with the file type rewritten.
    CHECK(mine.find("general.file_type")->bits == gguf_file_type(type));
    CHECK(mine.find("tokenizer.ggml.tokens")->count == 512);
  }
}

TEST_CASE("gguf export: a quantized source's tensors already in the target type are copied, not requantized") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-h192-q8_0.gguf");
  if (dir.empty()) return;
  const GgufFile src = GgufFile::open(dir / "stories260K/stories260K-h192-q8_0.gguf");
  const LlamaConfig c = gguf_llama_config(src, 512);
  const GgufExport e = export_llama_gguf(load_gguf_llama_fp32(src, c), gguf_tokenizer(src), GgmlType::q8_0, &src);
  CHECK(e.copied == src.tensors().size());
  const GgufFile back = round_trip(e, "back.gguf");
  for (const auto& t : src.tensors()) CHECK(std::ranges::equal(back.tensor(t.name)->data, t.data));
}

TEST_CASE("gguf export: widths that are not a multiple of 32 stay F16 and are named; the file still runs") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  const GgufExport e = export_llama_gguf(w, tok, GgmlType::q4_0, nullptr);
  REQUIRE(e.fallbacks.size() == w.config.n_layers);  // ffn_down: 172 input columns
  CHECK(e.fallbacks[0].find("blk.0.ffn_down.weight: 172 columns") != std::string::npos);
  const GgufFile f = round_trip(e, "q4.gguf");
  CHECK(f.tensor("blk.0.ffn_down.weight")->type == static_cast<std::uint32_t>(GgmlType::f16));
  CHECK(f.tensor("blk.0.ffn_up.weight")->type == static_cast<std::uint32_t>(GgmlType::q4_0));
  CHECK(f.tensor("blk.0.attn_norm.weight")->type == static_cast<std::uint32_t>(GgmlType::f32));
  CHECK(f.tensor("token_embd.weight")->type == static_cast<std::uint32_t>(GgmlType::q4_0));
  // The file runs: its first generated tokens are the fp32 model's (4-bit weights leave the path later).
  const LlamaConfig c = gguf_llama_config(f);
  const auto prompt = tok.encode("Once upon a time", true);
  const auto q = greedy_ids(load_gguf_llama(f, c), prompt, 12);
  const auto ref = greedy_ids(w, prompt, 12);
  CHECK(std::vector<int>(q.begin(), q.begin() + 3) == std::vector<int>(ref.begin(), ref.begin() + 3));
}

TEST_CASE("gguf export: streamed from a GGUF file, tensor by tensor, gives the loaded model's file and holds one tensor") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-h192-q4_0.gguf");
  if (dir.empty()) return;
  for (const std::string file : {"stories260K-f32.gguf", "stories260K-h192-f32.gguf", "stories260K-h192-q8_0.gguf",
                                 "stories260K-h192-q4_0.gguf"}) {
    const GgufFile src = GgufFile::open(dir / "stories260K" / file);
    const LlamaConfig c = gguf_llama_config(src, 512);
    const auto w = load_gguf_llama_fp32(src, c);
    const Tokenizer tok = gguf_tokenizer(src);
    std::size_t largest = 0, total = 0;
    for (const auto& slot : detail::llama_tensor_slots(c)) {
      largest = std::max(largest, slot.rows * slot.cols);
      total += slot.rows * slot.cols;
    }
    for (const std::string type : {"f32", "f16", "q8_0", "q4_0"})
      for (const GgufFile* metadata : {&src, static_cast<const GgufFile*>(nullptr)}) {
        const std::string how = metadata != nullptr ? " (source metadata)" : " (vocabulary from tok)";
        INFO(file << " -> " << type << how);
        const GgmlType t = parse_gguf_type(type);
        const GgufExport whole = export_llama_gguf(w, tok, t, metadata, "s");
        barato::CountingResource mem;
        const GgufExport streamed = export_gguf_llama_streamed(src, c, tok, t, metadata, "s", &mem);
        CHECK(mem.peak() == 0);  // nothing is dequantized before the file is written
        CHECK(streamed.writer.bytes() == whole.writer.bytes());
        CHECK(streamed.fallbacks == whole.fallbacks);
        CHECK(streamed.tensors == whole.tensors);
        CHECK(streamed.copied == whole.copied);
        CHECK(streamed.tensor_bytes == whole.tensor_bytes);
        // One tensor's fp32 values at a time (at most the largest), far below the model's; none when
        // every tensor is copied from the source.
        CHECK((mem.peak() > 0) == (streamed.copied < streamed.tensors));
        CHECK(mem.peak() <= largest * sizeof(float) + 64);
        CHECK(mem.peak() < total * sizeof(float) / 4);
        CHECK(mem.current() == 0);
      }
  }
}

TEST_CASE("gguf export: streamed export checks every tensor before anything is written") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-h192-f32.gguf");
  if (dir.empty()) return;
  const GgufFile src = GgufFile::open(dir / "stories260K/stories260K-h192-f32.gguf");
  const LlamaConfig c = gguf_llama_config(src, 512);
  const auto without = [&](const std::string& drop, std::uint64_t cut) {  // src without one tensor, or with one a row short
    GgufWriter w;
    for (const auto& [key, v] : src.metadata()) w.add(std::string(key), gguf_write_value(v));
    for (const auto& t : src.tensors()) {
      if (t.name == drop && cut == 0) continue;
      std::vector<std::uint64_t> ne(t.ne.begin(), t.ne.end());
      std::span<const std::byte> data = t.data;
      if (t.name == drop) {
        ne.back() -= cut;
        data = data.first(data.size() - cut * data.size() / (ne.back() + cut));
      }
      w.add_tensor(std::string(t.name), static_cast<GgmlType>(t.type), ne, data);
    }
    return GgufFile::from_bytes("broken.gguf", w.bytes());
  };
  const Tokenizer tok = gguf_tokenizer(src);
  const GgufFile missing = without("blk.1.ffn_up.weight", 0);
  CHECK_THROWS_WITH_AS((void)export_gguf_llama_streamed(missing, c, tok, GgmlType::q8_0, &missing),
                       doctest::Contains("blk.1.ffn_up.weight"), barato::format_error);
  const GgufFile short_rows = without("blk.0.attn_k.weight", 1);
  CHECK_THROWS_WITH_AS((void)export_gguf_llama_streamed(short_rows, c, tok, GgmlType::q8_0, &short_rows),
                       doctest::Contains("blk.0.attn_k.weight"), barato::format_error);
}

TEST_CASE("gguf export: streamed from a file in all ten block types, the same file as from its F32 twin") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/tok512.bin");
  if (dir.empty()) return;
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", 512);
  const barato::test::BlockTypeModel model = barato::test::block_type_model(tok, 5);
  const GgufFile blocks = GgufFile::from_bytes("blocks.gguf", model.blocks), f32 = GgufFile::from_bytes("f32.gguf", model.f32);
  const LlamaConfig c = gguf_llama_config(blocks, 0);
  for (const GgmlType t : {GgmlType::f32, GgmlType::q8_0, GgmlType::q4_0}) {
    INFO(ggml_type_name(static_cast<std::uint32_t>(t)));
    // Without the source's metadata nothing is copied: both files are the F32 values encoded.
    const auto a = export_gguf_llama_streamed(blocks, c, tok, t, nullptr, "m").writer.bytes();
    CHECK(a == export_gguf_llama_streamed(f32, c, tok, t, nullptr, "m").writer.bytes());
    CHECK(a == export_llama_gguf(load_gguf_llama_fp32(blocks, c), tok, t, nullptr, "m").writer.bytes());
  }
}

namespace {

/// A llama2.c checkpoint with an unshared classifier (negative vocab_size in the header) and
/// pseudo-random weights, every width a multiple of 32; 512 pieces to match tok512.bin.
std::filesystem::path write_unshared_llama2c(const std::filesystem::path& p) {
  const Llama2cHeader h{.dim = 64, .hidden_dim = 96, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .vocab_size = -512, .seq_len = 16};
  const std::size_t floats = llama2c_layout(h, p.string()).total_floats;
  std::vector<float> v(floats);
  std::uint32_t s = 12345;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<std::int32_t>(s >> 8) - (1 << 23)) / float(1 << 23);  // uniform in [-1, 1)
  }
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&h), sizeof(h));
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return p;
}

}  // namespace

TEST_CASE("gguf export: streamed from a llama2.c checkpoint, tensor by tensor, gives the loaded model's file and holds one tensor") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", 512);
  const auto tmp = barato::test::scratch_dir() / "gguf_export_test.bin";
  // stories260K: tied classifier, a 172-wide ffn_down (F16 fallback); the crafted file: unshared
  // classifier (output.weight), every matrix quantizable.
  for (const auto& path : {dir / "stories260K/stories260K.bin", write_unshared_llama2c(tmp)}) {
    const auto w = load_llama2c(path);
    std::size_t largest = 0;
    for (const auto& slot : detail::llama_tensor_slots(w.config)) largest = std::max(largest, slot.rows * slot.cols);
    for (const std::string type : {"f32", "f16", "q8_0", "q4_0"}) {
      const std::string where = path.filename().string() + " -> " + type;
      INFO(where);
      const GgmlType t = parse_gguf_type(type);
      const GgufExport whole = export_llama_gguf(w, tok, t, nullptr, "s");
      barato::CountingResource mem;
      const GgufExport streamed = export_llama2c_streamed(path, tok, t, "s", &mem);
      CHECK(mem.peak() == 0);  // nothing is read before the file is written
      CHECK(streamed.writer.bytes() == whole.writer.bytes());
      CHECK(streamed.fallbacks == whole.fallbacks);
      CHECK(streamed.tensors == whole.tensors);
      CHECK(streamed.copied == 0);
      CHECK(streamed.tensor_bytes == whole.tensor_bytes);
      CHECK(mem.peak() > 0);
      CHECK(mem.peak() <= largest * sizeof(float) + 64);  // one tensor's values at a time
      CHECK(mem.current() == 0);
    }
    CHECK((round_trip(export_llama2c_streamed(path, tok, GgmlType::f32, "s"), "back.gguf").tensor("output.weight") != nullptr) ==
          !w.config.shared_classifier);
  }
  // A file that shrinks between the export and the writing: the tensor the read fails in is named.
  const GgufExport e = export_llama2c_streamed(tmp, tok, GgmlType::q8_0, "s");
  std::filesystem::resize_file(tmp, std::filesystem::file_size(tmp) - 4);
  CHECK_THROWS_WITH_AS((void)e.writer.bytes(), doctest::Contains("while reading wcls"), barato::format_error);
  // A bad header is refused before anything is set up.
  std::filesystem::resize_file(tmp, 10);
  CHECK_THROWS_AS((void)export_llama2c_streamed(tmp, tok, GgmlType::q8_0, "s"), barato::format_error);
}
