#pragma once
// Scalar references for barato::quant (the oracles of tests/quant and the baselines of bench_quant).
// Written from the definitions, independently of the library code: plain loops over groups, integers
// as `int`, levels by exhaustive nearest search, products accumulated in double.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

namespace barato::test::quant_ref {

/// Tolerance of fp32 quantized kernels against the double reference over the same Ŵ
/// (relative to Σ|Ŵ_rc x_c| of the row, i.e. summation-order noise).
inline constexpr double kKernelRelTol = 2e-5;

/// Scale granularity of the reference: 0 = per tensor, 1 = per row, G ≥ 2 = groups of G in a row.
inline constexpr std::size_t kTensor = 0, kRow = 1;

/// Result of a reference quantization: per element the integer (or level index) and the float scale.
struct Quantized {
  std::vector<int> q;        // [rows, cols] integer (absmax) or level index (nf4)
  std::vector<float> scale;  // [rows, cols] the (stored, rounded) scale that applies to the element
  std::vector<float> w_hat;  // [rows, cols] dequantized
};

/// Group [c0, c1) of row r for granularity g.
template <class Fn>
void for_each_group(std::size_t rows, std::size_t cols, std::size_t g, Fn&& fn) {
  if (g == kTensor) {
    fn(std::size_t{0}, rows * cols);  // flat range
    return;
  }
  const std::size_t len = g == kRow ? cols : g;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 < cols; c0 += len) fn(r * cols + c0, r * cols + std::min(cols, c0 + len));
}

/// Symmetric absmax with `bits`; the scale is rounded through ScaleT.
template <class ScaleT>
Quantized absmax(const std::vector<float>& w, std::size_t rows, std::size_t cols, int bits, std::size_t g) {
  Quantized out{std::vector<int>(w.size()), std::vector<float>(w.size()), std::vector<float>(w.size())};
  const int qmax = (1 << (bits - 1)) - 1;
  for_each_group(rows, cols, g, [&](std::size_t b, std::size_t e) {
    float a = 0;
    for (std::size_t i = b; i < e; ++i) a = std::max(a, std::fabs(w[i]));
    const float s = static_cast<float>(static_cast<ScaleT>(a / static_cast<float>(qmax)));
    for (std::size_t i = b; i < e; ++i) {
      int q = 0;
      if (s != 0) {
        const float v = w[i] / s;
        q = static_cast<int>(std::nearbyint(v));
        q = std::clamp(q, -qmax - 1, qmax);
      }
      out.q[i] = q;
      out.scale[i] = s;
      out.w_hat[i] = static_cast<float>(q) * s;
    }
  });
  return out;
}

/// NF4 with blocks of `block` in a row; levels given; nearest by exhaustive search (ties: lower index).
template <class ScaleT, class Levels>
Quantized nf4(const std::vector<float>& w, std::size_t rows, std::size_t cols, std::size_t block, const Levels& lv) {
  Quantized out{std::vector<int>(w.size()), std::vector<float>(w.size()), std::vector<float>(w.size())};
  for_each_group(rows, cols, block, [&](std::size_t b, std::size_t e) {
    float a = 0;
    for (std::size_t i = b; i < e; ++i) a = std::max(a, std::fabs(w[i]));
    const float s = static_cast<float>(static_cast<ScaleT>(a));
    for (std::size_t i = b; i < e; ++i) {
      int best = 7;
      if (s != 0) {
        const float v = w[i] / s;
        double bd = std::numeric_limits<double>::infinity();
        for (int k = 0; k < 16; ++k) {
          const double d = std::fabs(double(v) - double(lv[k]));
          if (d < bd) { bd = d; best = k; }
        }
      }
      out.q[i] = best;
      out.scale[i] = s;
      out.w_hat[i] = lv[best] * s;
    }
  });
  return out;
}

/// y = W x in double, W [rows, cols].
inline std::vector<double> matvec(const std::vector<float>& w, std::size_t rows, std::size_t cols, const float* x) {
  std::vector<double> y(rows, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) y[r] += double(w[r * cols + c]) * double(x[c]);
  return y;
}

/// Σ_c |W_rc x_c| per row: the scale of a row's rounding noise.
inline std::vector<double> abs_matvec(const std::vector<float>& w, std::size_t rows, std::size_t cols, const float* x) {
  std::vector<double> y(rows, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) y[r] += std::fabs(double(w[r * cols + c]) * double(x[c]));
  return y;
}

/// Normal(0, sigma) weights from a seeded generator.
inline std::vector<float> normal_vector(std::size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& e : x) e = dist(gen);
  return x;
}

}  // namespace barato::test::quant_ref
