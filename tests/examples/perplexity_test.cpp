// Tests of the perplexity protocol (examples/models/perplexity.hpp) on stories260K and a prefix of the
// TinyStories sample: the batched (prefill) computation equals a direct per-token computation with the
// scalar reference forward pass, window by window (BOS + window, positions restarting at 0).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <string>
#include <vector>

#include "models/llama.hpp"
#include "models/perplexity.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/llama_reference.hpp"

using namespace barato_examples;

namespace {

/// Σ NLL from the batched path vs the per-token double-precision reference (relative).
constexpr double kNllRelTol = 1e-5;

/// Direct computation: for each window, the reference model fed token by token from BOS.
double reference_total_nll(const LlamaWeights<>& w, const std::vector<Token>& text, std::size_t window) {
  barato::test::LlamaReference ref(w);
  double total = 0;
  for (std::size_t w0 = 0; w0 < text.size(); w0 += window) {
    ref.reset();
    Token prev = 1;  // BOS
    for (std::size_t i = w0; i < std::min(text.size(), w0 + window); ++i) {
      const auto logits = ref.step(prev);
      double m = -INFINITY, s = 0;
      for (const float x : logits) m = std::max(m, double(x));
      for (const float x : logits) s += std::exp(double(x) - m);
      total += std::log(s) + m - logits[static_cast<std::size_t>(text[i])];
      prev = text[i];
    }
  }
  return total;
}

}  // namespace

TEST_CASE("perplexity: token_nll is -log softmax") {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(token_nll(l, 0) == doctest::Approx(z - 1.0));
  CHECK(token_nll(l, 2) == doctest::Approx(z - 3.0));
  PerplexityResult r{.tokens = 4, .windows = 1, .total_nll = 4 * std::numbers::ln2, .text_bytes = 8};
  CHECK(r.perplexity() == doctest::Approx(2.0));
  CHECK(r.bits_per_byte() == doctest::Approx(0.5));
}

TEST_CASE("perplexity: stories260K on a text prefix equals the per-token reference") {
  const auto dir = barato::test::data_dir_or_skip("text/tinystories-valid-sample.txt");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  std::ifstream in(dir / "text/tinystories-valid-sample.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Token> ids = tok.encode(text.substr(0, 1000), false);
  REQUIRE(ids.size() > 250);
  CHECK(tok.piece(ids.front())[0] == ' ');  // starts with the dummy prefix, no BOS

  Llama<barato::kv::Contiguous<float>> model(w, make_contiguous_caches(w.config, w.config.seq_len), {.max_chunk = 64});
  std::vector<float> scratch(48 * w.config.vocab_size);  // chunks of 48 rows: windows span several calls
  std::size_t calls = 0;
  SUBCASE("short windows (several windows, partial last one)") {
    const std::size_t window = 100;
    const auto r = perplexity(model, ids, window, scratch, 1000, [&](std::size_t, std::size_t) { ++calls; });
    CHECK(r.tokens == ids.size());
    CHECK(r.windows == (ids.size() + window - 1) / window);
    CHECK(calls == r.windows);
    const double ref = reference_total_nll(w, ids, window);
    CHECK(std::abs(r.total_nll - ref) <= kNllRelTol * ref);
    CHECK(r.bits_per_byte() == doctest::Approx(r.total_nll / std::numbers::ln2 / 1000));
    // A model that has seen TinyStories predicts them far better than uniform over 512 ids.
    CHECK(r.perplexity() < 20.0);
    CHECK(r.perplexity() > 1.0);
  }
  SUBCASE("the tool's window: seq_len - 1") {
    const std::vector<Token> head(ids.begin(), ids.begin() + 250);
    const auto r = perplexity(model, head, w.config.seq_len - 1, scratch);
    CHECK(r.windows == 1);
    CHECK(std::abs(r.total_nll - reference_total_nll(w, head, w.config.seq_len - 1)) <= kNllRelTol * r.total_nll);
  }
}
