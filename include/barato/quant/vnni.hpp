#pragma once
/// \file
/// The AVX-512 VNNI specialization of `quant::RowKernel` for integer AbsMax formats (8-bit codes, or
/// 4-bit codes) whose scale group is a row, the tensor, or a multiple of 128 columns — the int8-row
/// and int4-g128 decode paths — and int8 codes with groups of 32 or 64 columns (llama.cpp's Q8_0
/// layout; each 64-column half of a block is then reduced on its own and scaled per int32 lane, a
/// 32-column group being 8 lanes). `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds
/// groups of four into 16 int32 lanes: 64 multiply-adds per instruction, where the fp32 kernels do 16.
///
/// Activations stay fp32 at the interface. `prepare` turns x into 15-bit fixed point per block of 128
/// columns (x ≈ sx_b · x16, |x16| ≤ 16383, sx_b = max_b |x| / 16383) and splits x16 = 256·hi + lo into
/// two signed byte planes; each weight byte is multiplied with both planes, so the products are
/// exact and only x's rounding (≤ sx_b / 2 per element, 2⁻¹⁵ of the block maximum) differs from fp32.
/// (llama.cpp rounds activations to 8 bits instead.) Weights enter as unsigned bytes — int8 codes
/// with the sign bit flipped (q + 128), 4-bit codes as stored (q + 8) — and the offset is removed with
/// per-lane sums of x16, exactly in int32: Σ q·x16 = Σ u·x16 − offset · Σ x16.
///
/// For the 4-bit layout (quant/format.hpp) the low nibbles of a 64-byte chunk hold columns 32m + j
/// (byte 4j + m) and the high nibbles columns 32m + 16 + j, so `prepare` stores each 128-column block
/// of the planes in that order. Columns past the last full 128-block are done in fp32 from x.
/// `prepare` needs cols ≤ kMaxCols (the planes live on the caller's stack); wider matrices take the
/// fp32 kernels. x must be finite.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "barato/quant/avx512_tails.hpp"
#include "barato/quant/fixed_point.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {

/// x as two fixed-point byte planes per 128-column block (see the file comment). ~33 KiB; lives on
/// the stack of the caller of gemv.
struct VnniActivation {
  static constexpr std::size_t kBlock = kFixedPointBlock;
  static constexpr std::size_t kMaxCols = 16384;
  static constexpr int kFixedMax = kFixedPointMax;
  alignas(64) std::int8_t hi[kMaxCols];  // [cols_vec] high bytes of x16, in kernel order
  alignas(64) std::int8_t lo[kMaxCols];  // [cols_vec] low bytes of x16 (balanced: −128…127)
  alignas(64) std::int32_t corr[kMaxCols / kBlock][16];  // [blocks, lanes] offset · Σ x16 of each lane's columns
  alignas(64) std::int32_t corr_lo[kMaxCols / kBlock][16];  // the part of corr from a block's first 64 positions
                                                           // (int8 codes with 32- or 64-column groups only)
  float sx[kMaxCols / kBlock];           // [blocks] fixed-point step of each block
  const float* x = nullptr;              // [cols] the fp32 vector (tail columns)
  std::size_t cols = 0, blocks = 0;      // blocks = cols / 128 (full blocks only)
};

template <class Arch, Format F>
  requires(kUseVnni<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-vnni";
  using Activation = VnniActivation;
  static constexpr std::size_t kMaxCols = VnniActivation::kMaxCols;
  static constexpr int kOffset = F::kCodeBits == 8 ? 128 : F::kOffset;
  static constexpr std::size_t kGroup = F::granularity::kGroup;
  /// int8 codes with groups of 32 or 64 columns (llama.cpp's Q8_0 layout is G = 32): each 64-byte half
  /// of a block is summed on its own and scaled per lane (a 32-column group is 8 int32 lanes).
  static constexpr bool kSmallGroups = F::kCodeBits == 8 && (kGroup == 32 || kGroup == 64);

  /// Fixed-point planes of x [cols] (cols ≤ kMaxCols). O(cols).
  static void prepare(const float* x, std::size_t cols, Activation& a) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    a.x = x;
    a.cols = cols;
    a.blocks = cols / B;
    for (std::size_t b = 0; b < a.blocks; ++b) {
      for (auto& c : a.corr[b]) c = 0;
      if constexpr (kSmallGroups)
        for (auto& c : a.corr_lo[b]) c = 0;
      a.sx[b] = fixed_point_block(x + b * B, B, [&](std::size_t i, int q) {
        const int h = (q + 128) >> 8;  // −64…64
        const std::size_t pos = slot(i);
        a.hi[b * B + pos] = static_cast<std::int8_t>(h);
        a.lo[b * B + pos] = static_cast<std::int8_t>(q - 256 * h);
        a.corr[b][(pos % 64) / 4] += kOffset * q;  // the int32 lane this column is summed into
        if constexpr (kSmallGroups) {
          if (pos < 64) a.corr_lo[b][pos / 4] += kOffset * q;
        }
      });
    }
  }

  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& a) noexcept {
    using G = typename F::granularity;
    constexpr std::size_t B = VnniActivation::kBlock;
    constexpr std::size_t kBlocksPerGroup = G::kGroup / B;  // 0 for per-row / per-tensor
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    float s = static_cast<float>(sc[0]);
    for (std::size_t b = 0; b < a.blocks; ++b) {
      if constexpr (kSmallGroups) {  // two 64-column halves, each with its own scale lanes
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        const __m512i c_lo = _mm512_load_si512(a.corr_lo[b]);
        const __m512i c_hi = _mm512_sub_epi32(_mm512_load_si512(a.corr[b]), c_lo);
        for (std::size_t half = 0; half < 2; ++half) {
          const std::size_t c0 = b * B + 64 * half;
          detail::prefetch_codes(v, row + c0);
          const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(row + c0), flip);
          const __m512i dh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_load_si512(a.hi + c0));
          const __m512i dl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_load_si512(a.lo + c0));
          const __m512i di = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl), half == 0 ? c_lo : c_hi);
          __m512 sv;  // lane i sums columns c0 + 4i … c0 + 4i + 3
          if constexpr (kGroup == 64) {
            sv = _mm512_set1_ps(static_cast<float>(sc[c0 / 64]) * a.sx[b]);
          } else {
            sv = _mm512_mask_blend_ps(static_cast<__mmask16>(0xFF00), _mm512_set1_ps(static_cast<float>(sc[c0 / 32])),
                                      _mm512_set1_ps(static_cast<float>(sc[c0 / 32 + 1])));
            sv = _mm512_mul_ps(sv, _mm512_set1_ps(a.sx[b]));
          }
          if (half == 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sv, acc1);
          else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sv, acc0);
        }
        continue;
      }
      if constexpr (kBlocksPerGroup != 0) {
        if (b % kBlocksPerGroup == 0) s = static_cast<float>(sc[b / kBlocksPerGroup]);
      }
      __m512i dh = _mm512_setzero_si512(), dl = _mm512_setzero_si512();
      const __m512i h0 = _mm512_load_si512(a.hi + b * B), h1 = _mm512_load_si512(a.hi + b * B + 64);
      const __m512i l0 = _mm512_load_si512(a.lo + b * B), l1 = _mm512_load_si512(a.lo + b * B + 64);
      if constexpr (F::kCodeBits == 8) {
        const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
        detail::prefetch_codes(v, row + b * B);
        detail::prefetch_codes(v, row + b * B + 64);
        const __m512i u0 = _mm512_xor_si512(_mm512_loadu_si512(row + b * B), flip);
        const __m512i u1 = _mm512_xor_si512(_mm512_loadu_si512(row + b * B + 64), flip);
        dh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(dh, u0, h0), u1, h1);
        dl = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(dl, u0, l0), u1, l1);
      } else {
        const __m512i nib = _mm512_set1_epi8(0x0F);
        detail::prefetch_codes(v, row + b * (B / 2));
        const __m512i w = _mm512_loadu_si512(row + b * (B / 2));
        const __m512i u0 = _mm512_and_si512(w, nib);                         // columns 32m + j
        const __m512i u1 = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);   // columns 32m + 16 + j
        dh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(dh, u0, h0), u1, h1);
        dl = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(dl, u0, l0), u1, l1);
      }
      // exact integer Σ q·x16 per lane, then one fp32 multiply-add by scale · step
      const __m512i di = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl), _mm512_load_si512(a.corr[b]));
      const __m512 sk = _mm512_set1_ps(s * a.sx[b]);
      if (b & 1) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sk, acc1);
      else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sk, acc0);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    const std::size_t tail = a.blocks * B;  // the rest of the row (one scale unless the groups are small)
    if (tail < v.cols) {
      if constexpr (F::kCodeBits == 8) {
        const std::size_t step = kSmallGroups ? kGroup : v.cols;
        for (std::size_t c = tail; c < v.cols; c += step) {
          const std::size_t e = c + step < v.cols ? c + step : v.cols;
          total += v.scale(r, c) * avx512::tail8(reinterpret_cast<const std::int8_t*>(row), c, e, a.x);
        }
      } else {
        alignas(64) float lev[16];
        for (unsigned k = 0; k < 16; ++k) lev[k] = F::level(static_cast<std::uint8_t>(k));
        const float s_tail = v.scale(r, tail);
        total += avx512::tail4(row, tail, v.cols, a.x, _mm512_load_ps(lev), [&](std::size_t) { return s_tail; });
      }
    }
    return total;
  }

 private:
  /// Position of block column i in the planes: natural for 8-bit codes; for 4-bit codes the order of
  /// the nibbles in a 64-byte chunk (low nibbles first, then high nibbles; byte 4j + m ↔ 32m + j).
  static constexpr std::size_t slot(std::size_t i) noexcept {
    if constexpr (F::kCodeBits == 8) {
      return i;
    } else {
      const std::size_t k = i / 16, j = i % 16;  // column 16k + j: word j, nibble k
      const std::size_t m = k / 2;               // byte 4j + m of the word
      return (k % 2) * 64 + 4 * j + m;
    }
  }
};

}  // namespace barato::quant

#endif  // AVX-512 VNNI
