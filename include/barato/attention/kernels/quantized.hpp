#pragma once
/// \file
/// `attention::accumulate` for quantized blocks — `kv::QuantBlock` (a `kv::Quantized` cache) and
/// `kv::PagedQuantBlock` (a pool of quantized pages) — and the one kernel behind both,
/// `detail::accumulate_quantized`, written over their common row interface (kv/quant_block.hpp):
///  - one query head (g = 1, MHA): the generic tile routine (attention/kernels/generic.hpp) reads the
///    codes directly through `detail::QuantRows` and applies the row scales to scores and weights;
///  - a GQA group (g > 1): every K/V row would otherwise be unpacked G times, so stages of
///    kStageRows rows are dequantised once (code · scale) into an L1 scratch and folded by the dense
///    kernel (which has the fixed-dimension fast path for multiples of 16 up to 128).
/// Either way the online-softmax logic is the generic kernels', not a copy of it. Codes become floats
/// in `detail::load_codes`: the portable scalar loop, and one isolated AVX-512 intrinsics kernel per
/// format (sign-extend int8; split nibbles, interleave, zero-extend int4) selected by the arch type.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "barato/attention/kernels/dense.hpp"
#include "barato/attention/kernels/generic.hpp"
#include "barato/attention/kernels/query_group.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/kv_format.hpp"
#include "barato/kv/quant_block.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace barato::attention::detail {

/// Loads W = float lanes codes of a packed row starting at column c (c a multiple of W) as floats:
/// the portable scalar loop (the reference of the AVX-512 kernels below).
template <class Arch, kv::KvFormat F>
[[nodiscard]] inline simd::Batch<float, Arch> load_codes(const std::uint8_t* row, std::size_t c) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  alignas(64) float tmp[W];
  for (std::size_t i = 0; i < W; ++i) tmp[i] = static_cast<float>(F::code(row, c + i));
  return simd::Batch<float, Arch>::load_aligned(tmp);
}

#if defined(__AVX512F__)
/// `load_codes` of 16 int8 codes on AVX-512: sign-extend and convert.
template <class Arch, kv::KvFormat F>
  requires(simd::kHasAvx512<Arch> && simd::Batch<float, Arch>::size == 16 && std::same_as<F, kv::Int8>)
[[nodiscard]] inline simd::Batch<float, Arch> load_codes(const std::uint8_t* row, std::size_t c) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

/// `load_codes` of 16 int4 codes on AVX-512: split the nibbles of 8 bytes, interleave, zero-extend,
/// subtract the offset 8.
template <class Arch, kv::KvFormat F>
  requires(simd::kHasAvx512<Arch> && simd::Batch<float, Arch>::size == 16 && std::same_as<F, kv::Int4>)
[[nodiscard]] inline simd::Batch<float, Arch> load_codes(const std::uint8_t* row, std::size_t c) noexcept {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  const __m512i w = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  return _mm512_sub_ps(_mm512_cvtepi32_ps(w), _mm512_set1_ps(8.0f));
}
#endif  // __AVX512F__

/// Rows of a quantized block (`kv::QuantBlock`, `kv::PagedQuantBlock`) for the generic tile routine
/// (`KvRows` with kScaled = true): codes as floats, per-row scales.
template <class Blk>
struct QuantRows {
  using KF = typename Blk::key_format;
  using VF = typename Blk::value_format;
  static constexpr bool kScaled = true;
  const Blk& blk;
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_k(std::size_t r, std::size_t c) const noexcept {
    return load_codes<Arch, KF>(blk.k_row(r), c);
  }
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_v(std::size_t r, std::size_t c) const noexcept {
    return load_codes<Arch, VF>(blk.v_row(r), c);
  }
  [[nodiscard]] float k_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(KF::code(blk.k_row(r), c)); }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(VF::code(blk.v_row(r), c)); }
  [[nodiscard]] float k_scale(std::size_t r) const noexcept { return blk.k_scale_at(r); }
  [[nodiscard]] float v_scale(std::size_t r) const noexcept { return blk.v_scale_at(r); }
};

static_assert(KvRows<QuantRows<kv::QuantBlock<kv::Int8, kv::Int4>>>);

/// Largest head_dim whose rows are staged for GQA, and rows per stage (2 · 32 · 128 floats = 32 KiB
/// of stack scratch, L1-resident).
inline constexpr std::size_t kMaxStagedHeadDim = 128;
inline constexpr std::size_t kStageRows = 32;
/// Pages ahead that the paged quantized fold prefetches (a scattered page is short: 16 rows of int8
/// codes at d = 64 are 1 KiB per head).
inline constexpr std::size_t kQuantPrefetchPages = 8;

/// The kernel of the quantized block types (file comment), over any block with the row interface of
/// `kv::QuantBlock` (k_row, v_row, k_scale_at, v_scale_at, pos0, key_format, value_format).
template <class Arch, class Blk>
void accumulate_quantized(const QueryGroup& qg, const Blk& blk, std::size_t r0, std::size_t r1) noexcept {
  using KF = typename Blk::key_format;
  using VF = typename Blk::value_format;
  using Bt = simd::Batch<float, Arch>;
  constexpr std::size_t W = Bt::size;
  const std::size_t d = qg.d;
  const std::size_t dp = (d + W - 1) / W * W;  // padded row of the scratch (aligned loads)
  if (qg.g == 1 || dp > kMaxStagedHeadDim) {
    accumulate_rows<Arch>(qg, QuantRows<Blk>{blk}, r0, r1);
    return;
  }
  alignas(64) float kf[kStageRows * kMaxStagedHeadDim];  // [kStageRows, dp] dequantised keys
  alignas(64) float vf[kStageRows * kMaxStagedHeadDim];  // [kStageRows, dp] dequantised values
  const std::size_t dv = d / W * W;
  for (std::size_t r = r0; r < r1; r += kStageRows) {
    const std::size_t nr = std::min(kStageRows, r1 - r);
    for (std::size_t j = 0; j < nr; ++j) {
      const std::uint8_t* kr = blk.k_row(r + j);
      const std::uint8_t* vr = blk.v_row(r + j);
      const float ks = blk.k_scale_at(r + j), vs = blk.v_scale_at(r + j);
      for (std::size_t c = 0; c < dv; c += W) {
        (load_codes<Arch, KF>(kr, c) * Bt(ks)).store_aligned(kf + j * dp + c);
        (load_codes<Arch, VF>(vr, c) * Bt(vs)).store_aligned(vf + j * dp + c);
      }
      for (std::size_t c = dv; c < d; ++c) {
        kf[j * dp + c] = ks * static_cast<float>(KF::code(kr, c));
        vf[j * dp + c] = vs * static_cast<float>(VF::code(vr, c));
      }
    }
    const kv::DenseBlock<float> stage{kf, vf, nr, dp, blk.pos0 + r};
    attention::accumulate<Arch>(qg, stage, 0, nr);
  }
}
}  // namespace barato::attention::detail

namespace barato::attention {

/// Folds rows [r0, r1) of a quantized block into the partial states of the query heads of `qg` (see
/// attention/kernels/accumulate.hpp for the contract). Allocates nothing.
template <class Arch = simd::DefaultArch, kv::KvFormat KF, kv::KvFormat VF>
void accumulate(const QueryGroup& qg, const kv::QuantBlock<KF, VF>& blk, std::size_t r0, std::size_t r1) noexcept {
  detail::accumulate_quantized<Arch>(qg, blk, r0, r1);
}

/// Folds rows [r0, r1) of a paged quantized block into the partial states of the query heads of `qg`
/// (the quantized kernel over the page table). Same contract as the dense `accumulate`; bitwise the
/// result over one contiguous `kv::QuantBlock` of the same rows when pages divide the kernel's 32-row
/// GQA stages. The codes and scales of the page kQuantPrefetchPages ahead are prefetched as each page
/// is folded unless that page directly follows its predecessor in memory. Allocates nothing.
template <class Arch = simd::DefaultArch, kv::KvFormat KF, kv::KvFormat VF>
void accumulate(const QueryGroup& qg, const kv::PagedQuantBlock<KF, VF>& blk, std::size_t r0, std::size_t r1) noexcept {
  if (r0 >= r1) return;
  const std::size_t B = blk.page_rows;
  auto prefetch_page = [&](std::size_t i) {
    if (i * B >= blk.n) return;
    const kv::QuantBlock<KF, VF> pg = blk.page(i);
    prefetch_l2(pg.k, pg.n * pg.k_stride);
    prefetch_l2(pg.v, pg.n * pg.v_stride);
    prefetch_l2(pg.k_scale, pg.n * sizeof(float));
    prefetch_l2(pg.v_scale, pg.n * sizeof(float));
  };
  if (qg.g > 1) {
    // GQA: rows are dequantised into L1 stages once per row, across page boundaries; calls of whole
    // stages keep the stage boundaries (and so the rounding) of one call over [r0, r1).
    const std::size_t step = detail::kStageRows % B == 0 ? detail::kStageRows : B;
    for (std::size_t a = r0; a < r1;) {
      const std::size_t next = std::min(r1, a + step);
      for (std::size_t i = a / B; i * B < next; ++i)
        if (!blk.page_follows(i + detail::kQuantPrefetchPages)) prefetch_page(i + detail::kQuantPrefetchPages);
      detail::accumulate_quantized<Arch>(qg, blk, a, next);
      a = next;
    }
    return;
  }
  // One query head: the row kernel reads codes per vector of a row, so a page-table look-up per read
  // would cost more than the arithmetic (measured 1.6x the contiguous fp32 step at MHA d = 64, page
  // by page 1.1x): fold page by page — up to detail::kQuantPrefetchPages consecutive pages as one block.
  for (std::size_t i = r0 / B; i * B < r1;) {
    std::size_t j = i + 1;
    while (j * B < r1 && j - i < detail::kQuantPrefetchPages && blk.page_follows(j)) ++j;
    for (std::size_t p = i; p < j; ++p)
      if (!blk.page_follows(p + detail::kQuantPrefetchPages)) prefetch_page(p + detail::kQuantPrefetchPages);
    kv::QuantBlock<KF, VF> run = blk.page(i);  // pages [i, j): consecutive rows
    run.n = std::min(blk.n, j * B) - i * B;
    const std::size_t lo = std::max(r0, i * B) - i * B, hi = std::min(r1, j * B) - i * B;
    detail::accumulate_quantized<Arch>(qg, run, lo, hi);
    i = j;
  }
}

}  // namespace barato::attention
