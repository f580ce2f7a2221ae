#pragma once
/// \file
/// Row-tail helpers shared by the AVX-512 kernels (quant/avx512.hpp, quant/vnni.hpp): the columns
/// after a row's last full 128-column block, 16 at a time with masked loads. Compiled only when the
/// translation unit enables AVX-512 BW and VL.

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {

namespace avx512 {

/// The sum of v's 16 lanes by a fixed tree: lanes 8 apart, then 4, 2 and 1 (written out: the order of
/// `_mm512_reduce_add_ps` is the compiler's — GCC 12's and clang 14's are this tree, but nothing
/// promises it). `reduce16_rows` forms the same sums for 16 vectors at once, bit for bit.
[[nodiscard]] inline float reduce16(__m512 v) noexcept {
  const __m256 s1 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
  const __m128 s3 = _mm_add_ps(s2, _mm_movehl_ps(s2, s2));         // lanes 0, 1: s2[0] + s2[2], s2[1] + s2[3]
  return _mm_cvtss_f32(_mm_add_ss(s3, _mm_movehdup_ps(s3)));      // s3[0] + s3[1]
}

/// Lane i = `reduce16(v[i])` for 16 vectors, by a transposing tree: each step adds the same lane pairs
/// as reduce16 (8 apart, then 4, 2, 1; addition commutes, so the bits are the same) for all 16 at once
/// — 15 vector additions instead of 16 horizontal reductions. `add` adds two vectors lane by lane
/// (`reduce16_rows_epi32` passes int32 lanes through it as bits).
template <class Add>
[[nodiscard]] inline __m512 reduce16_rows_by(const __m512 (&v)[16], Add add) noexcept {
  __m512 a[8], b[4], c[2];
  // lanes k and k + 8: 256-bit halves of rows i and i + 8 → [row i (8) | row i + 8 (8)]
  for (int i = 0; i < 8; ++i)
    a[i] = add(_mm512_shuffle_f32x4(v[i], v[i + 8], 0x44), _mm512_shuffle_f32x4(v[i], v[i + 8], 0xEE));
  // lanes k and k + 4: 128-bit blocks 0 + 1 and 2 + 3 of a[i] and a[i + 4] → [i | i+8 | i+4 | i+12] (4 each)
  for (int i = 0; i < 4; ++i)
    b[i] = add(_mm512_shuffle_f32x4(a[i], a[i + 4], 0x88), _mm512_shuffle_f32x4(a[i], a[i + 4], 0xDD));
  // lanes k and k + 2 within each block: [p0 p1 q0 q1] + [p2 p3 q2 q3] (p from b[i], q from b[i + 2])
  for (int i = 0; i < 2; ++i)
    c[i] = add(_mm512_shuffle_ps(b[i], b[i + 2], 0x44), _mm512_shuffle_ps(b[i], b[i + 2], 0xEE));
  // lanes k and k + 1: [p0 q0 p'0 q'0] + [p1 q1 p'1 q'1] (p' from c[1])
  const __m512 t = add(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
  // t holds rows 0 2 1 3 | 8 10 9 11 | 4 6 5 7 | 12 14 13 15 (block m of b[i] is row i + 0, 8, 4, 12;
  // lane j of a block comes from b[0], b[2], b[1], b[3]): put them in order
  alignas(64) static constexpr std::int32_t kOrder[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  return _mm512_permutexvar_ps(_mm512_load_si512(kOrder), t);
}

/// `reduce16_rows_by` with fp32 additions: lane i = `reduce16(v[i])`, bit for bit.
[[nodiscard]] inline __m512 reduce16_rows(const __m512 (&v)[16]) noexcept {
  return reduce16_rows_by(v, [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
}

/// Lane i = the sum of v[i]'s 16 int32 lanes (wrapping as int32 addition does; exact when the sum fits).
[[nodiscard]] inline __m512i reduce16_rows_epi32(const __m512i (&v)[16]) noexcept {
  __m512 f[16];
  for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(v[i]);
  return _mm512_castps_si512(reduce16_rows_by(f, [](__m512 x, __m512 y) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_castps_si512(y)));
  }));
}

/// The 16 lane sums of `tail4` (before `reduce16`): Σ_c level(code_c) · scale_at(c) · x[c] over the
/// natural-order 4-bit tail [c0, n) of a row (c0 a multiple of 128, so byte c/2 holds columns c and
/// c+1), column c in lane c mod 16. 16 columns per step: 8 bytes unpacked to 16 nibbles in column
/// order, looked up in `base` (the 16 levels) scaled by the column's scale. `span`: the columns that
/// share one scale (scale groups [k·span, (k+1)·span), span a multiple of 16), or 0 when one scale
/// serves all of [c0, n); scale_at(c) is asked once per group, at its first column in the tail.
/// Whole steps take plain loads and the last partial one masked loads (the same values): per-step
/// masks and scales cost rows of 64 columns, all tail, more than their products (2026-12-07:
/// stories260K's perplexity over 40,000 tokens with int4-g128 weights 1.85 → 1.48 s, NF4 2.16 → 1.82 s).
template <class ScaleAt>
[[nodiscard]] inline __m512 tail4_lanes(const std::uint8_t* row, std::size_t c0, std::size_t n, const float* x,
                                        __m512 base, ScaleAt&& scale_at, std::size_t span = 0) noexcept {
  const __m128i nib = _mm_set1_epi8(0x0F);
  // 16 columns (the low 8 code bytes of v) times the scaled levels `lut` and x's 16 floats, into acc
  const auto step = [nib](__m128i v, __m512 lut, __m512 xv, __m512 acc) {
    const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(v, nib), _mm_and_si128(_mm_srli_epi16(v, 4), nib));
    return _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), lut), xv, acc);
  };
  __m512 acc = _mm512_setzero_ps();
  std::size_t c = c0;
  while (c < n) {
    const std::size_t e = span == 0 || n - c <= span - c % span ? n : c + (span - c % span);  // this group's end
    const __m512 lut = _mm512_mul_ps(base, _mm512_set1_ps(scale_at(c)));
    for (; c + 16 <= e; c += 16)
      acc = step(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2)), lut, _mm512_loadu_ps(x + c), acc);
    if (c < e) {  // the row's last columns (e = n)
      const std::size_t left = e - c;
      const __m128i v = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((left + 1) / 2)) - 1u), row + c / 2);
      acc = step(v, lut, _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1u), x + c), acc);
      c = e;
    }
  }
  return acc;
}

/// Σ_c level(code_c) · scale_at(c) · x[c] over the natural-order 4-bit tail [c0, n) of a row:
/// `reduce16` of `tail4_lanes` (`span` as there).
template <class ScaleAt>
[[nodiscard]] inline float tail4(const std::uint8_t* row, std::size_t c0, std::size_t n, const float* x, __m512 base,
                                 ScaleAt&& scale_at, std::size_t span = 0) noexcept {
  return reduce16(tail4_lanes(row, c0, n, x, base, std::forward<ScaleAt>(scale_at), span));
}

/// The 16 levels of a 4-bit format's codes as one vector (the tails' lookup table before scaling).
template <class F>
[[nodiscard]] inline __m512 levels() noexcept {
  alignas(64) float lev[16];
  for (unsigned k = 0; k < 16; ++k) lev[k] = F::level(static_cast<std::uint8_t>(k));
  return _mm512_load_ps(lev);
}

/// The int8 codes p[0 … 16) selected by m as 16 floats (the others 0).
[[nodiscard]] inline __m512 widen8(__mmask16 m, const std::int8_t* p) noexcept {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

/// Σ_c w[c] · x[c] over int8 columns [c0, n), 16 per step with masked loads (unscaled).
[[nodiscard]] inline float tail8(const std::int8_t* w, std::size_t c0, std::size_t n, const float* x) noexcept {
  __m512 acc = _mm512_setzero_ps();
  for (std::size_t c = c0; c < n; c += 16) {
    const std::size_t left = n - c < 16 ? n - c : 16;
    const auto m = static_cast<__mmask16>((1u << left) - 1u);
    acc = _mm512_fmadd_ps(widen8(m, w + c), _mm512_maskz_loadu_ps(m, x + c), acc);
  }
  return reduce16(acc);
}

/// Lane i = `tail8(w + i · stride, c0, n, x)` for 16 rows `stride` bytes apart: the same operations
/// in the same order per row, each x chunk loaded once for all 16.
[[nodiscard]] inline __m512 tail8_rows16(const std::int8_t* w, std::size_t stride, std::size_t c0, std::size_t n,
                                         const float* x) noexcept {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (std::size_t c = c0; c < n; c += 16) {
    const std::size_t left = n - c < 16 ? n - c : 16;
    const auto m = static_cast<__mmask16>((1u << left) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(widen8(m, w + i * stride + c), xv, acc[i]);
  }
  return reduce16_rows(acc);
}

}  // namespace avx512

}  // namespace barato::quant

#endif  // __AVX512BW__ && __AVX512VL__
