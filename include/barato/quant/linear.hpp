#pragma once
/// \file
/// `quant::Linear<Format>`: a linear layer y = Ŵ x whose weights are a `QuantizedMatrix<Format>` —
/// the model of `nn::LinearLayer` for quantized weights (fp32 activations in and out). Changing a
/// model's weight format is changing this template argument:
///
/// ```cpp
/// using Weights = barato::quant::Linear<barato::quant::Int4Group<128>>;   // or Nf4<64>, GgmlQ4_0, Int8PerRow<>, ...
/// Weights wq(rows, cols, fp32_weights);
/// wq.apply(x, y, threads);
/// ```

#include <cstddef>
#include <memory_resource>
#include <span>
#include <utility>

#include "barato/nn/linear_layer.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/gemv.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/nf4.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/arch.hpp"

namespace barato::quant {

/// A linear layer y = Ŵ x over a packed QuantizedMatrix<F>: the nn::LinearLayer model for quantized weights.
template <Format F, class Arch = simd::DefaultArch>
class Linear {
 public:
  using format = F;

  /// Quantizes fp32 weights `w` [rows, cols] (see `QuantizedMatrix` for the errors it throws).
  Linear(std::size_t rows, std::size_t cols, std::span<const float> w,
         std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : m_(rows, cols, w, mr) {}
  /// Takes an already quantized matrix.
  explicit Linear(QuantizedMatrix<F>&& m) noexcept : m_(std::move(m)) {}

  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;
  [[nodiscard]] Linear copy() const { return Linear(m_.copy()); }

  [[nodiscard]] std::size_t rows() const noexcept { return m_.rows(); }
  [[nodiscard]] std::size_t cols() const noexcept { return m_.cols(); }
  /// Exact weight storage (codes + scales) in bytes: what one `apply` streams.
  [[nodiscard]] std::size_t bytes() const noexcept { return m_.bytes(); }
  [[nodiscard]] double bits_per_weight() const noexcept { return m_.bits_per_weight(); }
  [[nodiscard]] const QuantizedMatrix<F>& matrix() const noexcept { return m_; }

  /// Grows the calling thread's activation arena for batches of up to n vectors, so that `apply` and
  /// `apply_batch` on this thread allocate nothing (call it at construction with the largest n).
  void reserve(std::size_t n) const { reserve_gemv<Arch, F>(n, cols()); }

  /// y = Ŵ x (x [cols], y [rows]). Allocates nothing once the thread's arena is large enough (`reserve`). Throws `shape_error` on mismatched sizes.
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    gemv<Arch>(m_.view(), x, y, threads);
  }
  /// Y = X Ŵᵀ for n vectors (X [n, cols], Y [n, rows]); weights read once for any n, row t bitwise
  /// equal to `apply` of x_t (quant/gemv.hpp).
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    gemv_batch<Arch>(m_.view(), x, y, n, threads);
  }

 private:
  QuantizedMatrix<F> m_;
};

static_assert(nn::LinearLayer<Linear<Int8PerRow<>>>);
static_assert(nn::LinearLayer<Linear<Int4Group<128>>>);
static_assert(nn::LinearLayer<Linear<Nf4<64>>>);
static_assert(nn::LinearLayer<Linear<GgmlQ8_0>> && nn::LinearLayer<Linear<GgmlQ4_0>>);

}  // namespace barato::quant
