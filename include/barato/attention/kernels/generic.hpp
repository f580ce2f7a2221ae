#pragma once
/// \file
/// The generic fused one-pass (online-softmax) tile routine, `detail::accumulate_rows`: folds rows
/// [r0, r1) of a block into the partial states of the G query heads that share the block's KV head,
/// for any head dimension and any rows (`detail::KvRows`, attention/kernels/rows.hpp). Keys are
/// processed in tiles of W rows (W = float lanes): the W dot products are reduced with one
/// transpose-add, the tile's max rescales the running state once, exp is vectorised over the tile,
/// and the W value rows are accumulated into o. A tile of K/V is read from memory once and reused
/// from L1 for all G heads, so GQA/MQA stream K/V once per group, not once per query head. Written
/// once over the row concept, so quantized blocks (attention/kernels/quantized.hpp) dequantise
/// inside the same routine instead of copying it. The dense dispatch (attention/kernels/dense.hpp)
/// sends multiples of 16 up to 128 and small d to their specialised kernels.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/rows.hpp"
#include "barato/attention/partial.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"

namespace barato::attention::detail {

/// The fused tile routine over any rows (`KvRows`): for each query head i of `qg`, folds rows
/// [r0, r1) into (qg.o + i·d, qg.st[i]), any head dimension d.
/// Complexity O(g·(r1 − r0)·d); allocates nothing.
template <class Arch, KvRows Rows>
void accumulate_rows(const QueryGroup& qg, const Rows& rows, std::size_t r0, std::size_t r1) noexcept {
  const float* const q = qg.q;
  const std::size_t g = qg.g, d = qg.d;
  const float scale = qg.scale;
  float* const o = qg.o;
  PartialStats* const st = qg.st;
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
          for (std::size_t j = 0; j < W; ++j) acc[j] = simd::fma(qc, rows.template load_k<Arch>(r + j, c), acc[j]);
        }
      } else {
        for (std::size_t c = 0; c < dv; c += W) {
          const B qc = B::load_unaligned(qh + c);
          for (std::size_t j = 0; j < nt; ++j) acc[j] = simd::fma(qc, rows.template load_k<Arch>(r + j, c), acc[j]);
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
      sh.raise_max(tmax, [oh, d](float alpha) { simd::scale<Arch>(alpha, oh, d); });
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
        for (std::size_t j = 0; j < nt; ++j) ov = simd::fma(B(w[j]), rows.template load_v<Arch>(r + j, c), ov);
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

}  // namespace barato::attention::detail
