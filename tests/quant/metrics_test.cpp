#include "barato/quant/metrics.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using namespace barato;
using namespace barato::quant;

TEST_CASE("relative_error is the Frobenius ratio") {
  const std::vector<float> w{3, 4, 0, 0}, wh{3, 4, 0, 1};
  CHECK(relative_error(w, wh) == doctest::Approx(1.0 / 5.0));
  CHECK(relative_error(w, w) == 0.0);
  const std::vector<float> z{0, 0};
  CHECK(relative_error(z, z) == 0.0);
  CHECK(std::isinf(relative_error(z, std::vector<float>{0, 1})));
  CHECK_THROWS_AS((void)relative_error(w, z), shape_error);
}

TEST_CASE("outlier_stats on a known set") {
  std::vector<float> w(1000, 0.0f);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = (i % 2 == 0) ? 1.0f : -1.0f;
  w[0] = 100.0f;  // one outlier
  const auto s = outlier_stats(w, 6.0);
  CHECK(s.n == 1000);
  CHECK(s.max_abs == 100.0);
  CHECK(s.mean == doctest::Approx(99.0 / 1000.0));
  CHECK(s.mean_abs == doctest::Approx((999.0 + 100.0) / 1000.0));
  double var = 0;
  for (float v : w) var += (v - s.mean) * (v - s.mean);
  CHECK(s.std == doctest::Approx(std::sqrt(var / 1000.0)));
  CHECK(s.max_over_std == doctest::Approx(100.0 / s.std));
  CHECK(s.beyond == 1);
  CHECK(s.share_beyond == doctest::Approx(0.001));
  CHECK(outlier_stats(std::vector<float>{}).n == 0);
  CHECK_THROWS_AS((void)outlier_stats(w, 0.0), value_error);
}
