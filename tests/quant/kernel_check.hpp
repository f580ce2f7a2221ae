#pragma once
// Checks of one quant::RowKernel against the scalar reference (tests/quant/reference.hpp), shared by
// gemv_test and the per-kernel tests (row_kernel, avx512, vnni, vnni_lut16): a kernel's dot of a row
// must equal the double product of the dequantized row within fp32 summation noise plus, for the
// fixed-point kernels, the bound of their roundings stated in quant/vnni.hpp and quant/vnni_lut16.hpp.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/quant/fixed_point.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/scratch.hpp"
#include "quant/reference.hpp"
#include "support/reference.hpp"

namespace barato::test::quant_ref {

/// Relative slack on the fixed-point half step sx/2: sx = max|x| / 16383 is itself computed in fp32.
inline constexpr double kFixedStepSlack = 1e-6;

/// Per row of Ŵ [rows, cols], the error kernel K may add to Σ_c Ŵ_rc x_c beyond fp32 summation noise:
/// 0 for the fp32 kernels; for the fixed-point kernels (K::kName "avx512-vnni" / "avx512-vnni-lut16")
/// the rounding of x to 15-bit fixed point per 128-column block (≤ sx_b / 2 per element, times |Ŵ_rc|;
/// with `K::kRowStep` one sx for all full blocks, from their largest |x|)
/// and, for the table kernel, the rounding of the levels to 16-bit fixed point (≤ scale / (2·kLevelScale)
/// per weight, times |x_c| + sx_b / 2). Columns past the last full block are exact fp32. For ggml's
/// product (K::kName "avx512-vnni-q8", quant/ggml_dot.hpp) the int8 rounding of x per 32-column block:
/// |x_c| · |D − d| / d + D / 2 per element (d = amax / 127, D its fp16 rounding), times |Ŵ_rc|.
template <class K, class F>
std::vector<double> fixed_point_bound(const quant::QuantizedMatrix<F>& m, const std::vector<float>& w_hat, const float* x) {
  const std::size_t rows = m.rows(), cols = m.cols();
  std::vector<double> bound(rows, 0.0);
  const std::string_view kernel = K::kName;
  if (kernel == "avx512-vnni-q8") {
    for (std::size_t b = 0; b < cols; b += 32) {
      const std::size_t e = std::min(cols, b + 32);
      double amax = 0;
      for (std::size_t c = b; c < e; ++c) amax = std::max(amax, std::fabs(double(x[c])));
      if (amax == 0) continue;
      const double d = amax / 127.0, D = double(to_float(from_float<f16>(float(d))));
      const double rel = std::fabs(D - d) / d + 1e-6;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = b; c < e; ++c)
          bound[r] += std::fabs(double(w_hat[r * cols + c])) * (std::fabs(double(x[c])) * rel + 0.5 * D * (1 + 1e-6));
    }
    return bound;
  }
  if (kernel != "avx512-vnni" && kernel != "avx512-vnni-lut16") return bound;
  double level_half_step = 0.0;  // per unit of scale
  if constexpr (requires { K::kLevelScale; }) level_half_step = 0.5 / double(K::kLevelScale);
  constexpr std::size_t B = quant::kFixedPointBlock;
  double row_xmax = 0;  // one step for all full blocks (K::kRowStep)
  for (std::size_t c = 0; c < cols / B * B; ++c) row_xmax = std::max(row_xmax, std::fabs(double(x[c])));
  bool row_step = false;
  if constexpr (requires { K::kRowStep; }) row_step = K::kRowStep;
  for (std::size_t b = 0; b + B <= cols; b += B) {
    double xmax = 0;
    for (std::size_t c = b; c < b + B; ++c) xmax = std::max(xmax, std::fabs(double(x[c])));
    if (row_step) xmax = row_xmax;
    const double half_step = 0.5 * xmax / quant::kFixedPointMax * (1 + kFixedStepSlack);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = b; c < b + B; ++c)
        bound[r] += std::fabs(double(w_hat[r * cols + c])) * half_step +
                    double(m.view().scale(r, c)) * level_half_step * (std::fabs(double(x[c])) + half_step);
  }
  return bound;
}

/// A rows × cols matrix of format F for kernel tests: N(0, 0.05) weights with one outlier of 1.0 (so
/// scales differ between groups and rows).
template <class F>
quant::QuantizedMatrix<F> test_matrix(std::size_t rows, std::size_t cols, unsigned seed) {
  auto w = normal_vector(rows * cols, seed, 0.05f);
  w[std::min(cols + 3, w.size() - 1)] = 1.0f;
  return quant::QuantizedMatrix<F>(rows, cols, w);
}

/// K::prepare(x) then K::dot for every row of `m`, against the double product of the dequantized
/// matrix: |dot − Ŵx| ≤ kKernelRelTol · Σ|Ŵ_rc x_c| + (with_fixed_point ? fixed_point_bound : 0).
template <class K, class F>
void check_dots(const quant::QuantizedMatrix<F>& m, const std::vector<float>& x, bool with_fixed_point = true) {
  const std::size_t rows = m.rows(), cols = m.cols();
  CAPTURE(rows);
  CAPTURE(cols);
  const std::string_view kernel = K::kName;
  CAPTURE(kernel);
  std::vector<float> w_hat(rows * cols);
  m.dequantize(w_hat);
  const auto expect = matvec(w_hat, rows, cols, x.data());
  const auto scale = abs_matvec(w_hat, rows, cols, x.data());
  auto bound = fixed_point_bound<K>(m, w_hat, x.data());
  if (!with_fixed_point) std::fill(bound.begin(), bound.end(), 0.0);
  typename K::Activation act;  // a view into the thread's arena (the VNNI planes)
  K::prepare(x.data(), cols, act, quant::ActivationArena::local().get(K::activation_bytes(cols)));
  for (std::size_t r = 0; r < rows; ++r) {
    CAPTURE(r);
    const double got = K::dot(m.view(), r, act);
    REQUIRE(std::fabs(got - expect[r]) <= kKernelRelTol * (scale[r] + kTiny) + bound[r]);
  }
}

/// check_dots over the shapes that reach every branch of a row kernel: full 128-column blocks, a
/// ragged tail (stories260K's w2 width), a width with no full block, and a width with one block plus
/// a 64 + 16 + 5 column tail; x uniform in [−2, 2).
template <class K, class F>
void check_row_kernel_shapes(unsigned seed) {
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{40, 512}, {17, 172}, {5, 61}, {9, 213}}) {
    const auto m = test_matrix<F>(rows, cols, seed);
    check_dots<K>(m, random_vector(cols, seed + 1, -2.0f, 2.0f));
    ++seed;
  }
}

/// x on the fixed-point grid of every 128-column block (x_c = q_c · 2⁻¹⁰ with integer |q_c| ≤ 16383,
/// the extremes present in each block): the fixed-point kernels round nothing, so only fp32
/// summation noise separates their result from the exact product.
inline std::vector<float> fixed_point_grid_vector(std::size_t cols, unsigned seed) {
  auto x = random_vector(cols, seed, -1.0f, 1.0f);
  for (std::size_t c = 0; c < cols; ++c) x[c] = std::nearbyint(x[c] * float(quant::kFixedPointMax)) / 1024.0f;
  for (std::size_t b = 0; b + quant::kFixedPointBlock <= cols; b += quant::kFixedPointBlock) {
    x[b] = float(quant::kFixedPointMax) / 1024.0f;
    x[b + 1] = -float(quant::kFixedPointMax) / 1024.0f;
  }
  return x;
}

/// The row kernel's `dot_rows_tails<N>` (16 rows at a time, their lane sums and tail columns reduced
/// together) against `dot_n<1>` row by row (one horizontal reduction per row), bit for bit, for
/// N = 1 … 4 vectors, rows from r0 = 3 (2 rows past the last 16 go to dot_n<N>), at widths of all
/// tail (64), 1, 2 and 8 full 128-column blocks plus a tail (172, 300, 1100) and none (384), and for
/// ggml's kernel (`K::kChunk` columns per chunk, 32 per tail block) 96 and 224 (whole tail blocks
/// only) too. `has_tail` must be true exactly when cols is not a multiple of the chunk.
template <class K, class F>
void check_dot_rows_tails(unsigned seed) {
  constexpr std::size_t chunk = [] {
    if constexpr (requires { K::kChunk; }) return std::size_t{K::kChunk};
    else return std::size_t{128};
  }();
  for (const std::size_t cols : {64u, 172u, 300u, 1100u, 384u, 96u, 224u}) {
    CAPTURE(cols);
    const std::size_t rows = 37;
    const auto m = test_matrix<F>(rows, cols, seed + unsigned(cols));
    CHECK(K::has_tail(m.view()) == (cols % chunk != 0));
    std::vector<std::vector<float>> xs;  // alive while the activations point at them (their tails)
    std::vector<std::vector<std::byte>> scratch;
    typename K::Activation acts[4];
    for (unsigned j = 0; j < 4; ++j) {
      xs.push_back(barato::test::random_vector(cols, seed + 1 + j, -2.f, 2.f));
      scratch.emplace_back(K::activation_bytes(cols) + 64);
      void* p = scratch.back().data();
      std::size_t space = scratch.back().size();
      K::prepare(xs[j].data(), cols, acts[j], static_cast<std::byte*>(std::align(64, K::activation_bytes(cols), p, space)));
    }
    const auto check = [&]<std::size_t N>(std::integral_constant<std::size_t, N>) {
      CAPTURE(N);
      std::vector<float> y(N * rows, -1.0f);
      K::template dot_rows_tails<N>(m.view(), 3, rows, acts, y.data(), rows);
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t r = 3; r < rows; ++r) {
          float one;
          K::template dot_n<1>(m.view(), r, &acts[j], &one);
          if (std::bit_cast<std::uint32_t>(one) != std::bit_cast<std::uint32_t>(y[j * rows + r])) {
            CAPTURE(j);
            CAPTURE(r);
            REQUIRE(std::bit_cast<std::uint32_t>(one) == std::bit_cast<std::uint32_t>(y[j * rows + r]));
          }
        }
    };
    check(std::integral_constant<std::size_t, 1>{});
    check(std::integral_constant<std::size_t, 2>{});
    check(std::integral_constant<std::size_t, 3>{});
    check(std::integral_constant<std::size_t, 4>{});
  }
}

}  // namespace barato::test::quant_ref
