// Speculative decoding on the real example model (stories260K): greedy speculative output equals
// plain greedy output (and llama2.c run.c's reference ids) on the reference prompts, for the n-gram
// drafter and the quantized drafters (int8, int4-g128, NF4); the target's cache after the run equals
// a fresh prefill of the committed tokens.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/speculative.hpp"
#include "support/data.hpp"
#include "support/reference_file.hpp"
#include "support/tolerances.hpp"

namespace fs = std::filesystem;
using namespace barato_examples;
using Cache = barato::kv::Contiguous<float>;

namespace {
// Under AddressSanitizer the decoder is ~15x slower: check a representative subset there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::vector<fs::path> reference_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir / "stories260K/reference"))
    if (e.path().extension() == ".txt") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("greedy speculative decoding of stories260K equals plain greedy decoding, for every drafter") {
  const fs::path dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto dense = load_llama2c(dir / "stories260K/stories260K.bin");
  const auto refs = reference_files(dir);
  REQUIRE(!refs.empty());
  for (const auto& path : refs) {
    const auto ref = barato::test::read_reference_file(path);
    const auto ids = ref.ids("prompt_ids");
    const std::vector<Token> prompt(ids.begin(), ids.end());
    const std::size_t steps = static_cast<std::size_t>(std::stoul(ref.at("steps")));
    const auto expected_ids = ref.ids("generated_ids");
    const std::vector<Token> expected(expected_ids.begin(), expected_ids.end());

    Llama<Cache> plain_model(dense, make_contiguous_caches(dense.config, steps));
    std::vector<float> logits(plain_model.vocab_size());
    const GenerateOptions gopt{.steps = steps, .temperature = 0.0f, .seed = 0, .use_cache = true};
    const auto plain = generate(plain_model, prompt, gopt, logits);
    REQUIRE(plain.generated == expected);  // the oracle itself is run.c's output

    const std::vector<std::string> drafts = kSanitized ? std::vector<std::string>{"ngram", "int8", "nf4"}
                                                       : std::vector<std::string>{"ngram:1", "ngram:2", "ngram", "ngram:4",
                                                                                  "int8", "int4-g128", "nf4"};
    const std::vector<std::size_t> gammas = kSanitized ? std::vector<std::size_t>{3} : std::vector<std::size_t>{1, 3, 6};
    for (const auto& draft : drafts)
      for (const std::size_t gamma : gammas) {
        CAPTURE(path.filename().string());
        CAPTURE(draft);
        CAPTURE(gamma);
        Llama<Cache> target(dense, make_contiguous_caches(dense.config, steps));
        SpecReport rep;
        const auto spec = generate_speculative(target, dense, parse_draft(draft), prompt, gopt, gamma, 1, &rep);
        CHECK(spec.generated == plain.generated);
        CHECK(spec.stopped_on_bos == plain.stopped_on_bos);
        CHECK(rep.emitted == spec.generated.size());
        CHECK(rep.accepted > 0);  // every drafter gets some tokens right on this text
        CHECK(rep.passes < spec.generated.size());
        // the target's cache holds exactly the committed tokens but the last: compare its next logits
        // with those of a fresh model prefilled with the same tokens
        std::vector<Token> all(prompt);
        all.insert(all.end(), spec.generated.begin(), spec.generated.end());
        REQUIRE(target.size() + 1 == all.size());
        Llama<Cache> fresh(dense, make_contiguous_caches(dense.config, steps));
        std::vector<float> a(target.vocab_size()), b(target.vocab_size());
        if (all.size() <= steps) {
          std::vector<float> pre((all.size() - 1) * fresh.vocab_size());
          fresh.forward(std::span<const Token>(all).first(all.size() - 1), pre);
          target.forward(std::span<const Token>(&all.back(), 1), a);
          fresh.forward(std::span<const Token>(&all.back(), 1), b);
          double md = 0, mx = barato::test::kTiny;
          for (std::size_t i = 0; i < a.size(); ++i) {
            md = std::max(md, double(std::abs(a[i] - b[i])));
            mx = std::max(mx, double(std::abs(b[i])));
          }
          CHECK(md / mx < barato::test::kLogitReorderRelTol);  // same tokens, different block split: summation order only
        }
      }
  }
}

TEST_CASE("parse_draft accepts the documented names and rejects others") {
  CHECK(parse_draft("ngram").ngram_n == 3);
  CHECK(parse_draft("ngram:5").ngram_n == 5);
  CHECK(parse_draft("ngram").ngram);
  CHECK(!parse_draft("int4-g128").ngram);
  CHECK(parse_draft("int4-g128").scheme == barato::quant::Scheme::int4_g128);
  CHECK(parse_draft("nf4").scheme == barato::quant::Scheme::nf4);
  CHECK(parse_draft("int8").scheme == barato::quant::Scheme::int8_row);
  CHECK(parse_draft("int8-tensor").scheme == barato::quant::Scheme::int8_tensor);
  CHECK_THROWS_AS((void)parse_draft("ngram:0"), CliError);
  CHECK_THROWS_AS((void)parse_draft("ngram:x"), CliError);
  CHECK_THROWS_AS((void)parse_draft("int3"), CliError);
}
