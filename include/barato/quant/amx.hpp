#pragma once
/// \file
/// Intel AMX int8 tiles for the batched product of the int8 formats with one scale per row or per
/// tensor (int8-row, int8-tensor: the VNNI kernel's `kRowStep` formats with 8-bit codes), and of the
/// formats with groups of 128 columns or more (int4-g128, int8-g128: `amx_block_rows`, one tile pass
/// per 128-column block whose exact sums the VNNI kernel's `dot_rows_blocks` forms too).
///
/// Why: with 15-bit activations the VNNI kernel spends two `vpdpbusd` per 64 columns and vector, so
/// from n ≈ 4 vectors on a batched product is bound by that arithmetic, not by memory (quant/gemv.hpp).
/// One `tdpbssd` multiplies a 16 × 64 tile of int8 by a 64 × 16 one into 16 × 16 int32 sums: 16,384
/// multiply-adds per instruction where `vpdpbusd` does 64.
///
/// What: the activations stay the VNNI kernel's (quant/vnni.hpp `prepare`: x16 = 256·hi + lo, one
/// fixed-point step per vector). `amx_pack` lays the two byte planes of 16 vectors out as AMX "B"
/// tiles (row i of a 64-column chunk's tile holds columns 4i … 4i + 3 of each vector: the 4-byte pairs
/// `tdpbssd` takes); the weights are the "A" tiles, loaded straight from the codes (16 rows, stride
/// row_bytes) — signed codes times signed planes, so no offset correction. `amx_rows` takes 32 rows
/// (two A tiles) × 16 vectors per pass: four int32 tiles (Σ q·hi and Σ q·lo of each half), then the
/// exact Σ q·x16 = 256·Σ q·hi + Σ q·lo per (row, vector) in int64.
///
/// Exactness and batch invariance: the integer sum is the one the VNNI kernel forms, and `amx_finish_row`
/// scales it with the arithmetic of the VNNI kernel's `finish_rows4` (the same double products, then
/// the same fp32 tail), so the output is bit for bit the VNNI kernel's —
/// `gemv_batch` may use tiles for some n and vectors for others and row t of a batch still equals the
/// single-vector product (tests/quant/amx_test.cpp). int32 sums are exact while |Σ q·lo| < 2³¹: up to
/// `kAmxMaxCols` columns (longer rows take the VNNI kernel).
///
/// Availability: compiled when the translation unit enables AMX-TILE and AMX-INT8 (e.g. -march=native
/// on Sapphire Rapids or later); used when Linux grants the process the tile state (`amx_available`,
/// asked once with arch_prctl(ARCH_REQ_XCOMP_PERM)). Each thread loads the tile configuration before
/// its rows and releases the tiles after.

#include <cstddef>
#include <cstdint>

#include "barato/core/parallel.hpp"

// (g++ defines __AMX_TILE__ / __AMX_INT8__, clang 14 __AMXTILE__ / __AMXINT8__)
#if (defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_INT8__) || defined(__AMXINT8__)) && \
    defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define BARATO_AMX_COMPILED 1
#endif

namespace barato::quant {

/// Rows of one AMX pass (two 16-row A tiles).
inline constexpr std::size_t kAmxRows = 32;
/// Vectors of one B tile.
inline constexpr std::size_t kAmxVectors = 16;
/// Columns per tile step (64 int8 per tile row).
inline constexpr std::size_t kAmxChunk = 64;
/// Longest row the tiles take: Σ q·lo over a row stays within 2³⁰ in magnitude (|q| ≤ 128, |lo| ≤ 128).
inline constexpr std::size_t kAmxMaxCols = std::size_t{1} << 16;

#if defined(BARATO_AMX_COMPILED)
inline constexpr bool kAmxCompiled = true;

/// True when the process may use AMX tile data: asks Linux once (ARCH_REQ_XCOMP_PERM for
/// XFEATURE_XTILEDATA); false on kernels that refuse it. Thread-safe.
[[nodiscard]] inline bool amx_available() noexcept {
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
  return ok;
}
#else
inline constexpr bool kAmxCompiled = false;
[[nodiscard]] inline bool amx_available() noexcept { return false; }
#endif

/// Live vectors of group g (16 vectors per B tile) among n: 16, or fewer in the last group.
[[nodiscard]] constexpr std::size_t amx_group_vectors(std::size_t n, std::size_t g) noexcept {
  return n - g * kAmxVectors < kAmxVectors ? n - g * kAmxVectors : kAmxVectors;
}

/// Bytes of `planes` byte planes of n vectors packed as B tiles over `chunks` 64-column chunks (vectors
/// rounded up to a whole tile, the missing ones zero).
[[nodiscard]] constexpr std::size_t amx_pack_bytes(std::size_t n, std::size_t chunks, std::size_t planes) noexcept {
  return planes * ((n + kAmxVectors - 1) / kAmxVectors) * kAmxVectors * chunks * kAmxChunk;
}
/// `amx_pack_bytes` of the row-step kernel's two planes over the full 128-column blocks of `cols`.
[[nodiscard]] constexpr std::size_t amx_pack_bytes(std::size_t n, std::size_t cols) noexcept {
  return amx_pack_bytes(n, cols / 128 * 2, 2);
}

/// The total of the 4 block accumulators of the grouped formats' result (quant/vnni.hpp
/// `dot_rows_blocks`, `amx_block_rows`), in one fixed order: (a0 + a2) + (a1 + a3).
[[nodiscard]] inline float sum_accumulators4(const float* a) noexcept { return (a[0] + a[2]) + (a[1] + a[3]); }

/// Bytes of the per-block table of n vectors over `blocks` 128-column blocks that `amx_block_rows`
/// reads: per vector group and block, the 16 vectors' offset corrections (int32) and steps (fp32).
[[nodiscard]] constexpr std::size_t amx_block_table_bytes(std::size_t n, std::size_t blocks) noexcept {
  return (n + kAmxVectors - 1) / kAmxVectors * blocks * 2 * 64;
}

#if defined(BARATO_AMX_COMPILED)
namespace detail {

/// The 64-byte AMX tile configuration (palette 1): tiles 0–7 all 16 rows × 64 bytes.
struct alignas(64) AmxConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

/// Byte offset of the B tile of vector group g, chunk c, plane p in a pack of P planes over `chunks` chunks.
template <std::size_t P>
[[nodiscard]] constexpr std::size_t amx_tile(std::size_t g, std::size_t c, std::size_t p, std::size_t chunks) noexcept {
  return ((g * chunks + c) * P + p) * (kAmxVectors * kAmxChunk);
}

}  // namespace detail

/// P byte planes of vectors 0 … n − 1 as B tiles into `pack` (64-byte aligned, amx_pack_bytes(n, chunks,
/// P) bytes): plane p of vector t starts at first[p] + t · stride; row i of chunk c's tile holds
/// columns 64c + 4i … 64c + 4i + 3 of vectors 0 … 15 of the group, the 4-byte pairs `tdpbssd` takes
/// (one 16-lane gather per row; vectors past n are zero). O(n · chunks · 64 · P).
template <std::size_t P>
void amx_pack_planes(const std::int8_t* const* first, std::ptrdiff_t stride, std::size_t n, std::size_t chunks,
                     std::int8_t* pack) noexcept {
  const std::size_t groups = (n + kAmxVectors - 1) / kAmxVectors;
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(stride)));
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t m = amx_group_vectors(n, g);
    const auto live = static_cast<__mmask16>((1u << m) - 1u);
    for (std::size_t c = 0; c < chunks; ++c)
      for (std::size_t p = 0; p < P; ++p) {
        const std::int8_t* src = first[p] + static_cast<std::ptrdiff_t>(g * kAmxVectors) * stride + c * kAmxChunk;
        std::int8_t* t = pack + detail::amx_tile<P>(g, c, p, chunks);
        for (std::size_t i = 0; i < 16; ++i)
          _mm512_store_si512(t + 64 * i, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, src + 4 * i, 1));
      }
  }
}

/// The two planes of vectors a[0 … n) prepared by the VNNI row-step kernel (vector t's planes at
/// a[0].hi + t · stride and a[0].lo + t · stride, as `gemv_prepared` lays them out) over their full
/// 128-column blocks: `amx_pack_planes<2>` into amx_pack_bytes(n, cols) bytes.
template <class Activation>
void amx_pack(const Activation* a, std::size_t n, std::ptrdiff_t stride, std::int8_t* pack) noexcept {
  const std::int8_t* first[2] = {a[0].hi, a[0].lo};
  amx_pack_planes<2>(first, stride, n, a[0].blocks * 128 / kAmxChunk, pack);
}

/// The integer sums of rows r0 … r0 + 31 (codes `codes`, `row_bytes` apart) against the 16 vectors of
/// group g of a pack of P planes (`amx_pack_planes<P>`), over `chunks` chunks, exact in int32:
/// sums[P·h + p][i][v] = Σ q·plane_p of row r0 + 16h + i and vector 16g + v. P = 2: the row-step
/// kernel's hi and lo planes (Σ q·x16 = 256 · the first + the second); P = 1: W8A8's int8 codes. The
/// caller has loaded `detail::AmxConfig`. 2·P · chunks `tdpbssd`.
template <std::size_t P>
inline void amx_rows(const std::uint8_t* codes, std::size_t row_bytes, const std::int8_t* pack, std::size_t g,
                     std::size_t chunks, std::int32_t (*sums)[16][16]) noexcept {
  static_assert(P == 1 || P == 2);
  // tiles: 0, 1 the weights of rows 0–15 and 16–31; 2 (and 3) the planes; 4 + P·h + p the sums
  _tile_zero(4);
  _tile_zero(5);
  if constexpr (P == 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  const std::uint8_t* second = codes + 16 * row_bytes;
  for (std::size_t c = 0; c < chunks; ++c) {
    _tile_loadd(0, codes + c * kAmxChunk, row_bytes);
    _tile_loadd(1, second + c * kAmxChunk, row_bytes);
    _tile_loadd(2, pack + detail::amx_tile<P>(g, c, 0, chunks), 64);
    if constexpr (P == 2) {
      _tile_loadd(3, pack + detail::amx_tile<P>(g, c, 1, chunks), 64);
      _tile_dpbssd(4, 0, 2);
      _tile_dpbssd(5, 0, 3);
      _tile_dpbssd(6, 1, 2);
      _tile_dpbssd(7, 1, 3);
    } else {
      _tile_dpbssd(4, 0, 2);
      _tile_dpbssd(5, 1, 2);
    }
  }
  _tile_stored(4, sums[0], 64);
  _tile_stored(5, sums[1], 64);
  if constexpr (P == 2) {
    _tile_stored(6, sums[2], 64);
    _tile_stored(7, sums[3], 64);
  }
}

/// Rows [0, rows) split between `threads` threads in multiples of PassRows (`parallel_for`); each
/// thread loads the tile configuration, calls pass(r) for each of its full passes of PassRows rows,
/// releases the tiles and hands the rows past its last pass to rest(r, hi) (if any).
template <std::size_t PassRows = kAmxRows, class Pass, class Rest>
void amx_row_passes(std::size_t rows, int threads, Pass&& pass, Rest&& rest) {
  parallel_for(
      rows, threads,
      [&](std::size_t lo, std::size_t hi) {
        const detail::AmxConfig config;
        _tile_loadconfig(&config);
        std::size_t r = lo;
        for (; r + PassRows <= hi; r += PassRows) pass(r);
        _tile_release();
        if (r < hi) rest(r, hi);
      },
      PassRows);
}

/// The table of `amx_block_rows` for vectors a[0 … n) of the VNNI kernel of grouped formats: for
/// group g and block b at table + 32·(g·blocks + b): 16 int32, vector v's Σ of its 16 lane
/// corrections of block b (−offset · Σ x16 over the block, exact), then 16 fp32, its step sx_b (both 0
/// past n). O(n · blocks).
template <class Activation>
void amx_block_table(const Activation* a, std::size_t n, std::int32_t* table) noexcept {
  const std::size_t blocks = a[0].blocks, groups = (n + kAmxVectors - 1) / kAmxVectors;
  for (std::size_t g = 0; g < groups; ++g)
    for (std::size_t b = 0; b < blocks; ++b) {
      std::int32_t* corr = table + 32 * (g * blocks + b);
      float* sx = reinterpret_cast<float*>(corr + 16);
      for (std::size_t v = 0; v < kAmxVectors; ++v) {
        const std::size_t t = g * kAmxVectors + v;
        corr[v] = t < n ? _mm512_reduce_add_epi32(_mm512_load_si512(a[t].corr + b * 16)) : 0;
        sx[v] = t < n ? a[t].sx[b] : 0.0f;
      }
    }
}

/// Vector groups of 16 that one `amx_block_rows` call takes (its accumulators: 4 KB per group; the
/// block's unpacked codes are loaded as tiles once for all of them).
inline constexpr std::size_t kAmxBlockGroups = 4;

/// Grouped formats (groups of 128 columns or more; the VNNI kernel's `dot_rows_blocks`): 16 rows ×
/// the vector groups [g0, g1) (g1 − g0 ≤ kAmxBlockGroups) of a two-plane pack (`amx_pack`), block by
/// block. `load(b, i, u0, u1)` gives row i's block b as the kernel's unsigned bytes (u0 columns of the
/// first 64-byte chunk, u1 the second), `wscale(b, i)` its weight scale. Per block the tiles form
/// S_b[i][v] = 256 · Σ u·hi + Σ u·lo (`tdpbusd`, exact int32), the table's correction completes the
/// exact Σ q·x16, and accumulator b mod 4 of (i, v) ← fma(float(S_b), fl(w · sx_b), it) (from +0); at
/// the end out[g − g0][i][v] = their total in `sum_accumulators4`'s order — the kernel's definition, so
/// its bits. `table` from `amx_block_table`. The caller has loaded `detail::AmxConfig`.
/// 4 · blocks · (g1 − g0) `tdpbusd`.
template <class Load, class WScale>
inline void amx_block_rows(std::size_t blocks, const std::int8_t* pack, const std::int32_t* table, std::size_t g0,
                           std::size_t g1, Load&& load, WScale&& wscale, float (*out)[16][16]) noexcept {
  const std::size_t chunks = 2 * blocks;
  alignas(64) std::uint8_t a[2][16][64];  // the block's unsigned codes: A tiles of the two chunks
  alignas(64) std::int32_t sums[2][16][16];
  alignas(64) float acc[kAmxBlockGroups][16][4][16];  // [group][row][accumulator][vector]
  const std::size_t used = blocks < 4 ? blocks : 4;    // accumulators that some block feeds
  for (std::size_t b = 0; b < blocks; ++b) {
    alignas(64) float w[16];
    for (std::size_t i = 0; i < 16; ++i) {
      __m512i u0, u1;
      load(b, i, u0, u1);
      _mm512_store_si512(a[0][i], u0);
      _mm512_store_si512(a[1][i], u1);
      w[i] = wscale(b, i);
    }
    // tiles: 0, 1 the codes; 2, 3 the hi plane and 4, 5 the lo plane of the two chunks; 6, 7 the sums
    _tile_loadd(0, a[0], 64);
    _tile_loadd(1, a[1], 64);
    for (std::size_t g = g0; g < g1; ++g) {
      _tile_zero(6);
      _tile_zero(7);
      _tile_loadd(2, pack + detail::amx_tile<2>(g, 2 * b, 0, chunks), 64);
      _tile_loadd(3, pack + detail::amx_tile<2>(g, 2 * b + 1, 0, chunks), 64);
      _tile_loadd(4, pack + detail::amx_tile<2>(g, 2 * b, 1, chunks), 64);
      _tile_loadd(5, pack + detail::amx_tile<2>(g, 2 * b + 1, 1, chunks), 64);
      _tile_dpbusd(6, 0, 2);
      _tile_dpbusd(6, 1, 3);
      _tile_dpbusd(7, 0, 4);
      _tile_dpbusd(7, 1, 5);
      _tile_stored(6, sums[0], 64);
      _tile_stored(7, sums[1], 64);
      const std::int32_t* t = table + 32 * (g * blocks + b);
      const __m512i corr = _mm512_load_si512(t);
      const __m512 sx = _mm512_load_ps(reinterpret_cast<const float*>(t + 16));
      for (std::size_t i = 0; i < 16; ++i) {
        float* ak = acc[g - g0][i][b % 4];
        const __m512i s = _mm512_add_epi32(
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[0][i]), 8), _mm512_load_si512(sums[1][i])), corr);
        const __m512 m = _mm512_mul_ps(_mm512_set1_ps(w[i]), sx);
        const __m512 prev = b < 4 ? _mm512_setzero_ps() : _mm512_load_ps(ak);  // first block: from +0
        _mm512_store_ps(ak, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), m, prev));
      }
    }
  }
  // the totals, lane by lane over the vectors, in sum_accumulators4's order (an accumulator no block
  // feeds is +0 in the VNNI kernel; here it is never stored and +0 stands in for it)
  for (std::size_t g = 0; g < g1 - g0; ++g)
    for (std::size_t i = 0; i < 16; ++i) {
      const float (*ac)[16] = acc[g][i];
      auto at = [&](std::size_t k) { return k < used ? _mm512_load_ps(ac[k]) : _mm512_setzero_ps(); };
      _mm512_store_ps(out[g][i], _mm512_add_ps(_mm512_add_ps(at(0), at(2)), _mm512_add_ps(at(1), at(3))));
    }
}

/// Row i of `amx_rows`' sums for 16 vectors, finished as `finish_rows4` does it four at a time:
/// out[v] = fp32(double(Σ q·x16) · step[v] · row_scale) (exact int64 sums; the same double products in
/// the same order, one rounding to fp32). `step`: the 16 vectors' steps (0 past the live ones).
[[gnu::always_inline]] inline void amx_finish_row(const std::int32_t* hi, const std::int32_t* lo, const double* step,
                                                  float row_scale, float* out) noexcept {
  const __m512d s = _mm512_set1_pd(static_cast<double>(row_scale));
  const __m512i h = _mm512_load_si512(hi), l = _mm512_load_si512(lo);
  __m256 half[2];
  for (int k = 0; k < 2; ++k) {
    const __m256i h8 = k == 0 ? _mm512_castsi512_si256(h) : _mm512_extracti64x4_epi64(h, 1);
    const __m256i l8 = k == 0 ? _mm512_castsi512_si256(l) : _mm512_extracti64x4_epi64(l, 1);
    const __m512i q = _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(h8), 8), _mm512_cvtepi32_epi64(l8));
    half[k] = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_mul_pd(_mm512_cvtepi64_pd(q), _mm512_load_pd(step + 8 * k)), s));
  }
  _mm512_store_ps(out, _mm512_insertf32x8(_mm512_castps256_ps512(half[0]), half[1], 1));
}
#endif  // BARATO_AMX_COMPILED

}  // namespace barato::quant
