#include "barato/sample/chain.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "barato/core/memory.hpp"
#include "support/chi_square.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
constexpr double kProbTol = 1e-6;  // fp32 chain vs double reference
}

TEST_CASE("Chain<> is softmax sampling; its probabilities match the double reference") {
  const auto l = test::random_vector(37, 5, -4.0f, 4.0f);
  sample::Chain chain(37);
  std::vector<float> p(37);
  chain.probabilities(l, {}, p);
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  for (std::size_t i = 0; i < l.size(); ++i) CHECK(std::abs(p[i] - std::exp(double(l[i])) / z) < kProbTol);
}

TEST_CASE("a chain applies its steps in order: penalty -> top-k -> temperature equals the hand computation") {
  const std::vector<float> l = {2.0f, 1.0f, 0.5f, -1.0f, 1.9f};
  const std::vector<Token> hist = {0, 0, 3};
  sample::Chain chain(5, sample::RepetitionPenalty{2.0f}, sample::TopK{3}, sample::Temperature{0.5f});
  std::vector<float> p(5);
  chain.probabilities(l, hist, p);
  // penalty: {1, 1, .5, -2, 1.9}; top-3: ids 4 (1.9), 0 (1), 1 (1; tie → lower ids 0, 1); temperature ×2
  const double e4 = std::exp(3.8), e0 = std::exp(2.0), e1 = std::exp(2.0), z = e4 + e0 + e1;
  CHECK(std::abs(p[4] - e4 / z) < kProbTol);
  CHECK(std::abs(p[0] - e0 / z) < kProbTol);
  CHECK(std::abs(p[1] - e1 / z) < kProbTol);
  CHECK(p[2] == 0.0f);
  CHECK(p[3] == 0.0f);
}

TEST_CASE("seeded sampling is reproducible and follows the chain's distribution (chi-square)") {
  const auto l = test::random_vector(12, 9, -2.0f, 2.0f);
  sample::Chain chain(12, sample::TopP{0.9f}, sample::MinP{0.05f}, sample::Temperature{0.7f});
  std::vector<float> p(12);
  chain.probabilities(l, {}, p);
  const std::vector<double> pd(p.begin(), p.end());
  sample::Rng a(11), b(11);
  std::vector<std::size_t> counts(12);
  for (int i = 0; i < 100000; ++i) {
    const auto sa = chain.sample(l, {}, a);
    const Token tb = chain.sample(l, {}, b).token;
    REQUIRE(sa.token == tb);
    REQUIRE(sa.probs[static_cast<std::size_t>(sa.token)] > 0.0f);
    ++counts[static_cast<std::size_t>(sa.token)];
  }
  CHECK(test::chi_square_test(counts, pd).p_value > test::kChiSquareAlpha);
}

TEST_CASE("sampling allocates nothing after construction; bad sizes throw") {
  CountingResource mr;
  sample::Chain chain(&mr, 64, sample::RepetitionPenalty{1.3f}, sample::TopK{10}, sample::TopP{0.8f});
  const auto l = test::random_vector(64, 2);
  const std::vector<Token> hist = {1, 2, 3, 2};
  sample::Rng rng(0);
  const auto before = mr.allocations();
  for (int i = 0; i < 10; ++i) (void)chain.sample(l, hist, rng);
  CHECK(mr.allocations() == before);
  std::vector<float> p(63);
  CHECK_THROWS_AS(chain.probabilities(l, hist, p), shape_error);
}

TEST_CASE("Chain refuses NaN / +inf logits before its steps rank them, and all-masked logits") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  sample::Chain chain(6, sample::TopK{3}, sample::TopP{0.9f}, sample::Temperature{0.7f});
  sample::Rng rng(5);
  std::vector<float> p(6);
  for (const auto& bad : {std::vector<float>{1, nan, 2, 0, 0, 0}, std::vector<float>{nan, nan, nan, nan, nan, nan},
                          std::vector<float>{1, 2, inf, 0, 0, 0}, std::vector<float>(6, -inf)}) {
    CHECK_THROWS_AS(chain.probabilities(bad, {}, p), value_error);
    CHECK_THROWS_AS((void)chain.sample(bad, {}, rng), value_error);
  }
  const std::vector<float> eq(6, 0.5f);  // all equal: top-k keeps the 3 lowest ids, each 1/3
  chain.probabilities(eq, {}, p);
  for (std::size_t i = 0; i < 6; ++i) CHECK(p[i] == doctest::Approx(i < 3 ? 1.0 / 3.0 : 0.0));
}
