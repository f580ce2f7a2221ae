#pragma once
/// \file
/// The AVX-512 VNNI specialization of `quant::RowKernel` for 4-bit formats with scale groups of 64·k
/// columns that the integer VNNI kernel (quant/vnni.hpp) does not take: NF4 (a codebook of 16
/// irrational levels, QLoRA) and AbsMax 4-bit with 64-column groups.
///
/// Why: the fp32 table kernel (quant/avx512.hpp) spends a lane-crossing `vpermps` per 16 weights,
/// which is the slow part on one core (NF4 ran at ~24 G weights/s from cache). Here the table lookup
/// is an in-lane byte shuffle (`vpshufb`, 64 codes per instruction) and the multiply-add is
/// `vpdpwssd` (32 int16 products per instruction):
///  - the 16 levels become 16-bit fixed point, L16 = round(level · kLevelScale) with
///    kLevelScale = 8192 / max |level| (NF4: 8192; AbsMax int4: 1024, exact); their low and high
///    bytes are two shuffle tables, and interleaving the two shuffles gives the int16 weights;
///  - `prepare` turns x into 15-bit fixed point per 128-column block (as the VNNI kernel does:
///    x ≈ sx_b · x16, |x16| ≤ 16383) stored as int16 in the order the interleave produces;
///  - per 128-column chunk four `vpdpwssd` give 16 int32 lane sums; with the 4-bit layout
///    (quant/format.hpp) even lanes hold columns of the chunk's first 64 and odd lanes the last 64,
///    so one multiply by [s_first, s_second, …] · sx_b / kLevelScale applies both groups' scales.
///    |L16·x16| < 2^27 and a lane adds 8 products per chunk: no int32 overflow.
/// Error against the exact product of the dequantized row: the level rounding (≤ scale / (2·kLevelScale)
/// per weight; 6·10⁻⁵ of the group's absmax for NF4, 0 for AbsMax int4) plus the rounding of x
/// (≤ sx_b / 2 per element). Columns past the last full 128-chunk are done in fp32.
/// x16 lives in scratch the caller provides (`activation_bytes(cols)`: 2 bytes per column and 4 per
/// block; quant/gemv.hpp takes it from the thread's `ActivationArena`), so any width works. x must be
/// finite. `dot_n<N>` decodes each 128-column chunk (two shuffles per nibble half, four unpacks) once
/// and runs the four `vpdpwssd` of every one of the N vectors on it; each vector keeps its own
/// accumulators, so a vector's result is the same for every N.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "barato/core/dtype.hpp"
#include "barato/quant/avx512_tails.hpp"
#include "barato/quant/fixed_point.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/quant/scratch.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {

/// x as int16 fixed point per 128-column block, in the kernel's column order: a view of the scratch
/// `prepare` filled (no ownership; trivially copyable).
struct VnniLut16Activation {
  static constexpr std::size_t kBlock = kFixedPointBlock;
  std::int16_t* x16 = nullptr;       // [blocks · 128] kernel order (see `RowKernel::slot`)
  float* k = nullptr;                // [blocks] fixed-point step of each block / kLevelScale
  const float* x = nullptr;          // [cols] the fp32 vector (tail columns)
  std::size_t cols = 0, blocks = 0;  // blocks = cols / 128 (full blocks only)
};

template <class Arch, Format F>
  requires(kUseVnniLut16<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-vnni-lut16";
  using Activation = VnniLut16Activation;
  static constexpr std::size_t kGroup = F::granularity::kGroup;

  /// Largest |level| of the format's 16 codes.
  static constexpr float max_level() noexcept {
    float m = 0.f;
    for (unsigned k = 0; k < 16; ++k) {
      const float a = F::level(static_cast<std::uint8_t>(k)) < 0 ? -F::level(static_cast<std::uint8_t>(k))
                                                                 : F::level(static_cast<std::uint8_t>(k));
      m = a > m ? a : m;
    }
    return m;
  }
  /// Fixed-point factor of the levels: the largest |level| maps to 8192.
  static constexpr float kLevelScale = 8192.0f / max_level();

  /// The shuffle tables: byte `hi` (0 = low, 1 = high) of L16 for each code, repeated in the four
  /// 128-bit lanes. Computed at compile time.
  static constexpr std::array<std::int8_t, 64> table(int hi) noexcept {
    std::array<std::int8_t, 64> t{};
    for (unsigned k = 0; k < 16; ++k) {
      const float f = F::level(static_cast<std::uint8_t>(k)) * kLevelScale;
      const int q = static_cast<int>(f < 0 ? f - 0.5f : f + 0.5f);  // round half away from zero
      const auto byte = static_cast<std::int8_t>(static_cast<std::uint8_t>((hi != 0 ? q >> 8 : q) & 0xFF));
      for (unsigned lane = 0; lane < 4; ++lane) t[16 * lane + k] = byte;
    }
    return t;
  }
  /// Groups of 64 with fp16 scales: a chunk's two scales are adjacent and converted by one F16C
  /// instruction (converting them one by one made the 0.5B-shape pass ~15 % slower).
#if defined(__F16C__)
  static constexpr bool kPairScales = kGroup == 64 && std::is_same_v<typename F::scale_type, f16>;
#else
  static constexpr bool kPairScales = false;
#endif
  alignas(64) static constexpr std::array<std::int8_t, 64> kTableLo = table(0);
  alignas(64) static constexpr std::array<std::int8_t, 64> kTableHi = table(1);

  /// Scratch bytes of one prepared vector of `cols` columns (a multiple of 64).
  static constexpr std::size_t activation_bytes(std::size_t cols) noexcept {
    const std::size_t blocks = cols / VnniLut16Activation::kBlock;
    return 2 * blocks * VnniLut16Activation::kBlock + scratch_round(blocks * 4);
  }

  /// Fixed-point copy of x [cols] into `scratch` (64-byte aligned, activation_bytes(cols) bytes). O(cols).
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    constexpr std::size_t B = VnniLut16Activation::kBlock;
    a.x = x;
    a.cols = cols;
    a.blocks = cols / B;
    a.x16 = reinterpret_cast<std::int16_t*>(scratch);
    a.k = reinterpret_cast<float*>(a.x16 + a.blocks * B);
    for (std::size_t b = 0; b < a.blocks; ++b)
      a.k[b] = fixed_point_block(x + b * B, B, [&](std::size_t i, int q) {
                 a.x16[b * B + slot(i)] = static_cast<std::int16_t>(q);
               }) /
               kLevelScale;  // divided once here, not once per row
  }

  /// out[j] = row r · a[j] for j < N (see the file comment): the lane sums of the full 128-column
  /// blocks (`block_lanes`), reduced, plus those of the fp32 tail columns, reduced. O(N · cols).
  template <std::size_t N>
  static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* a, float* out) noexcept {
    __m512 acc[N];
    block_lanes<N>(v, r, a, acc);
    const bool tail = a[0].blocks * VnniLut16Activation::kBlock < v.cols;
    const __m512 base = tail ? avx512::levels<F>() : _mm512_setzero_ps();  // built once for the N vectors
    for (std::size_t j = 0; j < N; ++j) {
      float total = avx512::reduce16(acc[j]);
      if (tail) total += avx512::reduce16(tail_lanes(v, r, a[j], base));
      out[j] = total;
    }
  }

  /// True when v's rows have fp32 tail columns (cols not a multiple of 128): gemv_batch then takes
  /// groups of vectors through `dot_rows_tails`.
  [[nodiscard]] static bool has_tail(const QuantizedView<F>& v) noexcept {
    return v.cols % VnniLut16Activation::kBlock != 0;
  }

  /// Rows [r0, r1) × N vectors a[0 … N) into y (row r of vector j at y[j · stride + r]): `dot_n<N>`
  /// row after row, bit for bit, with the lane sums of 16 rows taken together per vector
  /// (`avx512::reduce16_rows`, the pairs of `reduce16`) instead of one horizontal reduction (two with
  /// tail columns) per (row, vector); each row's blocks are decoded once for the N vectors.
  template <std::size_t N>
  static void dot_rows_tails(const QuantizedView<F>& v, std::size_t r0, std::size_t r1, const Activation* a, float* y,
                             std::size_t stride) noexcept {
    const bool tail = a[0].blocks * VnniLut16Activation::kBlock < v.cols;
    const __m512 base = tail ? avx512::levels<F>() : _mm512_setzero_ps();  // built once for all rows and vectors
    std::size_t r = r0;
    for (; r + 16 <= r1; r += 16) {
      __m512 lanes[N][16];
      for (std::size_t i = 0; i < 16; ++i) {
        __m512 acc[N];
        block_lanes<N>(v, r + i, a, acc);
        for (std::size_t j = 0; j < N; ++j) lanes[j][i] = acc[j];
      }
      for (std::size_t j = 0; j < N; ++j) {
        __m512 total = avx512::reduce16_rows(lanes[j]);
        if (tail) {
          for (std::size_t i = 0; i < 16; ++i) lanes[j][i] = tail_lanes(v, r + i, a[j], base);
          total = _mm512_add_ps(total, avx512::reduce16_rows(lanes[j]));
        }
        _mm512_storeu_ps(y + j * stride + r, total);
      }
    }
    detail::dot_n_rows<RowKernel, N>(v, r, r1, a, y, stride);
  }

  /// acc[j] = the fp32 lane sums of row r's full 128-column blocks against a[j].
  template <std::size_t N>
  [[gnu::always_inline]] static void block_lanes(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                 __m512* acc) noexcept {
    constexpr std::size_t B = VnniLut16Activation::kBlock;
    const __m512i t_lo = _mm512_load_si512(kTableLo.data()), t_hi = _mm512_load_si512(kTableHi.data());
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t blocks = a[0].blocks;
    __m512 acc0[N], acc1[N];
    for (std::size_t j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {
      detail::prefetch_codes(v, row + b * (B / 2));
      const __m512i w = _mm512_loadu_si512(row + b * (B / 2));
      const __m512i n_lo = _mm512_and_si512(w, nib);                        // columns 32m + j
      const __m512i n_hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);  // columns 32m + 16 + j
      const __m512i lo_l = _mm512_shuffle_epi8(t_lo, n_lo), hi_l = _mm512_shuffle_epi8(t_hi, n_lo);
      const __m512i lo_h = _mm512_shuffle_epi8(t_lo, n_hi), hi_h = _mm512_shuffle_epi8(t_hi, n_hi);
      const __m512i w0 = _mm512_unpacklo_epi8(lo_l, hi_l), w1 = _mm512_unpackhi_epi8(lo_l, hi_l);
      const __m512i w2 = _mm512_unpacklo_epi8(lo_h, hi_h), w3 = _mm512_unpackhi_epi8(lo_h, hi_h);
      // even lanes: the chunk's first 64 columns; odd lanes: the last 64
      float s0 = 0.f, s1 = 0.f;  // the two groups' weight scales
      __m128 s01 = _mm_setzero_ps();
      if constexpr (kPairScales) {  // two adjacent fp16 scales, converted together
        std::uint32_t pair;
        std::memcpy(&pair, sc + 2 * b, sizeof pair);
        s01 = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(pair)));
      } else {
        s0 = to_float(sc[(b * B) / kGroup]);
        s1 = to_float(sc[(b * B + 64) / kGroup]);
      }
      for (std::size_t j = 0; j < N; ++j) {
        const std::int16_t* xb = a[j].x16 + b * B;
        __m512i d = _mm512_madd_epi16(w0, _mm512_load_si512(xb));
        d = _mm512_dpwssd_epi32(d, w1, _mm512_load_si512(xb + 32));
        d = _mm512_dpwssd_epi32(d, w2, _mm512_load_si512(xb + 64));
        d = _mm512_dpwssd_epi32(d, w3, _mm512_load_si512(xb + 96));
        const float k = a[j].k[b];
        __m512 sv;
        if constexpr (kPairScales) {
          sv = _mm512_broadcast_f32x2(_mm_mul_ps(s01, _mm_set1_ps(k)));
        } else {
          sv = _mm512_unpacklo_ps(_mm512_set1_ps(s0 * k), _mm512_set1_ps(s1 * k));
        }
        if (b & 1) acc1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sv, acc1[j]);
        else acc0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sv, acc0[j]);
      }
    }
    for (std::size_t j = 0; j < N; ++j) acc[j] = _mm512_add_ps(acc0[j], acc1[j]);
  }

  /// The lane sums of row r's fp32 tail columns (past the last full 128-column block) against a;
  /// `base`: the format's levels (`avx512::levels<F>`).
  [[gnu::always_inline]] static __m512 tail_lanes(const QuantizedView<F>& v, std::size_t r, const Activation& a,
                                                  __m512 base) noexcept {
    return avx512::tail4_lanes(v.row(r), a.blocks * VnniLut16Activation::kBlock, v.cols, a.x, base,
                               [&](std::size_t c) { return v.scale(r, c); }, kGroup);
  }

  /// Row r · a (`dot_n<1>`).
  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& a) noexcept {
    float out;
    dot_n<1>(v, r, &a, &out);
    return out;
  }

 private:
  /// Position of block column i in x16. A 64-byte chunk holds column 32m + j in the low nibble of
  /// byte 4j + m and column 32m + 16 + j in its high nibble; within each 128-bit lane L, unpacklo
  /// gives the words of bytes 16L … 16L + 7 and unpackhi those of 16L + 8 … 16L + 15. Vector u ∈
  /// {lo-unpacklo, lo-unpackhi, hi-unpacklo, hi-unpackhi} occupies x16[32u, 32u + 32).
  static constexpr std::size_t slot(std::size_t i) noexcept {
    const std::size_t high = (i % 32) >= 16 ? 1 : 0;  // column 32m + 16·high + j
    const std::size_t m = i / 32, j = i % 16;
    const std::size_t byte = 4 * j + m;               // 0 … 63
    const std::size_t lane = byte / 16, in_lane = byte % 16;
    const std::size_t u = 2 * high + (in_lane >= 8 ? 1 : 0);
    return 32 * u + 8 * lane + in_lane % 8;
  }
};

}  // namespace barato::quant

#endif  // AVX-512 VNNI
