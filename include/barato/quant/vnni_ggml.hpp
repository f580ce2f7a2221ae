#pragma once
/// \file
/// The AVX-512 VNNI row kernel for ggml's Q8_0 and Q4_0 (quant/ggml.hpp), computing ggml's product
/// (quant/ggml_dot.hpp): the activation is quantized once per call to int8 Q8_0 blocks of 32 columns
/// (`prepare`), each block's sum Σ integer(w)·q is exact in int32, and it is scaled by
/// fp32(weight scale · activation step). One `vpdpbusd` multiplies 64 weight bytes by 64 activation
/// bytes, so 128 columns cost two for Q4_0 and for Q8_0 — half of what the 15-bit kernel of the other
/// integer formats (quant/vnni.hpp) spends on its two activation planes.
///
/// Weights enter `vpdpbusd` as unsigned bytes: Q4_0's nibbles as stored (u = q + 8), Q8_0's codes with
/// the sign bit flipped (u = q + 128); the offset is removed exactly by adding −offset · Σ q over the
/// same columns (precomputed by `prepare`). Lane i of a 64-byte load covers bytes 4i…4i+3, which lie
/// in one 32-column block: for Q4_0 a load holds 4 blocks of 16 bytes (lanes 4g…4g+3 are block g; low
/// nibbles columns 32g + j, high nibbles 32g + 16 + j, so `prepare` stores each 128-column chunk of
/// the codes in that order), for Q8_0 2 blocks (lanes 8g…8g+7).
///
/// Scaling. Q8_0: each lane's int32 (started from its −offset · Σ q) is converted and multiplied by
/// its block's weight scale (the fp16 scales converted by one `vcvtph2ps` and spread over the lanes)
/// times its activation step. Q4_0 takes chunks in groups of 4 (16 blocks, one `vcvtph2ps` of their
/// scales): the 4 lane sums of each block are added in int32 by unpack-and-add steps across the
/// group's 4 chunks (`block_sums`: lane 4g + c holds block g of chunk c, exact, plus that block's
/// −8 · Σ q), so one conversion, one multiply and one FMA serve 4 chunks instead of 1 (one thread,
/// 2026-12-03: 896 × 4864 batches of n = 16 650 → 445 µs, n = 64 2.65 → 1.77 ms; 4864 × 896 n = 64
/// 3.09 → 2.63 ms; n = 1, and the streamed 0.5B pass, unchanged within this host's noise).
/// Columns past the last full chunk (128 for Q4_0, 64 for Q8_0) are summed per 32-column block by the
/// scalar code of quant/ggml_dot.hpp.
///
/// Result: the integer block sums are ggml's; the fp32 sum of the scaled sums differs from the scalar
/// reference only by summation order. Error against Ŵx: the activation rounding of
/// quant/ggml_dot.hpp times |Ŵ|, plus fp32 summation. `dot_n<N>` loads and decodes each 64-byte chunk
/// of weights once for N vectors; every vector has its own accumulators and the instruction sequence
/// of `dot_n<1>`, so a vector's result is the same for every N (batch invariance).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "barato/quant/format.hpp"
#include "barato/quant/ggml_dot.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/quant/scratch.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

namespace barato::quant {

/// An activation quantized by ggml's Q8_0 rule, in the kernel's order: a view of the scratch
/// `prepare` filled (no ownership; trivially copyable).
struct GgmlActivation {
  std::int8_t* q = nullptr;      // [cols] codes: full chunks in kernel order, then the tail by column
  std::int32_t* corr = nullptr;  // [lane vectors, 16] −offset · Σ q over each lane's columns (Q8_0) or block (Q4_0)
  float* lane_step = nullptr;    // [lane vectors, 16] the activation step D of each lane's block
  float* step = nullptr;         // [⌈cols / 32⌉] D of each 32-column block
  std::size_t cols = 0, chunks = 0;
};

template <class Arch, Format F>
  requires(kUseVnniGgml<Arch, F>)
struct RowKernel<Arch, F> {
  static constexpr const char* kName = "avx512-vnni-q8";
  using Activation = GgmlActivation;
  static constexpr bool kQ4 = F::kCodeBits == 4;
  /// Columns per 64-byte load of codes.
  static constexpr std::size_t kChunk = kQ4 ? 128 : 64;
  /// Blocks per chunk and int32 lanes per block.
  static constexpr std::size_t kBlocksPerChunk = kChunk / kGgmlBlock, kLanesPerBlock = 16 / kBlocksPerChunk;
  /// Unsigned offset of the weight bytes vpdpbusd sees.
  static constexpr int kOffset = kQ4 ? F::kOffset : 128;

  /// Chunks that share one 16-lane vector of `corr` and `lane_step`: Q8_0 one (lane i: bytes 4i…4i+3
  /// of the chunk); Q4_0 a group of four, whose integer sums `dot_n` adds up per block (lane 4g + c:
  /// block g of the group's chunk c).
  static constexpr std::size_t kGroup = kQ4 ? 4 : 1;
  /// 16-lane vectors of `corr` (and of `lane_step`) for `chunks` full chunks.
  static constexpr std::size_t lane_vectors(std::size_t chunks) noexcept { return (chunks + kGroup - 1) / kGroup; }
  /// The 32-column block of the row that lane `lane` of lane vector t stands for (Q4_0: lanes of chunks
  /// past the last full one stand for none and hold 0).
  static constexpr std::size_t lane_block(std::size_t t, std::size_t lane) noexcept {
    if constexpr (kQ4) return (kGroup * t + lane % 4) * kBlocksPerChunk + lane / 4;
    else return t * kBlocksPerChunk + lane / kLanesPerBlock;
  }

  /// Scratch bytes of one prepared vector of `cols` columns (a multiple of 64).
  static constexpr std::size_t activation_bytes(std::size_t cols) noexcept {
    const std::size_t chunks = cols / kChunk, blocks = (cols + kGgmlBlock - 1) / kGgmlBlock;
    return scratch_round(cols) + 2 * lane_vectors(chunks) * 64 + scratch_round(blocks * sizeof(float));
  }

  /// ggml's Q8_0 codes of x [cols] into `scratch` (64-byte aligned, activation_bytes(cols) bytes): the
  /// full chunks vectorized (the same roundings as `ggml_q8_block`: |x|'s maximum, x · id rounded to
  /// nearest even), the tail by `ggml_q8_block`. O(cols).
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    a.cols = cols;
    a.chunks = cols / kChunk;
    a.q = reinterpret_cast<std::int8_t*>(scratch);
    a.corr = reinterpret_cast<std::int32_t*>(scratch + scratch_round(cols));
    const std::size_t lanes = lane_vectors(a.chunks);
    a.lane_step = reinterpret_cast<float*>(a.corr + lanes * 16);
    a.step = a.lane_step + lanes * 16;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512i ones = _mm512_set1_epi8(1);
    if (lanes > 0) _mm512_store_ps(a.lane_step + (lanes - 1) * 16, _mm512_setzero_ps());  // Q4_0: a short last group
    __m512i part[kGroup];  // Q4_0: the lane sums Σ q of the group's chunks so far
    for (std::size_t k = 0; k < a.chunks; ++k) {
      std::int8_t* q = a.q + k * kChunk;
      for (std::size_t g = 0; g < kBlocksPerChunk; ++g) {
        const float* xb = x + k * kChunk + kGgmlBlock * g;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const float D = ggml_q8_step(amax);
        const __m512 vid = _mm512_set1_ps(id);
        constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), kNearest)));
        const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), kNearest)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + slot(g, 0)), q0);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + slot(g, 16)), q1);
        a.step[k * kBlocksPerChunk + g] = D;
        if constexpr (kQ4) a.lane_step[k / kGroup * 16 + 4 * g + k % kGroup] = D;
        else for (std::size_t i = 0; i < kLanesPerBlock; ++i) a.lane_step[k * 16 + g * kLanesPerBlock + i] = D;
      }
      // Σ q of each lane's columns: bytes 4i…4i+3 of each 64-byte plane
      __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(q));
      if constexpr (kQ4) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(q + 64));
      part[k % kGroup] = sum;
      if (k % kGroup == kGroup - 1 || k + 1 == a.chunks) {  // −offset · Σ q per lane (Q8_0) or per block (Q4_0)
        if constexpr (kQ4) {
          for (std::size_t c = k % kGroup + 1; c < kGroup; ++c) part[c] = _mm512_setzero_si512();
          sum = block_sums(part[0], part[1], part[2], part[3]);
        }
        _mm512_store_si512(a.corr + k / kGroup * 16, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-kOffset)));
      }
    }
    for (std::size_t c = a.chunks * kChunk, b = c / kGgmlBlock; c < cols; c += kGgmlBlock, ++b)
      a.step[b] = ggml_q8_block(x + c, cols - c < kGgmlBlock ? cols - c : kGgmlBlock, a.q + c);
  }

  /// Q4_0: the 4-lane sums of each 128-bit lane of four chunks' lane sums A, B, C, D, as lane 4g + c
  /// (g the 128-bit lane, c = 0…3 for A…D): each block's exact int32 sum, in a group's lane order.
  [[gnu::always_inline]] static __m512i block_sums(__m512i A, __m512i B, __m512i C, __m512i D) noexcept {
    const __m512i ab = pair_sums(A, B), cd = pair_sums(C, D);
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  }
  /// (x0 + x2, y0 + y2, x1 + x3, y1 + y3) in every 128-bit lane: the first half of `block_sums`.
  [[gnu::always_inline]] static __m512i pair_sums(__m512i x, __m512i y) noexcept {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
  }

  /// Q4_0 chunk k of `row` as unsigned bytes for vpdpbusd: low nibbles (columns 32g + j of the
  /// chunk's block g), high nibbles (columns 32g + 16 + j).
  [[gnu::always_inline]] static void q4_codes(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t k,
                                              __m512i& u0, __m512i& u1) noexcept {
    const std::uint8_t* w = row + k * 64;
    detail::prefetch_codes(v, w);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    const __m512i bytes = _mm512_loadu_si512(w);
    u0 = _mm512_and_si512(bytes, nib);
    u1 = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nib);
  }
  /// The 16 int32 lane sums of Q4_0 chunk k (codes u0, u1) with vector a's codes.
  [[gnu::always_inline]] static __m512i q4_isum(const Activation& a, std::size_t k, __m512i u0, __m512i u1) noexcept {
    const std::int8_t* q = a.q + k * kChunk;
    const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, _mm512_load_si512(q));
    return _mm512_dpbusd_epi32(d, u1, _mm512_load_si512(q + 64));
  }
  /// Q4_0: the fp16 weight scales of the 4 · m blocks from chunk k on (the other lanes 0) in fp32, in
  /// block order.
  [[gnu::always_inline]] static __m512 q4_scales(const typename F::scale_type* sc, std::size_t k, unsigned m) noexcept {
    const auto* p = sc + k * kBlocksPerChunk;
    switch (m) {
      case 4: return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      case 3: return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)), 1));
      case 2: return _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
      default: return _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
  }
  /// Q4_0: the group of M chunks k … k + M − 1 (lane vector t, weight scales s16 in block order; the
  /// lanes of missing chunks 0) times each of the N vectors, added to acc[j] (see `dot_n`).
  template <std::size_t N, std::size_t M>
  [[gnu::always_inline]] static void q4_group(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t k,
                                              std::size_t t, __m512 s16, const Activation* a, __m512* acc) noexcept {
    const __m512i zero = _mm512_setzero_si512();
    __m512i p01[N], p23[N], u0, u1;  // pair_sums of chunks 0, 1 and of chunks 2, 3
    q4_codes(v, row, k, u0, u1);
    for (std::size_t j = 0; j < N; ++j) p01[j] = q4_isum(a[j], k, u0, u1);
    if constexpr (M > 1) q4_codes(v, row, k + 1, u0, u1);
    for (std::size_t j = 0; j < N; ++j) p01[j] = pair_sums(p01[j], M > 1 ? q4_isum(a[j], k + 1, u0, u1) : zero);
    if constexpr (M > 2) q4_codes(v, row, k + 2, u0, u1);
    for (std::size_t j = 0; j < N; ++j) p23[j] = M > 2 ? q4_isum(a[j], k + 2, u0, u1) : zero;
    if constexpr (M > 3) q4_codes(v, row, k + 3, u0, u1);
    for (std::size_t j = 0; j < N; ++j) p23[j] = pair_sums(p23[j], M > 3 ? q4_isum(a[j], k + 3, u0, u1) : zero);
    // lane 4g + c takes the scale of the group's block 4c + g
    const __m512 sw = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s16);
    for (std::size_t j = 0; j < N; ++j) {
      const __m512i sums = _mm512_add_epi32(_mm512_unpacklo_epi64(p01[j], p23[j]), _mm512_unpackhi_epi64(p01[j], p23[j]));
      const __m512i exact = _mm512_add_epi32(sums, _mm512_load_si512(a[j].corr + t * 16));
      const __m512 s = _mm512_mul_ps(sw, _mm512_load_ps(a[j].lane_step + t * 16));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), s, acc[j]);
    }
  }

  /// Q8_0 chunk k of `row` (weight scales sw, one per lane) times each of the N vectors, added to
  /// acc[j]: the codes with the sign bit flipped, each lane's int32 started from its −128 · Σ q.
  template <std::size_t N>
  [[gnu::always_inline]] static void q8_chunk(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t k,
                                              __m512 sw, const Activation* a, __m512* acc) noexcept {
    const std::uint8_t* w = row + k * 64;
    detail::prefetch_codes(v, w);
    const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(w), _mm512_set1_epi8(static_cast<char>(0x80)));
    for (std::size_t j = 0; j < N; ++j) {
      const __m512i di = _mm512_dpbusd_epi32(_mm512_load_si512(a[j].corr + k * 16), u, _mm512_load_si512(a[j].q + k * kChunk));
      const __m512 s = _mm512_mul_ps(sw, _mm512_load_ps(a[j].lane_step + k * 16));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), s, acc[j]);
    }
  }

  /// out[j] = row r · a[j] for j < N (see the file comment). O(N · cols). Always inlined: quant/gemv.hpp
  /// calls it row after row in one loop for a single vector, which then sets up its constants once.
  template <std::size_t N>
  [[gnu::always_inline]] static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                           float* out) noexcept {
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t chunks = a[0].chunks;
    __m512 acc0[N], acc1[N];
    for (std::size_t j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    if constexpr (kQ4) {
      // A group of 4 chunks (16 blocks): each chunk's nibbles decoded once; per vector, the 16 int32
      // lane sums of each chunk folded into exact block sums (`block_sums`, lane 4g + c = block 4c + g
      // of the group), plus the block's −offset · Σ q, converted once and scaled by the block's weight
      // scale (16 fp16 scales by one vcvtph2ps, put in lane order by one permute) times its step.
      std::size_t k = 0, t = 0;
      for (; k + 2 * kGroup <= chunks; k += 2 * kGroup, t += 2) {
        q4_group<N, 4>(v, row, k, t, q4_scales(sc, k, 4), a, acc0);
        q4_group<N, 4>(v, row, k + kGroup, t + 1, q4_scales(sc, k + kGroup, 4), a, acc1);
      }
      if (k + kGroup <= chunks) {
        q4_group<N, 4>(v, row, k, t, q4_scales(sc, k, 4), a, acc0);
        k += kGroup;
        ++t;
      }
      switch (chunks - k) {
        case 1: q4_group<N, 1>(v, row, k, t, q4_scales(sc, k, 1), a, acc1); break;
        case 2: q4_group<N, 2>(v, row, k, t, q4_scales(sc, k, 2), a, acc1); break;
        case 3: q4_group<N, 3>(v, row, k, t, q4_scales(sc, k, 3), a, acc1); break;
        default: break;
      }
    } else {
      // Q8_0: lane i of a chunk belongs to its block i / kLanesPerBlock
      const __m512i lane_block = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
      // 16 fp16 scales (kScaleGroup chunks) converted by one vcvtph2ps, spread over each chunk's lanes by
      // one permute; kScaleGroup is even, so chunk parity (the accumulator) is the same as below
      constexpr std::size_t kScaleGroup = 16 / kBlocksPerChunk;
      __m512i spread[kScaleGroup];  // lane i of chunk c takes scale c · kBlocksPerChunk + i / kLanesPerBlock
      for (std::size_t c = 0; c < kScaleGroup; ++c)
        spread[c] = _mm512_add_epi32(lane_block, _mm512_set1_epi32(static_cast<int>(c * kBlocksPerChunk)));
      std::size_t k = 0;
      for (; k + kScaleGroup <= chunks; k += kScaleGroup) {
        const __m512 s16 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + k * kBlocksPerChunk)));
        for (std::size_t c = 0; c < kScaleGroup; c += 2) {
          q8_chunk<N>(v, row, k + c, _mm512_permutexvar_ps(spread[c], s16), a, acc0);
          q8_chunk<N>(v, row, k + c + 1, _mm512_permutexvar_ps(spread[c + 1], s16), a, acc1);
        }
      }
      for (; k < chunks; ++k) {
        // the chunk's two fp16 weight scales, one per lane
        int pair = 0;
        std::memcpy(&pair, sc + 2 * k, sizeof pair);
        const __m512 sw = _mm512_permutexvar_ps(lane_block, _mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi32_si128(pair))));
        if (k & 1) q8_chunk<N>(v, row, k, sw, a, acc1);
        else q8_chunk<N>(v, row, k, sw, a, acc0);
      }
    }
    const std::size_t full = chunks * kChunk;
    for (std::size_t j = 0; j < N; ++j) {
      float total = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j], acc1[j]));
      for (std::size_t c = full, b = full / kGgmlBlock; c < v.cols; c += kGgmlBlock, ++b) {
        const std::size_t e = v.cols - c < kGgmlBlock ? v.cols : c + kGgmlBlock;
        total += to_float(sc[b]) * a[j].step[b] * static_cast<float>(ggml_block_sum<F>(row, v.cols, c, e, a[j].q));
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

  /// Position in a chunk of column j of the chunk's block g: Q8_0 natural (32g + j); Q4_0 low nibbles
  /// first (j < 16: 16g + j), then high nibbles (64 + 16g + j − 16), as the nibbles of a 64-byte load.
  static constexpr std::size_t slot(std::size_t g, std::size_t j) noexcept {
    if constexpr (kQ4) return j < 16 ? 16 * g + j : 64 + 16 * g + (j - 16);
    else return kGgmlBlock * g + j;
  }
};

}  // namespace barato::quant

#endif  // AVX-512 VNNI
