// Tests of the llama2.c tokenizer (examples/models/tokenizer.hpp): the fast encoder against a literal
// transcription of run.c's quadratic encode (tests/support/tokenizer_reference.hpp), the README's
// examples and token counts, decoding, and bad tokenizer files.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/tokenizer_reference.hpp"
#include "support/scratch_dir.hpp"

namespace fs = std::filesystem;
using barato_examples::Token;
using barato_examples::Tokenizer;

namespace {

const fs::path& temp_dir() { return barato::test::scratch_dir(); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<int> as_int(const std::vector<Token>& v) { return {v.begin(), v.end()}; }

barato::test::TokenizerReference reference_of(const Tokenizer& t) {
  return {std::vector<std::string>(t.pieces().begin(), t.pieces().end()), std::vector<float>(t.scores().begin(), t.scores().end())};
}

/// A synthetic vocabulary: 3 specials, 256 byte pieces, then `merged` with scores (ties included).
Tokenizer synthetic(const std::vector<std::pair<std::string, float>>& merged) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores = {0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.emplace_back(buf);
    scores.push_back(0);
  }
  std::size_t max_len = 6;
  for (const auto& [p, s] : merged) {
    pieces.push_back(p);
    scores.push_back(s);
    max_len = std::max(max_len, p.size());
  }
  return Tokenizer(std::move(pieces), std::move(scores), max_len);
}

/// Random strings over a small alphabet that hits merges often, plus odd bytes and UTF-8.
std::string random_text(std::mt19937& gen, std::size_t max_len) {
  static const std::vector<std::string> atoms = {"a", "b", "ab", "aa", " ", "  ", "e", "th", "the", "\n", "é", "€", "😀",
                                                 "\xC3", "\x80", "\xFF", "\x01", "ing", " a", "x", "\xE2\x82", "\t"};
  std::uniform_int_distribution<std::size_t> len(0, max_len), pick(0, atoms.size() - 1);
  std::string s;
  const std::size_t n = len(gen);
  for (std::size_t i = 0; i < n; ++i) s += atoms[pick(gen)];
  return s;
}

void write_bytes(const fs::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void put_i32(std::vector<unsigned char>& b, std::int32_t v) {
  unsigned char r[4];
  std::memcpy(r, &v, 4);
  b.insert(b.end(), r, r + 4);
}

}  // namespace

TEST_CASE("tokenizer: fast encode equals run.c's quadratic encode on a synthetic vocabulary with ties") {
  // Ties on purpose (several pieces share score 0 / -1), chains (a+a -> aa, aa+aa -> aaaa), and a
  // piece that is a multi-byte code point.
  const Tokenizer t = synthetic({{" ", -5}, {"aa", 0}, {"ab", 0}, {"ba", 0}, {"aaaa", -1}, {"aab", -1}, {"th", -2},
                                 {"the", -1}, {" the", -3}, {"é", -4}, {" a", 0}, {"abab", 0}, {"\n\n", -2}, {"in", -7},
                                 {"ing", -6}, {"€", -9}, {"bb", -1e11f}});
  const auto ref = reference_of(t);
  std::mt19937 gen(1234);
  for (int i = 0; i < 1500; ++i) {
    const std::string s = random_text(gen, i < 1300 ? 12 : 80);
    for (bool bos : {true, false}) {
      INFO("text: " << s << " bos " << bos);
      REQUIRE(as_int(t.encode(s, bos)) == ref.encode(s, bos));
    }
  }
  // The never-merge threshold: "bb" scores below -1e10.
  CHECK(as_int(t.encode("bb", false)) == std::vector<int>{t.find(" "), 'b' + 3, 'b' + 3});
}

TEST_CASE("tokenizer: empty string and edge inputs") {
  const Tokenizer t = synthetic({{" ", -5}, {"ab", 0}});
  CHECK(t.encode("", true) == std::vector<Token>{1});
  CHECK(t.encode("", false).empty());
  CHECK(t.encode("", true, true) == std::vector<Token>{1, 2});
  // A byte not in the vocabulary falls back to id byte + 3; a NUL byte is an ordinary byte here.
  const std::string s("\xFF\x00z", 3);
  CHECK(t.encode(s, false) == std::vector<Token>{t.find(" "), 0xFF + 3, 0 + 3, 'z' + 3});
  // Five continuation bytes in a row group as 4 + 1, like run.c.
  const auto ref = reference_of(t);
  const std::string cont = "\x80\x81\x82\x83\x84";
  CHECK(as_int(t.encode(cont, true)) == ref.encode(cont, true));
  // No " " piece: encoding non-empty text is a value_error, the empty string still works.
  const Tokenizer nospace = synthetic({{"ab", 0}});
  CHECK_THROWS_AS((void)nospace.encode("ab"), barato::value_error);
  CHECK(nospace.encode("") == std::vector<Token>{1});
}

TEST_CASE("tokenizer: decode and safe print follow run.c") {
  const Tokenizer t = synthetic({{" ", -5}, {" hello", -1}, {"<0x4", -2}});
  const Token hello = t.find(" hello");
  CHECK(t.decode(1, hello) == "hello");  // leading space stripped after BOS
  CHECK(t.decode(5, hello) == " hello");
  CHECK(t.decode(1, 'A' + 3) == "A");    // <0x41> -> raw byte
  CHECK(t.decode(1, 10 + 3) == "\n");
  CHECK(t.decode(1, t.find("<0x4")) == "\x04");  // sscanf accepts a single hex digit
  std::string out;
  Tokenizer::safe_append(t.decode(1, 7 + 3), out);  // \a: not printable, dropped
  Tokenizer::safe_append(t.decode(1, 0 + 3), out);  // NUL: dropped
  Tokenizer::safe_append(t.decode(1, 0xC3 + 3), out);  // lone high byte: dropped
  CHECK(out.empty());
  Tokenizer::safe_append(t.decode(1, '\t' + 3), out);
  Tokenizer::safe_append(t.decode(1, 'x' + 3), out);
  CHECK(out == "\tx");
  CHECK_THROWS_AS((void)t.decode(1, 100000), barato::value_error);
  CHECK(Tokenizer::byte_piece_value("<0xzz>") == -1);
  CHECK(Tokenizer::byte_piece_value("<0xab>") == 0xAB);
}

TEST_CASE("tokenizer: bad files") {
  const fs::path p = temp_dir() / "tok.bin";
  auto expect = [&](const std::vector<unsigned char>& bytes, std::size_t vocab, std::size_t offset, const char* needle) {
    write_bytes(p, bytes);
    try {
      (void)barato_examples::load_tokenizer(p, vocab);
      FAIL("expected format_error");
    } catch (const barato::format_error& e) {
      CHECK(e.file() == p.string());
      CHECK(e.offset() == offset);
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  // A well-formed 259-token file to corrupt.
  std::vector<unsigned char> good;
  put_i32(good, 6);
  for (int i = 0; i < 259; ++i) {
    const float s = 0;
    unsigned char r[4];
    std::memcpy(r, &s, 4);
    good.insert(good.end(), r, r + 4);
    put_i32(good, 1);
    good.push_back(static_cast<unsigned char>('a' + i % 26));
  }
  write_bytes(p, good);
  CHECK(barato_examples::load_tokenizer(p, 259).vocab_size() == 259);
  CHECK(barato_examples::load_tokenizer(p).vocab_size() == 259);

  expect({1, 0}, 0, 0, "truncated header");
  std::vector<unsigned char> b = {0, 0, 0, 0};
  expect(b, 0, 0, "max_token_length");
  // Entry running past the end: the last record claims 5 bytes, only 1 follows.
  b = good;
  const std::size_t last_len = b.size() - 5;
  b[last_len] = 5;
  expect(b, 259, b.size() - 1, "runs past the end");
  // Negative length.
  b = good;
  b[last_len] = 0xFF; b[last_len + 1] = 0xFF; b[last_len + 2] = 0xFF; b[last_len + 3] = 0xFF;
  expect(b, 259, last_len, "expected >= 0");
  // Longer than max_token_length.
  b = good;
  b[last_len] = 7;
  expect(b, 259, last_len, "max_token_length");
  // Truncated in the middle of a score.
  b = good;
  b.resize(b.size() - 7);
  expect(b, 259, b.size() - 2, "score");
  // Fewer records than the model's vocabulary; trailing bytes after it.
  expect(good, 300, good.size(), "token 259");
  b = good;
  b.push_back(0);
  expect(b, 259, good.size(), "trailing");
  // Bounded by the file (issue 15): a vocab_size of 2^30 reserves room only for the records the
  // file can hold and fails at the first missing one (it used to reserve 2^30 strings: bad_alloc).
  expect(good, std::size_t{1} << 30, good.size(), "token 259");
  // max_token_length 2^30, or beyond kMaxTokenLength, or beyond the file's size: refused at byte 0.
  b = good;
  b[0] = 0; b[1] = 0; b[2] = 0; b[3] = 0x40;  // 2^30
  expect(b, 259, 0, "max_token_length: expected <= 1024");
  b = good;
  b[0] = 0x01; b[1] = 0x04;  // 1025
  expect(b, 259, 0, "found 1025");
  expect({8, 0, 0, 0, 0, 0, 0, 0}, 0, 0, "<= the 4 bytes after the header, found 8");
  CHECK_THROWS_AS((void)barato_examples::load_tokenizer(temp_dir() / "nope.bin"), barato::io_error);
  CHECK_THROWS_AS((void)barato_examples::load_tokenizer("/dev/zero"), barato::io_error);  // endless: bounded read
}

TEST_CASE("tokenizer: a piece of kMaxTokenLength bytes builds quickly; longer ones are refused") {
  // Building the merge tables is O(len²) per piece; the boundary table keeps O(len · 32) entries.
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.emplace_back(barato_examples::kMaxTokenLength, 'a');
  pieces.emplace_back(" ");
  std::vector<float> scores(pieces.size(), 1.0f);
  const Tokenizer t(pieces, scores, barato_examples::kMaxTokenLength);
  const std::string text(2 * barato_examples::kMaxTokenLength + 3, 'a');
  CHECK(as_int(t.encode(text, false)) == reference_of(t).encode(text, false));
  CHECK_THROWS_AS(Tokenizer(pieces, scores, barato_examples::kMaxTokenLength + 1), barato::value_error);
}

TEST_CASE("tokenizer: tok512 examples from the README and random strings vs the reference") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/tok512.bin");
  if (dir.empty()) return;
  const Tokenizer t = barato_examples::load_tokenizer(dir / "stories260K/tok512.bin", 512);
  CHECK(t.vocab_size() == 512);
  CHECK(t.max_token_length() == 7);
  CHECK(t.find(" ") == 410);
  CHECK(t.encode("Once upon a time") == std::vector<Token>{1, 403, 407, 261, 378});
  CHECK(t.encode("Lily wanted to") == std::vector<Token>{1, 317, 391, 266, 267});
  CHECK(t.encode("\n", false) == std::vector<Token>{410, 13});
  CHECK(t.decode_text(std::vector<Token>{1, 403, 407, 261, 378}) == "Once upon a time");
  // byte fallback: run.c's printing drops the lone bytes, decode_utf8 joins them into the character
  for (const std::string text : {"time \xF0\x9F\x98\x80!", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC"}) {
    const auto ids = t.encode(text);
    CHECK(t.decode_utf8(ids) == text);
    CHECK(t.decode_text(ids).size() < text.size());
  }

  const auto ref = reference_of(t);
  std::mt19937 gen(99);
  static const std::vector<std::string> words = {"Once", " upon", " a", " time", "Lily", " the", "\n", "  ", "é", "ß", "日本",
                                                 "😀", "\xC3", "\xFF", "ing", "ed", ".", ",", "\"", "Tom", " play", "x", "q"};
  std::uniform_int_distribution<std::size_t> pick(0, words.size() - 1), len(0, 40);
  for (int i = 0; i < 400; ++i) {
    std::string s;
    const std::size_t n = len(gen);
    for (std::size_t j = 0; j < n; ++j) s += words[pick(gen)];
    INFO("text: " << s);
    REQUIRE(as_int(t.encode(s, i % 2 == 0)) == ref.encode(s, i % 2 == 0));
  }
  // A real paragraph from the text file, checked against the reference.
  if (fs::exists(dir / "text/tinystories-valid-sample.txt")) {
    const std::string text = read_all(dir / "text/tinystories-valid-sample.txt").substr(0, 1200);
    CHECK(as_int(t.encode(text, false)) == ref.encode(text, false));
  }
}

TEST_CASE("tokenizer: token counts of the text files (text README)") {
  const auto dir = barato::test::data_dir_or_skip("text/tinyshakespeare.txt");
  if (dir.empty()) return;
  const Tokenizer t = barato_examples::load_tokenizer(dir / "stories260K/tok512.bin", 512);
  const auto stories = t.encode(read_all(dir / "text/tinystories-valid-sample.txt"), false);
  CHECK(stories.size() == 393018);
  const auto shakespeare = t.encode(read_all(dir / "text/tinyshakespeare.txt"), false);
  CHECK(shakespeare.size() == 693363);
  CHECK(shakespeare.front() != 1);
}
