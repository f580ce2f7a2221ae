#pragma once
/// \file
/// How ggml multiplies its Q8_0 / Q4_0 weights (quant/ggml.hpp) into an activation vector, as scalar
/// reference code: the activation is itself quantized to Q8_0 blocks of 32 columns, each block's dot
/// product is an exact integer, and the integer is scaled by the two blocks' scales (fp16; fp32 for
/// `Q4_0F32`). The VNNI
/// kernel for these formats (quant/vnni_ggml.hpp) computes the same integers; this file is its oracle
/// and its tail code. So a GGUF model's quantized matrices give, block for block, the integer sums
/// llama.cpp's CPU backend computes (its `vec_dot_q4_0_q8_0` / `vec_dot_q8_0_q8_0`); only the order
/// of the fp32 additions of the scaled block sums differs.
///
/// **Activation rule** (ggml's x86 `quantize_row_q8_0`, the one llama.cpp runs on this machine; its
/// portable C reference rounds half away from zero instead), for a block x[0…n), n ≤ 32:
///   amax = max |x|; d = amax / 127, stored as fp16(d) (round to nearest even);
///   id = 127 / amax (0 when amax = 0); q_j = round-half-to-even(x_j · id), |q_j| ≤ 127.
///   The block's step is D = float(fp16(d)) — except where fp16(d) overflows (amax > 65504 · 127 ≈ 8.3·10⁶;
///   ggml's scale is ∞ there), where barato keeps D = d in fp32 so the product stays finite.
/// Error of one activation: |D·q_j − x_j| ≤ |x_j| · |D − d| / d + D / 2 (+ fp32 rounding of x·id):
/// 2⁻¹¹ relative from the fp16 step plus half a step, d = amax / 127. A row's product:
///   y = Σ_b fp32(w_scale_b · D_b) · Σ_{j∈b} integer(w_j) · q_j,  b over the 32-column blocks.
/// x must be finite.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "barato/core/dtype.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"

namespace barato::quant {

/// Columns per activation block of ggml's Q8_0 rule (and per weight block of Q8_0 / Q4_0).
inline constexpr std::size_t kGgmlBlock = 32;

/// Formats whose products follow ggml's rule (this file): those that say so by `kGgmlProduct`
/// (GgmlQ8_0, GgmlQ4_0, and Q4_0F32 — Q4_0 with fp32 scales).
template <class F>
concept GgmlDotFormat = Format<F> && requires { requires F::kGgmlProduct; } && F::granularity::kGroup == kGgmlBlock;

/// The step D of an activation block whose largest |x| is amax: float(fp16(amax / 127)), or amax / 127
/// itself where fp16 overflows (see the file comment).
[[nodiscard]] inline float ggml_q8_step(float amax) noexcept {
  const float d = amax / 127.0f;
  const float stored = to_float(from_float<f16>(d));
  return std::isinf(stored) ? d : stored;
}

/// ggml's Q8_0 rule for one activation block x [n ≤ 32] (see the file comment): writes n codes,
/// returns the step D (0 for an all-zero block). x must be finite. O(n).
[[nodiscard]] inline float ggml_q8_block(const float* x, std::size_t n, std::int8_t* q) noexcept {
  float amax = 0.0f;
  for (std::size_t j = 0; j < n; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (std::size_t j = 0; j < n; ++j) {
    const float v = std::nearbyint(x[j] * id);  // the default rounding mode: half to even
    q[j] = static_cast<std::int8_t>(v > 127.0f ? 127 : (v < -127.0f ? -127 : static_cast<int>(v)));
  }
  return ggml_q8_step(amax);
}

/// ggml's Q8_0 rule over a whole vector x [cols]: codes q [cols], steps D [⌈cols / 32⌉] (the last
/// block may be shorter). O(cols).
inline void ggml_q8_activation(const float* x, std::size_t cols, std::int8_t* q, float* D) noexcept {
  for (std::size_t c = 0, b = 0; c < cols; c += kGgmlBlock, ++b)
    D[b] = ggml_q8_block(x + c, cols - c < kGgmlBlock ? cols - c : kGgmlBlock, q + c);
}

/// The exact integer Σ_{c∈[c0, c1)} integer(w_rc) · q_c of one block's columns of row `row` (packed,
/// `cols` wide) with activation codes q (indexed by column). O(c1 − c0).
template <GgmlDotFormat F>
[[nodiscard]] inline std::int32_t ggml_block_sum(const std::uint8_t* row, std::size_t cols, std::size_t c0,
                                                 std::size_t c1, const std::int8_t* q) noexcept {
  using P = packing_of<F>;
  std::int32_t s = 0;
  if constexpr (F::kCodeBits == 8) {
    // Q8_0's codes read as int8 directly. Written as integer(code) = int8(uint8), GCC 12.2 at -O3 with
    // AVX-512 VNNI vectorized this loop into vpdpbusd on the *unsigned* bytes (wrong code, seen here:
    // the sign conversion was dropped); the plain int8 × int8 loop compiles correctly.
    const auto* w = reinterpret_cast<const std::int8_t*>(row);
    for (std::size_t c = c0; c < c1; ++c) s += static_cast<std::int32_t>(w[c]) * static_cast<std::int32_t>(q[c]);
  } else {
    for (std::size_t c = c0; c < c1; ++c) s += F::integer(P::get(row, c, cols)) * static_cast<std::int32_t>(q[c]);
  }
  return s;
}

/// Scalar reference: row r of `v` times the activation (codes q [cols], steps D [⌈cols / 32⌉]),
/// Σ_b fp32(scale_b · D_b) · sum_b in block order. O(cols).
template <GgmlDotFormat F>
[[nodiscard]] float ggml_dot_reference(const QuantizedView<F>& v, std::size_t r, const std::int8_t* q, const float* D) noexcept {
  const std::uint8_t* row = v.row(r);
  const auto* sc = v.row_scales(r);
  float total = 0.0f;
  for (std::size_t c = 0, b = 0; c < v.cols; c += kGgmlBlock, ++b) {
    const std::size_t e = v.cols - c < kGgmlBlock ? v.cols : c + kGgmlBlock;
    const float dd = to_float(sc[b]) * D[b];
    total += dd * static_cast<float>(ggml_block_sum<F>(row, v.cols, c, e, q));
  }
  return total;
}

}  // namespace barato::quant
