#pragma once
/// \file
/// Row-tail helpers shared by the AVX-512 kernels (quant/avx512.hpp, quant/vnni.hpp): the columns
/// after a row's last full 128-column block, 16 at a time with masked loads. Compiled only when the
/// translation unit enables AVX-512 BW and VL.

#include <cstddef>
#include <cstdint>

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {

namespace avx512 {

/// Σ_c level(code_c) · scale_at(c) · x[c] over the natural-order 4-bit tail [c0, n) of a row
/// (c0 a multiple of 128, so byte c/2 holds columns c and c+1). 16 columns per step: 8 bytes
/// unpacked to 16 nibbles in column order, looked up in `base` (the 16 levels) scaled by
/// scale_at(c), which must be constant within each 16 columns.
template <class ScaleAt>
[[nodiscard]] inline float tail4(const std::uint8_t* row, std::size_t c0, std::size_t n, const float* x, __m512 base,
                                 ScaleAt&& scale_at) noexcept {
  const __m128i nib = _mm_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps();
  for (std::size_t c = c0; c < n; c += 16) {
    const std::size_t left = n - c < 16 ? n - c : 16;
    const __m128i v = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((left + 1) / 2)) - 1u), row + c / 2);
    const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(v, nib), _mm_and_si128(_mm_srli_epi16(v, 4), nib));
    const __m512 lut = _mm512_mul_ps(base, _mm512_set1_ps(scale_at(c)));
    const __m512 wv = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), lut);
    acc = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1u), x + c), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

/// Σ_c w[c] · x[c] over int8 columns [c0, n), 16 per step with masked loads (unscaled).
[[nodiscard]] inline float tail8(const std::int8_t* w, std::size_t c0, std::size_t n, const float* x) noexcept {
  __m512 acc = _mm512_setzero_ps();
  for (std::size_t c = c0; c < n; c += 16) {
    const std::size_t left = n - c < 16 ? n - c : 16;
    const auto m = static_cast<__mmask16>((1u << left) - 1u);
    const __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, w + c)));
    acc = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + c), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace avx512

}  // namespace barato::quant

#endif  // __AVX512BW__ && __AVX512VL__
