// Tests of the --ids file parser (examples/models/token_ids.hpp) and of teacher-forced scoring of a
// given sequence: on run.c's greedy reference, barato's argmax at every generated position is the next
// reference id (the sequence *is* the fp32 greedy path), so the agreement is exactly 1.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/llama.hpp"
#include "models/perplexity.hpp"
#include "models/token_ids.hpp"
#include "support/data.hpp"
#include "support/reference_file.hpp"

using namespace barato_examples;

namespace {
/// The format_error of parsing `text`, or a failed check when it parses.
barato::format_error parse_error(const std::string& text, std::size_t vocab = 512) {
  try {
    (void)parse_token_ids(text, "ids.txt", vocab);
  } catch (const barato::format_error& e) {
    return e;
  }
  FAIL("expected a format_error for: " << text);
  return barato::format_error("", 0, "");
}
}  // namespace

TEST_CASE("token_ids: whitespace-separated ids, BOS first") {
  CHECK(parse_token_ids("1 403 407\n261\t378\r\n", "f", 512) == std::vector<Token>{1, 403, 407, 261, 378});
  CHECK(parse_token_ids("  1", "f", 512) == std::vector<Token>{1});
  CHECK(parse_token_ids("1 511", "f", 512) == std::vector<Token>{1, 511});
}

TEST_CASE("token_ids: errors name the file, the offset and what was expected") {
  auto e = parse_error("1 40x3");
  CHECK(e.file() == "ids.txt");
  CHECK(e.offset() == 4);
  CHECK(std::string(e.what()).find("'x'") != std::string::npos);
  e = parse_error("1 512");
  CHECK(e.offset() == 2);
  CHECK(std::string(e.what()).find("outside the vocabulary [0, 512)") != std::string::npos);
  e = parse_error("1 99999999999999999999999999");  // no overflow: rejected as soon as it leaves the vocabulary
  CHECK(e.offset() == 2);
  e = parse_error("403 407");
  CHECK(e.offset() == 0);
  CHECK(std::string(e.what()).find("expected BOS") != std::string::npos);
  e = parse_error(" \n\t");
  CHECK(std::string(e.what()).find("found none") != std::string::npos);
  e = parse_error("1 -3");
  CHECK(e.offset() == 2);
  e = parse_error(std::string("1 4\0", 4));
  CHECK(std::string(e.what()).find("byte 0") != std::string::npos);
}

TEST_CASE("token_ids: teacher-forced argmax on run.c's greedy sequence is the sequence itself") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/reference/greedy_once_upon_a_time.txt");
  if (dir.empty()) return;
  const auto ref = barato::test::read_reference_file(dir / "stories260K/reference/greedy_once_upon_a_time.txt");
  std::vector<Token> seq;
  for (const int t : ref.ids("prompt_ids")) seq.push_back(t);
  const std::size_t n_prompt = seq.size();
  for (const int t : ref.ids("generated_ids")) seq.push_back(t);

  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  Llama<barato::kv::Contiguous<float>> model(w, make_contiguous_caches(w.config, w.config.seq_len), {.max_chunk = 32});
  std::vector<float> scratch(32 * w.config.vocab_size);
  const std::vector<Token> text(seq.begin() + 1, seq.end());  // BOS is the window's own
  std::vector<Token> argmax;
  const auto r = perplexity(model, text, w.config.seq_len - 1, scratch, 0, {}, &argmax);
  REQUIRE(argmax.size() == text.size());
  CHECK(r.tokens == text.size());
  // argmax[i] predicts text[i] = seq[i + 1]; generated positions are those predicting seq[n_prompt…].
  std::size_t agree = 0;
  for (std::size_t i = n_prompt - 1; i < text.size(); ++i) agree += argmax[i] == text[i];
  CHECK(agree == text.size() - (n_prompt - 1));
  // A greedy path is the model's most likely continuation: its perplexity is far below the text's.
  CHECK(r.perplexity() < 3.0);
}
