#pragma once
/// \file
/// `nn::Dense<T, Arch>`: a dense linear layer y = W x with W [rows, cols] stored row-major as T (fp32, fp16
/// or bf16) in a `Buffer<T>` from a memory resource. The model of `nn::LinearLayer` for unquantized
/// weights.
///
/// Kernels. A decode step is a matrix–vector product (GEMV) that reads every weight once, so its speed
/// is the memory bandwidth: for large matrices the kernel walks the rows in memory order (one
/// sequential stream the hardware prefetchers follow), one SIMD accumulator per row; small
/// (cache-resident) matrices interleave a SIMD-width group of rows so their FMA chains overlap. Row
/// sums are finished 16 (one SIMD width) at a time by a transpose-add. `apply_batch` (prefill, batched
/// decode) takes the rows in L2-sized blocks: one pass brings a block in for the first `kVecTile`
/// vectors (two sequential streams, one per half of the block, with a software prefetch ahead of
/// each), then `kRowTile` rows × `kVecTile` vectors register tiles reuse it for the rest, so each
/// weight is read from memory once for all n vectors.
/// Rows are split between threads with `barato::parallel_for` (contiguous ranges, one stream each).
///
/// Determinism: every output element is accumulated in the same order (lane-wise over the SIMD
/// chunks in k order, the zero-padded last chunk included, then one fixed-tree horizontal sum)
/// whatever the tiling or the thread count, so
/// `apply` and `apply_batch` give bit-identical results for 1 or more threads, and `apply_batch` with
/// n = 1 equals `apply`.

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <span>
#include <type_traits>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::nn {

/// A read-only view of a row-major matrix [rows, cols] of T (what kernels take).
template <Element T>
struct DenseView {
  const T* data = nullptr;  // [rows, cols]
  std::size_t rows = 0;
  std::size_t cols = 0;
  /// Row r as a span of `cols` elements.
  [[nodiscard]] std::span<const T> row(std::size_t r) const noexcept { return {data + r * cols, cols}; }
};

namespace detail {

/// Rows per tile of the GEMV / GEMM kernels (x loads are shared by these rows).
inline constexpr std::size_t kRowTile = 4;
/// Input vectors per tile of the batched kernel.
inline constexpr std::size_t kVecTile = 4;
/// The work per thread below which extra threads cost more than they save, in multiply-adds plus
/// weight bytes (rows × cols × (n + sizeof(T))): a thread must repay an OpenMP fork and join (≈ 3.5 µs
/// on the 2-core Zen 5 host) — kMinWorkPerThread — and the moving of its share of the n input and
/// output vectors between the cores — kMovedValueWork per value of n · (rows + cols) (`threads_for` in
/// core/parallel.hpp). Measured there (2026-12-05), two threads against one, cached and streamed: with
/// 2^17 multiply-adds per thread (no bytes, no moves, the thread count rounded up), 128 × 896 at n = 2
/// and 4 took 1.3–1.5× one thread's time (a 120 + 8 row split), 512 × 64 at n = 16 and 64 1.5–1.8×,
/// and stories260K's 128-token prefill 1.2–1.7× (its 172 × 64 FFN matrices); these now stay on one
/// thread, while 896 × 896 at n = 1 still splits (0.55–0.77×) and 128 × 896 from n = 7 (0.54–0.81×).
inline constexpr std::size_t kMinWorkPerThread = std::size_t{3} << 17;
/// Weight bytes per row block of the batched kernel (sized to stay in L2 while X passes over it).
inline constexpr std::size_t kRowBlockBytes = std::size_t{1} << 18;
/// Matrices up to this size are treated as cache-resident by the GEMV (rows interleaved, see gemv_rows).
inline constexpr std::size_t kInterleaveBytes = std::size_t{1} << 18;

/// Horizontal sums of `count` accumulators: sums[i] = Σ lanes of acc[i]. Reduced `W` at a time with
/// the transpose-add `simd::reduce_add_rows` (zero-padded), whose addition tree for lane i involves
/// only acc[i] — so every output has the same rounding whichever accumulators share its group. All
/// Dense kernels finish through here, which keeps GEMV, batched and threaded results bit-identical.
template <class Arch>
inline void reduce_lanes(simd::Batch<float, Arch>* acc, std::size_t count, float* sums) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  for (std::size_t g = 0; g < count; g += W) {
    const std::size_t m = count - g < W ? count - g : W;
    for (std::size_t i = m; i < W; ++i) acc[g + i] = B(0.f);  // callers size acc to a multiple of W
    alignas(64) float tmp[W];
    simd::reduce_add_rows<Arch>(acc + g).store_aligned(tmp);
    for (std::size_t i = 0; i < m; ++i) sums[g + i] = tmp[i];
  }
}

/// The last, partial SIMD chunk of a row: lanes [0, n) hold p[0..n) as floats, the other lanes 0
/// (n < lanes). Reads exactly n elements: a copy through a small buffer (portable; AVX-512 masked
/// loads for fp32 / fp16 / bf16 in the overload below). Folding the tail into the lane accumulators
/// keeps short rows (e.g. 172 columns = 10 chunks + 12) vectorised.
template <class Arch, Element T>
[[nodiscard]] inline simd::Batch<float, Arch> load_tail(const T* p, std::size_t n) noexcept {
  using B = simd::Batch<float, Arch>;
  alignas(64) float tmp[B::size] = {};
  for (std::size_t i = 0; i < n; ++i) tmp[i] = static_cast<float>(p[i]);
  return B::load_aligned(tmp);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/// `load_tail` on AVX-512 BW: masked (fault-suppressing) loads.
template <class Arch, Element T>
  requires(simd::kHasAvx512bw<Arch> && simd::Batch<float, Arch>::size == 16)
[[nodiscard]] inline simd::Batch<float, Arch> load_tail(const T* p, std::size_t n) noexcept {
  const auto mask = static_cast<__mmask16>((1u << n) - 1u);
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else if constexpr (std::is_same_v<T, f16>) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
  } else {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
}
#endif

/// How far ahead (bytes) of each weight row the streaming pass of the batched kernel prefetches.
/// The hardware prefetchers alone ran the two-stream pass of a 896 × 4864 fp32 matrix (n = 4) at
/// 16–18 GB/s, 21 with this (2026-12-02, Zen 5 host; 512 B too near, 8 KB no better).
inline constexpr std::size_t kStreamAheadBytes = 2048;

/// out[r * out_stride + j] = Σ_k w[r][k] · x[j][k] for r < R, j < N (R rows of W, `w_stride` elements
/// apart, and N vectors of x, `x_stride` apart).
/// One accumulator per (r, j): full chunks in k order, then the zero-padded tail chunk, finished by
/// `reduce_lanes` — the same arithmetic, per output, as `gemv_rows`.
/// With `Ahead` > 0 each row's load also prefetches the line `Ahead` bytes further on, if that is
/// before `w_end` (the end of the matrix).
template <std::size_t R, std::size_t N, class Arch, Element T, std::size_t Ahead = 0>
inline void dot_tile(const T* w, std::size_t w_stride, std::size_t cols, const float* x, std::size_t x_stride,
                     float* out, std::size_t out_stride, const T* w_end = nullptr) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr std::size_t kAcc = (R * N + W - 1) / W * W;
  B acc[kAcc];  // [R, N] (+ padding)
  for (std::size_t i = 0; i < R * N; ++i) acc[i] = B(0.f);
  const std::size_t kfull = cols / W * W, rest = cols - kfull;
  for (std::size_t k = 0; k < kfull; k += W) {
    B xv[N];
    for (std::size_t j = 0; j < N; ++j) {
      xv[j] = B::load_unaligned(x + j * x_stride + k);
      if constexpr (R > 1) simd::pin(xv[j]);  // one load, shared by the R rows' FMAs
    }
    for (std::size_t r = 0; r < R; ++r) {
      if constexpr (Ahead > 0) {
        const T* p = w + r * w_stride + k;
        if (static_cast<std::size_t>(w_end - p) > Ahead / sizeof(T)) __builtin_prefetch(p + Ahead / sizeof(T), 0, 3);
      }
      B wv = simd::load_as_float<Arch>(w + r * w_stride + k);
      if constexpr (N > 1) simd::pin(wv);  // likewise, shared by the N vectors' FMAs
      for (std::size_t j = 0; j < N; ++j) acc[r * N + j] = simd::fma(wv, xv[j], acc[r * N + j]);
    }
  }
  if (rest != 0) {
    B xv[N];
    for (std::size_t j = 0; j < N; ++j) xv[j] = load_tail<Arch>(x + j * x_stride + kfull, rest);
    for (std::size_t r = 0; r < R; ++r) {
      const B wv = load_tail<Arch>(w + r * w_stride + kfull, rest);
      for (std::size_t j = 0; j < N; ++j) acc[r * N + j] = simd::fma(wv, xv[j], acc[r * N + j]);
    }
  }
  float sums[R * N];
  reduce_lanes<Arch>(acc, R * N, sums);
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t j = 0; j < N; ++j) out[r * out_stride + j] = sums[r * N + j];
}

/// Rows per pass of the interleaved GEMV (their FMA chains overlap; 8 keeps the row pointers in
/// registers, 16 measured ~10 % slower).
inline constexpr std::size_t kInterleaveRows = 8;

/// GEMV over rows [lo, hi): y[r] = W[r] · x. Rows are finished `W` (SIMD width) at a time. When the
/// matrix is small (likely cache-resident) `kInterleaveRows` rows are interleaved chunk by chunk — x
/// loaded once, independent FMA chains; otherwise each row is streamed whole before the next, so the
/// weights are read in memory order (one sequential stream for the prefetchers). Both orders add each
/// row's chunks in k order, so results are identical.
template <class Arch, Element T>
inline void gemv_rows(const T* w, std::size_t cols, const float* x, float* y, std::size_t lo, std::size_t hi,
                      bool interleave) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr std::size_t H = kInterleaveRows < W ? kInterleaveRows : W;
  const std::size_t kfull = cols / W * W, rest = cols - kfull;
  const B xt = rest != 0 ? load_tail<Arch>(x + kfull, rest) : B(0.f);
  for (std::size_t g = lo; g < hi; g += W) {
    const std::size_t m = hi - g < W ? hi - g : W;
    const T* wg = w + g * cols;
    B acc[W];
    std::size_t i = 0;
    if (interleave) {
      for (; i + H <= m; i += H) {
        B a[H];
        for (std::size_t h = 0; h < H; ++h) a[h] = B(0.f);
        const T* wh = wg + i * cols;
        for (std::size_t k = 0; k < kfull; k += W) {
          const B xv = B::load_unaligned(x + k);
          for (std::size_t h = 0; h < H; ++h) a[h] = simd::fma(simd::load_as_float<Arch>(wh + h * cols + k), xv, a[h]);
        }
        if (rest != 0)
          for (std::size_t h = 0; h < H; ++h) a[h] = simd::fma(load_tail<Arch>(wh + h * cols + kfull, rest), xt, a[h]);
        for (std::size_t h = 0; h < H; ++h) acc[i + h] = a[h];
      }
    }
    for (; i < m; ++i) {
      B a(0.f);
      const T* wr = wg + i * cols;
      for (std::size_t k = 0; k < kfull; k += W) a = simd::fma(simd::load_as_float<Arch>(wr + k), B::load_unaligned(x + k), a);
      if (rest != 0) a = simd::fma(load_tail<Arch>(wr + kfull, rest), xt, a);
      acc[i] = a;
    }
    reduce_lanes<Arch>(acc, m, y + g);
  }
}

}  // namespace detail

/// Dense linear layer: W [rows, cols] of T, y = W x. Owns its weights (64-byte aligned, from `mr`).
/// Move-only; `copy()` is explicit. `Arch` is the SIMD architecture its kernels are compiled for
/// (as for `quant::Linear<F, Arch>`); the default is the best one the build enables.
template <Element T = float, class Arch = simd::DefaultArch>
class Dense {
 public:
  using element_type = T;  ///< storage type of the weights
  using arch_type = Arch;   ///< SIMD architecture of the kernels

  /// Zero weights of shape [rows, cols] from `mr` (fill them through `weights()`).
  /// Throws `shape_error` when rows or cols is 0.
  Dense(std::size_t rows, std::size_t cols, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : rows_(checked(rows, "rows")), cols_(checked(cols, "cols")), w_(rows * cols, mr) {}

  /// Weights `w` [rows, cols] row-major, converted to T (round to nearest even).
  /// Throws `shape_error` when w.size() != rows·cols or a dimension is 0.
  Dense(std::size_t rows, std::size_t cols, std::span<const float> w,
        std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : Dense(rows, cols, mr) {
    require(w.size() == rows * cols, "nn::Dense: expected rows*cols = ", rows, "*", cols, " = ", rows * cols,
            " weights, got ", w.size());
    simd::from_float<T>(w.data(), w_.data(), w.size());
  }

  Dense(Dense&&) noexcept = default;
  Dense& operator=(Dense&&) noexcept = default;
  /// Explicit deep copy (same memory resource).
  [[nodiscard]] Dense copy() const {
    Dense out(rows_, cols_, w_.resource());
    out.w_ = w_.copy();
    return out;
  }

  /// Output size (rows of W).
  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  /// Input size (columns of W).
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
  /// Exact weight storage in bytes: rows · cols · sizeof(T) (what one GEMV streams).
  [[nodiscard]] std::size_t bytes() const noexcept { return w_.bytes(); }
  /// Read-only view for kernels.
  [[nodiscard]] DenseView<T> view() const noexcept { return {w_.data(), rows_, cols_}; }
  /// Mutable weights [rows, cols] row-major (for loaders and initialisers).
  [[nodiscard]] std::span<T> weights() noexcept { return w_.span(); }
  [[nodiscard]] std::span<const T> weights() const noexcept { return w_.span(); }

  /// y = W x. x [cols], y [rows]; x and y must not overlap. Allocates nothing; O(rows·cols).
  /// Throws `shape_error` on mismatched sizes.
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    require(x.size() == cols_, "nn::Dense::apply: x has ", x.size(), " elements, expected cols = ", cols_);
    require(y.size() == rows_, "nn::Dense::apply: y has ", y.size(), " elements, expected rows = ", rows_);
    run(x.data(), y.data(), 1, threads);
  }

  /// Y = X Wᵀ for n input vectors: X [n, cols] row-major, Y [n, rows]. Each weight is read once
  /// for all n vectors. Allocates nothing; O(n·rows·cols). Throws `shape_error` on mismatched sizes.
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    require(x.size() == n * cols_, "nn::Dense::apply_batch: x has ", x.size(), " elements, expected n*cols = ", n, "*",
            cols_, " = ", n * cols_);
    require(y.size() == n * rows_, "nn::Dense::apply_batch: y has ", y.size(), " elements, expected n*rows = ", n, "*",
            rows_, " = ", n * rows_);
    run(x.data(), y.data(), n, threads);
  }

 private:
  static std::size_t checked(std::size_t v, const char* name) {
    require(v > 0, "nn::Dense: ", name, " must be > 0, got 0");
    return v;
  }

  /// Threads worth using for n vectors (`threads_for`; see kMinWorkPerThread).
  [[nodiscard]] int useful_threads(std::size_t n, int threads) const noexcept {
    return threads_for(rows_ * cols_ * (n + sizeof(T)),
                       detail::kMinWorkPerThread + kMovedValueWork * n * (rows_ + cols_), threads);
  }

  void run(const float* x, float* y, std::size_t n, int threads) const {
    if (n == 0) return;
    parallel_for(
        rows_, useful_threads(n, threads), [&](std::size_t lo, std::size_t hi) { rows_range(x, y, n, lo, hi); },
        detail::kRowTile);
  }

  /// Rows [lo, hi) for all n vectors: y[j * rows + r].
  ///
  /// Memory order matters more than register tiling here: with row-major weights, visiting one row
  /// after the other is a single sequential stream, which the hardware prefetchers follow at full DRAM
  /// bandwidth, whereas interleaving several short rows (e.g. 4 × 3.5 KB) starts new streams every few
  /// KB and measured at about half the bandwidth on 896-column matrices. So the GEMV (n = 1) goes row
  /// by row, and the first `kVecTile` vectors of each row block take two sequential streams (one per
  /// half of the block, `first_pass`); for n > kVecTile the rest of the block, now in L2, is computed
  /// in kRowTile × kVecTile register tiles.
  void rows_range(const float* x, float* y, std::size_t n, std::size_t lo, std::size_t hi) const noexcept {
    constexpr std::size_t R = detail::kRowTile, N = detail::kVecTile;
    // Plain switches, not a generic run-time-to-constant dispatch through a lambda: that version
    // (quant/vnni.hpp's with_constant) ran apply_batch 20–40 % slower at n = 2 … 11 (GCC 12, Zen 5
    // host, 2026-12-06; 128 × 896, n = 7: 80 → 55 GMAC/s), the lambda changing what GCC inlines.
    static_assert(N == 4, "the remainder's switch below covers 1 … 3 vectors");
    const std::size_t c = cols_;
    if (n == 1) {
      detail::gemv_rows<Arch>(w_.data(), c, x, y, lo, hi, bytes() <= detail::kInterleaveBytes);
      return;
    }
    const std::size_t block = n <= N ? hi - lo : std::max(R, detail::kRowBlockBytes / (c * sizeof(T)) / R * R);
    for (std::size_t r0 = lo; r0 < hi; r0 += block) {
      const std::size_t r1 = std::min(hi, r0 + block);
      const std::size_t first = std::min(n, N);
      // the block's pass from memory: two rows at a time, one from each half of the block (two
      // sequential streams; 2·first independent FMA chains — one chain per output is latency-bound)
      switch (first) {
        case 2: first_pass<2>(r0, r1, x, y); break;
        case 3: first_pass<3>(r0, r1, x, y); break;
        default: first_pass<N>(r0, r1, x, y); break;
      }
      std::size_t j = first;
      for (; j + N <= n; j += N) tiles<N>(r0, r1, x + j * c, j, y);
      // the last 1 … N − 1 vectors together, so each weight load still feeds all of them (one at a
      // time, n = 7 ran at about half the multiply-add rate of n = 8)
      switch (n - j) {
        case 3: tiles<3>(r0, r1, x + j * c, j, y); break;
        case 2: tiles<2>(r0, r1, x + j * c, j, y); break;
        case 1: tiles<1>(r0, r1, x + j * c, j, y); break;
        default: break;
      }
    }
  }

  /// Rows [r0, r1) × vectors [j, j + K) in kRowTile × K register tiles (x points at vector j).
  template <std::size_t K>
  void tiles(std::size_t r0, std::size_t r1, const float* x, std::size_t j, float* y) const noexcept {
    constexpr std::size_t R = detail::kRowTile;
    std::size_t r = r0;
    for (; r + R <= r1; r += R) tile<R, K>(r, x, j, y);
    for (; r < r1; ++r) tile<1, K>(r, x, j, y);
  }

  /// Vectors [0, K) over rows [r0, r1), two rows per tile: row r0 + i with row r0 + h + i (h = half the
  /// range), so each of the two weight streams is sequential. Pairing adjacent rows (r, r + 1, then
  /// r + 2, …) makes both streams skip every other row, which the hardware prefetchers follow badly
  /// with short rows: 4864 × 896 fp32 streamed at 16 GB/s at n = 4 that way, 23 GB/s split and 31–35
  /// with `kStreamAheadBytes` added (2026-12-02, Zen 5 host); from cache the two are equally fast.
  template <std::size_t K>
  void first_pass(std::size_t r0, std::size_t r1, const float* x, float* y) const noexcept {
    const std::size_t half = (r1 - r0) / 2;
    float tmp[2 * K];
    for (std::size_t i = 0; i < half; ++i) {
      detail::dot_tile<2, K, Arch, T, detail::kStreamAheadBytes>(w_.data() + (r0 + i) * cols_, half * cols_, cols_, x, cols_,
                                                                 tmp, K, w_.data() + rows_ * cols_);
      for (std::size_t b = 0; b < K; ++b) y[b * rows_ + r0 + i] = tmp[b], y[b * rows_ + r0 + half + i] = tmp[K + b];
    }
    if (r0 + 2 * half < r1) tile<1, K>(r1 - 1, x, 0, y);
  }

  /// Rows [r, r + R) × vectors [j, j + N) (x points at vector j) into y [n, rows].
  template <std::size_t R, std::size_t N>
  void tile(std::size_t r, const float* x, std::size_t j, float* y) const noexcept {
    float tmp[R * N];  // [R, N]
    detail::dot_tile<R, N, Arch>(w_.data() + r * cols_, cols_, cols_, x, cols_, tmp, N);
    for (std::size_t a = 0; a < R; ++a)
      for (std::size_t b = 0; b < N; ++b) y[(j + b) * rows_ + r + a] = tmp[a * N + b];
  }

  std::size_t rows_, cols_;
  Buffer<T> w_;  // [rows, cols]
};

/// The fp32 dense layer under its role name.
using DenseLinear = Dense<float>;

static_assert(LinearLayer<Dense<float>>);
static_assert(LinearLayer<Dense<f16>>);
static_assert(LinearLayer<Dense<bf16>>);

}  // namespace barato::nn
