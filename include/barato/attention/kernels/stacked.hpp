#pragma once
/// \file
/// The stacked-query kernel of cascade decode (attention/cascade.hpp): many query heads — the S·G
/// heads of S sequences sharing a prefix — folding the *same* rows, `detail::accumulate_stacked`.
/// Where `accumulate_fixed_dim` vectorises over the head dimension (one dot product per row, W rows
/// reduced by a transpose-add, q and o in registers), this kernel vectorises over query heads: the
/// queries are stored transposed ([d, heads], scaled), so the scores of W heads for one row are
/// Σ_c broadcast(k_c)·qt_c — d FMAs, no horizontal reduction — and the online softmax runs on
/// vectors of W heads (max, rescale, exp, sum). Per chunk of rows:
///   1. scores of W heads × 8 rows at a time (8 independent FMA chains; each broadcast key element
///      serves W heads);
///   2. per head block: new max, rescale factor, p = e^{s − m}, l — all on W-head vectors;
///   3. o_h += Σ_r p_{r,h}·v_r for HP heads at a time (16 accumulators: each value row loaded once
///      for HP heads).
/// The chunk's rows are read once from memory and from L1 for every head block; fp16 (bf16) rows
/// are widened into an fp32 stage once per chunk. Same state as `accumulate` up to fp32 rounding
/// (the dot products sum in another order); worth it for ≥ W stacked heads (fewer waste lanes).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "barato/attention/partial.hpp"
#include "barato/core/dtype.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/kv/paged_block.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention::detail {

/// Stacked heads are padded to a multiple of this many (a multiple of every float lane count).
inline constexpr std::size_t kStackedHeadPad = 16;

/// The query side of `accumulate_stacked`: g heads stored transposed and pre-scaled. A view.
struct StackedQueries {
  const float* qt = nullptr;   ///< [d, gp]: scale·q of head h, element c at qt[c·gp + h]; heads ≥ g zero; 64-byte aligned
  std::size_t g = 0;           ///< query heads
  std::size_t gp = 0;          ///< g rounded up to kStackedHeadPad
  float* o = nullptr;          ///< [g, d] un-normalised outputs
  PartialStats* st = nullptr;  ///< [g] running (m, l)
};

/// True when `accumulate_stacked` has a kernel for head dimension `d` on `Arch` (d = 64 / 128; the
/// cascade's shared pass takes `accumulate` otherwise).
template <class Arch>
[[nodiscard]] constexpr bool has_stacked_kernel(std::size_t d) noexcept {
  return (d == 64 || d == 128) && d % simd::Batch<float, Arch>::size == 0;
}

/// Rows ahead that `accumulate_stacked` prefetches (into L2) the key and value rows, one row per row
/// scored in its first head pass. A shared prefix last read a model's depth ago comes from DRAM or
/// L3. The requests are spread one cache line per key element of the score loop: issued eight rows
/// at a time (64 lines in a burst) with a page-table division per row, the kernel ran a shared pass
/// from DRAM 1.27× slower (one KV head of 2,048 rows, 32 stacked heads: 0.54 of the in-binary FMA
/// rate against 0.69 spread, 0.77 with the rows in cache). 64 rows ahead measured 2–4 % faster than
/// 128 and the same as 32 in bench_batching's 24-layer cascade.
inline constexpr std::size_t kStackedPrefetchRows = 64;

/// Rows per chunk of `accumulate_stacked` at head dimension D: an fp32 stage of K + V ≤ 32 KiB.
template <std::size_t D>
inline constexpr std::size_t kStackedChunkRows = D <= 64 ? 64 : 32;

/// Folds rows [r0, r1) of a paged block into the states of the stacked heads `sq` (file comment).
/// Requires D % W == 0. Allocates nothing.
template <std::size_t D, class Arch, Element T>
void accumulate_stacked(const StackedQueries& sq, const kv::PagedBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr std::size_t C = D / W;  // vectors per row
  constexpr std::size_t R = kStackedChunkRows<D>;
  constexpr std::size_t kAcc = W >= 16 ? 16 : 8;  // PV accumulators (AVX-512 has 32 registers)
  constexpr std::size_t HP = C >= kAcc ? 1 : kAcc / C;  // heads per PV pass
  constexpr bool kStage = !std::is_same_v<T, float>;
  static_assert(D % W == 0 && kStackedHeadPad % W == 0 && R % 8 == 0);
  static_assert(16 * ((D * sizeof(T) + kCacheLineBytes - 1) / kCacheLineBytes) <= D,
                "the K and V lines of 8 rows must fit the score loop's D steps (pf_line)");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  alignas(64) float sb[2 * R * W];                // [2, R, W] scores, then probabilities, of two head blocks
  float* const s = sb;
  alignas(64) float kst[kStage ? R * D : 1];      // [R, D] fp32 stage of the chunk's keys (fp16 / bf16 rows)
  alignas(64) float vst[kStage ? R * D : 1];      // [R, D] values, same
  alignas(64) float mo[W], lo[W], alpha[W];       // per head of a block: old m, old l, rescale factor
  const float* kr[R];                             // key row j of the chunk
  const float* vr[R];                             // value row j
  std::size_t off[R];                             // offset of row j of the chunk
  std::size_t pf_off[R];                          // offset of row j + kStackedPrefetchRows
  const char* pf_line[D];                         // lines to prefetch during one 8-row score block
  const std::size_t gp = sq.gp;

  for (std::size_t c0 = r0; c0 < r1; c0 += R) {
    const std::size_t nr = std::min(R, r1 - c0);
    const std::size_t ahead = c0 + kStackedPrefetchRows;
    const std::size_t n_pf = ahead < r1 ? std::min(R, r1 - ahead) : 0;  // chunk rows whose row ahead exists
    blk.offsets(c0, nr, off);
    blk.offsets(ahead, n_pf, pf_off);
    for (std::size_t j = 0; j < nr; ++j) {
      if constexpr (kStage) {
        for (std::size_t c = 0; c < D; c += W) {
          simd::load_as_float<Arch>(blk.k + off[j] + c).store_aligned(kst + j * D + c);
          simd::load_as_float<Arch>(blk.v + off[j] + c).store_aligned(vst + j * D + c);
        }
        kr[j] = kst + j * D;
        vr[j] = vst + j * D;
      } else {
        kr[j] = blk.k + off[j];
        vr[j] = blk.v + off[j];
      }
    }

    // 1. scores s[b, j, i] of NB head blocks (lane i of block b = head h0 + b·W + i), 8 rows at a
    //    time: 8·NB independent FMA chains, each broadcast key element serving NB·W heads
    //    (the first pass also prefetches the rows kStackedPrefetchRows ahead, one per row scored,
    //    spread one line per key element: 8 rows of K and V are ≤ D lines, static_assert above)
    auto scores = [&]<std::size_t NB>(std::size_t h0, B* mx) {
      for (std::size_t b = 0; b < NB; ++b) mx[b] = B(kNegInf);
      std::size_t j = 0;
      for (; j + 8 <= nr; j += 8) {
        std::size_t n_lines = 0;
        if (h0 == 0)
          for (std::size_t t = j; t < j + 8 && t < n_pf; ++t)
            for (std::size_t b = 0; b < D * sizeof(T); b += kCacheLineBytes) {
              pf_line[n_lines++] = reinterpret_cast<const char*>(blk.k + pf_off[t]) + b;
              pf_line[n_lines++] = reinterpret_cast<const char*>(blk.v + pf_off[t]) + b;
            }
        B a[NB][8];
        for (std::size_t b = 0; b < NB; ++b)
          for (std::size_t t = 0; t < 8; ++t) a[b][t] = B(0.0f);
        for (std::size_t c = 0; c < D; ++c) {
          if (c < n_lines) prefetch_l2(pf_line[c], 1);
          B qv[NB];
          for (std::size_t b = 0; b < NB; ++b) qv[b] = B::load_aligned(sq.qt + c * gp + h0 + b * W);
          for (std::size_t t = 0; t < 8; ++t) {
            const B kb(kr[j + t][c]);
            for (std::size_t b = 0; b < NB; ++b) a[b][t] = simd::fma(kb, qv[b], a[b][t]);
          }
        }
        for (std::size_t b = 0; b < NB; ++b)
          for (std::size_t t = 0; t < 8; ++t) {
            a[b][t].store_aligned(s + (b * R + j + t) * W);
            mx[b] = xsimd::max(mx[b], a[b][t]);
          }
      }
      for (; j < nr; ++j)
        for (std::size_t b = 0; b < NB; ++b) {
          B a(0.0f);
          for (std::size_t c = 0; c < D; ++c) a = simd::fma(B(kr[j][c]), B::load_aligned(sq.qt + c * gp + h0 + b * W), a);
          a.store_aligned(s + (b * R + j) * W);
          mx[b] = xsimd::max(mx[b], a);
        }
    };

    for (std::size_t h1 = 0; h1 < sq.g; h1 += 2 * W) {
      B mxs[2];
      const std::size_t nb = sq.g - h1 > W ? 2 : 1;  // head blocks of this pass
      if (nb == 2) scores.template operator()<2>(h1, mxs);
      else scores.template operator()<1>(h1, mxs);
      for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t h0 = h1 + b * W;
      const B mx = mxs[b];
      float* const s = sb + b * R * W;
      // 2. the online softmax on W heads at once
      const std::size_t nh = std::min(W, sq.g - h0);  // real heads of the block (the rest is padding)
      for (std::size_t i = 0; i < W; ++i) {
        mo[i] = i < nh ? sq.st[h0 + i].m : kNegInf;
        lo[i] = i < nh ? sq.st[h0 + i].l : 0.0f;
      }
      const B m_old = B::load_aligned(mo);
      const B m_new = xsimd::max(m_old, mx);
      const B a_new = xsimd::select(m_old == B(kNegInf), B(0.0f), xsimd::exp(m_old - m_new));
      B lsum(0.0f);
      for (std::size_t t = 0; t < nr; ++t) {
        const B p = xsimd::exp(B::load_aligned(s + t * W) - m_new);
        p.store_aligned(s + t * W);
        lsum += p;
      }
      (B::load_aligned(lo) * a_new + lsum).store_aligned(lo);
      m_new.store_aligned(mo);
      a_new.store_aligned(alpha);
      for (std::size_t i = 0; i < nh; ++i) sq.st[h0 + i] = PartialStats{.m = mo[i], .l = lo[i]};

      // 3. o_h ← alpha_h·o_h + Σ_j p_{j,h}·v_j, N heads per pass over the rows
      auto pv = [&]<std::size_t N>(std::size_t i0) {
        B acc[N][C];
        for (std::size_t n = 0; n < N; ++n) {
          const B an(alpha[i0 + n]);
          const float* oh = sq.o + (h0 + i0 + n) * D;
          for (std::size_t c = 0; c < C; ++c) acc[n][c] = B::load_unaligned(oh + c * W) * an;
        }
        for (std::size_t t = 0; t < nr; ++t) {
          B vv[C];
          for (std::size_t c = 0; c < C; ++c) vv[c] = B::load_unaligned(vr[t] + c * W);
          for (std::size_t n = 0; n < N; ++n) {
            const B p(s[t * W + i0 + n]);
            for (std::size_t c = 0; c < C; ++c) acc[n][c] = simd::fma(p, vv[c], acc[n][c]);
          }
        }
        for (std::size_t n = 0; n < N; ++n) {
          float* oh = sq.o + (h0 + i0 + n) * D;
          for (std::size_t c = 0; c < C; ++c) acc[n][c].store_unaligned(oh + c * W);
        }
      };
      std::size_t i = 0;
      for (; i + HP <= nh; i += HP) pv.template operator()<HP>(i);
      for (; i < nh; ++i) pv.template operator()<1>(i);
      }
    }
  }
}

}  // namespace barato::attention::detail
