#pragma once
/// \file
/// RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization"):
/// y = x / sqrt(mean(x²) + eps) ⊙ w. The free function `rms_norm` is the kernel; `nn::RmsNorm` owns
/// the gain vector w and applies it to one vector or to a batch of rows. In place is allowed
/// (y may be the same span as x).

#include <cmath>
#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"

namespace barato::nn {

/// Default epsilon of RMSNorm (Llama / llama2.c use 1e-5).
inline constexpr float kRmsNormEps = 1e-5f;

/// y = x / sqrt(mean(x²) + eps) ⊙ w over one vector of size n = x.size(). y may alias x exactly.
/// O(n), allocates nothing. Throws `shape_error` when w or y differ in size from x, or x is empty.
template <class Arch = simd::DefaultArch>
inline void rms_norm(std::span<const float> x, std::span<const float> w, std::span<float> y, float eps = kRmsNormEps) {
  const std::size_t n = x.size();
  require(n > 0, "nn::rms_norm: x is empty");
  require(w.size() == n, "nn::rms_norm: w has ", w.size(), " elements, expected ", n);
  require(y.size() == n, "nn::rms_norm: y has ", y.size(), " elements, expected ", n);
  const float ss = simd::dot<float, Arch>(x.data(), x.data(), n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const B s(inv);
  std::size_t i = 0;
  for (; i + W <= n; i += W)
    (B::load_unaligned(x.data() + i) * s * B::load_unaligned(w.data() + i)).store_unaligned(y.data() + i);
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

/// In-place form: x ← rms_norm(x) ⊙ w.
template <class Arch = simd::DefaultArch>
inline void rms_norm(std::span<float> x, std::span<const float> w, float eps = kRmsNormEps) {
  rms_norm<Arch>(std::span<const float>(x), w, x, eps);
}

/// An RMSNorm layer: owns the gain w [dim] (from `mr`) and eps.
class RmsNorm {
 public:
  /// Gain `w` [dim] (copied); `eps` > 0. Throws `shape_error` for an empty w, `value_error` for eps ≤ 0.
  explicit RmsNorm(std::span<const float> w, float eps = kRmsNormEps,
                   std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : w_(w.size(), mr), eps_(eps) {
    require(!w.empty(), "nn::RmsNorm: the gain vector is empty");
    require<value_error>(eps > 0.0f && std::isfinite(eps), "nn::RmsNorm: eps must be finite and > 0, got ", eps);
    for (std::size_t i = 0; i < w.size(); ++i) w_[i] = w[i];
  }

  [[nodiscard]] std::size_t dim() const noexcept { return w_.size(); }
  [[nodiscard]] float eps() const noexcept { return eps_; }
  /// The gain vector [dim].
  [[nodiscard]] std::span<const float> weights() const noexcept { return w_.span(); }
  /// Bytes of the gain vector.
  [[nodiscard]] std::size_t bytes() const noexcept { return w_.bytes(); }

  /// y = RMSNorm(x) for one vector [dim]; y may alias x.
  void apply(std::span<const float> x, std::span<float> y) const { rms_norm(x, w_.span(), y, eps_); }
  /// In place on one vector [dim].
  void apply(std::span<float> x) const { rms_norm(x, w_.span(), eps_); }
  /// Each of the n rows of x [n, dim] normalised into y [n, dim] (y may alias x).
  /// Throws `shape_error` when x or y is not n·dim floats.
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n) const {
    const std::size_t d = w_.size();
    require(x.size() == n * d, "nn::RmsNorm::apply_batch: x has ", x.size(), " elements, expected n*dim = ", n * d);
    require(y.size() == n * d, "nn::RmsNorm::apply_batch: y has ", y.size(), " elements, expected n*dim = ", n * d);
    for (std::size_t t = 0; t < n; ++t) rms_norm(x.subspan(t * d, d), w_.span(), y.subspan(t * d, d), eps_);
  }

 private:
  Buffer<float> w_;  // [dim]
  float eps_;
};

}  // namespace barato::nn
