#pragma once
/// \file
/// `quant::OffsetLinear<F>`: a linear layer whose weights are a scale times a code *plus an offset*
/// per group of G consecutive weights of a row — asymmetric ("zero-point", min/scale) group
/// quantization:
///
///   w_rj = s_rg · level(q_rj) + o_rg        (g = j / G)
///
/// the form of ggml's Q4_1 / Q5_1 (o = m) and of its k-quants Q2_K / Q4_K / Q5_K (s = d·sc,
/// o = −dmin·m per sub-block). The product splits into two sums,
///
///   y_r = Σ_g s_rg Σ_{j∈g} level(q_rj) x_j  +  Σ_g o_rg Σ_{j∈g} x_j,
///
/// the first a `quant::Linear<F>` over the codes and scales (any per-group format, so its kernels —
/// VNNI for int8 codes — do the work), the second a small fp32 product of the offsets [rows, groups]
/// with the group sums of x: 1/G of the first's multiply-adds and its bytes 4/G per weight.
///
/// Rounding and invariance: the group sums u_g = Σ_{j∈g} x_j are fp32 sums in column order; for each
/// (vector, row) the offset term is one fused multiply-add per group in group order, starting from 0,
/// then added to the first sum once. Nothing depends on the batch size, the vector's place in the
/// batch, the row tiling or the thread count, so row t of `apply_batch` is bitwise `apply` of x_t
/// (the `LinearLayer` rule; `quant::Linear` keeps it for the first sum).
///
/// Error against the exact product with these weights: the first sum's (the format's activation
/// quantization, quant/gemv.hpp — for the int8 group formats 15-bit activations, for Q4_0F32 ggml's int8
/// per 32 columns) plus fp32 rounding of the offset term. The activation error scales with the codes'
/// levels, so centred codes about halve it: s · u + o with u in 0…15 is better held as s · (u − 8) + (o + 8s)
/// in a symmetric 4-bit format (what the examples' GGUF loader does for Q4_1 / Q4_K with Q4_0F32) than
/// as uncentred int8 codes.
///
/// Storage: `bytes()` = the codes and scales of the `Linear<F>` + 4 bytes per group for the offsets.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory_resource>
#include <span>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/scratch.hpp"
#include "barato/simd/arch.hpp"

namespace barato::quant {

/// A linear layer y = Ŵ x with Ŵ = scale · level(code) + offset per group (see the file comment).
template <Format F, class Arch = simd::DefaultArch>
  requires (F::granularity::kGroup != 0)
class OffsetLinear {
 public:
  using format = F;
  static constexpr std::size_t kGroup = F::granularity::kGroup;

  /// Takes codes and scales (`m`) and the offsets, [rows, groups] row-major with groups =
  /// ceil(cols / G) (a last short group of a row has its own offset). Throws `shape_error` when the
  /// offsets' size disagrees; `capacity_error` / std::bad_alloc from `mr` for their copy. `m` is
  /// moved from only once both succeeded.
  OffsetLinear(QuantizedMatrix<F>&& m, std::span<const float> offsets,
               std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : groups_((m.cols() + kGroup - 1) / kGroup), offsets_t_(transposed(m, offsets, mr)), codes_(std::move(m)) {}

  OffsetLinear(OffsetLinear&&) noexcept = default;
  OffsetLinear& operator=(OffsetLinear&&) noexcept = default;

  [[nodiscard]] std::size_t rows() const noexcept { return codes_.rows(); }
  [[nodiscard]] std::size_t cols() const noexcept { return codes_.cols(); }
  /// Groups per row (ceil(cols / G)).
  [[nodiscard]] std::size_t groups() const noexcept { return groups_; }
  /// Exact weight storage: codes, scales and offsets.
  [[nodiscard]] std::size_t bytes() const noexcept { return codes_.bytes() + offsets_t_.bytes(); }
  [[nodiscard]] double bits_per_weight() const noexcept {
    return rows() * cols() == 0 ? 0.0 : 8.0 * static_cast<double>(bytes()) / static_cast<double>(rows() * cols());
  }
  /// The codes and scales part (the first sum).
  [[nodiscard]] const Linear<F, Arch>& codes() const noexcept { return codes_; }
  /// Offset of group g of row r.
  [[nodiscard]] float offset(std::size_t r, std::size_t g) const noexcept { return offsets_t_[g * rows() + r]; }

  /// Grows the calling thread's scratch for batches of up to n vectors (as `quant::Linear::reserve`).
  void reserve(std::size_t n) const {
    codes_.reserve(n);
    ActivationArena::local().reserve(scratch_round(n * groups_ * sizeof(float)));
  }

  /// y = Ŵ x (x [cols], y [rows]). Throws `shape_error` on mismatched sizes.
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    codes_.apply(x, y, threads);
    add_offsets(x, y, 1, threads);
  }
  /// Y = X Ŵᵀ for n vectors (X [n, cols], Y [n, rows]); row t bitwise equal to `apply` of x_t.
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    codes_.apply_batch(x, y, n, threads);
    add_offsets(x, y, n, threads);
  }

 private:
  /// The offsets checked and stored transposed, [groups, rows] (the offset term runs over rows in
  /// vector lanes).
  static Buffer<float> transposed(const QuantizedMatrix<F>& m, std::span<const float> offsets, std::pmr::memory_resource* mr) {
    const std::size_t rows = m.rows(), groups = (m.cols() + kGroup - 1) / kGroup;
    require(offsets.size() == rows * groups, "quant::OffsetLinear: expected ", rows, " x ", groups, " = ", rows * groups,
            " offsets for ", rows, " x ", m.cols(), " weights in groups of ", kGroup, ", got ", offsets.size());
    Buffer<float> t(rows * groups, mr);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t g = 0; g < groups; ++g) t[g * rows + r] = offsets[r * groups + g];
    return t;
  }

  /// Y += the offset term (the file comment's second sum). The sizes were checked by the first sum.
  void add_offsets(std::span<const float> x, std::span<float> y, std::size_t n, int threads) const {
    const std::size_t R = rows(), C = cols(), NG = groups_;
    if (n == 0 || R == 0 || C == 0) return;
    // Group sums of every vector, in the calling thread's arena (the first sum has returned, so the
    // arena is free; the rows' threads below only read it).
    float* u = reinterpret_cast<float*>(ActivationArena::local().get(scratch_round(n * NG * sizeof(float))));
    for (std::size_t v = 0; v < n; ++v) {
      const float* xv = x.data() + v * C;
      for (std::size_t g = 0; g < NG; ++g) {
        const std::size_t end = std::min(C, (g + 1) * kGroup);
        float s = 0.0f;
        for (std::size_t j = g * kGroup; j < end; ++j) s += xv[j];
        u[v * NG + g] = s;
      }
    }
    // Tiles of kTile rows: a tile's offsets ([NG, kTile] floats) stay in L1 across the n vectors.
    constexpr std::size_t kTile = 64;
    const std::size_t tiles = (R + kTile - 1) / kTile;
    const float* ot = offsets_t_.data();
    float* yp = y.data();
    // Threads only when each repays its fork (2^18 multiply-adds, as the decoder's attention asks).
    const int use = threads_for(n * R * NG, std::size_t{1} << 18, threads);
    parallel_for(tiles, use, [&](std::size_t t0, std::size_t t1) {
      for (std::size_t t = t0; t < t1; ++t) {
        const std::size_t r0 = t * kTile, w = std::min(kTile, R - r0);
        for (std::size_t v = 0; v < n; ++v) {
          float acc[kTile] = {};
          const float* uv = u + v * NG;
          for (std::size_t g = 0; g < NG; ++g) {
            const float ug = uv[g];
            const float* og = ot + g * R + r0;
            for (std::size_t k = 0; k < w; ++k) acc[k] = std::fma(og[k], ug, acc[k]);
          }
          float* yv = yp + v * R + r0;
          for (std::size_t k = 0; k < w; ++k) yv[k] += acc[k];
        }
      }
    });
  }

  std::size_t groups_ = 0;
  Buffer<float> offsets_t_;  // [groups, rows]
  Linear<F, Arch> codes_;
};

}  // namespace barato::quant
