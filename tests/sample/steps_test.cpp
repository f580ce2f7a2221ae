#include "barato/sample/steps.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace barato;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLogitTol = 1e-6f;

/// Owns a [vocab] workspace for calling steps directly.
struct Scratch {
  std::vector<Token> index;
  std::vector<float> values;
  std::vector<std::uint8_t> mark;
  explicit Scratch(std::size_t v) : index(v), values(v), mark(v) {}
  sample::Workspace ws() { return {index, values, mark}; }
};

std::vector<bool> kept(const std::vector<float>& l) {
  std::vector<bool> k;
  for (float x : l) k.push_back(x != -kInf);
  return k;
}
}  // namespace

TEST_CASE("Temperature divides the logits and rejects t <= 0") {
  Scratch s(3);
  std::vector<float> l = {1.0f, -2.0f, 0.5f};
  sample::Temperature{0.5f}.apply(l, {}, s.ws());
  CHECK(l == std::vector<float>{2.0f, -4.0f, 1.0f});
  CHECK_THROWS_AS(sample::Temperature{0.0f}, value_error);
  CHECK_THROWS_AS(sample::Temperature{-1.0f}, value_error);
  CHECK_THROWS_AS(sample::Temperature{std::numeric_limits<float>::infinity()}, value_error);
}

TEST_CASE("TopK keeps exactly k, ties at the boundary resolved to the lower id") {
  Scratch s(5);
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 2.0f, 0.0f};
  sample::TopK{2}.apply(l, {}, s.ws());
  CHECK(kept(l) == std::vector<bool>{false, true, true, false, false});
  CHECK(l[1] == 3.0f);  // survivors untouched
  std::vector<float> all = {1.0f, 1.0f, 1.0f};
  sample::TopK{1}.apply(all, {}, s.ws());
  CHECK(kept(all) == std::vector<bool>{true, false, false});
  std::vector<float> big = {0.3f, 0.2f};
  sample::TopK{10}.apply(big, {}, s.ws());
  CHECK(big == std::vector<float>{0.3f, 0.2f});
  CHECK_THROWS_AS(sample::TopK{0}, value_error);
}

TEST_CASE("TopP: smallest nucleus reaching p; top token always kept; p >= 1 keeps all; ties by id") {
  Scratch s(4);
  // probabilities ∝ 4 : 2 : 1 : 1  →  0.5, 0.25, 0.125, 0.125
  const std::vector<float> base = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  auto run = [&](float p) {
    auto l = base;
    sample::TopP{p}.apply(l, {}, s.ws());
    return kept(l);
  };
  CHECK(run(1e-6f) == std::vector<bool>{true, false, false, false});
  CHECK(run(0.49f) == std::vector<bool>{true, false, false, false});
  CHECK(run(0.51f) == std::vector<bool>{true, true, false, false});
  CHECK(run(0.8f) == std::vector<bool>{true, true, true, false});  // tie 2 vs 3: the lower id first
  CHECK(run(0.9f) == std::vector<bool>{true, true, true, true});
  CHECK(run(1.0f) == std::vector<bool>{true, true, true, true});
  CHECK(run(5.0f) == std::vector<bool>{true, true, true, true});
  // already-masked tokens stay masked and count as probability 0
  std::vector<float> l = {-kInf, 0.0f, 0.0f, -kInf};
  sample::TopP{0.99f}.apply(l, {}, s.ws());
  CHECK(kept(l) == std::vector<bool>{false, true, true, false});
  // a single dominant token
  std::vector<float> d = {0.0f, 50.0f, 0.0f, 0.0f};
  sample::TopP{0.999f}.apply(d, {}, s.ws());
  CHECK(kept(d) == std::vector<bool>{false, true, false, false});
  CHECK_THROWS_AS(sample::TopP{0.0f}, value_error);
  CHECK_THROWS_AS(sample::TopP{-0.5f}, value_error);
}

TEST_CASE("MinP keeps tokens with probability >= p * max probability") {
  Scratch s(4);
  std::vector<float> l = {0.0f, std::log(0.5f), std::log(0.1f), std::log(0.3f)};
  sample::MinP{0.2f}.apply(l, {}, s.ws());
  CHECK(kept(l) == std::vector<bool>{true, true, false, true});
  std::vector<float> t = {2.0f, 2.0f, 1.0f, -1.0f};
  sample::MinP{1.0f}.apply(t, {}, s.ws());
  CHECK(kept(t) == std::vector<bool>{true, true, false, false});
  std::vector<float> z = {2.0f, -100.0f};
  sample::MinP{0.0f}.apply(z, {}, s.ws());
  CHECK(kept(z) == std::vector<bool>{true, true});
  CHECK_THROWS_AS(sample::MinP{1.5f}, value_error);
}

TEST_CASE("RepetitionPenalty: positive logits divided, negative multiplied, once per distinct token, window") {
  Scratch s(5);
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  const std::vector<Token> hist = {0, 1, 0, 0, 4};
  sample::RepetitionPenalty{2.0f}.apply(l, hist, s.ws());
  CHECK(l == std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f, 0.0f});
  for (auto m : s.mark) CHECK(m == 0);  // marks cleared for the next call
  std::vector<float> w = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  sample::RepetitionPenalty{2.0f, 2}.apply(w, std::vector<Token>{0, 1, 2, 3}, s.ws());  // only 2 and 3
  CHECK(w == std::vector<float>{2.0f, -2.0f, 0.5f, 0.25f, 0.0f});
  std::vector<float> r = {1.0f, -1.0f};
  sample::RepetitionPenalty{0.5f}.apply(r, std::vector<Token>{0, 1}, s.ws());  // < 1 encourages repeats
  CHECK(std::abs(r[0] - 2.0f) < kLogitTol);
  CHECK(std::abs(r[1] + 0.5f) < kLogitTol);
  std::vector<float> bad = {1.0f, 1.0f};
  CHECK_THROWS_AS(sample::RepetitionPenalty{1.2f}.apply(bad, std::vector<Token>{2}, s.ws()), value_error);
  CHECK_THROWS_AS(sample::RepetitionPenalty{0.0f}, value_error);
}
