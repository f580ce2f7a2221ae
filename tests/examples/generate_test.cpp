// Tests of the generation helpers (examples/models/generate.hpp): run.c's --steps semantics, BOS
// stop, greedy ties, temperature sampling frequencies and seed determinism.
#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "models/generate.hpp"

using namespace barato_examples;

namespace {

/// A fake model whose next-token logits depend only on the last token: argmax = (last + 1) % V,
/// except that token `bos_after` is followed by BOS. Counts forwarded positions.
struct FakeModel {
  std::size_t V = 10;
  Token bos_after = -1;
  std::size_t positions = 0, resets = 0, calls = 0;
  std::size_t vocab_size() const { return V; }
  void reset() { ++resets; positions = 0; }
  void forward_last(std::span<const Token> t, std::span<float> logits) {
    positions += t.size();
    ++calls;
    for (auto& x : logits) x = 0.0f;
    const Token last = t.back();
    logits[last == bos_after ? 1 : static_cast<std::size_t>(last + 1) % V] = 5.0f;
  }
};

}  // namespace

TEST_CASE("generate: steps count the prompt (run.c -n)") {
  FakeModel m;
  std::vector<float> logits(m.V);
  const std::vector<Token> prompt = {1, 3, 4};
  auto g = generate(m, prompt, {.steps = 8}, logits);
  CHECK(g.generated == std::vector<Token>{5, 6, 7, 8, 9, 0});  // 8 - 3 + 1 tokens
  CHECK(m.positions == 8);  // prompt (3) + 5 decode steps: positions 0..7
  CHECK(g.decode_steps == 5);
  CHECK_FALSE(g.stopped_on_bos);

  // Fewer steps than prompt tokens: run.c only feeds the prompt.
  FakeModel m2;
  g = generate(m2, prompt, {.steps = 2}, logits);
  CHECK(g.generated.empty());
  CHECK(m2.positions == 2);
  g = generate(m2, prompt, {.steps = 3}, logits);
  CHECK(g.generated == std::vector<Token>{5});

  // Uncached mode recomputes the whole sequence each step, same tokens.
  FakeModel m3;
  g = generate(m3, prompt, {.steps = 8, .use_cache = false}, logits);
  CHECK(g.generated == std::vector<Token>{5, 6, 7, 8, 9, 0});
  CHECK(m3.positions == 8);  // after the last reset: the whole sequence
  CHECK(m3.resets == 6);
}

TEST_CASE("generate: stops on BOS, which is the last generated id") {
  FakeModel m;
  m.bos_after = 6;
  std::vector<float> logits(m.V);
  const auto g = generate(m, std::vector<Token>{1, 4}, {.steps = 20}, logits);
  CHECK(g.generated == std::vector<Token>{5, 6, 1});
  CHECK(g.stopped_on_bos);
}

TEST_CASE("generate: greedy ties resolve to the lowest id; temperature sampling") {
  std::vector<float> l = {0.0f, 2.0f, 2.0f, 1.0f};
  CHECK(argmax(l) == 1);
  // Frequencies of softmax(l / T) within 5 standard errors.
  const float T = 0.7f;
  double z = 0;
  std::vector<double> p(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(l[i] / T);
  XorshiftRng rng(42);
  std::vector<int> count(l.size(), 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> x = l;
    ++count[static_cast<std::size_t>(sample_temperature(x, T, rng))];
  }
  for (std::size_t i = 0; i < l.size(); ++i) {
    const double pi = p[i] / z;
    CHECK(std::abs(count[i] / double(n) - pi) < 5 * std::sqrt(pi * (1 - pi) / n));
  }
  std::vector<float> x = l;
  CHECK_THROWS_AS((void)sample_temperature(x, 0.0f, rng), barato::value_error);
  // Same seed, same tokens.
  FakeModel a, b;
  std::vector<float> la(a.V), lb(b.V);
  const auto ga = generate(a, std::vector<Token>{1}, {.steps = 30, .temperature = 3.0f, .seed = 7}, la);
  const auto gb = generate(b, std::vector<Token>{1}, {.steps = 30, .temperature = 3.0f, .seed = 7}, lb);
  CHECK(ga.generated == gb.generated);
}
