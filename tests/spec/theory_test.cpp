#include "barato/spec/theory.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace barato;

namespace {
constexpr double kTol = 1e-12;
/// At a = 1 − 10⁻¹², E = Σ_{i≤g} aⁱ = 9 − 36·10⁻¹²: the sum must be continuous there (the closed form
/// (1 − a^{g+1}) / (1 − a) loses ~4 digits to cancellation).
constexpr double kNearOneTol = 1e-9;
/// Probabilities given as fp32 (0.3f, 0.2f, …) are off by ≤ u·p ≈ 3·10⁻⁸ each; sums of four of them.
constexpr double kFloatProbTol = 1e-6;
double closed_form(double a, std::size_t g) { return (1 - std::pow(a, double(g + 1))) / (1 - a); }
}  // namespace

TEST_CASE("expected tokens per pass equals (1 - a^(g+1)) / (1 - a), with the a = 1 and a = 0 limits") {
  for (double a : {0.1, 0.3, 0.5, 0.7, 0.9, 0.99})
    for (std::size_t g : {0u, 1u, 2u, 4u, 8u, 16u}) CHECK(std::abs(spec::expected_tokens_per_pass(a, g) - closed_form(a, g)) < kTol * 100);
  CHECK(spec::expected_tokens_per_pass(1.0, 4) == 5.0);
  CHECK(spec::expected_tokens_per_pass(0.0, 4) == 1.0);
  // continuous at a → 1 (the closed form loses digits there; the sum does not)
  CHECK(std::abs(spec::expected_tokens_per_pass(1.0 - 1e-12, 8) - 9.0) < kNearOneTol);
  CHECK_THROWS_AS((void)spec::expected_tokens_per_pass(1.5, 2), value_error);
  CHECK_THROWS_AS((void)spec::expected_tokens_per_pass(-0.1, 2), value_error);
}

TEST_CASE("speedup = E / (g c + 1): the traps — poor drafter, expensive drafter, gamma too long") {
  CHECK(std::abs(spec::expected_speedup(0.8, 4, 0.05) - closed_form(0.8, 4) / 1.2) < kTol);
  CHECK(spec::expected_speedup(0.3, 8, 0.2) < 1.0);  // poor and expensive: 1.43 / 2.6
  CHECK(spec::expected_speedup(0.9, 4, 0.05) > 2.5);
  CHECK(spec::expected_speedup(1.0, 3, 0.0) == 4.0);
  // at a = 0.5, c = 0.1 the optimum is short; a long gamma is slower than a short one
  CHECK(spec::best_gamma(0.5, 0.1) <= 3);
  CHECK(spec::expected_speedup(0.5, 8, 0.1) < spec::expected_speedup(0.5, 2, 0.1));
  CHECK(spec::best_gamma(0.95, 0.01) >= 10);
  CHECK_THROWS_AS((void)spec::expected_speedup(0.5, 2, -1.0), value_error);
  // a verify pass that costs 3 single steps (a compute-bound target) divides the gain accordingly
  CHECK(std::abs(spec::expected_speedup(0.8, 4, 0.05, 3.0) - closed_form(0.8, 4) / 3.2) < kTol);
  CHECK_THROWS_AS((void)spec::expected_speedup(0.5, 2, 0.1, 0.0), value_error);
}

TEST_CASE("acceptance probability is sum min(p, q) = 1 - total variation") {
  const std::vector<float> p = {0.5f, 0.3f, 0.2f, 0.0f}, q = {0.2f, 0.3f, 0.1f, 0.4f};
  CHECK(std::abs(spec::acceptance_probability(p, q) - 0.6) < kFloatProbTol);
  CHECK(std::abs(spec::acceptance_probability(p, p) - 1.0) < kFloatProbTol);
  CHECK_THROWS_AS((void)spec::acceptance_probability(p, std::vector<float>(3)), shape_error);
}
