#include "barato/quant/outliers.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "quant/reference.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

namespace {
/// SmoothQuant's (W·diag(s))·(diag(s)⁻¹·x) against W·x, both in double from fp32 inputs: the scaled
/// weights and activations are rounded to fp32 once each (u ≈ 6·10⁻⁸ relative per term), but a row sum
/// with cancellation can lose a few digits relative to its own value.
constexpr double kSmoothIdentityRelTol = 1e-4;

double rel_err(const std::vector<float>& y, const std::vector<double>& exact) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    num += (y[i] - exact[i]) * (y[i] - exact[i]);
    den += exact[i] * exact[i];
  }
  return std::sqrt(num / den);
}
}  // namespace

TEST_CASE("find_outlier_columns returns exactly the columns beyond the threshold") {
  const std::vector<float> x{0.1f, -7.f, 6.0f, 6.5f, -0.2f};
  std::vector<std::uint32_t> idx(5);
  REQUIRE(find_outlier_columns(x, 6.0f, idx) == 2);
  CHECK(idx[0] == 1);
  CHECK(idx[1] == 3);
}

TEST_CASE("LLM.int8 mixed decomposition equals its definition and rescues activations with outlier dimensions") {
  const std::size_t R = 96, C = 512;
  const auto w = ref::normal_vector(R * C, 6, 0.05f);
  auto x = ref::normal_vector(C, 7, 1.0f);
  for (std::size_t c : {3u, 77u, 300u}) x[c] = 60.0f;  // systematic outlier features (LLM.int8, fig. 1)
  const MixedInt8Linear<> mixed(R, C, w);
  const W8A8Linear<> plain(R, C, w);
  std::vector<float> ym(R), yp(R);
  mixed.apply(x, ym);
  plain.apply(x, yp);
  CHECK(mixed.last_outliers() >= 3);

  // definition: fp32 over outlier columns (dequantized int8 weights) + int8 path over the rest
  const auto v = plain.matrix().view();
  std::vector<float> xr = x;
  std::vector<bool> out(C);
  for (std::size_t c = 0; c < C; ++c) out[c] = std::fabs(x[c]) > kOutlierThreshold;
  for (std::size_t c = 0; c < C; ++c) if (out[c]) xr[c] = 0;
  std::vector<std::int8_t> xq(C);
  const float sx = quantize_activation(xr, xq);
  for (std::size_t r = 0; r < R; ++r) {
    double d = 0, f = 0;
    for (std::size_t c = 0; c < C; ++c) {
      d += double(Int8PerRow<>::integer(v.code(r, c))) * xq[c];
      if (out[c]) f += double(v.at(r, c)) * x[c];
    }
    const double expect = double(v.scale(r, 0)) * sx * d + f;
    CHECK(ym[r] == doctest::Approx(expect).epsilon(test::kFp32RelTol));
  }
  const auto exact = ref::matvec(w, R, C, x.data());
  CHECK(rel_err(ym, exact) < 0.5 * rel_err(yp, exact));  // the outliers no longer swamp the int8 scale
}

TEST_CASE("SmoothQuant migration keeps X Wᵀ and lowers W8A8 error on outlier channels") {
  const std::size_t R = 64, C = 256, N = 8;
  auto w = ref::normal_vector(R * C, 8, 0.05f);
  auto x = ref::normal_vector(N * C, 9, 1.0f);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t c : {5u, 100u}) x[t * C + c] *= 40.0f;  // two outlier channels
  std::vector<float> act_max(C, 0.f);
  for (std::size_t i = 0; i < x.size(); ++i) act_max[i % C] = std::max(act_max[i % C], std::fabs(x[i]));
  const auto s = smooth_scales(act_max, column_absmax(w, R, C), 0.5f);
  auto ws = w;
  scale_columns(ws, R, C, s);
  auto xs = x;
  divide_channels(xs, s);
  double err_plain = 0, err_smooth = 0;
  for (std::size_t t = 0; t < N; ++t) {
    const auto exact = ref::matvec(w, R, C, x.data() + t * C);
    const auto same = ref::matvec(ws, R, C, xs.data() + t * C);
    for (std::size_t r = 0; r < R; ++r) CHECK(same[r] == doctest::Approx(exact[r]).epsilon(kSmoothIdentityRelTol));
    std::vector<float> yp(R), ys(R);
    W8A8Linear<float>(R, C, w).apply(std::span<const float>(x.data() + t * C, C), yp);
    W8A8Linear<float>(R, C, ws).apply(std::span<const float>(xs.data() + t * C, C), ys);
    err_plain += rel_err(yp, exact);
    err_smooth += rel_err(ys, exact);
  }
  CHECK(err_smooth < 0.7 * err_plain);
  CHECK_THROWS_AS((void)smooth_scales(act_max, act_max, 1.5f), value_error);
  CHECK(smooth_scales(std::vector<float>{0.f}, std::vector<float>{1.f})[0] == 1.f);
}
