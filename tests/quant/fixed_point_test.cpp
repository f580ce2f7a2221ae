#include "barato/quant/fixed_point.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "support/reference.hpp"

using namespace barato::quant;

TEST_CASE("fixed_point_block: q · sx is within sx / 2 of x, the largest |x| maps to ±kFixedPointMax") {
  auto x = barato::test::random_vector(kFixedPointBlock, 5, -3.0f, 3.0f);
  x[17] = -4.5f;  // the block maximum
  std::vector<int> q(x.size(), 99999);
  const float sx = fixed_point_block(x.data(), x.size(), [&](std::size_t i, int v) { q[i] = v; });
  CHECK(sx == doctest::Approx(4.5 / kFixedPointMax));
  CHECK(q[17] == -kFixedPointMax);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(std::abs(q[i]) <= kFixedPointMax);
    CHECK(std::fabs(double(q[i]) * sx - double(x[i])) <= 0.5 * sx * (1 + barato::test::kStepRoundingSlack));
  }
}

TEST_CASE("fixed_point_block: an all-zero block has step 0 and zero codes (no NaN)") {
  const std::vector<float> x(kFixedPointBlock, 0.0f);
  std::vector<int> q(x.size(), 7);
  CHECK(fixed_point_block(x.data(), x.size(), [&](std::size_t i, int v) { q[i] = v; }) == 0.0f);
  for (int v : q) CHECK(v == 0);
}
