#pragma once
/// \file
/// The AVX-512 VNNI specialization of `quant::RowKernel` for integer AbsMax formats (8-bit codes, or
/// 4-bit codes) whose scale group is a row, the tensor, or a multiple of 128 columns — the int8-row
/// and int4-g128 decode paths — and int8 codes with groups of 16, 32 or 64 columns (each 64-column
/// half of a block is then reduced on its own and scaled per int32 lane, a 32-column group being 8
/// lanes, a 16-column group 4).
/// ggml's own Q8_0 / Q4_0 take ggml's product instead (quant/vnni_ggml.hpp).
/// Grouped formats (groups of 128 columns or more): where the AMX tiles are compiled, a row's result is
/// its blocks' exact integer sums scaled into 4 fp32 accumulators (`dot_rows_blocks`), the definition
/// the tiles share; elsewhere the lanes of each block are scaled and kept in fp32 accumulators
/// (`dot_rows_lanes`).
/// `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds
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
/// The planes live in scratch the caller provides (`activation_bytes(cols)`: 2 bytes per column plus
/// 128 (256 with small groups) + 4 bytes per block; quant/gemv.hpp takes it from the thread's
/// `ActivationArena`), so any width works. x must be finite.
///
/// Formats with one scale per row or tensor (`kRowStep`: int8-row, int4-row, int8/int4-tensor) give
/// the vector one step for all its full blocks (sx = max |x| / 16383 over them), so the products of a
/// whole row are added in int32 lanes, widened once to int64, and the exact Σ q·x16 is scaled once by
/// sx and the row's scale: 4 `vpdpbusd` per 128 columns and vector and no other instruction per
/// block (the other formats convert and scale each block's sums). The rounding of x is then 2⁻¹⁵ of
/// the vector's largest |x| instead of the block's.
///
/// `dot_n<N>` loads each 64-byte chunk of weights once and runs the `vpdpbusd` pairs of all N
/// vectors on it (N·4 VNNI instructions per 128 columns on the same weight registers); each vector
/// keeps its own accumulators, so a vector's result is the same for every N. `dot2_n<N>` (all formats
/// but int8 in groups of 16 / 32 / 64) does two rows, loading each vector's planes once for both, with
/// every (row, vector) computed as by `dot_n<1>`.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "barato/core/error.hpp"
#include "barato/quant/amx.hpp"
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

/// x as two fixed-point byte planes per 128-column block (see the file comment): a view of the
/// scratch `prepare` filled (no ownership; trivially copyable).
struct VnniActivation {
  static constexpr std::size_t kBlock = kFixedPointBlock;
  static constexpr int kFixedMax = kFixedPointMax;
  std::int8_t* hi = nullptr;        // [blocks · 128] high bytes of x16, in kernel order
  std::int8_t* lo = nullptr;        // [blocks · 128] low bytes of x16 (balanced: −128…127)
  std::int32_t* corr = nullptr;     // [blocks, 16] −offset · Σ x16 of each int32 lane's columns (the
                                    // low plane's sums start from it, so no subtraction per block)
  std::int32_t* corr_lo = nullptr;  // [blocks, 16] the part of corr from a block's first 64 positions
                                    // (int8 codes with 32- or 64-column groups only, else null)
  float* sx = nullptr;              // [blocks] fixed-point step of each block (all equal for formats
                                    // with one scale per row or tensor: see `kRowStep`)
  std::int64_t corr_row = 0;        // −offset · Σ x16 over all full blocks (`kRowStep` kernels only)
  const float* x = nullptr;         // [cols] the fp32 vector (tail columns)
  std::size_t cols = 0, blocks = 0;  // blocks = cols / 128 (full blocks only)
};

template <class Arch, Format F>
  requires(kUseVnni<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-vnni";
  using Activation = VnniActivation;
  static constexpr int kOffset = F::kCodeBits == 8 ? 128 : F::kOffset;
  static constexpr std::size_t kGroup = F::granularity::kGroup;
  /// int8 codes with groups of 16, 32 or 64 columns: each 64-byte half of a block is summed on its
  /// own and scaled per lane (a 32-column group is 8 int32 lanes, a 16-column group 4).
  static constexpr bool kSmallGroups = F::kCodeBits == 8 && (kGroup == 16 || kGroup == 32 || kGroup == 64);
  /// One scale per row or per tensor (int8-row, int4-row, …): the vector gets one fixed-point step
  /// for all its full blocks, so the integer sums of a whole row are added in int32 lanes and scaled
  /// once — four `vpdpbusd` per 128 columns and nothing else per block.
  static constexpr bool kRowStep = !kSmallGroups && kGroup == 0;
  /// Batched products may take Intel AMX tiles (quant/amx.hpp): int8 codes with one scale per row or
  /// tensor, whose exact integer sums the tiles form too.
  static constexpr bool kAmx = kAmxCompiled && kRowStep && F::kCodeBits == 8;
  /// Formats with groups of 128 columns or more (int4-g128, int8-g128, …) may take the tiles too:
  /// their per-block exact sums are tile elements (`amx_block_rows`).
  static constexpr bool kAmxBlocks = kAmxCompiled && !kRowStep && !kSmallGroups;
  /// Blocks whose lane sums stay in int32 before they are widened to int64: a lane's exact Σ u·x16
  /// over a block is at most 8 · 255 · 16383 in magnitude, and 64 such blocks stay below 2³¹.
  static constexpr std::size_t kRowSegmentBlocks = 64;

  /// Scratch bytes of one prepared vector of `cols` columns (a multiple of 64).
  static constexpr std::size_t activation_bytes(std::size_t cols) noexcept {
    const std::size_t blocks = cols / VnniActivation::kBlock;
    return 2 * blocks * VnniActivation::kBlock + (kSmallGroups ? 2 : 1) * blocks * 64 + scratch_round(blocks * 4);
  }

  /// Fixed-point planes of x [cols] into `scratch` (64-byte aligned, activation_bytes(cols) bytes):
  /// 16 columns per instruction — the same bytes as `prepare_scalar` (the rounding is the same
  /// `round(x · (1 / step))` to nearest even, and the lane corrections are exact integer sums, taken
  /// from the stored planes by `vpdpbusd` with a vector of ones). O(cols).
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    bind(x, cols, a, scratch);
    const float row_step = kRowStep ? max_abs(x, a.blocks * B) / static_cast<float>(kFixedPointMax) : 0.0f;
    const __m512i ones = _mm512_set1_epi8(1);
    const __m512i off = _mm512_set1_epi32(-kOffset);
    std::int64_t sum = 0;  // Σ x16 over the full blocks (kRowStep)
    for (std::size_t b = 0; b < a.blocks; ++b) {
      const float* xb = x + b * B;
      const float step = kRowStep ? row_step : max_abs(xb, B) / static_cast<float>(kFixedPointMax);
      a.sx[b] = step;
      const __m512 inv = _mm512_set1_ps(step > 0.f ? 1.0f / step : 0.f);
      const __m512i qmax = _mm512_set1_epi32(kFixedPointMax);
      __m512i h[8], l[8];  // x16 of columns 16k … 16k + 15 as hi (−64…64) and lo (−128…127)
      __m512i qs = _mm512_setzero_si512();
      for (std::size_t k = 0; k < 8; ++k) {
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * k), inv));  // MXCSR: nearest even
        q = _mm512_max_epi32(_mm512_min_epi32(q, qmax), _mm512_sub_epi32(_mm512_setzero_si512(), qmax));
        h[k] = _mm512_srai_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(128)), 8);
        l[k] = _mm512_sub_epi32(q, _mm512_slli_epi32(h[k], 8));
        qs = _mm512_add_epi32(qs, q);
      }
      std::int8_t* hb = a.hi + b * B;
      std::int8_t* lb = a.lo + b * B;
      if constexpr (F::kCodeBits == 8) {  // natural order
        for (std::size_t k = 0; k < 8; ++k) {
          _mm_store_si128(reinterpret_cast<__m128i*>(hb + 16 * k), _mm512_cvtepi32_epi8(h[k]));
          _mm_store_si128(reinterpret_cast<__m128i*>(lb + 16 * k), _mm512_cvtepi32_epi8(l[k]));
        }
      } else {  // chunk c holds columns 16(2m + c) + j at byte 4j + m (`slot`)
        const __m512i byte = _mm512_set1_epi32(0xFF);
        auto interleave = [&](const __m512i* v, std::size_t c) {
          __m512i w = _mm512_and_si512(v[c], byte);
          for (std::size_t m = 1; m < 4; ++m)
            w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_and_si512(v[2 * m + c], byte), static_cast<unsigned>(8 * m)));
          return w;
        };
        for (std::size_t c = 0; c < 2; ++c) {
          _mm512_store_si512(hb + 64 * c, interleave(h, c));
          _mm512_store_si512(lb + 64 * c, interleave(l, c));
        }
      }
      if constexpr (kRowStep) {
        sum += _mm512_reduce_add_epi32(qs);  // ≤ 128 · 16383 per block: exact in int32
        continue;
      }
      // the lanes' −offset · Σ x16 of each 64-byte chunk: Σ x16 = 256 · Σ hi + Σ lo over the lane's 4 bytes
      __m512i chunk[2];
      for (std::size_t c = 0; c < 2; ++c) {
        const __m512i sh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(hb + 64 * c));
        const __m512i sl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(lb + 64 * c));
        chunk[c] = _mm512_mullo_epi32(off, _mm512_add_epi32(_mm512_slli_epi32(sh, 8), sl));
      }
      _mm512_store_si512(a.corr + b * 16, _mm512_add_epi32(chunk[0], chunk[1]));
      if constexpr (kSmallGroups) _mm512_store_si512(a.corr_lo + b * 16, chunk[0]);
    }
    if constexpr (kRowStep) a.corr_row = -static_cast<std::int64_t>(kOffset) * sum;
  }

  /// `prepare` written element by element: the readable reference of the vector version (the tests
  /// check that both fill the scratch with the same bytes). O(cols).
  static void prepare_scalar(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    bind(x, cols, a, scratch);
    if constexpr (kRowStep) {
      const float step = fixed_point_step(x, a.blocks * B);
      std::int64_t sum = 0;
      for (std::size_t b = 0; b < a.blocks; ++b) {
        a.sx[b] = step;
        fixed_point_store(x + b * B, B, step, [&](std::size_t i, int q) { store_planes(a, b, i, q); sum += q; });
      }
      a.corr_row = -static_cast<std::int64_t>(kOffset) * sum;
      return;
    }
    for (std::size_t b = 0; b < a.blocks; ++b) {
      std::int32_t* corr = a.corr + b * 16;
      for (std::size_t i = 0; i < 16; ++i) corr[i] = 0;
      if constexpr (kSmallGroups)
        for (std::size_t i = 0; i < 16; ++i) a.corr_lo[b * 16 + i] = 0;
      a.sx[b] = fixed_point_block(x + b * B, B, [&](std::size_t i, int q) {
        const std::size_t pos = store_planes(a, b, i, q);
        corr[(pos % 64) / 4] -= kOffset * q;  // the int32 lane this column is summed into
        if constexpr (kSmallGroups) {
          if (pos < 64) a.corr_lo[b * 16 + pos / 4] -= kOffset * q;
        }
      });
    }
  }

  /// Column i of block b as x16 = q = 256·hi + lo (hi −64…64, lo −128…127) into the planes; returns
  /// its position in the block (kernel order).
  static std::size_t store_planes(Activation& a, std::size_t b, std::size_t i, int q) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    const int h = (q + 128) >> 8;
    const std::size_t pos = slot(i);
    a.hi[b * B + pos] = static_cast<std::int8_t>(h);
    a.lo[b * B + pos] = static_cast<std::int8_t>(q - 256 * h);
    return pos;
  }

  /// Block b (128 columns) of a row's codes as unsigned bytes u = code + kOffset, prefetching ahead:
  /// int8 codes with the sign bit flipped (u0 columns 0–63, u1 64–127); 4-bit codes as stored, low
  /// nibbles in u0 (columns 32m + j) and high nibbles in u1 (columns 32m + 16 + j).
  [[gnu::always_inline]] static void load_block(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t b,
                                                __m512i& u0, __m512i& u1) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    if constexpr (F::kCodeBits == 8) {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      detail::prefetch_codes(v, row + b * B);
      detail::prefetch_codes(v, row + b * B + 64);
      u0 = _mm512_xor_si512(_mm512_loadu_si512(row + b * B), flip);
      u1 = _mm512_xor_si512(_mm512_loadu_si512(row + b * B + 64), flip);
    } else {
      const __m512i nib = _mm512_set1_epi8(0x0F);
      detail::prefetch_codes(v, row + b * (B / 2));
      const __m512i w = _mm512_loadu_si512(row + b * (B / 2));
      u0 = _mm512_and_si512(w, nib);
      u1 = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);
    }
  }

  /// total + row r's columns [c, e) (codes `row`, all in the scale group of column c) · x in fp32: the
  /// columns past the last full 128-block, which the kernels leave to the fp32 tail routines. The int8
  /// scale goes in by an explicit fused multiply-add: every caller got one before from GCC's default
  /// contraction (-ffp-contract=fast) of total + s · t; written out, the result no longer rests on the
  /// compiler's choice at each inlined call site, and equals the earlier code's bit for bit.
  static float add_tail(float total, const QuantizedView<F>& v, std::size_t r, const std::uint8_t* row, std::size_t c,
                        std::size_t e, const float* x) noexcept {
    const float s = v.scale(r, c);
    if constexpr (F::kCodeBits == 8) {
      return std::fma(s, avx512::tail8(reinterpret_cast<const std::int8_t*>(row), c, e, x), total);
    } else {
      return total + avx512::tail4(row, c, e, x, avx512::levels<F>(), [&](std::size_t) { return s; });
    }
  }

  /// The 16 int32 lanes of v widened to int64 and added in pairs: 8 int64 lanes with the same total.
  [[gnu::always_inline]] static __m512i widen_pairs(__m512i v) noexcept {
    return _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)),
                            _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
  }

  /// The totals of the 8 int64 lanes of each of a, b, c, d (exact) as the 4 lanes of one register, by
  /// a transposing tree: three adds for all four vectors instead of one horizontal reduction each.
  [[gnu::always_inline]] static __m256i lane_totals4(__m512i a, __m512i b, __m512i c, __m512i d) noexcept {
    // 128-bit blocks: [x0 x1 | y0 y1] + [x2 x3 | y2 y3] → x's 4 partial pairs, then y's
    const __m512i ab = _mm512_add_epi64(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
    const __m512i cd = _mm512_add_epi64(_mm512_shuffle_i64x2(c, d, 0x44), _mm512_shuffle_i64x2(c, d, 0xEE));
    // one 128-bit block per vector: a, b, c, d; then each block's two lanes added (totals in lanes 0, 2, 4, 6)
    const __m512i abcd = _mm512_add_epi64(_mm512_shuffle_i64x2(ab, cd, 0x88), _mm512_shuffle_i64x2(ab, cd, 0xDD));
    const __m512i pairs = _mm512_add_epi64(abcd, _mm512_shuffle_epi32(abcd, _MM_PERM_BADC));
    return _mm512_castsi512_si256(_mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), pairs));
  }

  /// `dot_n` (R = 1) and `dot2_n` (R = 2) for `kRowStep` formats: per row and vector, Σ u·hi and
  /// Σ u·lo over the row in int32 lanes — for one row two accumulators per plane (each chain then
  /// takes one `vpdpbusd` per block), for two rows one, so the registers hold 2·R·N·(3 − R) of them —
  /// combined per segment of kRowSegmentBlocks blocks into the lanes' exact Σ u·x16 = 256·Σ u·hi +
  /// Σ u·lo (int32 wrap-around is harmless: the segment's true lane sums fit), widened to int64 and
  /// totalled across the lanes, four vectors at a time, into one register of int64 sums per row and
  /// four vectors (R · ⌈N/4⌉ registers across the segments; the 8-lane int64 vectors of every (row,
  /// vector), kept instead, pushed the block loop past the 32 vector registers: with GCC 12 it spilled
  /// accumulators every block). The exact Σ q·x16 = Σ u·x16 − offset·Σ x16 is scaled once (in double)
  /// by the vector's step and the row's scale (`finish_rows4`); the tail columns are fp32.
  /// out[i·N + j] = row r + i · a[j]. The integer sums are exact, so a (row, vector) result is the
  /// same for every R and N.
  /// With kTail = false the fp32 tail columns are left out (`dot_rows_tails` adds them 16 rows at a time).
  template <std::size_t R, std::size_t N, bool kTail = true>
  [[gnu::always_inline]] static void dot_rows(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                              float* out) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    constexpr std::size_t A = R == 1 ? 2 : 1;    // accumulators per plane
    constexpr std::size_t NP = (N + 3) / 4 * 4;  // vectors padded to the transposing tree's 4
    const std::size_t blocks = a[0].blocks;
    __m256i exact[R][NP / 4];  // totals of the segments so far, four vectors per register (see above)
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t q = 0; q < NP / 4; ++q) exact[i][q] = _mm256_setzero_si256();
    for (std::size_t b0 = 0; b0 < blocks; b0 += kRowSegmentBlocks) {
      const std::size_t b1 = b0 + kRowSegmentBlocks < blocks ? b0 + kRowSegmentBlocks : blocks;
      __m512i h[R][N][A], l[R][N][A];
      for (std::size_t i = 0; i < R; ++i)
        for (std::size_t j = 0; j < N; ++j)
          for (std::size_t k = 0; k < A; ++k) h[i][j][k] = l[i][j][k] = _mm512_setzero_si512();
      for (std::size_t b = b0; b < b1; ++b) {
        __m512i u[R][2];  // the block's 128 weights of each row as unsigned bytes, loaded once for all N vectors
        for (std::size_t i = 0; i < R; ++i) load_block(v, v.row(r + i), b, u[i][0], u[i][1]);
        for (std::size_t j = 0; j < N; ++j) {
          for (std::size_t k = 0; k < 2; ++k) {  // the two 64-column planes
            __m512i hi = _mm512_load_si512(a[j].hi + b * B + 64 * k);
            __m512i lo = _mm512_load_si512(a[j].lo + b * B + 64 * k);
            if constexpr (R > 1) {  // one load each, shared by the rows (simd::pin says why)
              simd::pin(hi);
              simd::pin(lo);
            }
            for (std::size_t i = 0; i < R; ++i) {
              simd::dpbusd(h[i][j][k % A], u[i][k], hi);
              simd::dpbusd(l[i][j][k % A], u[i][k], lo);
            }
          }
        }
      }
      for (std::size_t i = 0; i < R; ++i) {
        __m512i wide[NP];
        for (std::size_t j = 0; j < NP; ++j) wide[j] = _mm512_setzero_si512();
        for (std::size_t j = 0; j < N; ++j) {
          __m512i hs = h[i][j][0], ls = l[i][j][0];
          if constexpr (A == 2) {
            hs = _mm512_add_epi32(hs, h[i][j][1]);
            ls = _mm512_add_epi32(ls, l[i][j][1]);
          }
          wide[j] = widen_pairs(_mm512_add_epi32(_mm512_slli_epi32(hs, 8), ls));
        }
        for (std::size_t j = 0; j < NP; j += 4)
          exact[i][j / 4] = _mm256_add_epi64(exact[i][j / 4], lane_totals4(wide[j], wide[j + 1], wide[j + 2], wide[j + 3]));
      }
    }
    if constexpr (N % 4 != 0) {
      // fewer than four vectors (a product of one vector takes this path row after row): scalar, which
      // measured faster there (512 × 1024 int8-row from cache, 61 vs 43 G weights/s with the vector one)
      for (std::size_t i = 0; i < R; ++i) {
        alignas(32) std::int64_t sums[NP];
        for (std::size_t j = 0; j < NP; j += 4) _mm256_store_si256(reinterpret_cast<__m256i*>(sums + j), exact[i][j / 4]);
        for (std::size_t j = 0; j < N; ++j) out[i * N + j] = finish_row_step<kTail>(v, r + i, sums[j] + a[j].corr_row, a[j]);
      }
    } else {
      for (std::size_t j = 0; j < N; j += 4) {
        // the four vectors' corrections and steps, through memory: built from scalars in registers
        // (_mm256_set_*), GCC 12 hoisted them above the block loop and spilled accumulators there
        alignas(32) std::int64_t corr[4];
        alignas(32) double step[4];
        for (std::size_t q = 0; q < 4; ++q) {
          corr[q] = a[j + q].corr_row;
          step[q] = a[j + q].blocks > 0 ? static_cast<double>(a[j + q].sx[0]) : 0.0;
        }
        const __m256i c = _mm256_load_si256(reinterpret_cast<const __m256i*>(corr));
        const __m256d st = _mm256_load_pd(step);
        for (std::size_t i = 0; i < R; ++i) finish_rows4(v, r + i, _mm256_add_epi64(exact[i][j / 4], c), st, out + i * N + j);
      }
      if (kTail && a[0].blocks * B < v.cols)
        for (std::size_t i = 0; i < R; ++i)
          for (std::size_t j = 0; j < N; ++j)
            out[i * N + j] = add_tail(out[i * N + j], v, r + i, v.row(r + i), a[j].blocks * B, v.cols, a[j].x);
    }
  }

  /// Row r · a for a `kRowStep` format from the exact Σ q·x16 over the full blocks: scaled once (in
  /// double) by a's step and the row's scale, plus the fp32 tail columns (products of fewer than four
  /// vectors; `finish_rows4` does four at a time with the same arithmetic).
  template <bool kTail = true>
  [[gnu::always_inline]] static float finish_row_step(const QuantizedView<F>& v, std::size_t r, std::int64_t qx,
                                                      const Activation& a) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    const double step = a.blocks > 0 ? static_cast<double>(a.sx[0]) : 0.0;
    const float s = to_float(v.row_scales(r)[0]);
    float total = static_cast<float>(static_cast<double>(qx) * step * static_cast<double>(s));
    if (kTail && a.blocks * B < v.cols) total = add_tail(total, v, r, v.row(r), a.blocks * B, v.cols, a.x);
    return total;
  }

  /// Row r · a[q] for four vectors of a `kRowStep` format, from their exact Σ q·x16 over the full
  /// blocks (lane q of `qx`: Σ u·x16 + a[q].corr_row) and their fixed-point steps (lane q of `step`:
  /// a[q]'s, 0 when the row has no full block), into out[0 … 4), without the fp32 tail columns:
  ///   out[q] = fp32(double(qx_q) · step_q · double(row scale))
  /// (the two products in double in this order, one rounding to fp32): `finish_row_step`'s arithmetic,
  /// four vectors per instruction, each lane's operations those of the scalar expression, so the same
  /// bits. `amx_finish_row` (quant/amx.hpp) is its 16-vector twin for the AMX tiles.
  [[gnu::always_inline]] static void finish_rows4(const QuantizedView<F>& v, std::size_t r, __m256i qx, __m256d step,
                                                  float* out) noexcept {
    const __m256d s = _mm256_set1_pd(static_cast<double>(to_float(v.row_scales(r)[0])));
    _mm_storeu_ps(out, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_mul_pd(_mm256_cvtepi64_pd(qx), step), s)));
  }

  /// True when v's rows have fp32 tail columns (cols not a multiple of 128): `dot_rows_tails` then
  /// takes them 16 rows at a time.
  [[nodiscard]] static bool has_tail(const QuantizedView<F>& v) noexcept { return v.cols % VnniActivation::kBlock != 0; }

  /// Rows [r0, r1) × N vectors a[0 … N) into y (row r of vector j at y[j · stride + r]): `dot_n<N>`
  /// row after row, bit for bit. When the rows have fp32 tail columns (cols not a multiple of 128),
  /// 16 rows at a time take their tails together, vector by vector: the full blocks' part of each
  /// (row, vector) first (the kernels with kTail = false, rows in pairs where the format has
  /// `dot2_n`, each weight loaded once for all N), then each vector's tails of the 16 rows by
  /// `tails16`. Why: a horizontal reduction and scalar scaling per (row, vector) made rows of 64
  /// columns, all tail, 3–5 × fp32's time (stories260K's 64 × 64 and 512 × 64, one vector;
  /// llama2.c's stories260K_q80.bin, int8 in groups of 32, decoded at 1.7–1.9 × its dequantized fp32
  /// time until its groups took this path too, 2026-12-07).
  template <std::size_t N>
  static void dot_rows_tails(const QuantizedView<F>& v, std::size_t r0, std::size_t r1, const Activation* a, float* y,
                             std::size_t stride) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    std::size_t r = r0;
    if (a[0].blocks * B < v.cols) {
      for (; r + 16 <= r1; r += 16) {
        alignas(64) float head[N][16];  // the full blocks' part of each (row, vector)
        if (a[0].blocks == 0) {  // none (cols < 128, all tail): what the calls below give then, without them
          for (std::size_t i = 0; i < 16; ++i) {
            float h = 0.0f;
            if constexpr (kRowStep) h = 0.0f * to_float(v.row_scales(r + i)[0]);  // 0 · step 0 · s: s's sign
            for (std::size_t j = 0; j < N; ++j) head[j][i] = h;
          }
        } else if constexpr (kSmallGroups) {
          for (std::size_t i = 0; i < 16; ++i) {
            float out[N];
            dot_n_small_groups<N, false>(v, r + i, a, out);
            for (std::size_t j = 0; j < N; ++j) head[j][i] = out[j];
          }
        } else {
          // rows in pairs for four vectors (as `dot2_n` for gemv_batch's full groups), else one by one
          // (one row keeps two accumulators per plane: int8-row at 288 columns ran 1.15 × slower in pairs)
          constexpr std::size_t R = N == 4 ? 2 : 1;
          for (std::size_t i = 0; i < 16; i += R) {
            float out[R * N];
            if constexpr (kRowStep) dot_rows<R, N, false>(v, r + i, a, out);
            else if constexpr (kAmxBlocks) dot_rows_blocks<R, N, false>(v, r + i, a, out);
            else dot_rows_lanes<R, N, false>(v, r + i, a, out);
            for (std::size_t k = 0; k < R; ++k)
              for (std::size_t j = 0; j < N; ++j) head[j][i + k] = out[k * N + j];
          }
        }
        for (std::size_t j = 0; j < N; ++j) _mm512_storeu_ps(y + j * stride + r, tails16(v, r, a[j], head[j]));
      }
    }
    detail::dot_n_rows<RowKernel, N>(v, r, r1, a, y, stride);
  }

  /// Rows r … r + 15 · a: head[i] (their full blocks' part) plus their fp32 tail columns, as
  /// `add_tail` adds them row by row, 16 rows at once: int8 codes through `avx512::tail8_rows16` (each
  /// x chunk loaded once) and their scales by one fused multiply-add (int8 in groups of 16 / 32 / 64:
  /// one of each per group, as `dot_n_small_groups` adds them group by group), 4-bit codes each into
  /// its lane accumulator (`tail4_lanes`) — then one transposing reduction (`reduce16_rows`, the lane
  /// pairs of `reduce16`) instead of a horizontal one per row.
  [[gnu::always_inline]] static __m512 tails16(const QuantizedView<F>& v, std::size_t r, const Activation& a,
                                               const float* head) noexcept {
    const std::size_t c0 = a.blocks * VnniActivation::kBlock;
    if constexpr (kSmallGroups) {
      __m512 out = _mm512_load_ps(head);
      const auto* row = reinterpret_cast<const std::int8_t*>(v.row(r));
      for (std::size_t c = c0; c < v.cols; c += kGroup) {
        const std::size_t e = c + kGroup < v.cols ? c + kGroup : v.cols;
        alignas(64) float scale[16];
        for (std::size_t i = 0; i < 16; ++i) scale[i] = v.scale(r + i, c);
        out = _mm512_fmadd_ps(_mm512_load_ps(scale), avx512::tail8_rows16(row, v.row_bytes, c, e, a.x), out);
      }
      return out;
    } else if constexpr (F::kCodeBits == 8) {
      alignas(64) float scale[16];
      for (std::size_t i = 0; i < 16; ++i) scale[i] = v.scale(r + i, c0);
      const __m512 tails =
          avx512::tail8_rows16(reinterpret_cast<const std::int8_t*>(v.row(r)), v.row_bytes, c0, v.cols, a.x);
      return _mm512_fmadd_ps(_mm512_load_ps(scale), tails, _mm512_load_ps(head));  // add_tail's fma, 16 at once
    } else {
      const __m512 base = avx512::levels<F>();
      __m512 lanes[16];
      for (std::size_t i = 0; i < 16; ++i) {
        const float s = v.scale(r + i, c0);
        lanes[i] = avx512::tail4_lanes(v.row(r + i), c0, v.cols, a.x, base, [&](std::size_t) { return s; });
      }
      return _mm512_add_ps(_mm512_load_ps(head), avx512::reduce16_rows(lanes));  // add_tail's total + tail
    }
  }

  /// Rows r and r + 1 against a[j] for j < N: out[j] and out[N + j] (every format but int8 in groups
  /// of 32 / 64; the same results as two `dot_n` calls, with each vector's activation loads shared by
  /// both rows).
  template <std::size_t N>
    requires(kRowStep || !kSmallGroups)
  static void dot2_n(const QuantizedView<F>& v, std::size_t r, const Activation* a, float* out) noexcept {
    if constexpr (kRowStep) dot_rows<2, N>(v, r, a, out);
    else if constexpr (kAmxBlocks) dot_rows_blocks<2, N>(v, r, a, out);
    else dot_rows_lanes<2, N>(v, r, a, out);
  }

  /// out[j] = row r · a[j] for j < N (see the file comment). O(N · cols). Always inlined (with what it
  /// calls): quant/gemv.hpp calls it row after row in one loop for a single vector.
  template <std::size_t N>
  [[gnu::always_inline]] static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                           float* out) noexcept {
    if constexpr (kRowStep) dot_rows<1, N>(v, r, a, out);
    else if constexpr (kSmallGroups) dot_n_small_groups<N>(v, r, a, out);
    else if constexpr (kAmxBlocks) dot_rows_blocks<1, N>(v, r, a, out);
    else dot_rows_lanes<1, N>(v, r, a, out);
  }

  /// The exact Σ q·x16 of one 128-column block b of a row (unsigned codes u0, u1 from `load_block`)
  /// against vector a, in 16 int32 lanes: Σ u·hi shifted by 8 plus Σ u·lo plus the lanes' offset
  /// correction (|Σ| ≤ 128 · 128 · 16383 < 2³¹, so every step is exact).
  [[gnu::always_inline]] static __m512i block_lanes(__m512i u0, __m512i u1, const Activation& a, std::size_t b) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    __m512i dh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, _mm512_load_si512(a.hi + b * B));
    dh = _mm512_dpbusd_epi32(dh, u1, _mm512_load_si512(a.hi + b * B + 64));
    __m512i dl = _mm512_dpbusd_epi32(_mm512_load_si512(a.corr + b * 16), u0, _mm512_load_si512(a.lo + b * B));
    dl = _mm512_dpbusd_epi32(dl, u1, _mm512_load_si512(a.lo + b * B + 64));
    return _mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl);
  }

  /// `dot_n` (R = 1) and `dot2_n` (R = 2) for formats with groups of 128 columns or more, where the
  /// AMX tiles are compiled. The definition of a (row, vector) result, which the tiles compute too:
  ///  1. per 128-column block b the exact integer S_b = Σ q·x16 (|S_b| ≤ 128 · 8 · 16383 < 2²⁴ for
  ///     4-bit codes, so float(S_b) is exact; for 8-bit codes one rounding);
  ///  2. 4 fp32 accumulators from +0, block b feeding accumulator b mod 4 in block order:
  ///     acc_{b mod 4} ← fma(float(S_b), fl(w_b · sx_b), acc_{b mod 4}) with w_b the block's weight
  ///     scale and sx_b the vector's step;
  ///  3. their total (acc_0 + acc_2) + (acc_1 + acc_3) (`sum_accumulators4`), plus the fp32 tail columns.
  /// The AMX tiles (quant/amx.hpp `amx_block_rows`) form S_b as a tile element and then the same steps,
  /// so every path gives the same bits (batch invariance).
  /// How: a row is taken in spans of 16 blocks; the span's 16 lane vectors are totalled by a
  /// transposing tree (15 adds and 30 shuffles give one vector of the 16 block sums, where one
  /// horizontal sum per block would take ~8 instructions); the 4 accumulators are one 128-bit vector,
  /// and a span costs one conversion, one multiply and four 128-bit multiply-adds (lanes past the row's
  /// blocks hold S = 0 and w·sx = 0, and fma(0, 0, a) = a: no accumulator is ever −0). Each row's
  /// codes stream in order; with R = 2 each vector's planes are read once for both rows. For one row
  /// and one or two vectors (the products of 1 and 2 vectors; more take the tiles) the last, partial
  /// span's block count is a template constant (`with_constant`): with a run-time count GCC 12 kept
  /// the quads in memory and tested every block, and a 7-block row (896 columns) cost 3.6 ns per block
  /// from L2 against 3.2–3.3 with it (one thread, n = 1; n = 2 6.9 → 5.7). The other (R, N) keep the
  /// run-time count: 15 more span bodies each took gemv_test.cpp's compile from 30 s to 53 s.
  /// O(R · N · cols).
  /// (Four accumulators, not one chain or 16: one chain costs a scalar multiply-add per block here,
  /// 16 cost the tiles a 16 KB state per vector group; 4 are cheap on both sides.)
  /// With kTail = false the fp32 tail columns are left out (`dot_rows_tails`).
  template <std::size_t R, std::size_t N, bool kTail = true>
  [[gnu::always_inline]] static void dot_rows_blocks(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                     float* out) noexcept {
    constexpr std::size_t kSpan = 16;  // blocks per span: one lane (accumulator) each
    const std::size_t blocks = a[0].blocks;
    __m128 acc[R][N];  // the 4 accumulators of each (row, vector)
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < N; ++j) acc[i][j] = _mm_setzero_ps();
    // one span of nb ≤ 16 blocks from b0, its blocks in Q quads (Q = 1, 2 or 4: the tree's levels over
    // empty quads are skipped); nb a std::size_t or a std::integral_constant (then every test below is
    // a constant and the quads stay in registers)
    auto span = [&]<std::size_t Q, class Count>(std::size_t b0, Count nb) {
      const auto live = static_cast<__mmask16>(nb == kSpan ? 0xFFFFu : (1u << nb) - 1u);
#pragma GCC unroll 2
      for (std::size_t i = 0; i < R; ++i) {
        const __m512 w = span_scales(v, r + i, b0, live);
        __m512i quad[N][4];  // after two tree levels: blocks 4q … 4q + 3, one per 128-bit lane group
#pragma GCC unroll 4
        for (std::size_t q = 0; q < Q; ++q) {
          __m512i d[N][4];
#pragma GCC unroll 4
          for (std::size_t k = 0; k < 4; ++k) {
            if (4 * q + k < nb) {
              __m512i u0, u1;  // the block's weights, decoded once for the N vectors
              load_block(v, v.row(r + i), b0 + 4 * q + k, u0, u1);
              for (std::size_t j = 0; j < N; ++j) d[j][k] = block_lanes(u0, u1, a[j], b0 + 4 * q + k);
            } else {
              for (std::size_t j = 0; j < N; ++j) d[j][k] = _mm512_setzero_si512();
            }
          }
          for (std::size_t j = 0; j < N; ++j) quad[j][q] = tree_quad(d[j]);
        }
        for (std::size_t j = 0; j < N; ++j) {
          const __m512 sf = _mm512_cvtepi32_ps(tree_final<Q>(quad[j]));  // lane k: float(S_{b0+k})
          const __m512 m = _mm512_mul_ps(w, _mm512_maskz_loadu_ps(live, a[j].sx + b0));
          // blocks b0 + 4q … b0 + 4q + 3 into accumulators 0 … 3, q in order (b0 is a multiple of 4)
          acc[i][j] = _mm_fmadd_ps(_mm512_castps512_ps128(sf), _mm512_castps512_ps128(m), acc[i][j]);
          if constexpr (Q > 1) acc[i][j] = _mm_fmadd_ps(extract128(sf, 1), extract128(m, 1), acc[i][j]);
          if constexpr (Q > 2) acc[i][j] = _mm_fmadd_ps(extract128(sf, 2), extract128(m, 2), acc[i][j]);
          if constexpr (Q > 2) acc[i][j] = _mm_fmadd_ps(extract128(sf, 3), extract128(m, 3), acc[i][j]);
        }
      }
    };
    std::size_t b0 = 0;
    for (; b0 + kSpan <= blocks; b0 += kSpan) span.template operator()<4>(b0, std::integral_constant<std::size_t, kSpan>{});
    const std::size_t rest = blocks - b0;  // the last, partial span
    if constexpr (R == 1 && N <= 2) {
      // the paths of products of one and two vectors: the count a constant too (one per matrix width,
      // so the branch predicts perfectly); the other (R, N) take it at run time, which costs them
      // speed but keeps the code (and build time) of 15 span sizes out of them
      with_constant<1, kSpan>(rest, [&]<std::size_t NB>() {
        span.template operator()<(NB <= 4 ? 1 : (NB <= 8 ? 2 : 4))>(b0, std::integral_constant<std::size_t, NB>{});
      });
    } else if (rest > 8) {
      span.template operator()<4>(b0, rest);
    } else if (rest > 4) {
      span.template operator()<2>(b0, rest);
    } else if (rest > 0) {
      span.template operator()<1>(b0, rest);
    }
    const std::size_t tail = blocks * VnniActivation::kBlock;  // the rest of the row (one scale)
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const float total = sum_accumulators4(acc[i][j]);
        out[i * N + j] = kTail && tail < v.cols ? add_tail(total, v, r + i, v.row(r + i), tail, v.cols, a[j].x) : total;
      }
  }

  /// f.template operator()<K>() for the K in [Lo, Hi) equal to k (nothing if there is none): a
  /// run-time count made a constant, so the loops f runs unroll fully.
  template <std::size_t Lo, std::size_t Hi, class Fn>
  [[gnu::always_inline]] static void with_constant(std::size_t k, Fn&& f) {
    if constexpr (Lo < Hi) {
      if (k == Lo) f.template operator()<Lo>();
      else with_constant<Lo + 1, Hi>(k, f);
    }
  }

  /// The total of a (row, vector)'s 4 block accumulators in the fixed order of `sum_accumulators4`
  /// (quant/amx.hpp): (a0 + a2) + (a1 + a3), which the tiles' path uses too.
  [[gnu::always_inline]] static float sum_accumulators4(__m128 a) noexcept {
    const __m128 t2 = _mm_add_ps(a, _mm_movehl_ps(a, a));  // a0 + a2, a1 + a3
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_movehdup_ps(t2)));
  }

  /// 128-bit lane group q (1 … 3) of v.
  [[gnu::always_inline]] static __m128 extract128(__m512 v, std::size_t q) noexcept {
    switch (q) {
      case 1: return _mm512_extractf32x4_ps(v, 1);
      case 2: return _mm512_extractf32x4_ps(v, 2);
      default: return _mm512_extractf32x4_ps(v, 3);
    }
  }

  /// The weight scales of blocks b0 … b0 + 15 of row r (lanes past `live` zero), as fp32: 16 fp16
  /// scales by one `vcvtph2ps` when each block is its own group.
  [[gnu::always_inline]] static __m512 span_scales(const QuantizedView<F>& v, std::size_t r, std::size_t b0,
                                                   __mmask16 live) noexcept {
    constexpr std::size_t kBlocksPerGroup = kGroup / VnniActivation::kBlock;
    const auto* sc = v.row_scales(r);
    if constexpr (kBlocksPerGroup == 1 && std::is_same_v<typename F::scale_type, f16>) {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, sc + b0));
    } else if constexpr (kBlocksPerGroup == 1 && std::is_same_v<typename F::scale_type, float>) {
      return _mm512_maskz_loadu_ps(live, sc + b0);
    } else {
      alignas(64) float t[16] = {};
      for (std::size_t k = 0; k < 16; ++k)
        if (live >> k & 1u) t[k] = block_scale(v, r, b0 + k);
      return _mm512_load_ps(t);
    }
  }

  /// One 128-column block b of `dot_rows_lanes`: each row's weights loaded once for the N vectors,
  /// each vector's activation planes once for the R rows; acc[i][j] += the exact int32 lane sums,
  /// converted, times mult[i][j][k]. A function, always inlined, not a lambda: GCC 12 left the lambda
  /// an out-of-line call in some translation units (bench_quant at c3b1fbf, bench_batching), passing
  /// the accumulators through memory; no speed difference was measured there (2026-12-03), but the
  /// kernel's code should not depend on the inliner's budget in the including file.
  template <std::size_t R, std::size_t N>
  [[gnu::always_inline]] static void rows_block(const QuantizedView<F>& v, const std::uint8_t* const* rows, std::size_t b,
                                                const Activation* a, const float (*mult)[N][16], std::size_t k,
                                                __m512 (*acc)[N]) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    __m512i u[R][2];  // each row's 128 weights of the block as unsigned bytes, loaded once for all N vectors
    for (std::size_t i = 0; i < R; ++i) load_block(v, rows[i], b, u[i][0], u[i][1]);
    for (std::size_t j = 0; j < N; ++j) {
      __m512i hi0 = _mm512_load_si512(a[j].hi + b * B), hi1 = _mm512_load_si512(a[j].hi + b * B + 64);
      __m512i lo0 = _mm512_load_si512(a[j].lo + b * B), lo1 = _mm512_load_si512(a[j].lo + b * B + 64);
      __m512i corr = _mm512_load_si512(a[j].corr + b * 16);
      if constexpr (R > 1) {  // one load each, shared by the rows (simd::pin says why)
        simd::pin(hi0);
        simd::pin(hi1);
        simd::pin(lo0);
        simd::pin(lo1);
        simd::pin(corr);
      }
      for (std::size_t i = 0; i < R; ++i) {
        __m512i dh = _mm512_setzero_si512(), dl = corr;
        if constexpr (R > 1) {  // simd::dpbusd: 3-18 % faster for two rows at n = 16; no gain for one
          simd::dpbusd(dh, u[i][0], hi0);
          simd::dpbusd(dh, u[i][1], hi1);
          simd::dpbusd(dl, u[i][0], lo0);
          simd::dpbusd(dl, u[i][1], lo1);
        } else {
          dh = _mm512_dpbusd_epi32(dh, u[i][0], hi0);
          dh = _mm512_dpbusd_epi32(dh, u[i][1], hi1);
          dl = _mm512_dpbusd_epi32(dl, u[i][0], lo0);
          dl = _mm512_dpbusd_epi32(dl, u[i][1], lo1);
        }
        // exact integer Σ q·x16 per lane (the offset removed by corr), then one fp32 multiply-add
        const __m512i di = _mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), _mm512_set1_ps(mult[i][j][k]), acc[i][j]);
      }
    }
  }

  /// `dot_n` (R = 1) and `dot2_n` (R = 2) for formats with groups of 128 columns or more where the
  /// AMX tiles are not compiled (`kAmxBlocks` false): per block, row and vector the exact int32 lane
  /// sums, converted and multiplied by the block's multiplier (weight scale · the vector's step,
  /// formed 16 blocks at a time: one `vcvtph2ps` for 16 fp16 scales, one multiply per row and vector)
  /// into fp32 accumulators, even blocks into acc0 and odd ones into acc1. Each block's weights are loaded once for the N vectors, each vector's activation
  /// planes once for the R rows; every (row, vector) gets the same operations in the same order for
  /// every R and N (batch invariance). out[i·N + j] = row r + i · a[j]; with kTail = false without the
  /// fp32 tail columns (`dot_rows_tails`).
  template <std::size_t R, std::size_t N, bool kTail = true>
  [[gnu::always_inline]] static void dot_rows_lanes(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                    float* out) noexcept {
    using G = typename F::granularity;
    constexpr std::size_t B = VnniActivation::kBlock;
    constexpr std::size_t kBlocksPerGroup = G::kGroup / B;
    static_assert(kBlocksPerGroup >= 1, "per-row and per-tensor scales take dot_rows (kRowStep)");
    constexpr std::size_t kSpan = 16;
    const std::size_t blocks = a[0].blocks;
    const std::uint8_t* rows[R];
    for (std::size_t i = 0; i < R; ++i) rows[i] = v.row(r + i);
    __m512 acc0[R][N], acc1[R][N];
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < N; ++j) acc0[i][j] = acc1[i][j] = _mm512_setzero_ps();
    alignas(64) float mult[R][N][kSpan];  // [row][vector][block in the span]
    for (std::size_t b0 = 0; b0 < blocks; b0 += kSpan) {
      const std::size_t nb = blocks - b0 < kSpan ? blocks - b0 : kSpan;
      const auto m = static_cast<__mmask16>(nb == kSpan ? 0xFFFFu : (1u << nb) - 1u);
      for (std::size_t i = 0; i < R; ++i) {
        const __m512 sw = span_scales(v, r + i, b0, m);  // lane k: the weight scale of block b0 + k
        for (std::size_t j = 0; j < N; ++j)
          _mm512_store_ps(mult[i][j], _mm512_mul_ps(sw, _mm512_maskz_loadu_ps(m, a[j].sx + b0)));
      }
      std::size_t k = 0;  // b0 is even, so block b0 + k goes to acc0 when k is even
      for (; k + 2 <= nb; k += 2) {
        rows_block<R, N>(v, rows, b0 + k, a, mult, k, acc0);
        rows_block<R, N>(v, rows, b0 + k + 1, a, mult, k + 1, acc1);
      }
      if (k < nb) rows_block<R, N>(v, rows, b0 + k, a, mult, k, acc0);
    }
    const std::size_t tail = blocks * B;  // the rest of the row (one scale)
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        float total = avx512::reduce16(_mm512_add_ps(acc0[i][j], acc1[i][j]));
        if (kTail && tail < v.cols) total = add_tail(total, v, r + i, rows[i], tail, v.cols, a[j].x);
        out[i * N + j] = total;
      }
  }

  /// The weight scale of block b of row r (grouped formats), as fp32.
  [[gnu::always_inline]] static float block_scale(const QuantizedView<F>& v, std::size_t r, std::size_t b) noexcept {
    return to_float(v.row_scales(r)[b / (kGroup / VnniActivation::kBlock)]);
  }

  /// Two levels of the transposing tree: 4 vectors of 16 int32 lanes → one vector whose lane 4g + i
  /// holds a partial sum of d[i] (each 128-bit group g a quarter of every d[i]'s lanes).
  [[gnu::always_inline]] static __m512i tree_quad(const __m512i* d) noexcept {
    const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[0], d[1]), _mm512_unpackhi_epi32(d[0], d[1]));
    const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2], d[3]), _mm512_unpackhi_epi32(d[2], d[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
  }

  /// The last two levels: Q `tree_quad` results (of vectors 0–3, 4–7, 8–11, 12–15; Q = 1, 2 or 4, the
  /// missing ones zero) → lane i = the total of vector i (0 past 4·Q).
  template <std::size_t Q>
  [[gnu::always_inline]] static __m512i tree_final(const __m512i* q) noexcept {
    static_assert(Q == 1 || Q == 2 || Q == 4);
    const __m512i z = _mm512_setzero_si512();
    const __m512i q1 = Q >= 2 ? q[1] : z;
    const __m512i w0 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[0], q1, 0x88), _mm512_shuffle_i32x4(q[0], q1, 0xDD));
    __m512i w1 = z;
    if constexpr (Q == 4)
      w1 = _mm512_add_epi32(_mm512_shuffle_i32x4(q[2], q[3], 0x88), _mm512_shuffle_i32x4(q[2], q[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(w0, w1, 0x88), _mm512_shuffle_i32x4(w0, w1, 0xDD));
  }

  /// `dot_n` for int8 codes in groups of 16, 32 or 64 columns: per half block, the exact int32 lane sums
  /// scaled by the lanes' group scales times the block's step into fp32 accumulators; then the fp32
  /// tail columns group by group (left out with kTail = false: `dot_rows_tails` adds them 16 rows at once).
  template <std::size_t N, bool kTail = true>
    requires(kSmallGroups)
  [[gnu::always_inline]] static void dot_n_small_groups(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                        float* out) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t blocks = a[0].blocks;
    // One pointer per vector: `bind` lays a vector's planes, corrections and steps out one after the
    // other, so they sit at fixed distances from its high plane. Five pointers per vector (20 for
    // N = 4) did not fit the general registers and were spilled and reloaded in the block loop.
    const std::size_t lo_at = blocks * B, corr_at = 2 * blocks * B;  // bytes from hi
    const std::size_t corr_lo_at = corr_at + blocks * 64, sx_at = corr_at + 2 * blocks * 64;
    const std::int8_t* base[N];
    for (std::size_t j = 0; j < N; ++j) {
      base[j] = a[j].hi;
      BARATO_ASSERT(a[j].blocks == blocks && a[j].lo == base[j] + lo_at &&
                    reinterpret_cast<const std::int8_t*>(a[j].corr) == base[j] + corr_at &&
                    reinterpret_cast<const std::int8_t*>(a[j].corr_lo) == base[j] + corr_lo_at &&
                    reinterpret_cast<const std::int8_t*>(a[j].sx) == base[j] + sx_at);
    }
    __m512 acc0[N], acc1[N];
    for (std::size_t j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    for (std::size_t b = 0; b < blocks; ++b) {  // two 64-column halves, each with its own scale lanes
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (std::size_t half = 0; half < 2; ++half) {
        const std::size_t c0 = b * B + 64 * half;
        detail::prefetch_codes(v, row + c0);
        const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(row + c0), flip);
        __m512 sw;  // the weight scales of lane i (columns c0 + 4i … c0 + 4i + 3)
        if constexpr (kGroup == 64) {
          sw = _mm512_set1_ps(to_float(sc[c0 / 64]));
        } else if constexpr (kGroup == 16) {
          // the half's 4 scales (fp16: converted by one vcvtph2ps), scale g to lanes 4g … 4g + 3
          __m512 s4;
          if constexpr (std::is_same_v<typename F::scale_type, f16>) {
            long long quad = 0;  // the four fp16 scales' bits
            std::memcpy(&quad, sc + c0 / 16, sizeof quad);
            s4 = _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi64_si128(quad)));
          } else {
            static_assert(std::is_same_v<typename F::scale_type, float>, "16-column groups: fp16 or fp32 scales");
            s4 = _mm512_castps128_ps512(_mm_loadu_ps(sc + c0 / 16));
          }
          sw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), s4);
        } else if constexpr (std::is_same_v<typename F::scale_type, f16>) {
          // fp16 scales: the half's 2 scales converted by one vcvtph2ps, lanes 0–7 and 8–15
          int pair = 0;  // the two fp16 scales' bits
          std::memcpy(&pair, sc + c0 / 32, sizeof pair);
          const __m128i h2 = _mm_cvtsi32_si128(pair);
          sw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                     _mm512_cvtph_ps(_mm256_castsi128_si256(h2)));
        } else {
          sw = _mm512_mask_blend_ps(static_cast<__mmask16>(0xFF00), _mm512_set1_ps(to_float(sc[c0 / 32])),
                                    _mm512_set1_ps(to_float(sc[c0 / 32 + 1])));
        }
        for (std::size_t j = 0; j < N; ++j) {
          const std::int8_t* p = base[j];
          const float sx = *reinterpret_cast<const float*>(p + sx_at + 4 * b);
          const __m512i c_lo = _mm512_load_si512(p + corr_lo_at + 64 * b);
          const __m512i corr = half == 0 ? c_lo : _mm512_sub_epi32(_mm512_load_si512(p + corr_at + 64 * b), c_lo);
          const __m512i dh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_load_si512(p + c0));
          const __m512i dl = _mm512_dpbusd_epi32(corr, u, _mm512_load_si512(p + lo_at + c0));
          const __m512i di = _mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl);
          const __m512 sv = kGroup == 64 ? _mm512_set1_ps(to_float(sc[c0 / 64]) * sx) : _mm512_mul_ps(sw, _mm512_set1_ps(sx));
          if (half == 1) acc1[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sv, acc1[j]);
          else acc0[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), sv, acc0[j]);
        }
      }
    }
    const std::size_t tail = blocks * B;  // the rest of the row, group by group
    for (std::size_t j = 0; j < N; ++j) {
      float total = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j], acc1[j]));
      if constexpr (kTail) {
        for (std::size_t c = tail; c < v.cols; c += kGroup) {
          const std::size_t e = c + kGroup < v.cols ? c + kGroup : v.cols;
          total = add_tail(total, v, r, row, c, e, a[j].x);
        }
      }
      out[j] = total;
    }
  }

  /// Row r · a (`dot_n<1>`).
  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& a) noexcept {
    float out;
    dot_n<1>(v, r, &a, &out);
    return out;
  }

  /// Where block column i sits in the prepared planes (kernel order: natural for 8-bit codes, the
  /// nibble order of the 4-bit layout). For the tests (the tiles take the planes in this order as
  /// they are).
  static constexpr std::size_t store_position(std::size_t i) noexcept { return slot(i); }

 private:
  /// Points a's planes, corrections and steps into `scratch` (the layout `activation_bytes` counts).
  static void bind(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    constexpr std::size_t B = VnniActivation::kBlock;
    a.x = x;
    a.cols = cols;
    a.blocks = cols / B;
    a.hi = reinterpret_cast<std::int8_t*>(scratch);
    a.lo = a.hi + a.blocks * B;
    a.corr = reinterpret_cast<std::int32_t*>(a.lo + a.blocks * B);
    a.corr_lo = kSmallGroups ? a.corr + a.blocks * 16 : nullptr;
    a.sx = reinterpret_cast<float*>(a.corr + (kSmallGroups ? 2 : 1) * a.blocks * 16);
  }

  /// max |x[i]| over i < n (a multiple of 16): exact, so the same as `fixed_point_step`'s scalar loop.
  static float max_abs(const float* x, std::size_t n) noexcept {
    __m512 m = _mm512_setzero_ps();
    for (std::size_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    return _mm512_reduce_max_ps(m);
  }

  /// Position of block column i in the planes: natural for 8-bit codes; for the 4-bit layout the
  /// order of the nibbles in a 64-byte chunk (low nibbles first, then high nibbles; byte 4j + m ↔ 32m + j).
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
