// distill/losses.hpp: KL / reverse KL / JSD against direct formulas on probability vectors, the T²
// switch, the KD and mixed gradients against central finite differences in double precision, masked
// tokens, and the errors.
#include "barato/distill/losses.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "barato/distill/softmax.hpp"

using namespace barato;
using namespace barato::distill;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
/// Two double evaluations of the same sum in different orders: a few ulps of values of order 1.
constexpr double kDoubleTol = 1e-12;
/// Central differences with step h in double: truncation O(h² · f''') ≈ 1e-10 and rounding
/// O(eps · f / h) ≈ 1e-11 for h = 1e-5 and losses of order 1; 1e-7 has headroom and fails on a wrong
/// factor (T, T², a sign), which is off by ≥ 1e-2 here.
constexpr double kFiniteDiffTol = 1e-7;
constexpr double kStep = 1e-5;

std::vector<double> random_logits(std::size_t n, unsigned seed, double scale = 2.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> z(n);
  for (double& x : z) x = d(rng);
  return z;
}

std::vector<double> probs(const std::vector<double>& z, double t) {
  std::vector<double> p(z.size());
  softmax(z, t, p);
  return p;
}

double kl_direct(const std::vector<double>& p, const std::vector<double>& q) {
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) s += p[i] * std::log(p[i] / q[i]);
  return s;
}

/// Central differences of f at z, one coordinate at a time.
template <class F>
std::vector<double> finite_diff(const std::vector<double>& z, F f) {
  std::vector<double> g(z.size());
  for (std::size_t i = 0; i < z.size(); ++i) {
    std::vector<double> a = z, b = z;
    a[i] += kStep;
    b[i] -= kStep;
    g[i] = (f(a) - f(b)) / (2 * kStep);
  }
  return g;
}
}  // namespace

TEST_CASE("forward KL, reverse KL and JSD equal their formulas on the probability vectors") {
  const auto zt = random_logits(37, 1), zs = random_logits(37, 2);
  for (const double t : {1.0, 2.0, 4.0}) {
    const auto p = probs(zt, t), q = probs(zs, t);
    CHECK(forward_kl(zt, zs, t) == doctest::Approx(kl_direct(p, q)).epsilon(kDoubleTol));
    CHECK(reverse_kl(zt, zs, t) == doctest::Approx(kl_direct(q, p)).epsilon(kDoubleTol));
    std::vector<double> m(p.size());
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = 0.5 * (p[i] + q[i]);
    CHECK(jsd(zt, zs, t) == doctest::Approx(0.5 * kl_direct(p, m) + 0.5 * kl_direct(q, m)).epsilon(kDoubleTol));
    CHECK(jsd(zt, zs, t) == doctest::Approx(jsd(zs, zt, t)).epsilon(kDoubleTol));
    CHECK(forward_kl(zt, zs, t) != doctest::Approx(reverse_kl(zt, zs, t)).epsilon(1e-3));  // not symmetric
  }
}

TEST_CASE("KL of a row with itself (or shifted by a constant) is 0; a different row gives > 0") {
  const auto z = random_logits(50, 3);
  std::vector<double> shifted = z;
  for (double& x : shifted) x += 7.5;
  CHECK(forward_kl(z, shifted) == doctest::Approx(0.0).epsilon(kDoubleTol));
  CHECK(jsd(z, shifted) == doctest::Approx(0.0).epsilon(kDoubleTol));
  CHECK(forward_kl(z, random_logits(50, 4)) > 0.01);
}

TEST_CASE("kd_loss: T² factor on by default, off with TemperatureScaling::none") {
  const auto zt = random_logits(20, 5), zs = random_logits(20, 6);
  for (const double t : {1.0, 2.0, 4.0}) {
    const double kl = forward_kl(zt, zs, t);
    CHECK(kd_loss(zt, zs, {.temperature = t}) == doctest::Approx(t * t * kl).epsilon(kDoubleTol));
    CHECK(kd_loss(zt, zs, {.temperature = t, .scaling = TemperatureScaling::none}) == doctest::Approx(kl).epsilon(kDoubleTol));
  }
}

TEST_CASE("kd_gradient = c (p_s - p_t) / T matches central finite differences of kd_loss in double") {
  const auto zt = random_logits(16, 7), zs = random_logits(16, 8);
  for (const auto scaling : {TemperatureScaling::squared, TemperatureScaling::none}) {
    for (const double t : {1.0, 2.0, 4.0}) {
      const KdOptions opt{.temperature = t, .scaling = scaling};
      std::vector<double> g(zs.size());
      const double loss = kd_gradient(zt, zs, opt, g);
      CHECK(loss == doctest::Approx(kd_loss(zt, zs, opt)).epsilon(kDoubleTol));
      const auto fd = finite_diff(zs, [&](const std::vector<double>& s) { return kd_loss(zt, s, opt); });
      for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(fd[i]).epsilon(kFiniteDiffTol).scale(1.0));
      // the closed form itself, in the stated convention
      const auto ps = probs(zs, t), pt = probs(zt, t);
      const double c = scaling == TemperatureScaling::squared ? t : 1.0 / t;
      for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(c * (ps[i] - pt[i])).epsilon(kDoubleTol));
    }
  }
}

TEST_CASE("mixed loss = alpha CE + (1 - alpha) KD, and its gradient matches finite differences") {
  const auto zt = random_logits(12, 9), zs = random_logits(12, 10);
  const Token y = 5;
  for (const double alpha : {0.0, 0.3, 1.0}) {
    const MixedOptions opt{.alpha = alpha, .kd = {.temperature = 2.0}};
    const double expect = alpha * cross_entropy(zs, y) + (1 - alpha) * kd_loss(zt, zs, opt.kd);
    CHECK(mixed_loss(zt, zs, y, opt) == doctest::Approx(expect).epsilon(kDoubleTol));
    std::vector<double> g(zs.size());
    CHECK(mixed_gradient(zt, zs, y, opt, g) == doctest::Approx(expect).epsilon(kDoubleTol));
    const auto fd = finite_diff(zs, [&](const std::vector<double>& s) { return mixed_loss(zt, s, y, opt); });
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(fd[i]).epsilon(kFiniteDiffTol).scale(1.0));
  }
  const auto p = probs(zs, 1.0);
  CHECK(cross_entropy(zs, y) == doctest::Approx(-std::log(p[y])).epsilon(kDoubleTol));
  std::vector<double> g(zs.size());
  CHECK(cross_entropy_gradient(zs, y, g) == doctest::Approx(cross_entropy(zs, y)).epsilon(kDoubleTol));
  const auto fd = finite_diff(zs, [&](const std::vector<double>& s) { return cross_entropy(s, y); });
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(fd[i]).epsilon(kFiniteDiffTol).scale(1.0));
}

TEST_CASE("masked tokens: 0 where the teacher masks, +inf KL where only the student masks, JSD stays <= ln 2") {
  const std::vector<double> t = {1.0, -kInf, 0.5, 2.0};
  const std::vector<double> s = {0.0, 3.0, -kInf, 1.0};
  CHECK(forward_kl(t, s) == kInf);  // the teacher has mass on token 2, the student none
  CHECK(reverse_kl(t, s) == kInf);  // and the other way round on token 1
  const double j = jsd(t, s);
  CHECK(std::isfinite(j));
  CHECK(j > 0.0);
  CHECK(j <= std::numbers::ln2);
  // both mask the same token: it contributes nothing and the rest is an ordinary KL
  const std::vector<double> t2 = {1.0, -kInf, 0.5}, s2 = {0.0, -kInf, 1.0};
  CHECK(forward_kl(t2, s2) == doctest::Approx(forward_kl(std::vector<double>{1.0, 0.5}, std::vector<double>{0.0, 1.0})).epsilon(kDoubleTol));
  std::vector<double> g(3);
  (void)kd_gradient(t2, s2, {.temperature = 2.0}, g);
  CHECK(g[1] == 0.0);
  // disjoint supports: JSD is exactly ln 2
  CHECK(jsd(std::vector<double>{0.0, -kInf}, std::vector<double>{-kInf, 0.0}) == doctest::Approx(std::numbers::ln2).epsilon(kDoubleTol));
}

TEST_CASE("bad input: NaN, sizes, alpha, target, temperature") {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f}, nan = {1.0f, std::nanf(""), 3.0f}, b = {1.0f, 2.0f};
  std::vector<float> g(3);
  CHECK_THROWS_AS((void)forward_kl(a, nan), value_error);
  CHECK_THROWS_AS((void)jsd(nan, a), value_error);
  CHECK_THROWS_AS((void)kd_loss(a, nan), value_error);
  CHECK_THROWS_AS((void)kd_gradient(nan, a, {}, g), value_error);
  CHECK_THROWS_AS((void)forward_kl(a, b), shape_error);
  CHECK_THROWS_AS((void)kd_gradient(a, a, {}, std::vector<float>(2)), shape_error);
  CHECK_THROWS_AS((void)mixed_loss(a, a, 0, {.alpha = 1.5}), value_error);
  CHECK_THROWS_AS((void)cross_entropy(a, 3), value_error);
  CHECK_THROWS_AS((void)cross_entropy(a, -1), value_error);
  CHECK_THROWS_AS((void)kd_loss(a, a, {.temperature = 0.0}), value_error);
  CHECK_THROWS_AS((void)mixed_gradient(a, a, 7, {}, g), value_error);
  CHECK_THROWS_AS((void)cross_entropy_gradient(a, 3, g), value_error);
  CHECK_THROWS_AS((void)cross_entropy_gradient(a, 0, std::vector<float>(2)), shape_error);
}

TEST_CASE("losses on all-equal, subnormal and empty rows: exact zeros, log(vocab), value_error") {
  const std::vector<float> eq(10, 1.25f), eq2(10, -7.0f), empty;
  CHECK(kl_divergence(eq, eq2) == 0.0);  // equal rows shifted by a constant: the same distribution
  CHECK(jsd(eq, eq2) == 0.0);
  CHECK(cross_entropy(eq, 3) == doctest::Approx(std::log(10.0)).epsilon(1e-12));
  std::vector<float> g(10, 9.0f);
  CHECK(kd_gradient(eq, eq2, KdOptions{}, g) == 0.0);
  for (const float x : g) CHECK(x == 0.0f);
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> sub{tiny, 0.0f, -tiny, tiny}, eq4(4, 3.0f);
  CHECK(std::isfinite(kl_divergence(sub, eq4)));
  CHECK(std::abs(kl_divergence(sub, eq4)) <= 1e-12);  // subnormal logits are a uniform row up to rounding
  CHECK_THROWS_AS((void)kl_divergence(empty, empty), shape_error);  // an empty row is a shape error (softmax.hpp)
  CHECK_THROWS_AS((void)jsd(empty, empty), shape_error);
  CHECK_THROWS_AS((void)cross_entropy(empty, 0), value_error);  // target 0 is outside [0, 0): checked first
}
