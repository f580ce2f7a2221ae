#pragma once
/// \file
/// Loading fp16 / bf16 storage as float batches, and bulk conversions. One small isolated
/// intrinsic kernel per instruction family (AVX-512 F `vcvtph2ps`, bf16 as a 16-bit shift),
/// selected by the arch type, with the portable Eigen conversion beside it as the reference.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "barato/core/dtype.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace barato::simd {

/// Loads `Batch<float,Arch>::size` consecutive elements of type `T` starting at `p` as floats.
template <class Arch, Element T>
[[nodiscard]] inline Batch<float, Arch> load_as_float(const T* p) noexcept {
  constexpr std::size_t W = Batch<float, Arch>::size;
  if constexpr (std::is_same_v<T, float>) {
    return Batch<float, Arch>::load_unaligned(p);
  }
#if defined(__AVX512F__)
  else if constexpr (kHasAvx512<Arch> && W == 16 && std::is_same_v<T, f16>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (kHasAvx512<Arch> && W == 16 && std::is_same_v<T, bf16>) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
#endif
  else {
    alignas(64) float tmp[W];
    for (std::size_t i = 0; i < W; ++i) tmp[i] = static_cast<float>(p[i]);
    return Batch<float, Arch>::load_aligned(tmp);
  }
}

/// dst[i] = float(src[i]) for i < n.
template <Element T, class Arch = DefaultArch>
inline void to_float(const T* src, float* dst, std::size_t n) noexcept {
  constexpr std::size_t W = Batch<float, Arch>::size;
  std::size_t i = 0;
  if constexpr (!std::is_same_v<T, float>) {
    for (; i + W <= n; i += W) load_as_float<Arch>(src + i).store_unaligned(dst + i);
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

/// dst[i] = T(src[i]) (round to nearest even) for i < n.
template <Element T, class Arch = DefaultArch>
inline void from_float(const float* src, T* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    if (n != 0) std::memcpy(dst, src, n * sizeof(float));
  } else {
    std::size_t i = 0;
#if defined(__AVX512F__)
    if constexpr (kHasAvx512<Arch> && std::is_same_v<T, f16>) {
      for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
      }
    }
#endif
    for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }
}

}  // namespace barato::simd
