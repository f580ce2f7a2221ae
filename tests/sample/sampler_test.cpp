#include "barato/sample/sampler.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/chi_square.hpp"

using namespace barato;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kProbTol = 1e-6;  // softmax vs double reference, absolute
}  // namespace

TEST_CASE("argmax: ties go to the lowest id; NaN never wins over a number") {
  CHECK(sample::argmax(std::vector<float>{1, 3, 3, 2}) == 1);
  CHECK(sample::argmax(std::vector<float>{5, 5, 5}) == 0);
  CHECK(sample::argmax(std::vector<float>{-kInf, -1, -kInf}) == 1);
  CHECK(sample::argmax(std::vector<float>{std::nanf(""), 0.5f, 2.0f}) == 2);
  CHECK(sample::argmax(std::vector<float>{7}) == 0);
}

TEST_CASE("softmax_into matches the double reference and gives exactly 0 to -inf logits") {
  std::vector<float> l = {0.5f, -kInf, 2.0f, -1.0f, 30.0f, -kInf, 1.0f, 0.0f, 3.0f, -2.0f, 0.25f, 0.75f, 1.5f, -0.5f, 2.5f, 0.1f, -3.0f};
  std::vector<float> p(l.size());
  sample::softmax_into(l, p);
  double m = 30, z = 0;
  for (float x : l) z += std::exp(double(x) - m);
  for (std::size_t i = 0; i < l.size(); ++i) CHECK(std::abs(p[i] - std::exp(double(l[i]) - m) / z) < kProbTol);
  CHECK(p[1] == 0.0f);
  CHECK(p[5] == 0.0f);
  std::vector<float> all_masked = {-kInf, -kInf};
  CHECK_THROWS_AS(sample::softmax_into(all_masked, all_masked), value_error);
  std::vector<float> nan = {0.0f, std::nanf("")};
  CHECK_THROWS_AS(sample::softmax_into(nan, nan), value_error);
}

TEST_CASE("draw follows the weights (chi-square) and never draws a zero-weight token") {
  const std::vector<float> w = {0.1f, 0.0f, 0.5f, 0.15f, 0.0f, 0.25f};
  std::vector<double> pr(w.begin(), w.end());
  std::vector<std::size_t> counts(w.size());
  sample::Rng rng(1);
  for (int i = 0; i < 100000; ++i) ++counts[static_cast<std::size_t>(sample::draw(w, rng))];
  CHECK(counts[1] == 0);
  CHECK(counts[4] == 0);
  CHECK(test::chi_square_test(counts, pr).p_value > test::kChiSquareAlpha);
  // unnormalised weights are fine
  const std::vector<float> w2 = {2.0f, 0.0f, 6.0f};
  CHECK(sample::draw(w2, rng) != 1);
  CHECK_THROWS_AS((void)sample::draw(std::vector<float>{0.0f, 0.0f}, rng), value_error);
}

TEST_CASE("sampler primitives on edge inputs: empty, NaN, +-inf, all equal, subnormal") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), tiny = std::numeric_limits<float>::denorm_min();
  // argmax
  CHECK(sample::argmax(std::vector<float>{nan, nan}) == 0);
  CHECK(sample::argmax(std::vector<float>{1.0f, kInf, kInf}) == 1);
  CHECK(sample::argmax(std::vector<float>{nan, -kInf, nan}) == 1);
  // softmax_into: a distribution or value_error
  std::vector<float> p;
  CHECK_THROWS_AS(sample::softmax_into({}, p), value_error);
  for (const auto& bad : {std::vector<float>{0.0f, nan, 1.0f}, std::vector<float>{1.0f, 2.0f, nan}, std::vector<float>{kInf, 1.0f},
                          std::vector<float>{-kInf, -kInf}, std::vector<float>{nan, nan}}) {
    p.assign(bad.size(), 0.0f);
    CHECK_THROWS_AS(sample::softmax_into(bad, p), value_error);
  }
  std::vector<float> eq(7, -2.0f), q(7);
  sample::softmax_into(eq, q);
  for (const float v : q) CHECK(v == 1.0f / 7.0f);
  std::vector<float> sub{tiny, 0.0f, -tiny}, sq(3);
  sample::softmax_into(sub, sq);
  for (const float v : sq) CHECK(v == doctest::Approx(1.0 / 3.0));
  // draw: value_error unless the weights have a positive finite total
  sample::Rng rng(1);
  CHECK_THROWS_AS((void)sample::draw({}, rng), value_error);
  CHECK_THROWS_AS((void)sample::draw(std::vector<float>{0.0f, 0.0f}, rng), value_error);
  CHECK_THROWS_AS((void)sample::draw(std::vector<float>{0.5f, nan}, rng), value_error);
  CHECK_THROWS_AS((void)sample::draw(std::vector<float>{0.5f, kInf}, rng), value_error);
  for (int i = 0; i < 20; ++i) {
    const Token t = sample::draw(std::vector<float>{0.0f, tiny, 0.0f, tiny}, rng);
    CHECK((t == 1 || t == 3));
  }
}
