#pragma once
/// \file
/// The fused one-pass (online-softmax) kernel: folds rows [r0, r1) of a dense KV block into the
/// partial states of G query heads that share the block's KV head. Keys are processed in tiles of
/// W rows (W = float lanes): the W dot products are reduced with one transpose-add, the tile's max
/// rescales the running state once, exp is vectorised over the tile, and the W value rows are
/// accumulated into o. A tile of K/V is read from memory once and reused from L1 for all G heads,
/// so GQA/MQA stream K/V once per group, not once per query head.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "barato/kv/block.hpp"
#include "barato/attention/partial.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention {

/// For each of `g` query heads i (q + i·d, d floats; scores are scaled by `scale`), folds the
/// block's rows [r0, r1) into (o + i·d, st[i]). Complexity O(g·(r1 − r0)·d); allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const float* q, std::size_t g, std::size_t d, float scale, const kv::DenseBlock<T>& blk, std::size_t r0,
                std::size_t r1, float* o, PartialStats* st) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t dv = d / W * W;  // vectorised part of each row
  alignas(64) float s[W];
  alignas(64) float p[W];

  for (std::size_t r = r0; r < r1; r += W) {
    const std::size_t nt = std::min(W, r1 - r);
    const T* krow0 = blk.k + r * blk.stride;
    const T* vrow0 = blk.v + r * blk.stride;
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
          for (std::size_t j = 0; j < W; ++j) acc[j] = xsimd::fma(qc, simd::load_as_float<Arch>(krow0 + j * blk.stride + c), acc[j]);
        }
      } else {
        for (std::size_t c = 0; c < dv; c += W) {
          const B qc = B::load_unaligned(qh + c);
          for (std::size_t j = 0; j < nt; ++j) acc[j] = xsimd::fma(qc, simd::load_as_float<Arch>(krow0 + j * blk.stride + c), acc[j]);
        }
      }
      simd::reduce_add_rows<Arch>(acc).store_aligned(s);
      if (dv < d) {
        for (std::size_t j = 0; j < nt; ++j) {
          const T* kr = krow0 + j * blk.stride;
          for (std::size_t c = dv; c < d; ++c) s[j] += qh[c] * static_cast<float>(kr[c]);
        }
      }
      float tmax = kNegInf;
      for (std::size_t j = 0; j < W; ++j) {
        s[j] = j < nt ? s[j] * scale : kNegInf;
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

      // o += Σ_j p_j · v_j
      for (std::size_t c = 0; c < dv; c += W) {
        B ov = B::load_unaligned(oh + c);
        for (std::size_t j = 0; j < nt; ++j) ov = xsimd::fma(B(p[j]), simd::load_as_float<Arch>(vrow0 + j * blk.stride + c), ov);
        ov.store_unaligned(oh + c);
      }
      for (std::size_t c = dv; c < d; ++c) {
        float a = oh[c];
        for (std::size_t j = 0; j < nt; ++j) a += p[j] * static_cast<float>(vrow0[j * blk.stride + c]);
        oh[c] = a;
      }
    }
  }
}

}  // namespace barato::attention
