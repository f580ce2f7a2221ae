#pragma once
/// \file
/// The int8-activation path (W8A8, as in LLM.int8() and SmoothQuant): each activation vector (token)
/// is quantized with its own absmax scale to int8, multiplied with int8 per-row (or per-tensor)
/// weights with int32 accumulation, and the int32 dot products are scaled back once per output:
/// y_r = s_r · s_x · Σ_c q_rc · x8_c. Unlike the weight-only kernels (quant/gemv.hpp), the
/// activations lose precision here (8 bits per token), which is what activation outliers break
/// (see quant/outliers.hpp).
///
/// Kernels: `Int8Dot<Arch>` — the portable int32 loop, and an AVX-512 VNNI specialization
/// (`vpdpbusd`, weights with the sign bit flipped to unsigned, the offset removed with Σ x8).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/gemv.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>
#endif

namespace barato::quant {

/// Quantizes x to int8 with one absmax scale (per token): q = round(x / s), s = max|x| / 127.
/// Returns s (0 for an all-zero x, whose codes are all 0). Throws `shape_error` when q.size() !=
/// x.size() and `value_error` for NaN / Inf in x. O(n).
inline float quantize_activation(std::span<const float> x, std::span<std::int8_t> q) {
  require(q.size() == x.size(), "quant::quantize_activation: q has ", q.size(), " elements, x has ", x.size());
  float m = 0.f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    require<value_error>(std::isfinite(x[i]), "quant::quantize_activation: x[", i, "] = ", x[i], " is not finite");
    m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  }
  const float s = m / 127.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = s == 0.f ? 0.f : std::nearbyint(x[i] / s);
    v = v > 127.f ? 127.f : (v < -127.f ? -127.f : v);
    q[i] = static_cast<std::int8_t>(v);
  }
  return s;
}

/// Σ w[i] · x[i] over n int8 pairs in int32 (exact for n < 2^17). Portable loop.
template <class Arch>
struct Int8Dot {
  static constexpr const char* kName = "scalar-int32";
  [[nodiscard]] static std::int32_t dot(const std::int8_t* w, const std::int8_t* x, std::size_t n,
                                        std::int32_t /*sum_x*/) noexcept {
    std::int32_t s = 0;
    for (std::size_t i = 0; i < n; ++i) s += std::int32_t{w[i]} * std::int32_t{x[i]};
    return s;
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/// VNNI: 64 int8 products per `vpdpbusd`; w enters as w + 128 (sign bit flipped), so the result is
/// corrected by 128 · Σ x (`sum_x`, computed once per vector).
template <class Arch>
  requires(simd::kHasAvx512bw<Arch>)
struct Int8Dot<Arch> {
  static constexpr const char* kName = "avx512-vnni";
  [[nodiscard]] static std::int32_t dot(const std::int8_t* w, const std::int8_t* x, std::size_t n,
                                        std::int32_t sum_x) noexcept {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
      a0 = _mm512_dpbusd_epi32(a0, _mm512_xor_si512(_mm512_loadu_si512(w + i), flip), _mm512_loadu_si512(x + i));
      a1 = _mm512_dpbusd_epi32(a1, _mm512_xor_si512(_mm512_loadu_si512(w + i + 64), flip), _mm512_loadu_si512(x + i + 64));
    }
    for (; i < n; i += 64) {  // masked tail: x is 0 in masked lanes, so their (flipped) w does not count
      const std::size_t left = n - i;
      const __mmask64 m = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
      a0 = _mm512_dpbusd_epi32(a0, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w + i), flip), _mm512_maskz_loadu_epi8(m, x + i));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1)) - 128 * sum_x;
  }
};
#endif

/// y_r = s_r · sx · Σ_c q_rc · xq_c for int8 weights with one scale per row or per tensor.
/// xq [cols], y [rows]. Throws `shape_error` on mismatched sizes. O(rows·cols); allocates nothing.
template <class Arch = simd::DefaultArch, Granularity Gran, Element S>
  requires(std::is_same_v<Gran, PerRow> || std::is_same_v<Gran, PerTensor>)
void gemv_w8a8(const QuantizedView<AbsMax<8, Gran, S>>& w, std::span<const std::int8_t> xq, float sx,
               std::span<float> y, int threads = 1) {
  require(xq.size() == w.cols, "quant::gemv_w8a8: xq has ", xq.size(), " elements, expected cols = ", w.cols);
  require(y.size() == w.rows, "quant::gemv_w8a8: y has ", y.size(), " elements, expected rows = ", w.rows);
  std::int32_t sum_x = 0;
  for (auto v : xq) sum_x += v;
  parallel_for(
      w.rows, detail::useful_threads(w.rows, w.cols, threads),
      [&](std::size_t lo, std::size_t hi) {
        for (std::size_t r = lo; r < hi; ++r) {
          const auto d = Int8Dot<Arch>::dot(reinterpret_cast<const std::int8_t*>(w.row(r)), xq.data(), w.cols, sum_x);
          y[r] = static_cast<float>(w.row_scales(r)[0]) * sx * static_cast<float>(d);
        }
      },
      detail::kRowGrain);
}

/// A W8A8 linear layer: int8 per-row weights, activations quantized per token on the fly. Holds a
/// scratch row of `cols` int8 (sized at construction), so `apply` allocates nothing — and one object
/// must not run `apply` from two threads at once. `apply_batch` quantizes and multiplies token by
/// token (weights read once per token).
template <Element S = f16, class Arch = simd::DefaultArch>
class W8A8Linear {
 public:
  using format = AbsMax<8, PerRow, S>;

  W8A8Linear(std::size_t rows, std::size_t cols, std::span<const float> w,
             std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : m_(rows, cols, w, mr), xq_(cols, mr) {}

  [[nodiscard]] std::size_t rows() const noexcept { return m_.rows(); }
  [[nodiscard]] std::size_t cols() const noexcept { return m_.cols(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return m_.bytes(); }
  [[nodiscard]] const QuantizedMatrix<format>& matrix() const noexcept { return m_; }

  /// y = Ŵ · dequant(quant(x)). Throws `shape_error` / `value_error` (non-finite x).
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    require(x.size() == cols(), "quant::W8A8Linear::apply: x has ", x.size(), " elements, expected cols = ", cols());
    const float sx = quantize_activation(x, xq_.span());
    gemv_w8a8<Arch>(m_.view(), std::span<const std::int8_t>(xq_.span()), sx, y, threads);
  }
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    require(x.size() == n * cols() && y.size() == n * rows(), "quant::W8A8Linear::apply_batch: expected x [", n, ", ",
            cols(), "] and y [", n, ", ", rows(), "], got ", x.size(), " and ", y.size(), " elements");
    for (std::size_t t = 0; t < n; ++t) apply(x.subspan(t * cols(), cols()), y.subspan(t * rows(), rows()), threads);
  }

 private:
  QuantizedMatrix<format> m_;
  mutable Buffer<std::int8_t> xq_;  // [cols] scratch: the quantized activation
};

static_assert(nn::LinearLayer<W8A8Linear<>>);

}  // namespace barato::quant
