#pragma once
/// \file
/// Fixed-point activations for the integer kernels (quant/vnni.hpp, quant/vnni_lut16.hpp): x is cut
/// into blocks of kFixedPointBlock columns and each block is stored as x ≈ sx · q with
/// sx = max |x| / kFixedPointMax and q = round(x / sx) ∈ [−kFixedPointMax, kFixedPointMax] (15 bits).
/// The rounding error is at most sx / 2 per element, 2⁻¹⁵ of the block's largest |x|. A kernel whose
/// weights have one scale per row (quant/vnni.hpp) uses one step for the whole vector instead
/// (`fixed_point_step` over all its blocks, then `fixed_point_store` per block), so the integer sums
/// of all blocks can be added before any scaling.

#include <cmath>
#include <cstddef>

namespace barato::quant {

/// Columns per fixed-point block (one scale sx per block).
inline constexpr std::size_t kFixedPointBlock = 128;
/// Largest |q|: products with int8 or int16 weights and their sums stay exact in int32.
inline constexpr int kFixedPointMax = 16383;

/// The fixed-point step of x [n]: max |x| / kFixedPointMax (0 when x is all zero). x must be finite. O(n).
inline float fixed_point_step(const float* x, std::size_t n) noexcept {
  float m = 0.f;
  for (std::size_t i = 0; i < n; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m / static_cast<float>(kFixedPointMax);
}

/// Calls store(i, q) with q = round(x[i] / step), clamped to ±kFixedPointMax, for each i < n (all
/// zero when step is 0). `step` is the `fixed_point_step` of a range that contains x [n]. O(n).
template <class Store>
void fixed_point_store(const float* x, std::size_t n, float step, Store&& store) noexcept {
  const float inv = step > 0.f ? 1.0f / step : 0.f;
  for (std::size_t i = 0; i < n; ++i) {
    const int q = static_cast<int>(std::nearbyint(x[i] * inv));
    store(i, q > kFixedPointMax ? kFixedPointMax : (q < -kFixedPointMax ? -kFixedPointMax : q));
  }
}

/// Fixed point of one block x [n]: returns sx (0 for an all-zero block) and calls store(i, q) for
/// each i < n. x must be finite. O(n).
template <class Store>
float fixed_point_block(const float* x, std::size_t n, Store&& store) noexcept {
  const float step = fixed_point_step(x, n);
  fixed_point_store(x, n, step, store);
  return step;
}

}  // namespace barato::quant
