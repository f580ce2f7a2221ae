#pragma once
/// \file
/// `QuantizedMatrix<Format>`: a [rows, cols] weight matrix stored in a quantization format — packed
/// codes (`Buffer<uint8_t>`, [rows, row_bytes]) and scales (`Buffer<scale_type>`, one per scale group)
/// from a memory resource — and `QuantizedView<Format>`, the non-owning view the kernels take.
///
/// Quantization (the constructor) is the scalar reference: for each scale group, absmax → scale
/// (rounded to the scale type) → nearest code of w / scale, exactly as the format's rules say
/// (quant/format.hpp). Non-finite input throws `barato::value_error`; a group whose scale is 0 (all
/// zeros, or a scale below the scale type's smallest value) is stored as zero codes and dequantizes to
/// exact zeros. Groups of `PerGroup<G>` restart at column 0 of every row; the last group of a row holds
/// cols % G weights when G does not divide cols.
/// A format with its own group rule (`QuantizesGroups`, e.g. ggml's Q8_0 / Q4_0) is quantized by its
/// `quantize_group` instead, group by group; codes are laid out by `packing_of<F>` (quant/format.hpp).
/// A second constructor takes packed codes and scales as they are (no quantization).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/quant/format.hpp"

namespace barato::quant {

/// A read-only view of a quantized matrix (what kernels take). Trivially copyable.
template <Format F>
struct QuantizedView {
  using format = F;
  using scale_type = typename F::scale_type;
  using packing = packing_of<F>;

  const std::uint8_t* codes = nullptr;    // [rows, row_bytes] packed codes
  const scale_type* scales = nullptr;     // [scale_count]: 1, [rows] or [rows, groups_per_row]
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t row_bytes = 0;

  /// Packed codes of row r.
  [[nodiscard]] const std::uint8_t* row(std::size_t r) const noexcept { return codes + r * row_bytes; }
  /// Code of weight (r, c).
  [[nodiscard]] std::uint8_t code(std::size_t r, std::size_t c) const noexcept { return packing::get(row(r), c, cols); }
  /// Scales of row r: one per group (PerGroup), the row's scale (PerRow) or the tensor's (PerTensor).
  [[nodiscard]] const scale_type* row_scales(std::size_t r) const noexcept {
    using G = typename F::granularity;
    if constexpr (G::kGroup != 0) return scales + r * G::scales_per_row(cols);
    else if constexpr (std::is_same_v<G, PerRow>) return scales + r;
    else return scales;                                               // PerTensor
  }
  /// The float scale that applies to weight (r, c).
  [[nodiscard]] float scale(std::size_t r, std::size_t c) const noexcept {
    using G = typename F::granularity;
    if constexpr (G::kGroup != 0) return to_float(row_scales(r)[c / G::kGroup]);
    else return to_float(row_scales(r)[0]);
  }
  /// Dequantized weight (r, c) = level(code) · scale.
  [[nodiscard]] float at(std::size_t r, std::size_t c) const noexcept { return F::level(code(r, c)) * scale(r, c); }
};

/// Owner of a quantized [rows, cols] matrix. Move-only; `copy()` is explicit.
template <Format F>
class QuantizedMatrix {
 public:
  using format = F;
  using scale_type = typename F::scale_type;
  using granularity = typename F::granularity;
  using packing = packing_of<F>;

  QuantizedMatrix() = default;

  /// Quantizes `w` ([rows, cols], row-major) with the format's scalar reference rules.
  /// Throws `shape_error` for w.size() != rows·cols or a zero dimension, `value_error` for NaN / Inf in
  /// `w` or a group whose scale overflows the scale type. O(rows·cols).
  QuantizedMatrix(std::size_t rows, std::size_t cols, std::span<const float> w,
                  std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : rows_(checked_rows(rows, cols, w.size())), cols_(cols), row_bytes_(packing::row_bytes(cols)),
        codes_(rows * packing::row_bytes(cols), mr),
        scales_(granularity::scale_count(rows, cols), mr) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      require<value_error>(std::isfinite(w[i]), "quant::QuantizedMatrix: weight (", i / cols, ", ", i % cols,
                           ") is not finite (", w[i], "); expected finite weights");
    }
    if constexpr (QuantizesGroups<F>) {  // the format's own rule (quant/format.hpp)
      const std::size_t g = granularity::kGroup, gpr = granularity::scales_per_row(cols);
      std::uint8_t q[granularity::kGroup];  // one group's codes, unpacked
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < gpr; ++j) {
          const std::size_t c0 = j * g, c1 = c0 + g < cols ? c0 + g : cols;
          const scale_type s = F::quantize_group(w.data() + r * cols + c0, c1 - c0, q);
          require<value_error>(std::isfinite(to_float(s)), "quant::QuantizedMatrix: row ", r, ", group ", j,
                               " (columns ", c0, "…", c1 - 1, ") gives a scale that overflows the scale type");
          scales_[r * gpr + j] = s;
          for (std::size_t c = c0; c < c1; ++c) packing::set(codes_.data() + r * row_bytes_, c, cols_, q[c - c0]);
        }
    } else if constexpr (granularity::kGroup != 0) {
      const std::size_t g = granularity::kGroup, gpr = granularity::scales_per_row(cols);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < gpr; ++j) {
          const std::size_t c0 = j * g, c1 = c0 + g < cols ? c0 + g : cols;
          quantize_span(w.data() + r * cols, r, c0, c1, scales_[r * gpr + j]);
        }
    } else if constexpr (std::is_same_v<granularity, PerRow>) {
      for (std::size_t r = 0; r < rows; ++r) quantize_span(w.data() + r * cols, r, 0, cols, scales_[r]);
    } else {  // PerTensor: absmax over everything, then every row with that one scale
      float a = 0.f;
      for (float v : w) a = std::fabs(v) > a ? std::fabs(v) : a;
      scales_[0] = make_scale(a);
      for (std::size_t r = 0; r < rows; ++r) encode_span(w.data() + r * cols, r, 0, cols, static_cast<float>(scales_[0]));
    }
  }

  /// Takes packed codes ([rows, row_bytes] in `packing_of<F>`) and scales ([scale_count(rows, cols)])
  /// as they are — no quantization (what a loader of already quantized weights calls; the buffers keep
  /// their memory resource). Throws `shape_error` when a size disagrees with rows × cols.
  QuantizedMatrix(std::size_t rows, std::size_t cols, Buffer<std::uint8_t>&& codes, Buffer<scale_type>&& scales)
      : rows_(checked_rows(rows, cols, rows * cols)), cols_(cols), row_bytes_(packing::row_bytes(cols)) {
    require(codes.size() == rows * row_bytes_, "quant::QuantizedMatrix: expected ", rows, " x ", row_bytes_,
            " = ", rows * row_bytes_, " code bytes for ", rows, " x ", cols, " weights, got ", codes.size());
    require(scales.size() == granularity::scale_count(rows, cols), "quant::QuantizedMatrix: expected ",
            granularity::scale_count(rows, cols), " scales for ", rows, " x ", cols, " weights, got ", scales.size());
    codes_ = std::move(codes);
    scales_ = std::move(scales);
  }

  QuantizedMatrix(QuantizedMatrix&&) noexcept = default;
  QuantizedMatrix& operator=(QuantizedMatrix&&) noexcept = default;
  /// Explicit deep copy (same memory resources).
  [[nodiscard]] QuantizedMatrix copy() const {
    QuantizedMatrix out;
    out.rows_ = rows_;
    out.cols_ = cols_;
    out.row_bytes_ = row_bytes_;
    out.codes_ = codes_.copy();
    out.scales_ = scales_.copy();
    return out;
  }

  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
  /// Exact storage: packed codes + scales, in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return codes_.bytes() + scales_.bytes(); }
  /// Exact storage bits per weight, scales included: 8 · bytes() / (rows · cols).
  [[nodiscard]] double bits_per_weight() const noexcept {
    return rows_ * cols_ == 0 ? 0.0 : 8.0 * double(bytes()) / double(rows_ * cols_);
  }
  /// Read-only view for kernels.
  [[nodiscard]] QuantizedView<F> view() const noexcept {
    return {codes_.data(), scales_.data(), rows_, cols_, row_bytes_};
  }
  /// Packed codes [rows, row_bytes] and scales (layout in quant/format.hpp).
  [[nodiscard]] std::span<const std::uint8_t> codes() const noexcept { return codes_.span(); }
  [[nodiscard]] std::span<const scale_type> scales() const noexcept { return scales_.span(); }
  /// Code of weight (r, c).
  [[nodiscard]] std::uint8_t code(std::size_t r, std::size_t c) const noexcept { return view().code(r, c); }

  /// Writes the dequantized matrix Ŵ [rows, cols] into `out`. Throws `shape_error` on a size mismatch.
  void dequantize(std::span<float> out) const {
    require(out.size() == rows_ * cols_, "quant::QuantizedMatrix::dequantize: expected ", rows_ * cols_,
            " floats, got ", out.size());
    const auto v = view();
    for (std::size_t r = 0; r < rows_; ++r)
      for (std::size_t c = 0; c < cols_; ++c) out[r * cols_ + c] = v.at(r, c);
  }

 private:
  static std::size_t checked_rows(std::size_t rows, std::size_t cols, std::size_t n) {
    require(rows > 0 && cols > 0, "quant::QuantizedMatrix: rows and cols must be > 0, got ", rows, " x ", cols);
    require(n == rows * cols, "quant::QuantizedMatrix: expected rows*cols = ", rows, "*", cols, " = ", rows * cols,
            " weights, got ", n);
    return rows;
  }
  /// scale = absmax / divisor, rounded to the scale type; overflow is a value_error.
  static scale_type make_scale(float absmax) {
    const scale_type s = from_float<scale_type>(absmax / F::kScaleDivisor);
    require<value_error>(std::isfinite(to_float(s)), "quant::QuantizedMatrix: group absmax ", absmax,
                         " gives a scale that overflows the scale type");
    return s;
  }
  void quantize_span(const float* wr, std::size_t r, std::size_t c0, std::size_t c1, scale_type& s_out) {
    float a = 0.f;
    for (std::size_t c = c0; c < c1; ++c) a = std::fabs(wr[c]) > a ? std::fabs(wr[c]) : a;
    s_out = make_scale(a);
    encode_span(wr, r, c0, c1, to_float(s_out));
  }
  void encode_span(const float* wr, std::size_t r, std::size_t c0, std::size_t c1, float s) {
    std::uint8_t* row = codes_.data() + r * row_bytes_;
    for (std::size_t c = c0; c < c1; ++c) {
      // division, not a multiply by 1/s: bit-exact with llama2.c's export (torch: w / scale)
      const std::uint8_t code = s == 0.f ? F::kZeroCode : F::encode(wr[c] / s);
      packing::set(row, c, cols_, code);
    }
  }

  std::size_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  Buffer<std::uint8_t> codes_;   // [rows, row_bytes] packed codes
  Buffer<scale_type> scales_;    // [granularity::scale_count(rows, cols)]
};

}  // namespace barato::quant
