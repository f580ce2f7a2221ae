#pragma once
/// \file
/// The fused online-softmax kernel (attention/kernels/generic.hpp) specialised for a compile-time
/// head dimension D, `detail::accumulate_fixed_dim`. The dense and paged `accumulate` overloads
/// dispatch here (`detail::with_fixed_dim`) for every d that is a multiple of 16 up to 128 (and of the
/// float lanes W); the result is the same partial state.
///
/// Why a specialisation: with D known, a head's query (pre-multiplied by the softmax scale) and its
/// output accumulator live in D/W vector registers for a whole chunk of rows (`kFixedChunkRowsFor`), so
/// the per-row work is only the K and V loads and their FMAs. Per chunk and query head:
///   1. scores of the chunk's rows, W at a time (W dot products reduced by one transpose-add),
///      stored to an L1 scratch of ≤ kFixedChunkRows floats, with a vector running max;
///   2. one rescale of (o, l) by e^{m_old − m_new} if the chunk raised the max;
///   3. p = e^{s − m} vectorised over the chunk, l += Σ p;
///   4. o += Σ_j p_j·v_j with two interleaved accumulator sets (2·D/W independent FMA chains).
/// Chunks are visited in the outer loop and the G query heads of a group in the inner loop, so a
/// chunk of K/V (≤ kFixedChunkBytes) is read from memory once and from L1 for the other heads.
/// The kernel reads rows through `detail::ChunkedKvRows` (attention/kernels/rows.hpp): contiguous
/// (base + r·stride) or paged (attention/kernels/paged.hpp: one page-table look-up per W-row tile),
/// so one call — and one set of registers per chunk — spans every page of a paged cache.
/// Rounding depends on where chunks start: attention over blocks that begin at multiples of the
/// chunk size is bitwise equal to attention over one contiguous block; other splits agree to fp32
/// rounding (the online-softmax rescale happens at different rows).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <limits>
#include <utility>

#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/rows.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/dtype.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention::detail {

/// Most rows per chunk of the fixed-dimension kernel (a multiple of every float lane count).
inline constexpr std::size_t kFixedChunkRows = 64;
/// Bytes of K plus V one chunk may span, so it stays in a 32 KiB L1 while the G query heads of a
/// group reuse it (GQA at d = 128, fp32: 32-row chunks; measured 1.3–1.45× faster than 64 rows for
/// G = 4–8, ~4 % slower for G = 1).
inline constexpr std::size_t kFixedChunkBytes = 32 * 1024;

/// Rows per chunk for head dimension D and element T: the largest power of two ≤ kFixedChunkBytes /
/// (2·D·sizeof(T)), clamped to [W, kFixedChunkRows] — so chunks tile the paged walk's prefetch
/// stretches (attention/kernels/paged.hpp) and W-row tiles (fp32: 64 rows up to d = 64, 32 rows at 80 … 128).
template <std::size_t D, Element T, std::size_t W>
inline constexpr std::size_t kFixedChunkRowsFor =
    std::min(kFixedChunkRows, std::max(W, std::bit_floor(kFixedChunkBytes / (2 * D * sizeof(T)))));

/// Head dimensions with a fixed-dimension kernel: the multiples of kFixedDimStep up to kFixedDimMax
/// that the float lanes W divide — 16, 32, 48 (stories15M), 64, 80 (Phi-2), 96 (Phi-3), 112, 128 —
/// where q and o take ≤ 16 of AVX-512's 32 vector registers. Eight kernel instances per element type
/// and row source on every arch (a step of W instead would make 32 on SSE, and every program that
/// includes attention compiles them). Wider heads (Gemma's 256) measured only 1.1–1.3× faster than the
/// generic routine with q and o spilling; other multiples of 8 take the generic routine, on the
/// 8-lane arch under AVX-512 (attention/kernels/dense.hpp).
inline constexpr std::size_t kFixedDimStep = 16;
inline constexpr std::size_t kFixedDimMax = 128;

/// Calls `f.template operator()<D>()` with D = d when head dimension d has a fixed-dimension kernel on
/// `Arch` (above) and returns whether it did. One comparison per candidate D, once per `accumulate` call.
template <class Arch, class F>
constexpr bool with_fixed_dim(std::size_t d, F&& f) {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  static_assert(kFixedChunkRows % W == 0);
  if (d == 0 || d % kFixedDimStep != 0 || d % W != 0 || d > kFixedDimMax) return false;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    bool ran = false;
    auto one = [&]<std::size_t D>() {
      if constexpr (D % W == 0) {
        if (d == D) {
          f.template operator()<D>();
          ran = true;
        }
      }
    };
    (one.template operator()<(I + 1) * kFixedDimStep>(), ...);
    return ran;
  }(std::make_index_sequence<kFixedDimMax / kFixedDimStep>{});
}

/// True when `accumulate` has a fixed-dimension path for head dimension `d` on `Arch`.
template <class Arch>
[[nodiscard]] constexpr bool has_fixed_dim_kernel(std::size_t d) noexcept {
  return with_fixed_dim<Arch>(d, []<std::size_t>() {});
}

/// Folds rows [r0, r1) reached through `rows` into the partial states of the query heads of `qg`
/// (qg.d == D). Same contract as `accumulate`; requires D % W == 0. One call covers any number of rows
/// (q and o stay in registers across every tile boundary of a chunk, wherever the rows live).
/// Allocates nothing.
template <std::size_t D, class Arch, ChunkedKvRows Rows>
void accumulate_fixed_dim(const QueryGroup& qg, const Rows& rows, std::size_t r0, std::size_t r1) noexcept {
  const float* const q = qg.q;
  const std::size_t g = qg.g;
  const float scale = qg.scale;
  float* const o = qg.o;
  PartialStats* const st = qg.st;
  using T = typename Rows::element_type;
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  constexpr std::size_t C = D / W;  // vectors per row
  constexpr std::size_t R = kFixedChunkRowsFor<D, T, W>;
  static_assert(D % W == 0 && R % W == 0);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t stride = rows.stride;
  alignas(64) float s[R];  // scores, then probabilities, of one chunk

  for (std::size_t c0 = r0; c0 < r1; c0 += R) {
    const std::size_t nr = std::min(R, r1 - c0);
    const auto cur = rows.template chunk<W, R>(c0, nr);
    constexpr std::size_t Run = decltype(cur)::kRun;  // rows at constant stride from cur.v(t)
    static_assert((Run % W == 0 || W % Run == 0) && Run % 2 == 0);
    for (std::size_t h = 0; h < g; ++h) {
      B qv[C];  // scale · q, in registers
      for (std::size_t c = 0; c < C; ++c) qv[c] = B(scale) * B::load_unaligned(q + h * D + c * W);

      // 1. scores of the chunk, W rows at a time.
      B mx(kNegInf);
      for (std::size_t t = 0; t < nr; t += W) {
        const std::size_t nt = std::min(W, nr - t);
        // the tile's key rows: at a constant stride from the first unless pages are shorter than a tile
        // (the two forms are spelled out: an address helper changed GCC 12's unrolling of this loop
        // and cost the contiguous kernel ~7 %)
        const T* kt = cur.k_row(t, 0);
        B acc[W];
        if (nt == W) {
          for (std::size_t j = 0; j < W; ++j) {
            if (h == 0) cur.prefetch_k(t, j);  // once per chunk, not once per query head
            if constexpr (Run % W == 0) {
              acc[j] = qv[0] * simd::load_as_float<Arch>(kt + j * stride);
              for (std::size_t c = 1; c < C; ++c) acc[j] = simd::fma(qv[c], simd::load_as_float<Arch>(kt + j * stride + c * W), acc[j]);
            } else {
              const T* kr = cur.k_row(t, j);
              acc[j] = qv[0] * simd::load_as_float<Arch>(kr);
              for (std::size_t c = 1; c < C; ++c) acc[j] = simd::fma(qv[c], simd::load_as_float<Arch>(kr + c * W), acc[j]);
            }
          }
          simd::reduce_add_rows<Arch>(acc).store_aligned(s + t);
        } else {
          for (std::size_t j = 0; j < W; ++j) acc[j] = B(0.0f);
          for (std::size_t j = 0; j < nt; ++j)
            for (std::size_t c = 0; c < C; ++c)
              acc[j] = simd::fma(qv[c], simd::load_as_float<Arch>((Run % W == 0 ? kt + j * stride : cur.k_row(t, j)) + c * W), acc[j]);
          simd::reduce_add_rows<Arch>(acc).store_aligned(s + t);
          for (std::size_t j = nt; j < W; ++j) s[t + j] = kNegInf;  // rows past the range weigh 0
        }
        mx = xsimd::max(mx, B::load_aligned(s + t));
      }
      const float cmax = simd::reduce_max<float, Arch>(mx);
      if (cmax == kNegInf) continue;  // nothing visible (only with -inf scores)

      // 2. rescale the running state once per chunk.
      PartialStats& sh = st[h];
      float* oh = o + h * D;
      B ov[C], ov2[C];
      for (std::size_t c = 0; c < C; ++c) {
        ov[c] = B::load_unaligned(oh + c * W);
        ov2[c] = B(0.0f);
      }
      sh.raise_max(cmax, [&](float alpha) {
        for (std::size_t c = 0; c < C; ++c) ov[c] = ov[c] * B(alpha);
      });

      // 3. probabilities of the chunk.
      const std::size_t nr_up = (nr + W - 1) / W * W;
      const B mb(sh.m);
      B lsum(0.0f);
      for (std::size_t t = 0; t < nr_up; t += W) {
        const B p = xsimd::exp(B::load_aligned(s + t) - mb);
        p.store_aligned(s + t);
        lsum += p;
      }
      sh.l += simd::reduce_add<float, Arch>(lsum);

      // 4. o += Σ_j p_j · v_j, two rows per iteration into independent accumulators (runs have an
      //    even length, so even rows go to ov and odd rows to ov2 whatever the row layout).
      for (std::size_t t = 0; t < nr; t += Run) {
        const std::size_t nt = std::min(Run, nr - t);
        const T* v0 = cur.v(t);  // [nt, stride]
        const float* pt = s + t;
        std::size_t j = 0;
        for (; j + 2 <= nt; j += 2) {
          const B p0(pt[j]), p1(pt[j + 1]);
          const T* va = v0 + j * stride;
          if (h == 0) {
            cur.prefetch_v(t, j);
            cur.prefetch_v(t, j + 1);
          }
          const T* vb = va + stride;
          for (std::size_t c = 0; c < C; ++c) {
            ov[c] = simd::fma(p0, simd::load_as_float<Arch>(va + c * W), ov[c]);
            ov2[c] = simd::fma(p1, simd::load_as_float<Arch>(vb + c * W), ov2[c]);
          }
        }
        if (j < nt) {
          const B p0(pt[j]);
          for (std::size_t c = 0; c < C; ++c) ov[c] = simd::fma(p0, simd::load_as_float<Arch>(v0 + j * stride + c * W), ov[c]);
        }
      }
      for (std::size_t c = 0; c < C; ++c) (ov[c] + ov2[c]).store_unaligned(oh + c * W);
    }
  }
}

}  // namespace barato::attention::detail
