#pragma once
/// \file
/// Quantized matrix–vector products from the packed form: y = Ŵ x (`gemv`) and Y = X Ŵᵀ for n vectors
/// (`gemv_batch`), rows split between threads with `barato::parallel_for`. Each row is one
/// `RowKernel<Arch, Format>::dot` (quant/row_kernel.hpp, quant/avx512.hpp); the batched form walks a
/// row against all n vectors while it is in L1, so each weight is read from memory once per call.
/// Every output is computed by the same code whatever the thread count, so results are identical for
/// any number of threads, and `gemv_batch` with n = 1 equals `gemv`.

#include <cstddef>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/parallel.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/simd/arch.hpp"

namespace barato::quant {

namespace detail {
/// Below this many weights per thread, an extra thread costs more than it saves.
inline constexpr std::size_t kMinWeightsPerThread = std::size_t{1} << 16;
/// Rows per parallel chunk boundary.
inline constexpr std::size_t kRowGrain = 16;

inline int useful_threads(std::size_t rows, std::size_t cols, int threads) noexcept {
  const std::size_t by_work = rows * cols / kMinWeightsPerThread;
  const std::size_t t = static_cast<std::size_t>(threads < 1 ? 1 : threads);
  return static_cast<int>(by_work < 1 ? 1 : (by_work < t ? by_work : t));
}
}  // namespace detail

/// y = Ŵ x with x [cols], y [rows] (no overlap). Throws `shape_error` on mismatched sizes.
/// O(rows·cols); allocates nothing.
template <class Arch = simd::DefaultArch, Format F>
void gemv(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, int threads = 1) {
  require(x.size() == w.cols, "quant::gemv: x has ", x.size(), " elements, expected cols = ", w.cols);
  require(y.size() == w.rows, "quant::gemv: y has ", y.size(), " elements, expected rows = ", w.rows);
  const float* xp = x.data();
  float* yp = y.data();
  parallel_for(
      w.rows, detail::useful_threads(w.rows, w.cols, threads),
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t r = lo; r < hi; ++r) yp[r] = RowKernel<Arch, F>::dot(w, r, xp);
      },
      detail::kRowGrain);
}

/// Y = X Ŵᵀ for n vectors: X [n, cols] row-major, Y [n, rows]. Throws `shape_error` on mismatched
/// sizes. O(n·rows·cols); allocates nothing; each weight row is read from memory once.
template <class Arch = simd::DefaultArch, Format F>
void gemv_batch(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, std::size_t n,
                int threads = 1) {
  require(x.size() == n * w.cols, "quant::gemv_batch: x has ", x.size(), " elements, expected n*cols = ", n, "*",
          w.cols, " = ", n * w.cols);
  require(y.size() == n * w.rows, "quant::gemv_batch: y has ", y.size(), " elements, expected n*rows = ", n, "*",
          w.rows, " = ", n * w.rows);
  const float* xp = x.data();
  float* yp = y.data();
  parallel_for(
      w.rows, detail::useful_threads(w.rows, w.cols * (n == 0 ? 1 : n), threads),
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t r = lo; r < hi; ++r)
          for (std::size_t t = 0; t < n; ++t) yp[t * w.rows + r] = RowKernel<Arch, F>::dot(w, r, xp + t * w.cols);
      },
      detail::kRowGrain);
}

}  // namespace barato::quant
