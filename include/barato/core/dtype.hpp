#pragma once
/// \file
/// Element types: fp32, fp16 (`Eigen::half`) and bf16 (`Eigen::bfloat16`) as storage types.
/// Scalar conversions go through Eigen, except fp16 → float where the build has F16C (`to_float`);
/// bulk conversions in hot loops live in barato/simd/convert.hpp.

#include <Eigen/Core>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace barato {

using f16 = Eigen::half;       ///< IEEE binary16 storage type.
using bf16 = Eigen::bfloat16;  ///< bfloat16 storage type.

/// A floating-point element type barato can store activations, caches and weights in.
template <class T>
concept Element = std::same_as<T, float> || std::same_as<T, f16> || std::same_as<T, bf16>;

/// Runtime tag for an element type (reports, CLI flags); never used in a hot loop.
enum class DType { f32, f16, bf16 };

template <Element T>
inline constexpr DType dtype_of = std::same_as<T, float> ? DType::f32 : (std::same_as<T, f16> ? DType::f16 : DType::bf16);

/// Bytes of one element of `t`.
[[nodiscard]] constexpr std::size_t dtype_size(DType t) noexcept { return t == DType::f32 ? 4 : 2; }

[[nodiscard]] constexpr std::string_view dtype_name(DType t) noexcept {
  return t == DType::f32 ? "fp32" : (t == DType::f16 ? "fp16" : "bf16");
}

/// Scalar conversion to float (exact; round-to-nearest-even on the way back, `from_float`). fp16 takes
/// the F16C instruction when the build enables it: Eigen 3.4 enables its own F16C path only under
/// clang (its test reads `!defined(EIGEN_COMP_CLANG) || EIGEN_COMP_CLANG >= 380`, and EIGEN_COMP_CLANG
/// is always defined, 0 under GCC), so with GCC every `static_cast<float>(f16)` ran a branchy bit-level
/// conversion — in the quantized kernels' per-row and per-group scales, about a fifth of a 64-column
/// int8-row product's time. The same value either way (tested over all 65,536 bit patterns).
template <Element T>
[[nodiscard]] inline float to_float(T x) noexcept {
#if defined(__F16C__)
  if constexpr (std::same_as<T, f16>) return _cvtsh_ss(std::bit_cast<std::uint16_t>(x));
#endif
  return static_cast<float>(x);
}
template <Element T>
[[nodiscard]] inline T from_float(float x) noexcept {
  return static_cast<T>(x);
}

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

}  // namespace barato
