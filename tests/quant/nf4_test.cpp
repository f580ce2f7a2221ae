#include "barato/quant/nf4.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace barato::quant;

namespace {
/// The table holds QLoRA's float32 values, built with δ rounded to 0.9677083.
constexpr double kTableTol = 1e-5;
/// Φ⁻¹ by bisection on erfc (double): enough digits to check the float table.
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}
}  // namespace

TEST_CASE("the NF4 table equals QLoRA's construction from normal quantiles") {
  const double delta = 1.0 - 0.5 * (1.0 / 32.0 + 1.0 / 30.0);  // 0.9677…
  std::vector<double> v;
  for (int i = 0; i < 8; ++i) v.push_back(normal_quantile(delta + (0.5 - delta) * i / 8.0));  // 8 of 9 points
  for (int i = 0; i < 7; ++i) v.push_back(-normal_quantile(delta + (0.5 - delta) * i / 7.0));  // 7 of 8 points
  v.push_back(0.0);
  double mx = 0;
  for (double x : v) mx = std::max(mx, std::fabs(x));
  for (auto& x : v) x /= mx;
  std::sort(v.begin(), v.end());
  for (int k = 0; k < 16; ++k) CHECK(kNf4Levels[std::size_t(k)] == doctest::Approx(v[std::size_t(k)]).epsilon(kTableTol));
}

TEST_CASE("NF4 encode picks the nearest level and round-trips every code") {
  using F = Nf4<64>;
  for (unsigned c = 0; c < 16; ++c) CHECK(F::encode(F::level(static_cast<std::uint8_t>(c))) == c);
  for (float v = -1.0f; v <= 1.0f; v += 0.001f) {
    const auto c = F::encode(v);
    for (unsigned k = 0; k < 16; ++k) CHECK(std::fabs(v - kNf4Levels[c]) <= std::fabs(v - kNf4Levels[k]));
  }
  CHECK(F::kBitsPerWeight == 4.25);
  CHECK(F::kBlockSize == 64);
}
