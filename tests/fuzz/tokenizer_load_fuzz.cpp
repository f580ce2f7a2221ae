// Fuzz harness: the llama2.c tokenizer loader (examples/models/tokenizer.hpp, parse_tokenizer).
// Input: the bytes of a tokenizer file, parsed twice (vocab size read to the end, and 259 records).
// A bad file must be a barato::format_error / value_error; any other exception, a crash or a
// sanitizer report is a defect. When the file loads, a few strings are encoded and compared with
// the scalar run.c reference (tests/support/tokenizer_reference.hpp), and every id is decoded.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "models/tokenizer.hpp"
#include "support/tokenizer_reference.hpp"

namespace {

using barato_examples::Tokenizer;

void exercise(const Tokenizer& tok) {
  const barato::test::TokenizerReference ref(std::vector<std::string>(tok.pieces().begin(), tok.pieces().end()),
                                             std::vector<float>(tok.scores().begin(), tok.scores().end()));
  static const std::string_view kTexts[] = {"", "a", "Once upon a time", "  two  spaces ", "h\xc3\xa9llo \xe2\x82\xac", "\xff\xfe\x80"};
  for (const std::string_view text : kTexts) {
    std::vector<barato::Token> ids;
    try {
      ids = tok.encode(text, /*bos=*/true);
    } catch (const barato::value_error&) {  // no " " piece: documented for non-empty texts
      BARATO_FUZZ_CHECK(!text.empty() && tok.find(" ") < 0, "encode threw for text '", text, "'");
      continue;
    }
    const std::vector<int> want = ref.encode(text, true);
    BARATO_FUZZ_CHECK(std::vector<int>(ids.begin(), ids.end()) == want, "encode differs from run.c's for '", text, "'");
    (void)tok.decode_text(ids);
  }
  for (std::size_t id = 0; id < tok.vocab_size(); ++id) {
    (void)tok.decode(barato_examples::kBos, static_cast<barato::Token>(id));
    BARATO_FUZZ_CHECK(tok.piece(static_cast<barato::Token>(id)).size() <= tok.max_token_length(), "piece ", id, " too long");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const std::size_t vocab : {std::size_t{0}, std::size_t{259}}) {
    try {
      const Tokenizer tok = barato_examples::parse_tokenizer(bytes, "fuzz.bin", vocab);
      exercise(tok);
    } catch (const barato::format_error&) {
    } catch (const barato::value_error&) {
    }
  }
  return 0;
}
