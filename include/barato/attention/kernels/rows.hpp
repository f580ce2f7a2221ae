#pragma once
/// \file
/// Where a kernel finds the key/value rows of a block: one row-location concept and its refinement,
/// and the rows of a dense block. Kernel plumbing (`attention::detail`); users write block views and
/// `accumulate` overloads, not row types.
///
///  - `detail::KvRows` — what the generic tile routine (attention/kernels/generic.hpp) reads: W float
///    lanes of row r from column c (`load_k<Arch>(r, c)`, `load_v<Arch>(r, c)`), one element
///    (`k_at`, `v_at`, for the d % W tail), and `kScaled`: when true the rows hold quantized codes and
///    `k_scale(r)` / `v_scale(r)` are the per-row dequantisation factors (score_r =
///    scale·k_scale(r)·(q·codes_r); value row r contributes p_r·v_scale(r)·codes_r), so dequantisation
///    happens inside the kernel.
///  - `detail::ChunkedKvRows` refines it with what the fixed-dimension kernel
///    (attention/kernels/fixed_dim.hpp) reads: unscaled rows of `element_type`, `stride` elements
///    apart within a run, and `chunk<W, R>(c0, nr)`, a cursor over rows [c0, c0 + nr) (nr ≤ R):
///    `k_row(t, j)` is the address of key row c0 + t + j (t a multiple of W, j < W); `v(t)` the
///    address of value row c0 + t for t a multiple of `kRun`, the rows c0 + t + j (j < kRun) following
///    it `stride` elements apart (`kRun`: R for contiguous rows; for paged rows the rows of a page
///    that a W-row tile holds — W, or a divisor of W when pages are smaller than a tile). The kernel
///    calls `prefetch_k(t, j)` / `prefetch_v(t, j)` as it reads key / value row c0 + t + j (for the
///    first query head of a group only): scattered rows prefetch ahead there, contiguous rows do
///    nothing. The caller guarantees what the row type needs (paged rows: tiles start at multiples
///    of W).
/// Models: `detail::ContiguousRows` (both), `detail::PagedRows` (both; attention/kernels/paged.hpp),
/// `detail::QuantRows` (`KvRows` only; attention/kernels/quantized.hpp).

#include <concepts>
#include <cstddef>

#include "barato/core/dtype.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention::detail {

/// Rows the generic tile routine can read (see the file comment).
template <class Rows>
concept KvRows = requires(const Rows& rows, std::size_t r, std::size_t c) {
  { Rows::kScaled } -> std::convertible_to<bool>;
  { rows.k_at(r, c) } -> std::convertible_to<float>;
  { rows.v_at(r, c) } -> std::convertible_to<float>;
  { rows.template load_k<simd::DefaultArch>(r, c) } -> std::same_as<simd::Batch<float, simd::DefaultArch>>;
  { rows.template load_v<simd::DefaultArch>(r, c) } -> std::same_as<simd::Batch<float, simd::DefaultArch>>;
};

/// Unscaled rows the fixed-dimension kernel can read chunk by chunk: a refinement of `KvRows`.
template <class Rows>
concept ChunkedKvRows = KvRows<Rows> && (!Rows::kScaled) && requires(const Rows& rows, std::size_t c0) {
  typename Rows::element_type;
  { rows.stride } -> std::convertible_to<std::size_t>;
  rows.template chunk<1, 1>(c0, c0).k_row(c0, c0);
  rows.template chunk<1, 1>(c0, c0).v(c0);
  rows.template chunk<1, 1>(c0, c0).prefetch_k(c0, c0);
  rows.template chunk<1, 1>(c0, c0).prefetch_v(c0, c0);
};

/// Rows at one stride: row r of K at k + r·stride, of V at v + r·stride (a `kv::DenseBlock`, a stretch
/// of consecutive pages, an L1 stage of dequantised rows). Any r0, any tile start.
template <Element T>
struct ContiguousRows {
  using element_type = T;
  static constexpr bool kScaled = false;
  const T* k;
  const T* v;
  std::size_t stride;

  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_k(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(k + r * stride + c);
  }
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_v(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(v + r * stride + c);
  }
  [[nodiscard]] float k_at(std::size_t r, std::size_t c) const noexcept { return barato::to_float(k[r * stride + c]); }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept { return barato::to_float(v[r * stride + c]); }

  template <std::size_t R>
  struct Cursor {
    static constexpr std::size_t kRun = R;
    const T* k0;
    const T* v0;
    std::size_t stride;
    [[nodiscard]] const T* k_row(std::size_t t, std::size_t j) const noexcept { return k0 + (t + j) * stride; }
    [[nodiscard]] const T* v(std::size_t t) const noexcept { return v0 + t * stride; }
    // one stream: the hardware prefetchers follow it
    void prefetch_k(std::size_t /*t*/, std::size_t /*j*/) const noexcept {}
    void prefetch_v(std::size_t /*t*/, std::size_t /*j*/) const noexcept {}
  };
  template <std::size_t W, std::size_t R>
  [[nodiscard]] Cursor<R> chunk(std::size_t c0, std::size_t /*nr*/) const noexcept {
    return {k + c0 * stride, v + c0 * stride, stride};
  }
};

static_assert(ChunkedKvRows<ContiguousRows<float>> && ChunkedKvRows<ContiguousRows<f16>>);

}  // namespace barato::attention::detail
