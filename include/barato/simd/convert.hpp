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

/// Loads `Batch<float,Arch>::size` consecutive elements of type `T` starting at `p` as floats: a plain
/// load for fp32, the portable conversion loop otherwise (AVX-512 fp16 / bf16: the overloads below).
template <class Arch, Element T>
[[nodiscard]] inline Batch<float, Arch> load_as_float(const T* p) noexcept {
  constexpr std::size_t W = Batch<float, Arch>::size;
  if constexpr (std::is_same_v<T, float>) {
    return Batch<float, Arch>::load_unaligned(p);
  } else {
    alignas(64) float tmp[W];
    for (std::size_t i = 0; i < W; ++i) tmp[i] = static_cast<float>(p[i]);
    return Batch<float, Arch>::load_aligned(tmp);
  }
}

#if defined(__AVX512F__)
/// `load_as_float` of 16 fp16 values on AVX-512 (`vcvtph2ps`).
template <class Arch, Element T>
  requires(kHasAvx512<Arch> && Batch<float, Arch>::size == 16 && std::is_same_v<T, f16>)
[[nodiscard]] inline Batch<float, Arch> load_as_float(const T* p) noexcept {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

/// `load_as_float` of 16 bf16 values on AVX-512 (zero-extend, shift into the high half).
template <class Arch, Element T>
  requires(kHasAvx512<Arch> && Batch<float, Arch>::size == 16 && std::is_same_v<T, bf16>)
[[nodiscard]] inline Batch<float, Arch> load_as_float(const T* p) noexcept {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
#endif

/// dst[i] = float(src[i]) for i < n.
template <Element T, class Arch = DefaultArch>
inline void to_float(const T* src, float* dst, std::size_t n) noexcept {
  constexpr std::size_t W = Batch<float, Arch>::size;
  std::size_t i = 0;
  if constexpr (!std::is_same_v<T, float>) {
    for (; i + W <= n; i += W) load_as_float<Arch>(src + i).store_unaligned(dst + i);
  }
  for (; i < n; ++i) dst[i] = barato::to_float(src[i]);
}

/// dst[i] = T(src[i]) (round to nearest even) for i < n: a copy for fp32, the portable conversion
/// loop otherwise (AVX-512 fp16: the overload below).
template <Element T, class Arch = DefaultArch>
inline void from_float(const float* src, T* dst, std::size_t n) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    if (n != 0) std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }
}

#if defined(__AVX512F__)
/// `from_float` to fp16 on AVX-512: 16 values per `vcvtps2ph`, then the scalar tail.
template <Element T, class Arch = DefaultArch>
  requires(kHasAvx512<Arch> && std::is_same_v<T, f16>)
inline void from_float(const float* src, T* dst, std::size_t n) noexcept {
  std::size_t i = 0;
  // The load is written as a full-mask masked load: GCC 12 at -O2 otherwise flags the plain
  // 64-byte load as out of bounds when inlined next to a source shorter than 16 floats (the loop
  // does not run then; the warning is false, and fatal under -Werror). Same instruction cost.
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>(0xFFFF), src + i);
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}
#endif

}  // namespace barato::simd
