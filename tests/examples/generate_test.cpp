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

TEST_CASE("sample_runc: run.c's top-p draw — the nucleus, its cut, the coin scaled by the nucleus mass") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (logits = their logs, T = 1). top_p 0.7: the running sum
  // passes 0.7 at id 1, so the nucleus is {0, 1} with mass 0.8 and r = coin · 0.8 picks 0 below 0.5.
  const std::vector<float> probs = {0.15f, 0.5f, 0.05f, 0.3f};  // ids 1, 3, 0, 2 by probability
  std::vector<float> l(probs.size());
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = std::log(probs[i]);
  std::vector<ProbIndex> scratch(l.size());
  std::vector<int> count(l.size(), 0);
  XorshiftRng rng(11), coins(11);
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    std::vector<float> x = l;
    const Token t = sample_runc(x, 1.0f, 0.7f, rng, scratch);
    const float r = coins.next_f32() * (x[1] + x[3]);  // the same coin, scaled as run.c scales it
    CHECK(t == (r < x[1] ? 1 : 3));
    ++count[static_cast<std::size_t>(t)];
  }
  CHECK(count[0] == 0);
  CHECK(count[2] == 0);
  const double p1 = 0.5 / 0.8;
  CHECK(std::abs(count[1] / double(n) - p1) < 5 * std::sqrt(p1 * (1 - p1) / n));
  // top_p <= 0 or >= 1: the whole distribution, one coin each, as sample_temperature.
  for (const float p : {0.0f, 1.0f, 1.5f}) {
    XorshiftRng a(5), b(5);
    for (int k = 0; k < 200; ++k) {
      std::vector<float> x = l, y = l;
      CHECK(sample_runc(x, 0.8f, p, a) == sample_temperature(y, 0.8f, b));
    }
  }
  // Below the cutoff (1 − p) / (n − 1) an id is never a candidate; equal probabilities keep id order.
  {
    const std::vector<float> flat = {0.0f, 0.0f, 0.0f, -30.0f};  // three at 1/3, one far below
    XorshiftRng r(3);
    std::vector<int> c(flat.size(), 0);
    for (int k = 0; k < 3000; ++k) {
      std::vector<float> x = flat;
      ++c[static_cast<std::size_t>(sample_runc(x, 1.0f, 0.5f, r, scratch))];
    }
    // the running sum passes 0.5 at the second of the three equal ids (0 then 1, stable): {0, 1}
    CHECK(c[2] == 0);
    CHECK(c[3] == 0);
    CHECK(c[0] > 1300);
    CHECK(c[1] > 1300);
  }
  // A tiny top_p over a flat distribution leaves no candidate (run.c reads before its array): the argmax.
  {
    std::vector<float> x(8, 0.0f);
    XorshiftRng r(1);
    std::vector<ProbIndex> s8(8);
    CHECK(sample_runc(x, 1.0f, 1e-6f, r, s8) == 0);
  }
  std::vector<float> x = l;
  XorshiftRng r(1);
  CHECK_THROWS_AS((void)sample_runc(x, 1.0f, 0.5f, r, std::span<ProbIndex>(scratch).first(2)), barato::shape_error);
  CHECK_THROWS_AS((void)sample_runc(x, std::nanf(""), 0.5f, r, scratch), barato::value_error);
}

TEST_CASE("generate: top_p is run.c's -p (default 0.9); the same seed gives the same ids") {
  FakeModel a, b, c;
  std::vector<float> la(a.V), lb(b.V), lc(c.V);
  const auto ga = generate(a, std::vector<Token>{1}, {.steps = 40, .temperature = 2.0f, .seed = 9}, la);
  const auto gb = generate(b, std::vector<Token>{1}, {.steps = 40, .temperature = 2.0f, .top_p = 0.9f, .seed = 9}, lb);
  const auto gc = generate(c, std::vector<Token>{1}, {.steps = 40, .temperature = 2.0f, .top_p = 0.3f, .seed = 9}, lc);
  CHECK(ga.generated == gb.generated);
  // FakeModel puts 5 on one id and 0 elsewhere: at T = 2, p = e^2.5 / (e^2.5 + 9) ≈ 0.575 > 0.3, so
  // a nucleus of 0.3 holds that id alone and generation is the greedy path.
  FakeModel g;
  std::vector<float> lg(g.V);
  CHECK(gc.generated == generate(g, std::vector<Token>{1}, {.steps = 40, .seed = 9}, lg).generated);
}
