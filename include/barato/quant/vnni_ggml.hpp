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
/// the sign bit flipped (u = q + 128); the offset is removed exactly by starting each int32 lane from
/// −offset · Σ q over the lane's columns (precomputed by `prepare`, per lane). Lane i of a 64-byte
/// load covers bytes 4i…4i+3, which lie in one 32-column block: for Q4_0 a load holds 4 blocks of 16
/// bytes (lanes 4g…4g+3 are block g; low nibbles columns 32g + j, high nibbles 32g + 16 + j, so
/// `prepare` stores each 128-column chunk of the codes in that order), for Q8_0 2 blocks (lanes
/// 8g…8g+7). Each lane's int32 is converted once and multiplied by its block's weight scale (the fp16
/// scales converted by one `vcvtph2ps` and spread over the lanes) times its activation step.
/// Columns past the last full chunk (128 for Q4_0, 64 for Q8_0) are summed per 32-column block by
/// the scalar code of quant/ggml_dot.hpp.
///
/// Result: the integer block sums are ggml's; the fp32 sum of the scaled lane sums differs from the
/// scalar reference only by summation order. Error against Ŵx: the activation rounding of
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
  std::int32_t* corr = nullptr;  // [chunks, 16] −offset · Σ q of each int32 lane's columns
  float* lane_step = nullptr;    // [chunks, 16] the activation step D of each lane's block
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

  /// Scratch bytes of one prepared vector of `cols` columns (a multiple of 64).
  static constexpr std::size_t activation_bytes(std::size_t cols) noexcept {
    const std::size_t chunks = cols / kChunk, blocks = (cols + kGgmlBlock - 1) / kGgmlBlock;
    return scratch_round(cols) + 2 * chunks * 64 + scratch_round(blocks * sizeof(float));
  }

  /// ggml's Q8_0 codes of x [cols] into `scratch` (64-byte aligned, activation_bytes(cols) bytes): the
  /// full chunks vectorized (the same roundings as `ggml_q8_block`: |x|'s maximum, x · id rounded to
  /// nearest even), the tail by `ggml_q8_block`. O(cols).
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* scratch) noexcept {
    a.cols = cols;
    a.chunks = cols / kChunk;
    a.q = reinterpret_cast<std::int8_t*>(scratch);
    a.corr = reinterpret_cast<std::int32_t*>(scratch + scratch_round(cols));
    a.lane_step = reinterpret_cast<float*>(a.corr + a.chunks * 16);
    a.step = a.lane_step + a.chunks * 16;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512i ones = _mm512_set1_epi8(1);
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
        for (std::size_t i = 0; i < kLanesPerBlock; ++i) a.lane_step[k * 16 + g * kLanesPerBlock + i] = D;
      }
      // −offset · Σ q of each lane's columns: bytes 4i…4i+3 of each 64-byte plane
      __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(q));
      if constexpr (kQ4) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(q + 64));
      _mm512_store_si512(a.corr + k * 16, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-kOffset)));
    }
    for (std::size_t c = a.chunks * kChunk, b = c / kGgmlBlock; c < cols; c += kGgmlBlock, ++b)
      a.step[b] = ggml_q8_block(x + c, cols - c < kGgmlBlock ? cols - c : kGgmlBlock, a.q + c);
  }

  /// out[j] = row r · a[j] for j < N (see the file comment). O(N · cols). Always inlined: quant/gemv.hpp
  /// calls it row after row in one loop for a single vector, which then sets up its constants once.
  template <std::size_t N>
  [[gnu::always_inline]] static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* a,
                                           float* out) noexcept {
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t chunks = a[0].chunks;
    // lane i of a chunk belongs to its block i / kLanesPerBlock
    const __m512i lane_block = kQ4 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                   : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc0[N], acc1[N];
    for (std::size_t j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    // chunk k: scale lanes sw (one weight scale per lane), then the integer sums of every vector
    // scaled into acc0 (k even) or acc1 (k odd)
    auto chunk = [&](std::size_t k, __m512 sw, auto& acc) {
      const std::uint8_t* w = row + k * 64;
      detail::prefetch_codes(v, w);
      __m512i u0, u1;
      if constexpr (kQ4) {
        const __m512i nib = _mm512_set1_epi8(0x0F);
        const __m512i bytes = _mm512_loadu_si512(w);
        u0 = _mm512_and_si512(bytes, nib);                        // columns 32g + j
        u1 = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nib);  // columns 32g + 16 + j
      } else {
        u0 = _mm512_xor_si512(_mm512_loadu_si512(w), _mm512_set1_epi8(static_cast<char>(0x80)));
        u1 = u0;  // unused
      }
      for (std::size_t j = 0; j < N; ++j) {
        const std::int8_t* q = a[j].q + k * kChunk;
        __m512i di = _mm512_dpbusd_epi32(_mm512_load_si512(a[j].corr + k * 16), u0, _mm512_load_si512(q));
        if constexpr (kQ4) di = _mm512_dpbusd_epi32(di, u1, _mm512_load_si512(q + 64));
        const __m512 s = _mm512_mul_ps(sw, _mm512_load_ps(a[j].lane_step + k * 16));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(di), s, acc[j]);
      }
    };
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
        chunk(k + c, _mm512_permutexvar_ps(spread[c], s16), acc0);
        chunk(k + c + 1, _mm512_permutexvar_ps(spread[c + 1], s16), acc1);
      }
    }
    for (; k < chunks; ++k) {
      // the chunk's fp16 weight scales, one per lane
      __m128i h;
      if constexpr (kQ4) {
        h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 4 * k));
      } else {
        int pair = 0;
        std::memcpy(&pair, sc + 2 * k, sizeof pair);
        h = _mm_cvtsi32_si128(pair);
      }
      const __m512 sw = _mm512_permutexvar_ps(lane_block, _mm512_cvtph_ps(_mm256_castsi128_si256(h)));
      if (k & 1) chunk(k, sw, acc1);
      else chunk(k, sw, acc0);
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
