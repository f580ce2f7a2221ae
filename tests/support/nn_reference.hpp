#pragma once
// Scalar references for barato::nn (the oracles of tests/nn and the baselines of the benchmarks).
// Written for clarity, in double precision, never for speed.

#include <cmath>
#include <cstddef>
#include <vector>

namespace barato::test {

/// Named tolerances of the nn kernels.
inline constexpr double kDenseFp32RelTol = 1e-5;   // fp32 GEMV vs double reference, relative to max |ref|
inline constexpr double kRmsNormRelTol = 1e-5;     // fp32 RMSNorm vs double reference
inline constexpr double kSwigluRelTol = 1e-5;      // vectorised exp vs std::exp in double

/// y [n, rows] = x [n, cols] · wᵀ with w [rows, cols], accumulated in double.
inline std::vector<float> dense_ref(const std::vector<float>& w, std::size_t rows, std::size_t cols,
                                    const std::vector<float>& x, std::size_t n) {
  std::vector<float> y(n * rows);
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t r = 0; r < rows; ++r) {
      double s = 0;
      for (std::size_t k = 0; k < cols; ++k) s += double(w[r * cols + k]) * double(x[j * cols + k]);
      y[j * rows + r] = static_cast<float>(s);
    }
  return y;
}

/// y = x / sqrt(mean(x²) + eps) ⊙ w, in double.
inline std::vector<float> rms_norm_ref(const std::vector<float>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (float v : x) ss += double(v) * double(v);
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(double(x[i]) * inv * double(w[i]));
  return y;
}

/// h = g · σ(g) · u, in double.
inline std::vector<float> swiglu_ref(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<float> h(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i];
    h[i] = static_cast<float>(gi / (1.0 + std::exp(-gi)) * double(u[i]));
  }
  return h;
}

}  // namespace barato::test
