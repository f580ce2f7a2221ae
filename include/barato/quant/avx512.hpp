#pragma once
/// \file
/// AVX-512 specializations of `quant::RowKernel` — the isolated intrinsics kernels for what xsimd 8.1
/// cannot express (byte → int32 widening, a 16-entry in-register lookup table), selected by the arch
/// type (`simd::kHasAvx512bw<Arch>`) and compiled only when the translation unit enables AVX-512 BW.
/// The portable kernel (quant/row_kernel.hpp) is their reference in the tests.
///
///  - 8-bit codes: 16 int8 weights per step widened to int32 (`vpmovsxbd`), converted (`vcvtdq2ps`)
///    and multiply-added with x; four independent accumulators; per-group scales applied to the
///    group's partial sum vector, masked loads for the tail of a group.
///  - 4-bit codes (AbsMax b ≤ 4 and NF4) whose group is a whole row or a multiple of 16: the 16
///    levels of the current group, pre-multiplied by its scale, sit in one register; 64 bytes of the
///    interleaved layout (quant/format.hpp) are shifted right by 4 bits eight times and each shift
///    indexes the table with `vpermps` (only the low 4 bits of each index are used), giving the 16
///    dequantized weights of 16 consecutive columns (the T-MAC / QLoRA "codebook in a register" idea).
///    The row's tail (cols % 128 codes) is done in scalar code.

#include <cstddef>
#include <cstdint>
#include <utility>

#include "barato/quant/avx512_tails.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {


/// 8-bit codes (AbsMax with 5–8 bits), any granularity.
template <class Arch, Format F>
  requires(simd::kHasAvx512bw<Arch> && F::kCodeBits == 8 && !kUseVnni<Arch, F> && !kUseVnniGgml<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-int8";
  using Activation = FloatActivation;
  static constexpr std::size_t activation_bytes(std::size_t /*cols*/) noexcept { return 0; }
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* /*scratch*/ = nullptr) noexcept {
    a = {x, cols};
  }

  /// out[j] = row r · a[j].x for j < N; each 16 weights are widened once for all N vectors.
  template <std::size_t N>
  static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* act, float* out) noexcept {
    using G = typename F::granularity;
    const auto* w = reinterpret_cast<const std::int8_t*>(v.row(r));
    const auto* sc = v.row_scales(r);
    const std::size_t n = v.cols;
    const std::size_t seg = G::kGroup != 0 ? G::kGroup : n;
    __m512 t0[N], t1[N];  // two independent chains across groups, per vector
    for (std::size_t j = 0; j < N; ++j) t0[j] = t1[j] = _mm512_setzero_ps();
    for (std::size_t c0 = 0, g = 0; c0 < n; c0 += seg, ++g) {
      const std::size_t c1 = c0 + seg < n ? c0 + seg : n;
      __m512 a[N][4];
      for (std::size_t j = 0; j < N; ++j)
        for (int i = 0; i < 4; ++i) a[j][i] = _mm512_setzero_ps();
      std::size_t c = c0;
      for (; c + 64 <= c1; c += 64) {
        detail::prefetch_codes(v, reinterpret_cast<const std::uint8_t*>(w + c));
        for (int i = 0; i < 4; ++i) {
          const __m512 wv = widen(w + c + 16 * i);
          for (std::size_t j = 0; j < N; ++j) a[j][i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(act[j].x + c + 16 * i), a[j][i]);
        }
      }
      for (; c + 32 <= c1; c += 32) {
        const __m512 w0 = widen(w + c), w1 = widen(w + c + 16);
        for (std::size_t j = 0; j < N; ++j) {
          a[j][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(act[j].x + c), a[j][0]);
          a[j][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(act[j].x + c + 16), a[j][1]);
        }
      }
      if (c + 16 <= c1) {
        const __m512 w0 = widen(w + c);
        for (std::size_t j = 0; j < N; ++j) a[j][2] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(act[j].x + c), a[j][2]);
        c += 16;
      }
      if (c < c1) {
        const __mmask16 m = static_cast<__mmask16>((1u << (c1 - c)) - 1u);
        const __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, w + c)));
        for (std::size_t j = 0; j < N; ++j) a[j][3] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, act[j].x + c), a[j][3]);
      }
      const __m512 s = _mm512_set1_ps(to_float(sc[G::kGroup != 0 ? g : 0]));
      for (std::size_t j = 0; j < N; ++j) {
        const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), _mm512_add_ps(a[j][2], a[j][3]));
        if (g & 1) t1[j] = _mm512_fmadd_ps(sum, s, t1[j]);
        else t0[j] = _mm512_fmadd_ps(sum, s, t0[j]);
      }
    }
    for (std::size_t j = 0; j < N; ++j) out[j] = _mm512_reduce_add_ps(_mm512_add_ps(t0[j], t1[j]));
  }

  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& act) noexcept {
    float out;
    dot_n<1>(v, r, &act, &out);
    return out;
  }

 private:
  [[gnu::always_inline]] static __m512 widen(const std::int8_t* p) noexcept {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};

/// 4-bit codes (AbsMax with 3–4 bits, NF4) with a whole-row scale or groups that are a multiple of 16.
template <class Arch, Format F>
  requires(simd::kHasAvx512bw<Arch> && F::kCodeBits == 4 && kDefaultPacking<F> && F::granularity::kGroup % 16 == 0 &&
           !kUseVnni<Arch, F> && !kUseVnniLut16<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-lut16";
  using Activation = FloatActivation;
  static constexpr std::size_t activation_bytes(std::size_t /*cols*/) noexcept { return 0; }
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* /*scratch*/ = nullptr) noexcept {
    a = {x, cols};
  }

  /// out[j] = row r · a[j].x for j < N; each 16 weights are looked up once for all N vectors.
  template <std::size_t N>
  static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* act, float* out) noexcept {
    using P = CodePacking<4>;
    constexpr std::size_t kG = F::granularity::kGroup;
    const __m512 base = avx512::levels<F>();
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t n = v.cols, full = n / P::kChunk * P::kChunk;
    __m512 acc[N][4];
    for (std::size_t j = 0; j < N; ++j)
      for (int i = 0; i < 4; ++i) acc[j][i] = _mm512_setzero_ps();
    __m512 lut = _mm512_mul_ps(base, _mm512_set1_ps(to_float(sc[0])));
    for (std::size_t c0 = 0; c0 < full; c0 += P::kChunk) {
      detail::prefetch_codes(v, row + c0 / 2);
      __m512i words = _mm512_loadu_si512(row + c0 / 2);  // 16 words × 8 codes
      for (std::size_t k = 0; k < 8; ++k) {
        const std::size_t c = c0 + 16 * k;
        if constexpr (kG != 0) {
          if (c % kG == 0) lut = _mm512_mul_ps(base, _mm512_set1_ps(to_float(sc[c / kG])));
        }
        const __m512 wv = _mm512_permutexvar_ps(words, lut);  // uses the low 4 bits of each word
        for (std::size_t j = 0; j < N; ++j) acc[j][k & 3] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(act[j].x + c), acc[j][k & 3]);
        words = _mm512_srli_epi32(words, 4);
      }
    }
    for (std::size_t j = 0; j < N; ++j) {
      float total = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_add_ps(acc[j][2], acc[j][3])));
      if (full < n) total += avx512::tail4(row, full, n, act[j].x, base, [&](std::size_t c) { return v.scale(r, c); }, kG);
      out[j] = total;
    }
  }

  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& act) noexcept {
    float out;
    dot_n<1>(v, r, &act, &out);
    return out;
  }
};

}  // namespace barato::quant

#endif  // __AVX512BW__ && __AVX512VL__
