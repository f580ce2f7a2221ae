#pragma once
/// \file
/// The CPU architecture as a type, and the few names that differ between xsimd 8 and newer xsimd.
/// barato never puts `-march` into its usage requirements: the arch is whatever the *user's*
/// compile flags enable (`xsimd::default_arch`), and every kernel also takes it as a template parameter.

#include <cstddef>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__) || defined(__AVX__) || defined(__FMA__)
#include <immintrin.h>
#endif

namespace barato::simd {

/// The best architecture enabled by the current compile flags.
using DefaultArch = xsimd::default_arch;

template <class T, class Arch = DefaultArch>
using Batch = xsimd::batch<T, Arch>;

/// Lanes of a float batch on `Arch`.
template <class Arch = DefaultArch>
inline constexpr std::size_t kFloatLanes = Batch<float, Arch>::size;

/// True when `Arch` has the AVX-512 F (and BW) instructions used by the isolated intrinsic kernels.
template <class Arch>
inline constexpr bool kHasAvx512 = std::is_base_of_v<xsimd::avx512f, Arch>;
template <class Arch>
inline constexpr bool kHasAvx512bw = std::is_base_of_v<xsimd::avx512bw, Arch>;

/// The 8-lane arch a 16-lane AVX-512 kernel may switch to for rows whose length is an odd multiple
/// of 8 (AVX2 when it is enabled), or void when `Arch` has none.
template <class Arch>
struct HalfWidth {
  using type = void;
};
#if XSIMD_WITH_AVX2
template <class Arch>
  requires(kHasAvx512<Arch> && Batch<float, Arch>::size == 16)
struct HalfWidth<Arch> {
  using type = xsimd::avx2;
};
#endif
template <class Arch>
using HalfWidthArch = typename HalfWidth<Arch>::type;

#if XSIMD_VERSION_MAJOR >= 9
/// Horizontal sum of a batch (xsimd 8: `hadd`; newer: `reduce_add`).
template <class T, class Arch>
[[nodiscard]] inline T reduce_add(const Batch<T, Arch>& b) noexcept {
  return xsimd::reduce_add(b);
}
/// Horizontal max of a batch.
template <class T, class Arch>
[[nodiscard]] inline T reduce_max(const Batch<T, Arch>& b) noexcept {
  return xsimd::reduce_max(b);
}
#else
/// Horizontal sum of a batch (xsimd 8: `hadd`; newer: `reduce_add`).
template <class T, class Arch>
[[nodiscard]] inline T reduce_add(const Batch<T, Arch>& b) noexcept {
  return xsimd::hadd(b);
}
/// Horizontal max of a batch (xsimd 8 has no reduction for max).
template <class T, class Arch>
[[nodiscard]] inline T reduce_max(const Batch<T, Arch>& b) noexcept {
  alignas(64) T tmp[Batch<T, Arch>::size];
  b.store_aligned(tmp);
  T m = tmp[0];
  for (std::size_t i = 1; i < Batch<T, Arch>::size; ++i) m = tmp[i] > m ? tmp[i] : m;
  return m;
}
#endif

/// x·y + z for batches, rounded once wherever the compile flags enable FMA instructions, and as a
/// product and a sum (two roundings) where they do not — never one or the other by the compiler's
/// choice. xsimd 8.1 has fused `fma` only for its fma3<…> arch types: on avx512f/bw and plain avx2 it
/// is `x * y + z`, which GCC's default -ffp-contract=fast fuses or not depending on the surrounding
/// loop (on an AMD Zen 5 with -march=native it did one in one code path and not in another, so a row
/// of a batched product differed in the last bit from the same row alone). The kernels call this one.
template <class T, class Arch>
[[nodiscard]] inline Batch<T, Arch> fma(const Batch<T, Arch>& x, const Batch<T, Arch>& y, const Batch<T, Arch>& z) noexcept {
  constexpr bool kF32 = std::is_same_v<T, float>, kF64 = std::is_same_v<T, double>;
#if defined(__AVX512F__)
  if constexpr (kHasAvx512<Arch> && kF32) return _mm512_fmadd_ps(x, y, z);
  if constexpr (kHasAvx512<Arch> && kF64) return _mm512_fmadd_pd(x, y, z);
#endif
#if defined(__FMA__)
  constexpr bool k256 = !kHasAvx512<Arch> && std::is_base_of_v<xsimd::avx, Arch>;
  constexpr bool k128 = !kHasAvx512<Arch> && !std::is_base_of_v<xsimd::avx, Arch> && std::is_base_of_v<xsimd::sse2, Arch>;
  if constexpr (k256 && kF32) return _mm256_fmadd_ps(x, y, z);
  if constexpr (k256 && kF64) return _mm256_fmadd_pd(x, y, z);
  if constexpr (k128 && kF32) return _mm_fmadd_ps(x, y, z);
  if constexpr (k128 && kF64) return _mm_fmadd_pd(x, y, z);
#endif
  (void)kF32;
  (void)kF64;
  return xsimd::fma(x, y, z);
}

/// Keeps the vector `v` (a raw register type of the intrinsics kernels: `__m512`, `__m512i`, …) in a
/// register from here on: an empty asm statement that claims to modify it, so the compiler cannot
/// rematerialise its later uses as memory operands. GCC 12 folds a loaded vector that several FMAs
/// share back into each FMA (one load per use: in the fp32 4 × 4 tile, 20 loads for 16 FMAs, which
/// bound the tile by the load ports on Zen 5); pinned, it is loaded once. No effect on the value.
template <class V>
  requires std::is_trivially_copyable_v<V>
inline void pin(V& v) noexcept {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
  __asm__("" : "+v"(v));
#else
  (void)v;
#endif
}
/// `pin` for an xsimd batch (its register).
template <class T, class Arch>
inline void pin(Batch<T, Arch>& b) noexcept {
  pin(b.data);
}

#if defined(__AVX512VNNI__)
/// acc += the four products u·s of each int32 lane (`vpdpbusd`: unsigned bytes u times signed bytes
/// s). GCC 12 gives the intrinsic's result a register other than its accumulator's and copies
/// between them around the instruction; in the register-blocked VNNI kernels (16 accumulators) that
/// doubled the vector registers the block loop needed, and accumulators went to the stack and back
/// every block. The asm statement names one register for both. The same instruction, so the same
/// result; other compilers take the intrinsic.
[[gnu::always_inline]] inline void dpbusd(__m512i& acc, __m512i u, __m512i s) noexcept {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "vm"(s));
#else
  acc = _mm512_dpbusd_epi32(acc, u, s);
#endif
}
#endif

#if defined(__AVX512F__)
namespace detail {
/// Last stage of the AVX-512 transpose-add: 128-bit chunk k of t[m] holds 4 partial sums of row
/// 4m + k (m, k < 4); returns the 16 row sums with row r in lane r. Shared by `reduce_add_rows` and
/// the packed-row small-head-dim attention kernel.
[[nodiscard]] inline __m512 sum_row_chunks_avx512(const __m512* t) noexcept {
  const __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(t[0], t[1]), _mm512_unpackhi_ps(t[0], t[1]));
  const __m512 w = _mm512_add_ps(_mm512_unpacklo_ps(t[2], t[3]), _mm512_unpackhi_ps(t[2], t[3]));
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(u, w, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u, w, _MM_SHUFFLE(3, 2, 3, 2)));
  // lane 4k + j of v holds row 4j + k; put row r in lane r.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, v);
}
}  // namespace detail
#endif

/// Reduces W = lanes batches to one batch whose lane i is the horizontal sum of `rows[i]`
/// (a transpose-add): the portable loop over `reduce_add`. xsimd 8.1's `haddp` permutes lanes wrongly
/// on AVX-512 (lane i of the result is not the sum of row i), so AVX-512 gets its own small
/// intrinsics kernel and AVX/AVX2 (W = 8) a 256-bit hadd network: the overloads below, selected by
/// the arch type.
template <class Arch>
[[nodiscard]] inline Batch<float, Arch> reduce_add_rows(const Batch<float, Arch>* rows) noexcept {
  constexpr std::size_t W = Batch<float, Arch>::size;
  alignas(64) float out[W];
  for (std::size_t i = 0; i < W; ++i) out[i] = reduce_add<float, Arch>(rows[i]);
  return Batch<float, Arch>::load_aligned(out);
}

#if defined(__AVX512F__)
/// `reduce_add_rows` on AVX-512 (W = 16): pairwise 128-bit shuffles, then `sum_row_chunks_avx512`.
template <class Arch>
  requires(kHasAvx512<Arch> && Batch<float, Arch>::size == 16)
[[nodiscard]] inline Batch<float, Arch> reduce_add_rows(const Batch<float, Arch>* rows) noexcept {
  __m512 s[8], t[4];
  for (int i = 0; i < 8; ++i) {  // 128-bit halves: row 2i in chunks 0-1, row 2i+1 in chunks 2-3
    const __m512 a = rows[2 * i], b = rows[2 * i + 1];
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  for (int m = 0; m < 4; ++m)  // chunk k of t[m] holds 4 partial sums of row 4m+k
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * m], s[2 * m + 1], 0xDD));
  return detail::sum_row_chunks_avx512(t);
}
#endif

#if defined(__AVX__)
/// `reduce_add_rows` on AVX / AVX2 (W = 8): hadd pairs rows within each 128-bit half; after two
/// levels, half k of u0 (u1) holds the partial sums of rows 0-3 (4-7) over elements 4k…4k+3; adding
/// the halves finishes each row.
template <class Arch>
  requires(std::is_base_of_v<xsimd::avx, Arch> && Batch<float, Arch>::size == 8)
[[nodiscard]] inline Batch<float, Arch> reduce_add_rows(const Batch<float, Arch>* rows) noexcept {
  const __m256 t0 = _mm256_hadd_ps(rows[0], rows[1]), t1 = _mm256_hadd_ps(rows[2], rows[3]);
  const __m256 t2 = _mm256_hadd_ps(rows[4], rows[5]), t3 = _mm256_hadd_ps(rows[6], rows[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

}  // namespace barato::simd
