#pragma once
/// \file
/// KV code formats: how a quantized KV cache (kv/quantized.hpp, and the quantized pages of
/// kv/paged.hpp) stores one row (one token of one KV head, `head_dim` elements), and the cache-side
/// quantiser that writes it.
///
/// Row quantisation (symmetric absmax):
///   s = max_c |x_c| / kMaxCode,   code_c = clamp(round(x_c / s), −kMaxCode, kMaxCode),   x̂_c = s · code_c
/// (s = 0 and all codes 0 for an all-zero row). `Int8`: kMaxCode = 127, one byte per code.
/// `Int4`: kMaxCode = 7, two codes per byte — element 2i in the low nibble of byte i, element 2i+1 in
/// the high nibble, each stored as code + 8 (1…15).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace barato::kv {

/// 8-bit symmetric codes, one byte each.
struct Int8 {
  static constexpr unsigned kBits = 8;
  static constexpr int kMaxCode = 127;
  static constexpr std::string_view kName = "int8";
  /// Bytes of one row of `d` codes.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return d; }
  /// Code of element c of a packed row.
  [[nodiscard]] static int code(const std::uint8_t* row, std::size_t c) noexcept {
    return static_cast<int>(static_cast<std::int8_t>(row[c]));
  }
  /// Stores code q (|q| ≤ kMaxCode) as element c.
  static void put(std::uint8_t* row, std::size_t c, int q) noexcept {
    row[c] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
  }
};

/// 4-bit symmetric codes, two per byte (element 2i low nibble, 2i+1 high nibble, stored as code + 8).
struct Int4 {
  static constexpr unsigned kBits = 4;
  static constexpr int kMaxCode = 7;
  static constexpr std::string_view kName = "int4";
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return (d + 1) / 2; }
  [[nodiscard]] static int code(const std::uint8_t* row, std::size_t c) noexcept {
    const unsigned byte = row[c / 2];
    return static_cast<int>((c % 2 == 0 ? byte : byte >> 4) & 0x0Fu) - 8;
  }
  static void put(std::uint8_t* row, std::size_t c, int q) noexcept {
    const auto nib = static_cast<std::uint8_t>(q + 8);
    std::uint8_t& b = row[c / 2];
    b = c % 2 == 0 ? static_cast<std::uint8_t>((b & 0xF0u) | nib) : static_cast<std::uint8_t>((b & 0x0Fu) | (nib << 4));
  }
};

static_assert(Int8::row_bytes(64) == 64 && Int4::row_bytes(64) == 32 && Int4::row_bytes(5) == 3);

/// A KV code format: bits, largest code, packed row size, scalar code access.
template <class F>
concept KvFormat = requires(const std::uint8_t* cr, std::uint8_t* r, std::size_t c, int q) {
  { F::kBits } -> std::convertible_to<unsigned>;
  { F::kMaxCode } -> std::convertible_to<int>;
  { F::row_bytes(c) } -> std::convertible_to<std::size_t>;
  { F::code(cr, c) } -> std::convertible_to<int>;
  F::put(r, c, q);
};

static_assert(KvFormat<Int8> && KvFormat<Int4>);

/// Quantises one row x[0..d) into `out` (F::row_bytes(d) bytes) and returns its scale. Scalar:
/// appends are O(d) per row, attention is where the time goes.
/// Edge cases: an all-zero row (±0) and a row holding any NaN or ±∞ give zero codes and scale 0
/// (they dequantize to exact zeros: a cache never stores NaN); subnormal inputs quantize like any
/// other (the scale may be subnormal). d = 0 writes nothing and returns 0.
template <KvFormat F>
[[nodiscard]] inline float quantize_row(const float* x, std::size_t d, std::uint8_t* out) noexcept {
  float amax = 0.0f;
  float bad = 0.0f;  // x − x: 0 for finite x, NaN for NaN / ±∞ (no branch in the loop)
  for (std::size_t c = 0; c < d; ++c) {
    amax = std::max(amax, std::abs(x[c]));
    bad += x[c] - x[c];
  }
  std::fill(out, out + F::row_bytes(d), std::uint8_t{0});
  if (amax == 0.0f || bad != 0.0f || !std::isfinite(amax)) {
    for (std::size_t c = 0; c < d; ++c) F::put(out, c, 0);
    return 0.0f;
  }
  const float s = amax / static_cast<float>(F::kMaxCode);
  for (std::size_t c = 0; c < d; ++c) {
    const long q = std::lround(x[c] / s);
    F::put(out, c, static_cast<int>(std::clamp<long>(q, -F::kMaxCode, F::kMaxCode)));
  }
  return s;
}

}  // namespace barato::kv
