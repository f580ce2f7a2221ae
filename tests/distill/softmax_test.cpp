// distill/softmax.hpp: softmax with temperature against a direct formula, the log-sum-exp against
// overflow, masked (−∞) tokens, the temperature's effect, and the errors (NaN, +∞, all masked, bad T).
#include "barato/distill/softmax.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "support/tolerances.hpp"

using namespace barato;
using namespace barato::distill;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Double-precision formulas evaluated two ways (max-subtracted vs direct, small logits): a few ulps.
constexpr double kDoubleTol = 1e-13;
}  // namespace

TEST_CASE("softmax at T equals exp(z/T) / sum exp(z/T), for float and double rows") {
  const std::vector<double> z = {1.5, -0.25, 3.0, 0.0, 2.0};
  for (const double t : {0.5, 1.0, 2.0, 4.0}) {
    double s = 0;
    for (const double x : z) s += std::exp(x / t);
    std::vector<double> p(z.size());
    softmax(z, t, p);
    std::vector<float> zf(z.begin(), z.end()), pf(z.size());
    softmax(zf, t, pf);
    for (std::size_t i = 0; i < z.size(); ++i) {
      CHECK(p[i] == doctest::Approx(std::exp(z[i] / t) / s).epsilon(kDoubleTol));
      CHECK(double(pf[i]) == doctest::Approx(std::exp(z[i] / t) / s).epsilon(test::kFp32RelTol));
    }
    CHECK(std::accumulate(p.begin(), p.end(), 0.0) == doctest::Approx(1.0).epsilon(kDoubleTol));
    CHECK(log_sum_exp(z, t) == doctest::Approx(std::log(s)).epsilon(kDoubleTol));
    std::vector<double> lp(z.size());
    log_softmax(z, t, lp);
    for (std::size_t i = 0; i < z.size(); ++i) CHECK(lp[i] == doctest::Approx(std::log(p[i])).epsilon(kDoubleTol));
  }
}

TEST_CASE("a higher temperature flattens: the top probability falls, the ratio p(a)/p(b) is its T-th root") {
  const std::vector<float> z = {4.0f, 2.0f, 1.0f, -1.0f};
  std::vector<double> p1(4), p2(4), p4(4);
  soft_targets(z, 1.0, p1);
  soft_targets(z, 2.0, p2);
  soft_targets(z, 4.0, p4);
  CHECK(p1[0] > p2[0]);
  CHECK(p2[0] > p4[0]);
  CHECK(p2[0] / p2[2] == doctest::Approx(std::sqrt(p1[0] / p1[2])).epsilon(kDoubleTol));
  CHECK(p4[0] / p4[2] == doctest::Approx(std::pow(p1[0] / p1[2], 0.25)).epsilon(kDoubleTol));
}

TEST_CASE("large logits do not overflow (log-sum-exp subtracts the max)") {
  const std::vector<float> z = {1000.0f, 999.0f, -1000.0f};
  std::vector<double> p(3);
  softmax(z, 1.0, p);
  CHECK(p[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(kDoubleTol));
  CHECK(p[2] >= 0.0);
  CHECK(log_sum_exp(z) == doctest::Approx(1000.0 + std::log1p(std::exp(-1.0))).epsilon(kDoubleTol));
}

TEST_CASE("masked (-inf) tokens get probability 0 and log-probability -inf, the rest renormalise") {
  const std::vector<double> z = {1.0, -kInf, 2.0};
  std::vector<double> p(3), lp(3);
  softmax(z, 2.0, p);
  log_softmax(z, 2.0, lp);
  CHECK(p[1] == 0.0);
  CHECK(lp[1] == -kInf);
  CHECK(p[0] + p[2] == doctest::Approx(1.0).epsilon(kDoubleTol));
  CHECK(p[2] / p[0] == doctest::Approx(std::exp(0.5)).epsilon(kDoubleTol));
}

TEST_CASE("bad input: NaN, +inf, every token masked, bad temperature, mismatched sizes, empty rows") {
  std::vector<double> out(3);
  CHECK_THROWS_AS(softmax(std::vector<float>{1.0f, std::nanf(""), 0.0f}, 1.0, out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{1.0, kInf, 0.0}, 1.0, out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{-kInf, -kInf, -kInf}, 1.0, out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{1, 2, 3}, 0.0, out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{1, 2, 3}, -1.0, out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{1, 2, 3}, std::nan(""), out), value_error);
  CHECK_THROWS_AS(softmax(std::vector<double>{1, 2}, 1.0, out), shape_error);
  CHECK_THROWS_AS((void)log_sum_exp(std::vector<double>{}), shape_error);
}
