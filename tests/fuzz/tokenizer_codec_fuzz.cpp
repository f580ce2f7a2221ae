// Fuzz harness: Tokenizer::encode of arbitrary bytes (valid and invalid UTF-8) and decode of
// arbitrary id sequences, over the real tok512 vocabulary ($BARATO_DATA_DIR/stories260K/tok512.bin,
// loaded once) or, without the data, a small vocabulary built here. Checked on every input:
//  - encode equals the scalar run.c reference (quadratic, so only for texts up to 96 bytes);
//  - the ids decode back to the text: the raw pieces (byte pieces "<0xXX>" as their byte) of
//    encode(text, bos = false) concatenate to " " + text (the dummy prefix) — no byte is lost;
//  - decode of any id sequence returns text or throws value_error for an id outside the vocabulary.
// The first input byte picks the mode (even: encode, odd: decode).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "models/tokenizer.hpp"
#include "support/tokenizer_reference.hpp"

namespace {

using barato_examples::Tokenizer;

Tokenizer make_vocab() {
  const char* env = std::getenv("BARATO_DATA_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : BARATO_DEFAULT_DATA_DIR;
  if (std::filesystem::exists(dir / "stories260K/tok512.bin")) return barato_examples::load_tokenizer(dir / "stories260K/tok512.bin", 512);
  // A small stand-in: specials, the 256 byte pieces, then merges of common English fragments.
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores = {0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.emplace_back(buf);
    scores.push_back(0);
  }
  const char* merges[] = {" ", "e", "t", "h", "a", "o", " t", "th", "he", "the", " the", "in", "an", "nd", " a", "é", "€", "ll", "o "};
  float s = -1;
  for (const char* m : merges) {
    pieces.emplace_back(m);
    scores.push_back(s);
    s -= 0.5f;
  }
  return Tokenizer(std::move(pieces), std::move(scores), 8);
}

const Tokenizer& vocab() {
  static const Tokenizer tok = make_vocab();
  return tok;
}

const barato::test::TokenizerReference& reference() {
  static const barato::test::TokenizerReference ref(std::vector<std::string>(vocab().pieces().begin(), vocab().pieces().end()),
                                                    std::vector<float>(vocab().scores().begin(), vocab().scores().end()));
  return ref;
}

/// Raw bytes of one token: a "<0xXX>" piece is its byte, any other piece its text.
std::string raw(const Tokenizer& tok, barato::Token id) {
  const std::string& p = tok.piece(id);
  const int b = Tokenizer::byte_piece_value(p);
  return b >= 0 ? std::string(1, static_cast<char>(b)) : p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Tokenizer& tok = vocab();
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    const std::vector<barato::Token> ids = tok.encode(rest, /*bos=*/false);
    if (rest.size() <= 96) {
      const std::vector<int> want = reference().encode(rest, false);
      BARATO_FUZZ_CHECK(std::vector<int>(ids.begin(), ids.end()) == want, "encode differs from run.c's");
    }
    std::string round;
    for (const barato::Token id : ids) round += raw(tok, id);
    BARATO_FUZZ_CHECK(rest.empty() ? round.empty() : round == " " + std::string(rest), "the tokens do not spell the text");
    const std::vector<barato::Token> with_bos = tok.encode(rest, /*bos=*/true, /*eos=*/true);
    BARATO_FUZZ_CHECK(with_bos.front() == barato_examples::kBos && with_bos.back() == barato_examples::kEos, "BOS/EOS missing");
    (void)tok.decode_text(with_bos);
  } else {
    // Ids as little-endian int16 pairs: mostly in range, some outside (negative or ≥ vocab).
    std::vector<barato::Token> ids;
    for (std::size_t i = 0; i + 1 < rest.size(); i += 2)
      ids.push_back(static_cast<barato::Token>(static_cast<std::int16_t>(static_cast<unsigned char>(rest[i]) |
                                                                          static_cast<unsigned char>(rest[i + 1]) << 8)) %
                    1024);
    // decode_text decodes ids[1:] (each after its predecessor): exactly those must be in range.
    bool tail_in_range = true;
    for (std::size_t i = 1; i < ids.size(); ++i)
      tail_in_range = tail_in_range && ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < tok.vocab_size();
    try {
      (void)tok.decode_text(ids);
      BARATO_FUZZ_CHECK(tail_in_range, "decode_text accepted an id outside the vocabulary");
    } catch (const barato::value_error&) {
      BARATO_FUZZ_CHECK(!tail_in_range, "decode_text threw for ids inside the vocabulary");
    }
  }
  return 0;
}
