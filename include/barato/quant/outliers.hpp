#pragma once
/// \file
/// Activation-outlier techniques as primitives.
///
///  - LLM.int8()-style mixed decomposition (Dettmers et al., 2022): the input columns whose activation
///    magnitude exceeds a threshold (default 6.0) are multiplied in fp32, the rest go through the
///    per-token int8 path, so a handful of huge feature dimensions no longer stretch the activation
///    scale for all the others: y = W[:, O] x_O + s_W · s_x · W8[:, ¬O] x8_¬O. Here W[:, O] is the
///    int8 per-row weight dequantized (LLM.int8 keeps those columns' weights in fp16; the activation
///    side — the point of the method — is the same).
///  - SmoothQuant-style scale migration (Xiao et al., 2023): per input channel j,
///    s_j = max|X_j|^α / max|W_j|^(1−α); X' = X / s and W' = W · diag(s) leave X Wᵀ unchanged but
///    move quantization difficulty from the activations to the weights (α = 0.5 splits it evenly).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/activation.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/arch.hpp"

namespace barato::quant {

/// Default LLM.int8() outlier threshold on |activation|.
inline constexpr float kOutlierThreshold = 6.0f;

/// Indices c with |x[c]| > threshold, written to `out` (capacity ≥ x.size()); returns how many.
inline std::size_t find_outlier_columns(std::span<const float> x, float threshold, std::span<std::uint32_t> out) {
  require(out.size() >= x.size(), "quant::find_outlier_columns: out holds ", out.size(), " indices, need ", x.size());
  std::size_t n = 0;
  for (std::size_t c = 0; c < x.size(); ++c)
    if (std::fabs(x[c]) > threshold) out[n++] = static_cast<std::uint32_t>(c);
  return n;
}

/// LLM.int8() mixed-decomposition linear layer over int8 per-row weights (see the file comment).
/// Scratch (sized at construction) makes `apply` allocation-free; one object must not run `apply`
/// from two threads at once.
template <Element S = f16, class Arch = simd::DefaultArch>
class MixedInt8Linear {
 public:
  using format = AbsMax<8, PerRow, S>;

  /// Throws `value_error` for threshold ≤ 0 (and what `QuantizedMatrix` throws).
  MixedInt8Linear(std::size_t rows, std::size_t cols, std::span<const float> w, float threshold = kOutlierThreshold,
                  std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : m_(rows, cols, w, mr), threshold_(threshold), xq_(cols, mr), xr_(cols, mr), idx_(cols, mr) {
    require<value_error>(threshold > 0, "quant::MixedInt8Linear: threshold must be > 0, got ", threshold);
  }

  [[nodiscard]] std::size_t rows() const noexcept { return m_.rows(); }
  [[nodiscard]] std::size_t cols() const noexcept { return m_.cols(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return m_.bytes(); }
  [[nodiscard]] float threshold() const noexcept { return threshold_; }
  /// Outlier columns found by the last `apply`.
  [[nodiscard]] std::size_t last_outliers() const noexcept { return n_out_; }

  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    require(x.size() == cols(), "quant::MixedInt8Linear::apply: x has ", x.size(), " elements, expected cols = ", cols());
    require(y.size() == rows(), "quant::MixedInt8Linear::apply: y has ", y.size(), " elements, expected rows = ", rows());
    n_out_ = find_outlier_columns(x, threshold_, idx_.span());
    for (std::size_t c = 0; c < cols(); ++c) xr_[c] = x[c];
    for (std::size_t i = 0; i < n_out_; ++i) xr_[idx_[i]] = 0.f;  // the int8 part sees no outliers
    const float sx = quantize_activation(std::span<const float>(xr_.span()), xq_.span());
    const auto v = m_.view();
    gemv_w8a8<Arch>(v, std::span<const std::int8_t>(xq_.span()), sx, y, threads);
    for (std::size_t r = 0; r < rows(); ++r) {  // fp32 part over the few outlier columns
      float acc = 0.f;
      for (std::size_t i = 0; i < n_out_; ++i) acc += v.at(r, idx_[i]) * x[idx_[i]];
      y[r] += acc;
    }
  }
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    require(x.size() == n * cols() && y.size() == n * rows(), "quant::MixedInt8Linear::apply_batch: expected x [", n,
            ", ", cols(), "] and y [", n, ", ", rows(), "], got ", x.size(), " and ", y.size(), " elements");
    for (std::size_t t = 0; t < n; ++t) apply(x.subspan(t * cols(), cols()), y.subspan(t * rows(), rows()), threads);
  }

 private:
  QuantizedMatrix<format> m_;
  float threshold_;
  mutable Buffer<std::int8_t> xq_;     // [cols] quantized inlier activations
  mutable Buffer<float> xr_;           // [cols] x with outlier columns zeroed
  mutable Buffer<std::uint32_t> idx_;  // [cols] outlier column indices (first n_out_)
  mutable std::size_t n_out_ = 0;
};

static_assert(nn::LinearLayer<MixedInt8Linear<>>);

// ---- SmoothQuant ----------------------------------------------------------------------------------------

/// max_r |w[r, c]| for each column c of w [rows, cols].
[[nodiscard]] inline std::vector<float> column_absmax(std::span<const float> w, std::size_t rows, std::size_t cols) {
  require(w.size() == rows * cols, "quant::column_absmax: expected rows*cols = ", rows * cols, " values, got ", w.size());
  std::vector<float> m(cols, 0.f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) m[c] = std::fabs(w[r * cols + c]) > m[c] ? std::fabs(w[r * cols + c]) : m[c];
  return m;
}

/// SmoothQuant scales s_j = max|X_j|^α / max|W_j|^(1−α) from per-channel activation maxima (over a
/// calibration set) and weight column maxima. Channels where either maximum is 0 get s_j = 1.
/// Throws `value_error` for α outside [0, 1], `shape_error` for different lengths.
[[nodiscard]] inline std::vector<float> smooth_scales(std::span<const float> act_absmax,
                                                      std::span<const float> weight_absmax, float alpha = 0.5f) {
  require<value_error>(alpha >= 0.f && alpha <= 1.f, "quant::smooth_scales: alpha must be in [0, 1], got ", alpha);
  require(act_absmax.size() == weight_absmax.size(), "quant::smooth_scales: ", act_absmax.size(),
          " activation maxima but ", weight_absmax.size(), " weight maxima");
  std::vector<float> s(act_absmax.size(), 1.f);
  for (std::size_t j = 0; j < s.size(); ++j)
    if (act_absmax[j] > 0 && weight_absmax[j] > 0)
      s[j] = std::pow(act_absmax[j], alpha) / std::pow(weight_absmax[j], 1.f - alpha);
  return s;
}

/// W' = W · diag(s): w[r, c] *= s[c] for w [rows, cols].
inline void scale_columns(std::span<float> w, std::size_t rows, std::size_t cols, std::span<const float> s) {
  require(w.size() == rows * cols && s.size() == cols, "quant::scale_columns: expected w [", rows, ", ", cols,
          "] and s [", cols, "], got ", w.size(), " and ", s.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) w[r * cols + c] *= s[c];
}

/// X' = X / s for n vectors x [n, cols] (in a model, folded into the previous RMSNorm's weight).
inline void divide_channels(std::span<float> x, std::span<const float> s) {
  require(!s.empty() && x.size() % s.size() == 0, "quant::divide_channels: x has ", x.size(),
          " elements, not a multiple of ", s.size(), " channels");
  for (std::size_t i = 0; i < x.size(); ++i) x[i] /= s[i % s.size()];
}

}  // namespace barato::quant
