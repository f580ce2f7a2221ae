#pragma once
/// \file
/// The SwiGLU gate (Shazeer 2020, "GLU Variants Improve Transformer"): h = silu(g) ⊙ u with
/// silu(g) = g · σ(g) = g / (1 + e^(−g)). Elementwise and vectorised; the Llama FFN is
/// W2 · swiglu(W1 x, W3 x).

#include <cmath>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"
#include "barato/simd/arch.hpp"

namespace barato::nn {

/// silu(g) = g / (1 + e^(−g)) for one value (the scalar form used by the tails).
[[nodiscard]] inline float silu(float g) noexcept { return g / (1.0f + std::exp(-g)); }

/// h[i] = silu(g[i]) · u[i]. h may alias g or u exactly. O(n), allocates nothing. Every element goes
/// through the same vector code (the tail zero-padded), so h[i] is a function of (g[i], u[i]) alone —
/// not of i or n: a row of a batched block gets the bits it gets alone (batch invariance).
/// Throws `shape_error` when the three sizes differ.
template <class Arch = simd::DefaultArch>
inline void swiglu(std::span<const float> g, std::span<const float> u, std::span<float> h) {
  const std::size_t n = g.size();
  require(u.size() == n, "nn::swiglu: u has ", u.size(), " elements, expected ", n, " (size of g)");
  require(h.size() == n, "nn::swiglu: h has ", h.size(), " elements, expected ", n, " (size of g)");
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const B one(1.0f);
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    const B gv = B::load_unaligned(g.data() + i);
    const B uv = B::load_unaligned(u.data() + i);
    (gv / (one + xsimd::exp(-gv)) * uv).store_unaligned(h.data() + i);
  }
  if (i < n) {  // the tail through the same vector code (zero-padded), so h[i] depends on g[i], u[i] only
    alignas(64) float gt[W] = {}, ut[W] = {}, ht[W];
    for (std::size_t k = i; k < n; ++k) {
      gt[k - i] = g[k];
      ut[k - i] = u[k];
    }
    const B gv = B::load_aligned(gt);
    (gv / (one + xsimd::exp(-gv)) * B::load_aligned(ut)).store_aligned(ht);
    for (std::size_t k = i; k < n; ++k) h[k] = ht[k - i];
  }
}

/// In-place form: g ← silu(g) ⊙ u.
template <class Arch = simd::DefaultArch>
inline void swiglu(std::span<float> g, std::span<const float> u) {
  swiglu<Arch>(std::span<const float>(g), u, g);
}

}  // namespace barato::nn
