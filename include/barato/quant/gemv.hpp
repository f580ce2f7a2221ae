#pragma once
/// \file
/// Quantized matrix–vector products from the packed form: y = Ŵ x (`gemv`) and Y = X Ŵᵀ for n vectors
/// (`gemv_batch`), rows split between threads with `barato::parallel_for`. The row kernel is
/// `RowKernel<Arch, Format>` (quant/row_kernel.hpp, avx512.hpp, vnni.hpp): x is prepared once per call
/// (on the caller's stack), then each row is one `dot`. The batched form prepares up to `kVecTile`
/// vectors and walks each row against all of them while it is in L1, so a weight is read from memory
/// once per tile (the fast kernels prefetch the codes ahead, `detail::kCodePrefetchBytes`). Every output
/// is computed by the same code whatever the thread count, so results are identical for any number of
/// threads, and `gemv_batch` rows equal `gemv`.

#include <array>
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
/// Input vectors prepared together by `gemv_batch` (each weight row is read once per tile).
inline constexpr std::size_t kVecTile = 4;

inline int useful_threads(std::size_t rows, std::size_t cols, int threads) noexcept {
  const std::size_t by_work = rows * cols / kMinWeightsPerThread;
  const std::size_t t = static_cast<std::size_t>(threads < 1 ? 1 : threads);
  return static_cast<int>(by_work < 1 ? 1 : (by_work < t ? by_work : t));
}

/// The kernel for (Arch, F) at this width: the VNNI kernels' stack planes hold at most kMaxCols.
template <class Arch, Format F, class Fn>
void with_kernel(std::size_t cols, Fn&& fn) {
  if constexpr (requires { RowKernel<Arch, F>::kMaxCols; }) {
    if (cols > RowKernel<Arch, F>::kMaxCols) {
      fn(PortableRowKernel<Arch, F>{});
      return;
    }
  }
  fn(RowKernel<Arch, F>{});
}

template <class K, Format F>
void gemv_tile(const QuantizedView<F>& w, const float* x, float* y, std::size_t n, int threads) {
  std::array<typename K::Activation, kVecTile> act;  // on the stack: nothing is allocated
  for (std::size_t t0 = 0; t0 < n; t0 += kVecTile) {
    const std::size_t nt = n - t0 < kVecTile ? n - t0 : kVecTile;
    for (std::size_t t = 0; t < nt; ++t) K::prepare(x + (t0 + t) * w.cols, w.cols, act[t]);
    parallel_for(
        w.rows, useful_threads(w.rows, w.cols * nt, threads),
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t r = lo; r < hi; ++r)
            for (std::size_t t = 0; t < nt; ++t) y[(t0 + t) * w.rows + r] = K::dot(w, r, act[t]);
        },
        kRowGrain);
  }
}
}  // namespace detail

/// y = Ŵ x with x [cols], y [rows] (no overlap). Throws `shape_error` on mismatched sizes.
/// O(rows·cols); allocates nothing.
template <class Arch = simd::DefaultArch, Format F>
void gemv(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, int threads = 1) {
  require(x.size() == w.cols, "quant::gemv: x has ", x.size(), " elements, expected cols = ", w.cols);
  require(y.size() == w.rows, "quant::gemv: y has ", y.size(), " elements, expected rows = ", w.rows);
  detail::with_kernel<Arch, F>(w.cols, [&](auto k) {
    using K = decltype(k);
    typename K::Activation act;
    K::prepare(x.data(), w.cols, act);
    float* yp = y.data();
    parallel_for(
        w.rows, detail::useful_threads(w.rows, w.cols, threads),
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t r = lo; r < hi; ++r) yp[r] = K::dot(w, r, act);
        },
        detail::kRowGrain);
  });
}

/// Y = X Ŵᵀ for n vectors: X [n, cols] row-major, Y [n, rows]. Throws `shape_error` on mismatched
/// sizes. O(n·rows·cols); allocates nothing.
template <class Arch = simd::DefaultArch, Format F>
void gemv_batch(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, std::size_t n,
                int threads = 1) {
  require(x.size() == n * w.cols, "quant::gemv_batch: x has ", x.size(), " elements, expected n*cols = ", n, "*",
          w.cols, " = ", n * w.cols);
  require(y.size() == n * w.rows, "quant::gemv_batch: y has ", y.size(), " elements, expected n*rows = ", n, "*",
          w.rows, " = ", n * w.rows);
  detail::with_kernel<Arch, F>(w.cols, [&](auto k) {
    detail::gemv_tile<decltype(k)>(w, x.data(), y.data(), n, threads);
  });
}

}  // namespace barato::quant
