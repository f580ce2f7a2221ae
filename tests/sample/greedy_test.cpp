#include "barato/sample/greedy.hpp"

#include <doctest/doctest.h>

#include <limits>

#include <vector>

using namespace barato;

TEST_CASE("Greedy returns the argmax (ties → lowest id) and a one-hot vector, without using the RNG") {
  sample::Greedy g(5);
  sample::Rng rng(3), untouched(3);
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  const auto s = g.sample(l, {}, rng);
  CHECK(s.token == 1);
  CHECK(s.probs.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(s.probs[i] == (i == 1 ? 1.0f : 0.0f));
  CHECK(rng() == untouched());
  std::vector<float> p(5, 7.0f);
  g.probabilities(l, {}, p);
  CHECK(p == std::vector<float>{0, 1, 0, 0, 0});
  CHECK_THROWS_AS(g.probabilities(std::vector<float>(4), {}, p), shape_error);
}

TEST_CASE("Greedy on edge logits: NaN never chosen, +inf chosen, all -inf or NaN is a value_error") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  sample::Greedy g(3);
  sample::Rng rng(1);
  CHECK(g.sample(std::vector<float>{nan, 1.0f, nan}, {}, rng).token == 1);
  CHECK(g.sample(std::vector<float>{2.0f, inf, inf}, {}, rng).token == 1);
  CHECK(g.sample(std::vector<float>{5.0f, 5.0f, 5.0f}, {}, rng).token == 0);
  CHECK_THROWS_AS((void)g.sample(std::vector<float>{nan, nan, nan}, {}, rng), value_error);
  CHECK_THROWS_AS((void)g.sample(std::vector<float>{-inf, -inf, -inf}, {}, rng), value_error);
  CHECK_THROWS_AS((void)g.sample(std::vector<float>{-inf, nan, -inf}, {}, rng), value_error);
}
