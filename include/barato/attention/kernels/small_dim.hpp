#pragma once
/// \file
/// The fused online-softmax kernel (attention/kernels/generic.hpp) for head dimensions smaller than
/// the float lanes (d ∈ {1, 2, 4, 8} on AVX-512, where W = 16), over dense blocks whose rows are
/// packed (stride == d), `detail::accumulate_small_dim`. The dense `accumulate` dispatches here when
/// `detail::has_small_dim_kernel<Arch>(d, stride)`; the result is the same partial state. Other archs
/// and shapes keep the generic path. The arch type selects the kernel: the AVX-512 definitions are
/// compiled only with AVX-512 enabled and constrained to AVX-512 archs; for every other arch
/// `detail::kHasSmallDimKernel` is false and the overload is deleted.
///
/// Why: the generic kernel vectorises over d, so with d < W it runs only its scalar tail. Here
/// R = W/d consecutive rows share one register instead. A tile of W rows of K is d loads (rows
/// R·i … R·i+R−1 in register i, d lanes each), multiplied by q repeated R times; a shuffle network
/// (the last stages of the AVX-512 transpose-add of `simd::reduce_add_rows`) turns the d product
/// vectors into one vector of W row sums. Per tile and query head, like the generic kernel:
///   1. the W scores (one shuffle network) and their max;
///   2. one rescale of (o, l) by e^{m_old − m_new} if the tile raised the max;
///   3. p = e^{s − m} over the tile, l += Σ p;
///   4. acc = Σ_i p_row ⊙ V_i over the d value registers of the tile (p_row = p permuted so that each
///      d-lane segment holds its row's weight; two accumulators), then the R segments of acc are
///      folded and added to o (kept in a register for the whole range).
/// All arithmetic is local to a tile of W rows, so attention over blocks that start at multiples of
/// W (paged pages of 16, prefill tiles of 64) is bitwise equal to attention over one contiguous block;
/// the paged fold (attention/kernels/paged.hpp) stages the tiles that span smaller scattered pages.
/// Chunks of ≤ kSmallChunkRows rows are visited in the outer loop and the G query heads in the inner
/// loop, so K/V of a chunk are read from memory once and from L1 for the other heads.
/// A partial last tile is staged once per chunk (converted to fp32, zero-padded) and reused by all
/// heads of the group. Complexity O(g·(r1 − r0)·d); allocates nothing.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/dtype.hpp"
#include "barato/kv/block.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace barato::attention::detail {

/// Most rows per chunk of the small-dimension kernel (8 KiB of fp32 K+V at d = 8, reused from L1 by
/// the query heads of a group); a multiple of the 16-row tile.
inline constexpr std::size_t kSmallChunkRows = 128;

/// True when `Arch` has the small-dimension kernel (AVX-512, W = 16; specialised below).
template <class Arch>
inline constexpr bool kHasSmallDimKernel = false;

/// Folds rows [r0, r1) of `blk` into the partial states of the query heads of `qg`. Same contract as
/// `accumulate`; requires `has_small_dim_kernel<Arch>(qg.d, blk.stride)` (deleted for archs without
/// the kernel, so a call the dispatch did not guard does not compile). Allocates nothing.
template <class Arch, Element T>
void accumulate_small_dim(const QueryGroup& qg, const kv::DenseBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept =
    delete;

#if defined(__AVX512F__)
template <class Arch>
  requires(simd::kHasAvx512<Arch> && simd::Batch<float, Arch>::size == 16)
inline constexpr bool kHasSmallDimKernel<Arch> = true;

/// Row sums of one tile of W = 16 rows packed D to a register: x[i] holds rows (16/D)·i … in
/// consecutive D-lane segments. Returns lane r = Σ of row r's D products.
template <std::size_t D>
[[nodiscard]] inline __m512 small_row_sums(const __m512* x) noexcept {
  if constexpr (D == 1) {
    return x[0];
  } else if constexpr (D == 2) {
    // x[0]: rows 0-7, x[1]: rows 8-15, two lanes each. Per 128-bit chunk c the pair sums give
    // [row 2c, row 2c+1, row 8+2c, row 9+2c]; the permutation puts row r in lane r.
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
    const __m512i idx = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    return _mm512_permutexvar_ps(idx, s);
  } else {
    static_assert(D == 4 || D == 8);
    __m512 t[4];  // chunk k of t[m] holds 4 partial sums of row 4m+k
    if constexpr (D == 4) {
      for (int m = 0; m < 4; ++m) t[m] = x[m];
    } else {  // x[i]: row 2i in chunks 0-1, row 2i+1 in chunks 2-3
      for (int m = 0; m < 4; ++m)
        t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xDD));
    }
    return simd::detail::sum_row_chunks_avx512(t);
  }
}

/// Sums the 16/D segments of D lanes of `a` into lanes 0 … D−1.
template <std::size_t D>
[[nodiscard]] inline __m512 small_fold_segments(__m512 a) noexcept {
  if constexpr (D < 16) a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(1, 0, 3, 2)));
  if constexpr (D < 8) a = _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
  if constexpr (D < 4) a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(1, 0, 3, 2)));
  if constexpr (D < 2) a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)));
  return a;
}

/// The kernel for one compile-time D ∈ {1, 2, 4, 8}; rows of `blk` are packed (stride == D).
template <std::size_t D, Element T>
void accumulate_small_dim_avx512(const QueryGroup& qg, const kv::DenseBlock<T>& blk, std::size_t r0,
                                 std::size_t r1) noexcept {
  const float* const q = qg.q;
  const std::size_t g = qg.g;
  const float scale = qg.scale;
  float* const o = qg.o;
  PartialStats* const st = qg.st;
  using xsimd::avx512f;
  using B = simd::Batch<float, avx512f>;  // for the vectorised exp
  constexpr std::size_t W = 16;
  constexpr std::size_t R = W / D;  // rows per register
  constexpr std::size_t C = kSmallChunkRows;
  static_assert(C % W == 0);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __mmask16 dmask = static_cast<__mmask16>((1u << D) - 1u);
  // lane l → l mod D (q repeated) and l / D (the row of lane l within a register)
  alignas(64) std::int32_t rep[W], seg[W];
  for (std::size_t l = 0; l < W; ++l) {
    rep[l] = static_cast<std::int32_t>(l % D);
    seg[l] = static_cast<std::int32_t>(l / D);
  }
  const __m512i rep_idx = _mm512_load_si512(rep);
  const __m512i seg_idx = _mm512_load_si512(seg);

  alignas(64) float kt[W * D];     // [W, D] staged partial tile of K (fp32, zero-padded)
  alignas(64) float vt[W * D];     // [W, D] staged partial tile of V

  for (std::size_t c0 = r0; c0 < r1; c0 += C) {
    const std::size_t nr = std::min(C, r1 - c0);
    const std::size_t nfull = nr / W * W;  // rows in full tiles
    const T* k0 = blk.k + c0 * D;          // [nr, D]
    const T* v0 = blk.v + c0 * D;          // [nr, D]
    if (nfull < nr) {
      const std::size_t nt = nr - nfull;
      for (std::size_t i = 0; i < W * D; ++i) {
        kt[i] = i < nt * D ? barato::to_float(k0[nfull * D + i]) : 0.0f;
        vt[i] = i < nt * D ? barato::to_float(v0[nfull * D + i]) : 0.0f;
      }
    }
    for (std::size_t h = 0; h < g; ++h) {
      const __m512 qv = _mm512_mul_ps(_mm512_set1_ps(scale),
                                      _mm512_permutexvar_ps(rep_idx, _mm512_maskz_loadu_ps(dmask, q + h * D)));
      PartialStats& sh = st[h];
      float* oh = o + h * D;
      __m512 ov = _mm512_maskz_loadu_ps(dmask, oh);  // o in lanes 0 … D−1
      // One tile of W rows of K (kp) and V (vp), packed D to a row; `live` rows are in the range.
      auto tile = [&](const auto* kp, const auto* vp, __mmask16 live) {
        // 1. the tile's W scores: D products, one shuffle network.
        __m512 x[D];
        for (std::size_t i = 0; i < D; ++i) x[i] = _mm512_mul_ps(qv, simd::load_as_float<avx512f>(kp + i * W));
        const __m512 sc = _mm512_mask_blend_ps(live, _mm512_set1_ps(kNegInf), small_row_sums<D>(x));
        const float tmax = _mm512_reduce_max_ps(sc);
        if (tmax == kNegInf) return;  // nothing visible (only with -inf scores)

        // 2. rescale the running state if the tile raised the max.
        sh.raise_max(tmax, [&](float alpha) { ov = _mm512_mul_ps(ov, _mm512_set1_ps(alpha)); });

        // 3. probabilities of the tile.
        const __m512 p = xsimd::exp(B(sc) - B(sh.m));
        sh.l += _mm512_reduce_add_ps(p);

        // 4. o += Σ_j p_j · v_j: register i holds rows R·i …, weighted by p permuted per segment.
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (std::size_t i = 0; i < D; ++i) {
          const __m512i idx = _mm512_add_epi32(seg_idx, _mm512_set1_epi32(static_cast<int>(R * i)));
          const __m512 pw = _mm512_permutexvar_ps(idx, p);
          if (i % 2 == 0)
            acc0 = _mm512_fmadd_ps(pw, simd::load_as_float<avx512f>(vp + i * W), acc0);
          else
            acc1 = _mm512_fmadd_ps(pw, simd::load_as_float<avx512f>(vp + i * W), acc1);
        }
        ov = _mm512_add_ps(ov, small_fold_segments<D>(_mm512_add_ps(acc0, acc1)));
      };
      for (std::size_t t = 0; t < nfull; t += W) tile(k0 + t * D, v0 + t * D, static_cast<__mmask16>(0xFFFF));
      if (nfull < nr) tile(kt, vt, static_cast<__mmask16>((1u << (nr - nfull)) - 1u));
      _mm512_mask_storeu_ps(oh, dmask, ov);
    }
  }
}

template <class Arch, Element T>
  requires kHasSmallDimKernel<Arch>
void accumulate_small_dim(const QueryGroup& qg, const kv::DenseBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept {
  switch (qg.d) {
    case 1: return accumulate_small_dim_avx512<1>(qg, blk, r0, r1);
    case 2: return accumulate_small_dim_avx512<2>(qg, blk, r0, r1);
    case 4: return accumulate_small_dim_avx512<4>(qg, blk, r0, r1);
    case 8: return accumulate_small_dim_avx512<8>(qg, blk, r0, r1);
    default: return;
  }
}
#endif  // __AVX512F__

/// True when the dense `accumulate` has a small-dimension path for head dimension `d` and row stride
/// `stride` on `Arch`: AVX-512 (W = 16), d ∈ {1, 2, 4, 8} and packed rows (stride == d).
template <class Arch>
[[nodiscard]] constexpr bool has_small_dim_kernel(std::size_t d, std::size_t stride) noexcept {
  return kHasSmallDimKernel<Arch> && stride == d && (d == 1 || d == 2 || d == 4 || d == 8);
}

}  // namespace barato::attention::detail
