#pragma once
/// \file
/// Quantized matrix–vector products from the packed form: Y = X Ŵᵀ for n vectors (`gemv_batch`) and
/// its n = 1 case y = Ŵ x (`gemv`), rows split between threads with `barato::parallel_for`. The row
/// kernel is `RowKernel<Arch, Format>` (quant/row_kernel.hpp, avx512.hpp, vnni.hpp, vnni_ggml.hpp,
/// vnni_lut16.hpp).
///
/// **Weights are read once per call, for any n.** The n vectors are prepared once per call (the
/// fixed-point planes of the VNNI kernels, nothing for the fp32 kernels) into the calling thread's
/// `ActivationArena` (quant/scratch.hpp): a compact layout sized to cols (≈ 2 bytes per column and
/// vector), which grows to the largest (n, cols) seen and then never allocates again; `reserve_gemv`
/// (or `Linear::reserve`) grows it up front. Each thread then walks its rows in *row tiles* of about
/// `kRowTileBytes` of codes (they stay in L1) and, for each tile, every group of `kVecTile` vectors:
/// the register-blocked micro-kernel `dot_n<kVecTile>` loads (and decodes) each weight of a row once
/// and multiplies it into the 4 vectors (`vpdpbusd` / `vpdpwssd` / fp32 FMAs on the same weight
/// registers; kernels with `dot2_n` — the 15-bit VNNI kernel for every format but int8 in groups of
/// 32 / 64 — take two rows per call for full groups, so each activation load feeds both). So a weight
/// leaves memory once per call and is decoded ⌈n / 4⌉ times from L1. For n > `kVecBlock` (prefill)
/// the rows are taken in `kRowBlockBytes` blocks that stay in L2 while the vectors pass over them in
/// blocks of kVecBlock (whose prepared activations stay in L2 too).
///
/// Cost: n = 1 streams the weights (≈ 0.8–0.86 of the DRAM probe for int8-row on one core); for n ≥ 4
/// the integer kernels are bound by their arithmetic, not by memory: 15-bit activations take two
/// `vpdpbusd` (two byte planes) or two `vpdpwssd` (int16) per 64 columns and vector; the per-row
/// formats spend nothing else per block (`kRowStep`), the grouped ones convert and scale each block's
/// sums. Measured on 4864×896, one thread (bench_batching Products, paired runs, medians): int8-row
/// time(16) ≈ 3.1 × time(1) (4.0 × before `kRowStep` and two rows per call), int4-g128 ≈ 8 ×, fp32
/// (nn::Dense) ≈ 1.7–2.2 ×; W8A8 (8-bit activations, quant/activation.hpp) ≈ 2.3 ×. On hosts with
/// AMX-INT8, int8-row / int8-tensor products of n ≥ `kAmxMinVectors` take AMX tiles instead
/// (quant/amx.hpp, `gemv_amx`; same bits): 896×4864, one thread, n = 16 ≈ 1.3 × time(1), n = 64 ≈ 2.5 ×;
/// so do the formats with groups of 128 columns or more (int4-g128, int8-g128) from n ≥
/// `kAmxBlockMinVectors` (`gemv_amx_blocks`; the VNNI kernel then sums each block exactly and scales it
/// into 4 fp32 accumulators, quant/vnni.hpp `dot_rows_blocks`): 4864×896 int4-g128 n = 16 ≈ 1.7–2 ×
/// time(1).
///
/// **Batch invariance (bitwise).** Every output y[t, r] is computed by the kernel's `dot_n` for some
/// group size N ≤ 4, and in `dot_n` each vector has its own accumulators and the same instruction
/// sequence as `dot_n<1>` (only weight and activation loads and decodes are shared; `dot2_n` gives
/// each (row, vector) the operations of `dot_n<1>`, and the `kRowStep` kernels' exact integer sums are
/// scaled once, so grouping cannot change them); a vector is prepared by the same
/// `prepare` whatever n is. So row t of a batched product equals the single-vector product of x_t bit
/// for bit, for every n, every position t, and any thread count (threads only split rows). `gemv` *is*
/// `gemv_batch` with n = 1.
///
/// **Error.** The fp32 kernels (portable, AVX-512) compute Σ_c Ŵ_rc x_c in fp32: only summation
/// rounding, |y_r − Ŵ_r·x| ≤ ~cols · 2⁻²⁴ · Σ_c |Ŵ_rc x_c|. The integer kernels quantize each activation
/// vector once per call to 15-bit fixed point per 128-column block (x_c ≈ sx_b · q_c, sx_b = max_b |x| /
/// 16383; products and lane sums exact in int32): |y_r − Ŵ_r·x| ≤ Σ_b (sx_b / 2) Σ_{c∈b} |Ŵ_rc| plus fp32
/// rounding of the per-block sums — i.e. 2⁻¹⁵ of the block maximum per element. Formats with one scale
/// per row or tensor (int8-row, int4-row, int8/int4-tensor: `kRowStep` in quant/vnni.hpp) take one step
/// for all the vector's full blocks instead (sx = max |x| / 16383 over them): |y_r − Ŵ_r·x| ≤ (sx / 2)
/// Σ_c |Ŵ_rc|, and the row's integer sum is exact and scaled once (one rounding); the NF4 / 4-bit table
/// kernel adds the rounding of its levels to 16-bit fixed point (≤ scale / (2 · kLevelScale) per weight).
/// Columns past the last full 128-block are done in fp32 from x. ggml's Q8_0 and Q4_0 (quant/ggml.hpp)
/// take ggml's product on VNNI machines (quant/ggml_dot.hpp, quant/vnni_ggml.hpp): x rounded to int8
/// per 32-column block as llama.cpp does, |x̂_c − x_c| ≤ |x_c| · |D − d| / d + D / 2 with d = max_b |x| / 127
/// and D its fp16 rounding (≈ 2⁻¹¹ relative + 2⁻⁸ of the block maximum), times |Ŵ_rc|; exact integer
/// block sums. Without VNNI they take the fp32 kernels.

#include <cstddef>
#include <new>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/parallel.hpp"
#include "barato/quant/amx.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/quant/scratch.hpp"
#include "barato/simd/arch.hpp"

namespace barato::quant {

namespace detail {
/// The work per thread below which a second thread costs more than it saves, in multiply-adds plus
/// weight bytes (rows × (n · cols + row_bytes)): a thread must repay an OpenMP fork and join (≈ 3.5 µs
/// on the 2-core Zen 5 host) and the serial preparation of the n vectors — kMinWorkPerThread — and
/// the moving of its share of the vectors and outputs between the cores — kMovedValueWork per value
/// of n · (rows + cols) (`threads_for` in core/parallel.hpp).
inline constexpr std::size_t kMinWorkPerThread = std::size_t{1} << 19;
/// Rows a thread must get at least: with fewer, the prepared planes it pulls from the preparing core
/// cost more than its share of the rows.
inline constexpr std::size_t kMinRowsPerThread = 128;
/// Rows per parallel chunk boundary.
inline constexpr std::size_t kRowGrain = 16;

/// Threads worth using (at least 1, at most `threads`) for n vectors times a rows × cols matrix of
/// `row_bytes` bytes per row (see kMinWorkPerThread and kMinRowsPerThread). Measured on the Zen 5 host,
/// one thread against two, n ∈ {1, 2, 4, 7, 16, 64}, int8-row, int4-g128 and q4_0, weights cached and
/// streamed (2026-12-05): with the former 2^16 weight-vector products per thread, 128 × 896 went to two
/// threads from n = 2 at 1.05–1.9× one thread's time (at n = 64 still 0.83–1.11×), and 256 × 896 from
/// n = 1 at 1.0–1.5×; both now stay on one up to n = 4 (128 × 896 always), while 896 × 896 still
/// splits from n = 1 (0.67–0.84×) and 256 × 896 from n = 7 (0.76–1.0×).
inline int useful_threads(std::size_t rows, std::size_t cols, std::size_t n, std::size_t row_bytes,
                          int threads) noexcept {
  const int by_work =
      threads_for(rows * (cols * n + row_bytes), kMinWorkPerThread + kMovedValueWork * n * (rows + cols), threads);
  const int by_rows = threads_for(rows, kMinRowsPerThread, threads);
  return by_work < by_rows ? by_work : by_rows;
}
/// Vectors per register-blocked micro-kernel call (`dot_n<kVecTile>`): each weight load feeds 4.
inline constexpr std::size_t kVecTile = 4;
/// Vectors that pass over a row tile together; up to this n the weights are walked once, row tile by
/// row tile. Larger batches take the rows in L2 blocks (kRowBlockBytes) and the vectors in blocks of this.
inline constexpr std::size_t kVecBlock = 64;
/// Code bytes of a row tile (stays in L1 while the vector groups pass over it).
inline constexpr std::size_t kRowTileBytes = std::size_t{1} << 14;
/// Code bytes of a row block when n > kVecBlock (stays in L2 while the vector blocks pass over it).
inline constexpr std::size_t kRowBlockBytes = std::size_t{1} << 19;

/// True when kernel K may hand batched products to AMX tiles (quant/amx.hpp; the VNNI kernel's `kAmx`).
template <class K>
[[nodiscard]] constexpr bool uses_amx() noexcept {
  if constexpr (requires { K::kAmx; }) return K::kAmx;
  else return false;
}
/// True when kernel K may hand batched products of grouped formats to AMX tiles (`amx_block_rows`;
/// the VNNI kernel's `kAmxBlocks`).
template <class K>
[[nodiscard]] constexpr bool uses_amx_blocks() noexcept {
  if constexpr (requires { K::kAmxBlocks; }) return K::kAmxBlocks;
  else return false;
}
/// Vectors from which a product of a `uses_amx` kernel takes the tiles (below, a pass of 16-vector
/// tiles costs more than the VNNI kernel: 4864 × 896 int8-row, n = 4, 395 → 480 µs; n = 16 1075 → 525).
inline constexpr std::size_t kAmxMinVectors = 8;
/// Vectors from which a grouped format's product (`uses_amx_blocks`) takes the tiles: a 16-vector tile
/// pass costs about the same for any n ≤ 16, and from 3 vectors it beats the VNNI kernel's block sums
/// (one thread, µs, VNNI → tiles: 4864 × 896 n = 3 352–367 → 233–253, n = 4 449–452 → 235–254;
/// 896 × 4864 n = 3 343–346 → 269–293; n = 2 a draw, 234–260 → 247–286).
inline constexpr std::size_t kAmxBlockMinVectors = 3;
/// True when a product of n vectors with a rows × cols matrix takes the AMX tiles (given a kernel that
/// can, whose tiles need at least `min_cols` columns): enough vectors, rows and columns, rows short
/// enough for exact int32 sums, and Linux granting the tile state.
[[nodiscard]] inline bool amx_takes(std::size_t n, std::size_t rows, std::size_t cols, std::size_t min_cols,
                                    std::size_t min_vectors = kAmxMinVectors) noexcept {
  return n >= min_vectors && rows >= kAmxRows && cols >= min_cols && cols <= kAmxMaxCols && amx_available();
}

/// Arena bytes `gemv_batch` takes for n prepared vectors of `cols` columns with kernel K.
template <class K>
[[nodiscard]] constexpr std::size_t batch_scratch_bytes(std::size_t n, std::size_t cols) noexcept {
  return scratch_round(n * sizeof(typename K::Activation)) + scratch_round(n * K::activation_bytes(cols)) +
         (uses_amx<K>() || uses_amx_blocks<K>() ? amx_pack_bytes(n, cols) : 0) +
         (uses_amx_blocks<K>() ? amx_block_table_bytes(n, cols / 128) : 0);
}

/// y[(j0 + j) · rows + r] = row r · a[j] for j < m (m ≤ kVecTile): one micro-kernel call.
template <class K, Format F>
inline void dot_group(const QuantizedView<F>& w, std::size_t r, const typename K::Activation* a, std::size_t m,
                      float* y, std::size_t j0) noexcept {
  float out[kVecTile];
  switch (m) {
    case 4: K::template dot_n<4>(w, r, a, out); break;
    case 3: K::template dot_n<3>(w, r, a, out); break;
    case 2: K::template dot_n<2>(w, r, a, out); break;
    default: K::template dot_n<1>(w, r, a, out); break;
  }
  for (std::size_t j = 0; j < m; ++j) y[(j0 + j) * w.rows + r] = out[j];
}

/// A kernel that can also multiply two rows by kVecTile vectors in one call (`dot2_n`, sharing each
/// vector's activation loads between the rows), with the results of two `dot_n` calls.
template <class K, class F>
concept PairedRowKernel = requires(const QuantizedView<F>& w, const typename K::Activation* a, float* out) {
  K::template dot2_n<kVecTile>(w, std::size_t{0}, a, out);
};

/// `dot_group` for rows [r0, r1): full groups of kVecTile vectors take rows two at a time when the
/// kernel can (`PairedRowKernel`); a single vector takes `dot_n<1>` row after row in one loop (the
/// VNNI kernels' `dot_n` is always inlined, so the loop holds the kernel's set-up — scale-spreading
/// constants, lane masks — once instead of paying a call and its set-up per row: 896-column rows from
/// cache ran 1.3–1.7× faster for every VNNI format, 2026-12-02). Where the kernel has
/// `dot_rows_tails<m>` (16 rows' lane sums and tails at once, the same bits), a single vector always
/// takes it, and 2–4 vectors take it when the rows have tail columns (`K::has_tail`; otherwise the
/// paired rows below).
template <class K, Format F>
inline void dot_rows(const QuantizedView<F>& w, std::size_t r0, std::size_t r1, const typename K::Activation* a,
                     std::size_t m, float* y, std::size_t j0) noexcept {
  std::size_t r = r0;
  if (m == 1) {
    if constexpr (requires { K::template dot_rows_tails<1>(w, r0, r1, a, y, w.rows); }) {
      K::template dot_rows_tails<1>(w, r0, r1, a, y + j0 * w.rows, w.rows);  // the same bits, rows taken together
    } else {
      for (; r < r1; ++r) K::template dot_n<1>(w, r, a, y + j0 * w.rows + r);
    }
    return;
  }
  if constexpr (requires { K::template dot_rows_tails<2>(w, r0, r1, a, y, w.rows); }) {
    if (K::has_tail(w) && r1 - r0 >= 16) {  // the same bits, tails 16 rows at a time (quant/vnni.hpp)
      float* out = y + j0 * w.rows;
      switch (m) {
        case 4: K::template dot_rows_tails<4>(w, r0, r1, a, out, w.rows); break;
        case 3: K::template dot_rows_tails<3>(w, r0, r1, a, out, w.rows); break;
        default: K::template dot_rows_tails<2>(w, r0, r1, a, out, w.rows); break;
      }
      return;
    }
  }
  if constexpr (PairedRowKernel<K, F>) {
    if (m == kVecTile) {
      float out[2 * kVecTile];
      for (; r + 2 <= r1; r += 2) {
        K::template dot2_n<kVecTile>(w, r, a, out);
        for (std::size_t j = 0; j < kVecTile; ++j) {
          y[(j0 + j) * w.rows + r] = out[j];
          y[(j0 + j) * w.rows + r + 1] = out[kVecTile + j];
        }
      }
    }
  }
  for (; r < r1; ++r) dot_group<K>(w, r, a, m, y, j0);
}

/// The walk of rows [lo, hi) × n vectors (see the file comment): calls group(r0, r1, j, m) for the
/// rows [r0, r1) of a row tile and vectors [j, j + m), m ≤ kVecTile, visiting every (row, vector) once. `row_bytes`: code bytes per
/// row (sizes the L1 row tiles and L2 row blocks). Shared by `gemv_batch` and `W8A8Linear`.
template <class Group>
inline void walk_rows(std::size_t row_bytes, std::size_t n, std::size_t lo, std::size_t hi, Group&& group) {
  const std::size_t rb = row_bytes > 0 ? row_bytes : 1;
  std::size_t tile = kRowTileBytes / rb;
  // even, so that kernels taking rows in pairs (`dot2_n`) never leave one to the single-row kernel:
  // 4864-byte rows went 3 to a tile, and the odd row cost 1.25-1.3x the tile's time (2026-12-02)
  tile = tile < 2 ? 2 : (tile > 16 ? 16 : (tile + 1) / 2 * 2);
  std::size_t block = hi - lo;
  if (n > kVecBlock) {
    block = kRowBlockBytes / rb;
    block = block < tile ? tile : block;
  }
  for (std::size_t b0 = lo; b0 < hi; b0 += block) {
    const std::size_t b1 = b0 + block < hi ? b0 + block : hi;
    for (std::size_t v0 = 0; v0 < n; v0 += kVecBlock) {
      const std::size_t v1 = v0 + kVecBlock < n ? v0 + kVecBlock : n;
      for (std::size_t t0 = b0; t0 < b1; t0 += tile) {
        const std::size_t t1 = t0 + tile < b1 ? t0 + tile : b1;
        for (std::size_t j = v0; j < v1; j += kVecTile) {
          const std::size_t m = v1 - j < kVecTile ? v1 - j : kVecTile;
          group(t0, t1, j, m);
        }
      }
    }
  }
}

/// Rows [lo, hi) × the n prepared vectors `acts` by the row kernel K (`walk_rows` + `dot_rows`): a
/// thread's share of `gemv_prepared`, and the rows the AMX paths leave after their last full pass.
template <class K, Format F>
inline void kernel_rows(const QuantizedView<F>& w, const typename K::Activation* acts, std::size_t n, float* y,
                      std::size_t lo, std::size_t hi) {
  walk_rows(w.row_bytes, n, lo, hi, [&](std::size_t r0, std::size_t r1, std::size_t j, std::size_t m) {
    dot_rows<K>(w, r0, r1, acts + j, m, y, j);
  });
}

#if defined(BARATO_AMX_COMPILED)
/// `gemv_prepared`'s product by AMX tiles (quant/amx.hpp) for K's `kAmx` formats: the planes of the n
/// prepared vectors (`per` bytes apart) packed into `pack`, then each thread's rows 32 at a time × 16
/// vectors at a time by `amx_rows<2>`, finished by `amx_finish_row` (the arithmetic of
/// `K::finish_rows4`, so the VNNI kernel's bits); the rows past its last 32 by the VNNI kernel.
template <class K, Format F>
void gemv_amx(const QuantizedView<F>& w, const typename K::Activation* acts, std::size_t n, std::size_t per, float* y,
              int threads, std::int8_t* pack) {
  amx_pack(acts, n, static_cast<std::ptrdiff_t>(per), pack);
  const std::size_t chunks = acts[0].blocks * 128 / kAmxChunk;
  const std::size_t groups = (n + kAmxVectors - 1) / kAmxVectors;
  const std::size_t tail = acts[0].blocks * 128;
  amx_row_passes(
      w.rows, useful_threads(w.rows, w.cols, n, w.row_bytes, threads),
      [&](std::size_t r) {
        alignas(64) std::int32_t sums[4][16][16];
        alignas(64) float out[kAmxRows][kAmxVectors];
        alignas(64) double step[kAmxVectors];
        for (std::size_t g = 0; g < groups; ++g) {
          amx_rows<2>(w.row(r), w.row_bytes, pack, g, chunks, sums);
          const std::size_t m = amx_group_vectors(n, g);
          for (std::size_t v = 0; v < kAmxVectors; ++v)
            step[v] = v < m ? static_cast<double>(acts[g * kAmxVectors + v].sx[0]) : 0.0;
          for (std::size_t i = 0; i < kAmxRows; ++i)
            amx_finish_row(sums[2 * (i / 16)][i % 16], sums[2 * (i / 16) + 1][i % 16], step,
                           to_float(w.row_scales(r + i)[0]), out[i]);
          for (std::size_t v = 0; v < m; ++v) {
            const auto& a = acts[g * kAmxVectors + v];
            float* yv = y + (g * kAmxVectors + v) * w.rows + r;
            if (tail < w.cols)
              for (std::size_t i = 0; i < kAmxRows; ++i)
                yv[i] = K::add_tail(out[i][v], w, r + i, w.row(r + i), tail, w.cols, a.x);
            else
              for (std::size_t i = 0; i < kAmxRows; ++i) yv[i] = out[i][v];
          }
        }
      },
      [&](std::size_t r, std::size_t hi) {
        kernel_rows<K>(w, acts, n, y, r, hi);
      });
}

/// `gemv_prepared`'s product by AMX tiles for K's `kAmxBlocks` formats (groups of 128 columns or
/// more): the planes of the n prepared vectors packed into `pack`, their per-block corrections and
/// steps into the table after it, then each thread's rows 16 at a time × up to 64 vectors at a time by
/// `amx_block_rows` (the arithmetic of `K::dot_rows_blocks`, so the VNNI kernel's bits), plus the fp32
/// tail columns; the rows past its last 16 by the VNNI kernel.
template <class K, Format F>
void gemv_amx_blocks(const QuantizedView<F>& w, const typename K::Activation* acts, std::size_t n, std::size_t per,
                     float* y, int threads, std::int8_t* pack) {
  amx_pack(acts, n, static_cast<std::ptrdiff_t>(per), pack);
  const std::size_t blocks = acts[0].blocks, tail = blocks * 128;
  auto* table = reinterpret_cast<std::int32_t*>(pack + amx_pack_bytes(n, w.cols));
  amx_block_table(acts, n, table);
  const std::size_t groups = (n + kAmxVectors - 1) / kAmxVectors;
  amx_row_passes<16>(
      w.rows, useful_threads(w.rows, w.cols, n, w.row_bytes, threads),
      [&](std::size_t r) {
        alignas(64) float acc[kAmxBlockGroups][16][16];
        const std::uint8_t* rows[16];
        for (std::size_t i = 0; i < 16; ++i) rows[i] = w.row(r + i);
        for (std::size_t g0 = 0; g0 < groups; g0 += kAmxBlockGroups) {
          const std::size_t g1 = g0 + kAmxBlockGroups < groups ? g0 + kAmxBlockGroups : groups;
          amx_block_rows(
              blocks, pack, table, g0, g1,
              [&](std::size_t b, std::size_t i, __m512i& u0, __m512i& u1) { K::load_block(w, rows[i], b, u0, u1); },
              [&](std::size_t b, std::size_t i) { return K::block_scale(w, r + i, b); }, acc);
          for (std::size_t g = g0; g < g1; ++g) {
            const std::size_t m = amx_group_vectors(n, g);
            for (std::size_t v = 0; v < m; ++v) {
              const auto& a = acts[g * kAmxVectors + v];
              float* yv = y + (g * kAmxVectors + v) * w.rows + r;
              for (std::size_t i = 0; i < 16; ++i)
                yv[i] = tail < w.cols ? K::add_tail(acc[g - g0][i][v], w, r + i, rows[i], tail, w.cols, a.x)
                                      : acc[g - g0][i][v];
            }
          }
        }
      },
      [&](std::size_t r, std::size_t hi) {
        kernel_rows<K>(w, acts, n, y, r, hi);
      });
}
#endif

/// Prepares the n vectors of X into the thread's arena, then splits the rows between threads.
template <class K, Format F>
void gemv_prepared(const QuantizedView<F>& w, const float* x, float* y, std::size_t n, int threads) {
  using A = typename K::Activation;
  if (n == 0) return;
  const std::size_t per = K::activation_bytes(w.cols), head = scratch_round(n * sizeof(A));
  std::byte* s = ActivationArena::local().get(batch_scratch_bytes<K>(n, w.cols));
  for (std::size_t t = 0; t < n; ++t) ::new (s + t * sizeof(A)) A{};
  A* acts = std::launder(reinterpret_cast<A*>(s));  // [n] views into the planes after them
  for (std::size_t t = 0; t < n; ++t) K::prepare(x + t * w.cols, w.cols, acts[t], s + head + t * per);
#if defined(BARATO_AMX_COMPILED)
  if constexpr (uses_amx<K>()) {
    if (amx_takes(n, w.rows, w.cols, 128)) {
      gemv_amx<K>(w, acts, n, per, y, threads,
                  reinterpret_cast<std::int8_t*>(s + head + scratch_round(n * per)));
      return;
    }
  }
  if constexpr (uses_amx_blocks<K>()) {
    if (amx_takes(n, w.rows, w.cols, 128, kAmxBlockMinVectors)) {
      gemv_amx_blocks<K>(w, acts, n, per, y, threads,
                         reinterpret_cast<std::int8_t*>(s + head + scratch_round(n * per)));
      return;
    }
  }
#endif
  parallel_for(
      w.rows, useful_threads(w.rows, w.cols, n, w.row_bytes, threads),
      [&](std::size_t lo, std::size_t hi) {
        kernel_rows<K>(w, acts, n, y, lo, hi);
      },
      kRowGrain);
}
}  // namespace detail

/// Grows the calling thread's `ActivationArena` so that `gemv_batch` of up to n vectors of `cols`
/// columns (format F, kernels of Arch) allocates nothing. A model calls it once at construction with
/// its largest n, on the thread that will run it. Throws `std::bad_alloc`.
template <class Arch = simd::DefaultArch, Format F>
void reserve_gemv(std::size_t n, std::size_t cols) {
  ActivationArena::local().reserve(detail::batch_scratch_bytes<RowKernel<Arch, F>>(n, cols));
}

/// Y = X Ŵᵀ for n vectors: X [n, cols] row-major, Y [n, rows]. Each weight is read from memory once
/// per call; row t of Y equals `gemv` of x_t bit for bit (see the file comment). Throws `shape_error`
/// on mismatched sizes. O(n·rows·cols); allocates only when the thread's arena must grow (never after
/// `reserve_gemv(n, cols)` or an earlier call as large).
template <class Arch = simd::DefaultArch, Format F>
void gemv_batch(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, std::size_t n,
                int threads = 1) {
  require(x.size() == n * w.cols, "quant::gemv_batch: x has ", x.size(), " elements, expected n*cols = ", n, "*",
          w.cols, " = ", n * w.cols);
  require(y.size() == n * w.rows, "quant::gemv_batch: y has ", y.size(), " elements, expected n*rows = ", n, "*",
          w.rows, " = ", n * w.rows);
  detail::gemv_prepared<RowKernel<Arch, F>>(w, x.data(), y.data(), n, threads);
}

/// y = Ŵ x with x [cols], y [rows] (no overlap): `gemv_batch` with n = 1. Throws `shape_error` on
/// mismatched sizes. O(rows·cols); allocates only as `gemv_batch` does.
template <class Arch = simd::DefaultArch, Format F>
void gemv(const QuantizedView<F>& w, std::span<const float> x, std::span<float> y, int threads = 1) {
  require(x.size() == w.cols, "quant::gemv: x has ", x.size(), " elements, expected cols = ", w.cols);
  require(y.size() == w.rows, "quant::gemv: y has ", y.size(), " elements, expected rows = ", w.rows);
  detail::gemv_prepared<RowKernel<Arch, F>>(w, x.data(), y.data(), 1, threads);
}

}  // namespace barato::quant
