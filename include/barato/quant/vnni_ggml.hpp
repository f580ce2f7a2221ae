#pragma once
/// \file
/// The AVX-512 VNNI row kernel for ggml's Q8_0 and Q4_0 (and Q4_0F32; quant/ggml.hpp), computing ggml's product
/// (quant/ggml_dot.hpp): the activation is quantized once per call to int8 Q8_0 blocks of 32 columns
/// (`prepare`), each block's sum Σ integer(w)·q is exact in int32, and it is scaled by
/// fp32(weight scale · activation step). One `vpdpbusd` multiplies 64 weight bytes by 64 activation
/// bytes, so 128 columns cost two for Q4_0 and for Q8_0 — half of what the 15-bit kernel of the other
/// integer formats (quant/vnni.hpp) spends on its two activation planes.
///
/// Weights enter `vpdpbusd` as unsigned bytes: Q4_0's nibbles as stored (u = q + 8), Q8_0's codes with
/// the sign bit flipped (u = q + 128); the offset is removed exactly by adding −offset · Σ q over the
/// same block (precomputed by `prepare`). Lane i of a 64-byte load covers bytes 4i…4i+3, which lie
/// in one 32-column block: for Q4_0 a load holds 4 blocks of 16 bytes (lanes 4g…4g+3 are block g; low
/// nibbles columns 32g + j, high nibbles 32g + 16 + j, so `prepare` stores each 128-column chunk of
/// the codes in that order), for Q8_0 2 blocks (lanes 8g…8g+7).
///
/// Scaling. Chunks go in groups of 16 blocks (4 for Q4_0, 8 for Q8_0; their fp16 weight scales
/// converted by one `vcvtph2ps`, Q4_0F32's fp32 scales loaded as they are). Per vector, each chunk's 16 int32 lane sums are added up per block by
/// unpack-and-add steps across the group (`group_sums`; exact), plus the block's −offset · Σ q, then
/// converted once and multiplied by weight scale × activation step in one FMA: one conversion,
/// multiply and FMA per 16 blocks, and one 16-lane vector of corrections and of steps per group, where
/// each chunk used to take its own (2026-12-03, one thread, before → after: batches of n = 4 on
/// 896 × 4864 q4_0 320–365 → 160–190 µs, q8_0 620–735 → 215–240 µs; q8_0 n = 64 8.3–9.2 → 2.4–3.4
/// ms; n = 1 and the streamed 0.5B pass unchanged within this host's noise, except q8_0 rows of 896
/// columns, a group of 8 chunks and a short one of 6, at 0.86–1.0×).
/// Columns past the last full chunk (128 for Q4_0, 64 for Q8_0) are summed per 32-column block, each
/// whole block's weights decoded once for the N vectors and its exact sum taken by `vpmaddwd`
/// (`tail_block_sum`; `dot_rows_tails` does 16 rows' at once); a last partial block by the scalar code
/// of quant/ggml_dot.hpp.
///
/// Result: the integer block sums are ggml's; the fp32 sum of the scaled sums differs from the scalar
/// reference only by summation order. Error against Ŵx: the activation rounding of
/// quant/ggml_dot.hpp times |Ŵ|, plus fp32 summation. `dot_n<N>` loads and decodes each 64-byte chunk
/// of weights once for N vectors; every vector has its own accumulators and the instruction sequence
/// of `dot_n<1>`, so a vector's result is the same for every N (batch invariance).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "barato/quant/avx512_tails.hpp"
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
  std::int32_t* corr = nullptr;  // [groups, 16] −offset · Σ q of each block, in the kernel's lane order
  float* lane_step = nullptr;    // [groups, 16] the activation step D of each block, the same order
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
  /// Blocks per chunk.
  static constexpr std::size_t kBlocksPerChunk = kChunk / kGgmlBlock;
  /// Unsigned offset of the weight bytes vpdpbusd sees.
  static constexpr int kOffset = kQ4 ? F::kOffset : 128;

  /// Chunks per group: 16 blocks, whose fp16 weight scales one `vcvtph2ps` converts and whose exact
  /// int32 sums `dot_n` forms from the chunks' lane sums (`group_sums`). Q4_0 4, Q8_0 8.
  static constexpr std::size_t kGroup = 16 / kBlocksPerChunk;
  /// 16-lane vectors of `corr` (and of `lane_step`) for `chunks` full chunks: one per group.
  static constexpr std::size_t lane_vectors(std::size_t chunks) noexcept { return (chunks + kGroup - 1) / kGroup; }
  /// The 32-column block of the row that lane `lane` of group t's sums stands for (the order
  /// `group_sums` leaves them in); lanes of chunks past the last full one stand for none and hold 0.
  /// Q4_0: lane 4g + c is block g of the group's chunk c. Q8_0: lane 4m + c is block m % 2 of chunk
  /// c + 4 · (m / 2).
  static constexpr std::size_t lane_block(std::size_t t, std::size_t lane) noexcept {
    const std::size_t c = lane % 4, m = lane / 4;
    if constexpr (kQ4) return (kGroup * t + c) * kBlocksPerChunk + m;
    else return (kGroup * t + c + 4 * (m / 2)) * kBlocksPerChunk + m % 2;
  }
  /// The lane of its group's vector that holds block g of chunk k (the inverse of `lane_block`).
  static constexpr std::size_t lane_of(std::size_t k, std::size_t g) noexcept {
    const std::size_t c = k % kGroup;
    if constexpr (kQ4) return 4 * g + c;
    else return 4 * (2 * (c / 4) + g) + c % 4;
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
    if (lanes > 0) _mm512_store_ps(a.lane_step + (lanes - 1) * 16, _mm512_setzero_ps());  // a short last group
    __m512i part[kGroup];  // the lane sums Σ q of the group's chunks so far
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
        a.lane_step[k / kGroup * 16 + lane_of(k, g)] = D;
      }
      // Σ q of each lane's columns: bytes 4i…4i+3 of each 64-byte plane
      __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(q));
      if constexpr (kQ4) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(q + 64));
      part[k % kGroup] = sum;
      if (k % kGroup == kGroup - 1 || k + 1 == a.chunks) {  // the group's −offset · Σ q per block
        for (std::size_t c = k % kGroup + 1; c < kGroup; ++c) part[c] = _mm512_setzero_si512();
        __m512i pairs[kGroup / 2];
        for (std::size_t c = 0; c < kGroup; c += 2) pairs[c / 2] = pair_sums(part[c], part[c + 1]);
        _mm512_store_si512(a.corr + k / kGroup * 16, _mm512_mullo_epi32(group_sums(pairs), _mm512_set1_epi32(-kOffset)));
      }
    }
    for (std::size_t c = a.chunks * kChunk, b = c / kGgmlBlock; c < cols; c += kGgmlBlock, ++b)
      a.step[b] = ggml_q8_block(x + c, cols - c < kGgmlBlock ? cols - c : kGgmlBlock, a.q + c);
  }

  /// (x0 + x2, y0 + y2, x1 + x3, y1 + y3) in every 128-bit lane of the lane sums x, y of two chunks.
  [[gnu::always_inline]] static __m512i pair_sums(__m512i x, __m512i y) noexcept {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y));
  }
  /// A group's exact int32 block sums, in `lane_block` order, from the `pair_sums` of its chunks 0 and
  /// 1, 2 and 3 (and for Q8_0 4 and 5, 6 and 7). After two unpack-and-add steps each 128-bit lane holds
  /// its 4-lane sums of chunks 0…3: a Q4_0 block is one 128-bit lane, so that is all; a Q8_0 block is
  /// two, added by one more step (128-bit lanes 0 + 1 and 2 + 3 of chunks 0…3 and of 4…7).
  [[gnu::always_inline]] static __m512i group_sums(const __m512i* pairs) noexcept {
    const __m512i lo = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[0], pairs[1]), _mm512_unpackhi_epi64(pairs[0], pairs[1]));
    if constexpr (kQ4) {
      return lo;
    } else {
      const __m512i hi = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2], pairs[3]), _mm512_unpackhi_epi64(pairs[2], pairs[3]));
      return _mm512_add_epi32(_mm512_shuffle_i32x4(lo, hi, 0x88), _mm512_shuffle_i32x4(lo, hi, 0xDD));
    }
  }
  /// Chunk k of `row` as unsigned bytes for vpdpbusd. Q4_0: low nibbles (columns 32g + j of the chunk's
  /// block g) in u0, high nibbles (columns 32g + 16 + j) in u1; Q8_0: the codes + 128 in u0.
  [[gnu::always_inline]] static void codes(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t k, __m512i& u0,
                                           __m512i& u1) noexcept {
    const std::uint8_t* w = row + k * 64;
    detail::prefetch_codes(v, w);
    const __m512i bytes = _mm512_loadu_si512(w);
    if constexpr (kQ4) {
      const __m512i nib = _mm512_set1_epi8(0x0F);
      u0 = _mm512_and_si512(bytes, nib);
      u1 = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nib);
    } else {
      u0 = _mm512_xor_si512(bytes, _mm512_set1_epi8(static_cast<char>(0x80)));
      u1 = u0;
    }
  }
  /// The 16 int32 lane sums of chunk k (`codes` u0, u1) with vector a's codes.
  [[gnu::always_inline]] static __m512i lane_sums(const Activation& a, std::size_t k, __m512i u0, __m512i u1) noexcept {
    const std::int8_t* q = a.q + k * kChunk;
    const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, _mm512_load_si512(q));
    if constexpr (kQ4) return _mm512_dpbusd_epi32(d, u1, _mm512_load_si512(q + 64));
    else return d;
  }
  /// pairs[j] = `pair_sums` of chunks k + C and k + C + 1 with vector j (a chunk at or past M: 0).
  template <std::size_t N, std::size_t M, std::size_t C>
  [[gnu::always_inline]] static void chunk_pair(const QuantizedView<F>& v, const std::uint8_t* row, std::size_t k,
                                                const Activation* a, __m512i* pairs) noexcept {
    __m512i u0, u1;
    if constexpr (C < M) {
      codes(v, row, k + C, u0, u1);
      for (std::size_t j = 0; j < N; ++j) pairs[j] = lane_sums(a[j], k + C, u0, u1);
    } else {
      for (std::size_t j = 0; j < N; ++j) pairs[j] = _mm512_setzero_si512();
    }
    if constexpr (C + 1 < M) {
      codes(v, row, k + C + 1, u0, u1);
      for (std::size_t j = 0; j < N; ++j) pairs[j] = pair_sums(pairs[j], lane_sums(a[j], k + C + 1, u0, u1));
    } else {
      for (std::size_t j = 0; j < N; ++j) pairs[j] = pair_sums(pairs[j], _mm512_setzero_si512());
    }
  }
  /// The weight scales (fp16, or fp32 for Q4_0F32) of the M · kBlocksPerChunk blocks from chunk k on,
  /// in fp32, in block order (the other lanes 0).
  template <std::size_t M>
  [[gnu::always_inline]] static __m512 group_scales(const typename F::scale_type* sc, std::size_t k) noexcept {
    const auto* p = sc + k * kBlocksPerChunk;
    constexpr auto kMask = static_cast<__mmask16>((1u << (M * kBlocksPerChunk)) - 1);
    if constexpr (std::is_same_v<typename F::scale_type, float>) {
      if constexpr (M == kGroup) return _mm512_loadu_ps(p);
      else return _mm512_maskz_loadu_ps(kMask, p);
    } else if constexpr (M == kGroup) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(kMask, p));
    }
  }
  /// The group of M chunks k … k + M − 1 (lane vector t; row scales sc; missing chunks 0) times each of the N
  /// vectors, added to acc[j]: exact block sums plus −offset · Σ q, converted once, times weight scale
  /// × step.
  template <std::size_t N, std::size_t M>
  [[gnu::always_inline]] static void group(const QuantizedView<F>& v, const std::uint8_t* row,
                                           const typename F::scale_type* sc, std::size_t k, std::size_t t,
                                           const Activation* a, __m512* acc) noexcept {
    __m512i pairs[kGroup / 2][N];
    chunk_pair<N, M, 0>(v, row, k, a, pairs[0]);
    chunk_pair<N, M, 2>(v, row, k, a, pairs[1]);
    if constexpr (kGroup == 8) {
      chunk_pair<N, M, 4>(v, row, k, a, pairs[2]);
      chunk_pair<N, M, 6>(v, row, k, a, pairs[3]);
    }
    const __m512i to_lanes = _mm512_setr_epi32(
        int(lane_block(0, 0)), int(lane_block(0, 1)), int(lane_block(0, 2)), int(lane_block(0, 3)), int(lane_block(0, 4)),
        int(lane_block(0, 5)), int(lane_block(0, 6)), int(lane_block(0, 7)), int(lane_block(0, 8)), int(lane_block(0, 9)),
        int(lane_block(0, 10)), int(lane_block(0, 11)), int(lane_block(0, 12)), int(lane_block(0, 13)),
        int(lane_block(0, 14)), int(lane_block(0, 15)));
    const __m512 sw = _mm512_permutexvar_ps(to_lanes, group_scales<M>(sc, k));
    for (std::size_t j = 0; j < N; ++j) {
      __m512i p[kGroup / 2];
      for (std::size_t i = 0; i < kGroup / 2; ++i) p[i] = pairs[i][j];
      const __m512i exact = _mm512_add_epi32(group_sums(p), _mm512_load_si512(a[j].corr + t * 16));
      const __m512 s = _mm512_mul_ps(sw, _mm512_load_ps(a[j].lane_step + t * 16));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), s, acc[j]);
    }
  }

  /// `group` for the m < kGroup chunks left at k.
  template <std::size_t N>
  [[gnu::always_inline]] static void short_group(std::size_t m, const QuantizedView<F>& v, const std::uint8_t* row,
                                                 const typename F::scale_type* sc, std::size_t k, std::size_t t,
                                                 const Activation* a, __m512* acc) noexcept {
    switch (m) {
      case 1: group<N, 1>(v, row, sc, k, t, a, acc); break;
      case 2: group<N, 2>(v, row, sc, k, t, a, acc); break;
      case 3: group<N, 3>(v, row, sc, k, t, a, acc); break;
      default:
        if constexpr (kGroup == 8) {
          switch (m) {
            case 4: group<N, 4>(v, row, sc, k, t, a, acc); break;
            case 5: group<N, 5>(v, row, sc, k, t, a, acc); break;
            case 6: group<N, 6>(v, row, sc, k, t, a, acc); break;
            default: group<N, 7>(v, row, sc, k, t, a, acc); break;
          }
        }
        break;
    }
  }

  /// out[j] = row r · a[j] for j < N (see the file comment). O(N · cols). Always inlined: quant/gemv.hpp
  /// calls it row after row in one loop for a single vector, which then sets up its constants once.
  template <std::size_t N>
  [[gnu::always_inline]] static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                           float* out) noexcept {
    __m512 acc[N];
    full_chunks<N>(v, r, a, acc);
    float total[N];
    for (std::size_t j = 0; j < N; ++j) total[j] = avx512::reduce16(acc[j]);
    add_tail_blocks<N>(v, r, a, total);
    for (std::size_t j = 0; j < N; ++j) out[j] = total[j];
  }

  /// True when v's rows have columns past their last full chunk (128 for Q4_0, 64 for Q8_0): batched
  /// products then take groups of vectors through `dot_rows_tails`.
  [[nodiscard]] static bool has_tail(const QuantizedView<F>& v) noexcept { return v.cols % kChunk != 0; }

  /// Rows [r0, r1) × N vectors a[0 … N) into y (row r of vector j at y[j · stride + r]): `dot_n<N>`
  /// row after row, bit for bit, 16 rows at a time per vector — their lane sums reduced together
  /// (`avx512::reduce16_rows`, the pairs of `reduce16`) and their tail blocks taken together
  /// (`tails16`) instead of a horizontal reduction per (row, vector) and per (row, vector, tail
  /// block); each row's chunks are decoded once for the N vectors. Why: stories260K's 64-column
  /// matrices in Q4_0 are two tail blocks a row (2026-12-07: its Q4_0 perplexity took 1.5 × fp32's time).
  template <std::size_t N>
  static void dot_rows_tails(const QuantizedView<F>& v, std::size_t r0, std::size_t r1, const Activation* a, float* y,
                             std::size_t stride) noexcept {
    std::size_t r = r0;
    for (; r + 16 <= r1; r += 16) {
      __m512 lanes[N][16];
      for (std::size_t i = 0; i < 16; ++i) {
        __m512 acc[N];
        full_chunks<N>(v, r + i, a, acc);
        for (std::size_t j = 0; j < N; ++j) lanes[j][i] = acc[j];
      }
      __m512 total[N];
      for (std::size_t j = 0; j < N; ++j) total[j] = avx512::reduce16_rows(lanes[j]);
      if (a[0].chunks * kChunk < v.cols) tails16<N>(v, r, a, total);
      for (std::size_t j = 0; j < N; ++j) _mm512_storeu_ps(y + j * stride + r, total[j]);
    }
    detail::dot_n_rows<RowKernel, N>(v, r, r1, a, y, stride);
  }

  /// Lane i of total[j]: plus row r + i's blocks past the last full chunk against a[j], as
  /// `add_tail_blocks` adds them for one row (the same operations lane by lane: (weight scale × step)
  /// × the exact block sum, rounded, then added), 16 rows at once: each whole block's weights decoded
  /// once for the N vectors and each vector's activation codes widened once for the 16 rows, the
  /// `vpmaddwd` products of 16 rows reduced by one transposing tree (`reduce16_rows_epi32`: int32,
  /// exact); a last partial block by the scalar code row by row.
  template <std::size_t N>
  [[gnu::always_inline]] static void tails16(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                             __m512* total) noexcept {
    std::size_t c = a[0].chunks * kChunk, b = c / kGgmlBlock;
    for (; c + kGgmlBlock <= v.cols; c += kGgmlBlock, ++b) {
      __m512i q16[N];
      for (std::size_t j = 0; j < N; ++j)
        q16[j] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[j].q + c)));
      __m512i prod[N][16];
      alignas(64) float s[16];
      for (std::size_t i = 0; i < 16; ++i) {
        const __m512i w16 = tail_block_weights(v.row(r + i), c);
        for (std::size_t j = 0; j < N; ++j) prod[j][i] = _mm512_madd_epi16(w16, q16[j]);
        s[i] = to_float(v.row_scales(r + i)[b]);
      }
      const __m512 sw = _mm512_load_ps(s);
      for (std::size_t j = 0; j < N; ++j) {
        const __m512 sums = _mm512_cvtepi32_ps(avx512::reduce16_rows_epi32(prod[j]));
        total[j] = _mm512_add_ps(total[j], rounded(_mm512_mul_ps(_mm512_mul_ps(sw, _mm512_set1_ps(a[j].step[b])), sums)));
      }
    }
    if (c < v.cols) {
      for (std::size_t j = 0; j < N; ++j) {
        alignas(64) float t[16];
        _mm512_store_ps(t, total[j]);
        for (std::size_t i = 0; i < 16; ++i) t[i] += partial_block(v, r + i, a[j], c);
        total[j] = _mm512_load_ps(t);
      }
    }
  }

  /// acc[j] = the fp32 lane accumulators of row r's full chunks against a[j] (their lanes' sum is the
  /// row's product over those chunks).
  template <std::size_t N>
  [[gnu::always_inline]] static void full_chunks(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                 __m512* acc) noexcept {
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t chunks = a[0].chunks;
    __m512 acc0[N], acc1[N];
    for (std::size_t j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    // groups of kGroup chunks, alternately into acc0 and acc1; a short last group into acc1
    std::size_t k = 0, t = 0;
    for (; k + 2 * kGroup <= chunks; k += 2 * kGroup, t += 2) {
      group<N, kGroup>(v, row, sc, k, t, a, acc0);
      group<N, kGroup>(v, row, sc, k + kGroup, t + 1, a, acc1);
    }
    if (k + kGroup <= chunks) {
      group<N, kGroup>(v, row, sc, k, t, a, acc0);
      k += kGroup;
      ++t;
    }
    if (k < chunks) short_group<N>(chunks - k, v, row, sc, k, t, a, acc1);
    for (std::size_t j = 0; j < N; ++j) acc[j] = _mm512_add_ps(acc0[j], acc1[j]);
  }

  /// total[j] += row r's blocks past the last full chunk against a[j], in block order: whole ones
  /// decoded once for the N vectors, a last partial one (cols not a multiple of 32) by the scalar code.
  template <std::size_t N>
  [[gnu::always_inline]] static void add_tail_blocks(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                                     float* total) noexcept {
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    std::size_t c = a[0].chunks * kChunk, b = c / kGgmlBlock;
    for (; c + kGgmlBlock <= v.cols; c += kGgmlBlock, ++b) {
      const __m512i w16 = tail_block_weights(row, c);
      const float s = to_float(sc[b]);
      for (std::size_t j = 0; j < N; ++j)
        total[j] += rounded(s * a[j].step[b] * static_cast<float>(tail_block_sum(w16, a[j].q + c)));
    }
    if (c < v.cols)
      for (std::size_t j = 0; j < N; ++j) total[j] += partial_block(v, r, a[j], c);
  }

  /// Row r's last, partial block (columns [c, cols), c a multiple of 32) against a, scaled: the scalar
  /// code of quant/ggml_dot.hpp, (weight scale × step) × the exact block sum, rounded.
  [[nodiscard]] static float partial_block(const QuantizedView<F>& v, std::size_t r, const Activation& a, std::size_t c) noexcept {
    const std::size_t b = c / kGgmlBlock;
    const float s = to_float(v.row_scales(r)[b]);
    return rounded(s * a.step[b] * static_cast<float>(ggml_block_sum<F>(v.row(r), v.cols, c, v.cols, a.q)));
  }

  /// x, rounded to fp32 where it stands: the compiler may not fuse the product that made it into the
  /// addition that takes it (an FMA). The tail's scaled block sums are then added exactly as the scalar
  /// reference adds them (quant/ggml_dot.hpp), the bits this kernel gave when the tail was scalar code.
  [[gnu::always_inline]] static float rounded(float x) noexcept {
    asm("" : "+x"(x));
    return x;
  }
  /// `rounded` for 16 lanes.
  [[gnu::always_inline]] static __m512 rounded(__m512 x) noexcept {
    asm("" : "+v"(x));
    return x;
  }

  /// The 32 integer weights of the whole block at column c past the full chunks (natural order, where
  /// c + 32 ≤ cols) as int16: Q4_0's 16 bytes split into low nibbles (columns c … c + 15) and high
  /// nibbles (c + 16 … c + 31) minus the offset 8, Q8_0's 32 codes sign-extended.
  [[gnu::always_inline]] static __m512i tail_block_weights(const std::uint8_t* row, std::size_t c) noexcept {
    if constexpr (kQ4) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2));
      const __m128i nib = _mm_set1_epi8(0x0F);
      const __m256i u = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(bytes, nib)),
                                                _mm_and_si128(_mm_srli_epi16(bytes, 4), nib), 1);
      return _mm512_sub_epi16(_mm512_cvtepu8_epi16(u), _mm512_set1_epi16(static_cast<short>(kOffset)));
    } else {
      return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)));
    }
  }

  /// Σ w · q over one whole tail block (w from `tail_block_weights`, q the activation codes of its 32
  /// columns): products summed in pairs by `vpmaddwd`, then across lanes — exact in int32 (|w| ≤ 128,
  /// |q| ≤ 127), so the same integer as `ggml_block_sum`, in a few instructions instead of 32 scalar
  /// steps (stories260K's 64-column matrices are all tail: 512 × 64 took 41 µs against int8-row's 4).
  [[gnu::always_inline]] static std::int32_t tail_block_sum(__m512i w16, const std::int8_t* q) noexcept {
    const __m512i q16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    return _mm512_reduce_add_epi32(_mm512_madd_epi16(w16, q16));
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
