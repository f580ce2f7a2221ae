#pragma once
/// \file
/// The fused one-pass (online-softmax) kernel: folds rows [r0, r1) of a dense KV block into the
/// partial states of G query heads that share the block's KV head. Keys are processed in tiles of
/// W rows (W = float lanes): the W dot products are reduced with one transpose-add, the tile's max
/// rescales the running state once, exp is vectorised over the tile, and the W value rows are
/// accumulated into o. A tile of K/V is read from memory once and reused from L1 for all G heads,
/// so GQA/MQA stream K/V once per group, not once per query head. The routine is written once
/// (`accumulate_rows`) over a row source, so quantized blocks (kv/quantized.hpp) dequantise inside
/// the same kernel instead of copying it.

#include <algorithm>
#include <concepts>
#include <cmath>
#include <cstddef>
#include <limits>

#include "barato/kv/block.hpp"
#include "barato/attention/fixed_dim_kernel.hpp"
#include "barato/attention/partial.hpp"
#include "barato/attention/small_dim_kernel.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention {

/// A row source for `accumulate_rows`: how the kernel reads key/value rows of one block.
/// `k<Arch>(r, c)` / `v<Arch>(r, c)` load W = float lanes consecutive elements of row r from column c
/// as floats; `k_at` / `v_at` read one element (the d % W tail). When `kScaled` is true the row
/// holds quantized codes and `k_scale(r)` / `v_scale(r)` are the per-row dequantisation factors
/// (score_r = scale·k_scale(r)·(q·codes_r), and value row r contributes p_r·v_scale(r)·codes_r), so
/// dequantisation happens inside the kernel and the online-softmax logic exists once.
template <class Rows>
concept RowSource = requires(const Rows& rows, std::size_t r, std::size_t c) {
  { Rows::kScaled } -> std::convertible_to<bool>;
  { rows.k_at(r, c) } -> std::convertible_to<float>;
  { rows.v_at(r, c) } -> std::convertible_to<float>;
};

/// Rows of a `kv::DenseBlock<T>`: plain loads, no scales.
template <Element T>
struct DenseRows {
  static constexpr bool kScaled = false;
  const kv::DenseBlock<T>& blk;
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> k(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(blk.k + r * blk.stride + c);
  }
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> v(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(blk.v + r * blk.stride + c);
  }
  [[nodiscard]] float k_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(blk.k[r * blk.stride + c]); }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(blk.v[r * blk.stride + c]); }
};

/// The fused tile routine over any row source. For each of `g` query heads i (q + i·d, d floats;
/// scores are scaled by `scale`), folds rows [r0, r1) into (o + i·d, st[i]).
/// Complexity O(g·(r1 − r0)·d); allocates nothing.
template <class Arch = simd::DefaultArch, RowSource Rows>
void accumulate_rows(const float* q, std::size_t g, std::size_t d, float scale, const Rows& rows, std::size_t r0,
                     std::size_t r1, float* o, PartialStats* st) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t dv = d / W * W;  // vectorised part of each row
  alignas(64) float s[W];
  alignas(64) float p[W];
  alignas(64) float pv[W];  // p_j · v_scale_j (scaled row sources only)

  for (std::size_t r = r0; r < r1; r += W) {
    const std::size_t nt = std::min(W, r1 - r);
    for (std::size_t h = 0; h < g; ++h) {
      const float* qh = q + h * d;
      float* oh = o + h * d;
      PartialStats& sh = st[h];

      // Scores of the tile: W dot products, reduced together.
      B acc[W];
      for (std::size_t j = 0; j < W; ++j) acc[j] = B(0.0f);
      if (nt == W) {
        for (std::size_t c = 0; c < dv; c += W) {
          const B qc = B::load_unaligned(qh + c);
          for (std::size_t j = 0; j < W; ++j) acc[j] = xsimd::fma(qc, rows.template k<Arch>(r + j, c), acc[j]);
        }
      } else {
        for (std::size_t c = 0; c < dv; c += W) {
          const B qc = B::load_unaligned(qh + c);
          for (std::size_t j = 0; j < nt; ++j) acc[j] = xsimd::fma(qc, rows.template k<Arch>(r + j, c), acc[j]);
        }
      }
      simd::reduce_add_rows<Arch>(acc).store_aligned(s);
      if (dv < d) {
        for (std::size_t j = 0; j < nt; ++j)
          for (std::size_t c = dv; c < d; ++c) s[j] += qh[c] * rows.k_at(r + j, c);
      }
      float tmax = kNegInf;
      for (std::size_t j = 0; j < W; ++j) {
        if constexpr (Rows::kScaled) {
          s[j] = j < nt ? s[j] * (scale * rows.k_scale(r + j)) : kNegInf;
        } else {
          s[j] = j < nt ? s[j] * scale : kNegInf;
        }
        tmax = std::max(tmax, s[j]);
      }
      if (tmax == kNegInf) continue;  // nothing visible (only with -inf scores)

      // Rescale the running state once per tile.
      if (tmax > sh.m) {
        if (sh.l != 0.0f) {
          const float alpha = std::exp(sh.m - tmax);
          sh.l *= alpha;
          simd::scale<Arch>(alpha, oh, d);
        }
        sh.m = tmax;
      }
      const B pb = xsimd::exp(B::load_aligned(s) - B(sh.m));
      pb.store_aligned(p);
      sh.l += simd::reduce_add<float, Arch>(pb);
      const float* w = p;  // weight of value row j
      if constexpr (Rows::kScaled) {
        for (std::size_t j = 0; j < nt; ++j) pv[j] = p[j] * rows.v_scale(r + j);
        w = pv;
      }

      // o += Σ_j w_j · v_j
      for (std::size_t c = 0; c < dv; c += W) {
        B ov = B::load_unaligned(oh + c);
        for (std::size_t j = 0; j < nt; ++j) ov = xsimd::fma(B(w[j]), rows.template v<Arch>(r + j, c), ov);
        ov.store_unaligned(oh + c);
      }
      for (std::size_t c = dv; c < d; ++c) {
        float a = oh[c];
        for (std::size_t j = 0; j < nt; ++j) a += w[j] * rows.v_at(r + j, c);
        oh[c] = a;
      }
    }
  }
}

/// The dense-block kernel: `accumulate_rows` over `DenseRows<T>`. For each of `g` query heads i
/// (q + i·d, d floats; scores are scaled by `scale`), folds the block's rows [r0, r1) into
/// (o + i·d, st[i]). Dispatches on d: 64 / 128 → fixed_dim_kernel.hpp; d < W with packed rows →
/// small_dim_kernel.hpp; d an odd multiple of 8 on AVX-512 → the generic routine on 8 lanes.
/// Complexity O(g·(r1 − r0)·d); allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const float* q, std::size_t g, std::size_t d, float scale, const kv::DenseBlock<T>& blk, std::size_t r0,
                std::size_t r1, float* o, PartialStats* st) noexcept {
  // d = 64 / 128: q and o stay in registers (attention/fixed_dim_kernel.hpp).
  if (has_fixed_dim_kernel<Arch>(d)) {
    if (d == 64) return accumulate_fixed_dim<64, Arch>(q, g, scale, blk, r0, r1, o, st);
    return accumulate_fixed_dim<128, Arch>(q, g, scale, blk, r0, r1, o, st);
  }
  // d < W with packed rows (d = 8 on AVX-512): several rows per register (attention/small_dim_kernel.hpp).
  if (has_small_dim_kernel<Arch>(d, blk.stride)) return accumulate_small_dim<Arch>(q, g, d, scale, blk, r0, r1, o, st);
#if XSIMD_WITH_AVX2
  // d an odd multiple of 8 (24, 40, 72, …) on AVX-512: 8-lane rows vectorise all of d instead of
  // leaving an 8-wide scalar tail (measured ~2× faster at d = 24 and 40).
  if constexpr (simd::kHasAvx512<Arch> && simd::Batch<float, Arch>::size == 16) {
    if (d % 16 == 8) return accumulate_rows<xsimd::avx2>(q, g, d, scale, DenseRows<T>{blk}, r0, r1, o, st);
  }
#endif
  accumulate_rows<Arch>(q, g, d, scale, DenseRows<T>{blk}, r0, r1, o, st);
}

}  // namespace barato::attention
