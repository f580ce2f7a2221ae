#pragma once
/// \file
/// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"):
/// y = x / sqrt(mean(x²) + eps) ⊙ w, applied to each row of x. One vector is the one-row case, and
/// the rows of a prefill block are normalised by the same call. The gain w is a plain span (a model
/// keeps its gains with its other weights). In place is allowed (y may be the same span as x).

#include <cmath>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"

namespace barato::nn {

/// Default epsilon of RMSNorm (Llama / llama2.c use 1e-5).
inline constexpr float kRmsNormEps = 1e-5f;

/// Each row of x [n, dim] normalised into y [n, dim]: y_t = x_t / sqrt(mean(x_t²) + eps) ⊙ w, with
/// dim = w.size() and n = x.size() / dim (n = 1 for a single vector). y may alias x exactly. Every row
/// is computed by the same code whatever n, so a row's result does not depend on the rows beside it.
/// O(n·dim), allocates nothing. Throws `shape_error` when x is empty, w is empty or does not divide
/// x.size(), or y differs in size from x; `value_error` when eps is not finite and > 0.
template <class Arch = simd::DefaultArch>
inline void rms_norm(std::span<const float> x, std::span<const float> w, std::span<float> y, float eps = kRmsNormEps) {
  const std::size_t d = w.size();
  require(!x.empty(), "nn::rms_norm: x is empty");
  require(d > 0 && x.size() % d == 0, "nn::rms_norm: x has ", x.size(), " elements, expected rows of w's ", d);
  require(y.size() == x.size(), "nn::rms_norm: y has ", y.size(), " elements, expected ", x.size(), " (size of x)");
  require<value_error>(eps > 0.0f && std::isfinite(eps), "nn::rms_norm: eps must be finite and > 0, got ", eps);
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  for (std::size_t r = 0; r < x.size(); r += d) {
    const std::span<const float> xr = x.subspan(r, d);
    const std::span<float> yr = y.subspan(r, d);
    const float ss = simd::dot<float, Arch>(xr.data(), xr.data(), d);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    const B s(inv);
    const std::size_t full = d / W * W;  // the tail loop starts at `full` so a constant d folds it away
    for (std::size_t i = 0; i < full; i += W)
      (B::load_unaligned(xr.data() + i) * s * B::load_unaligned(w.data() + i)).store_unaligned(yr.data() + i);
    for (std::size_t i = full; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

/// In-place form: each row of x [n, dim] ← RMSNorm(row) ⊙ w.
template <class Arch = simd::DefaultArch>
inline void rms_norm(std::span<float> x, std::span<const float> w, float eps = kRmsNormEps) {
  rms_norm<Arch>(std::span<const float>(x), w, x, eps);
}

}  // namespace barato::nn
