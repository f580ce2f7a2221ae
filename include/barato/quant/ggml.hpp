#pragma once
/// \file
/// `quant::GgmlQ8_0` and `quant::GgmlQ4_0`: ggml's Q8_0 and Q4_0 weight formats (the block types of
/// llama.cpp's GGUF files), with ggml's layout and ggml's reference quantization rules, so that a
/// matrix quantized here has, block for block, the bytes llama.cpp's quantizer writes for the same
/// fp32 weights. One header for both: they share the block size (32 consecutive weights of a row), the
/// fp16 scale, the overflow rules of the float-to-integer conversion and the byte conversion
/// (quant/ggml_blocks.hpp); they differ only in the rule of a block and in the code width.
///
/// **Q8_0** (34-byte block: fp16 d, then 32 int8 codes), for a block x[0…32):
///   amax = max |x|; d = amax / 127; id = 1/d (0 when d = 0); stored scale fp16(d) (round to nearest,
///   ties to even); q_j = roundf(x_j · id) (half away from zero; from the *unrounded* d, and x · id,
///   not x / d); x̂_j = float(fp16(d)) · q_j.
/// **Q4_0** (18-byte block: fp16 d, then 16 bytes), for a block x[0…32):
///   m = the signed x_j of largest |x_j| (the first one on ties); d = m / −8; id = 1/d (0 when d = 0);
///   stored fp16(d); u_j = min(15, int8(x_j · id + 8.5f)) (the cast truncates toward zero; the product
///   is rounded to fp32 before the add — no fused multiply-add); byte j holds u_j in its low nibble and
///   u_{j+16} in its high nibble (`SplitNibblePacking<32>`); x̂_j = float(fp16(d)) · (u_j − 8). The
///   scale is negative when m > 0 (then u = 0 at m and u = 15 at −m, clamped from 16).
///
/// Differences from `AbsMax<8, PerGroup<32>>` (quant/absmax.hpp, llama2.c's export): AbsMax takes codes
/// from the *stored* scale with w / s' and rounds half to even; these formats carry ggml's rules in
/// their `quantize_group` hook (quant/format.hpp) and are bit-exact with ggml, not with llama2.c.
///
/// Out-of-range conversions: C leaves a float-to-integer conversion of a value outside the target's
/// range undefined. When a block's largest magnitude is tiny but non-zero (below 127 / FLT_MAX ≈
/// 3.7·10⁻³⁷ for Q8_0, 8 / FLT_MAX ≈ 2.4·10⁻³⁸ for Q4_0), d is subnormal and id = 1/d overflows to ±∞,
/// so x · id is ±∞ or NaN (0 · ∞). x86's conversions (`cvttss2si`, `cvttps2dq`) return 0x80000000
/// there, whose low byte is 0, so an x86 build of ggml's quantizer stores code byte 0; `ggml_int8`
/// below does the same on every host. (Inferred from the instruction set, not checked against a file:
/// the shared GGUF files hold no such block.) Such blocks have fp16(d) = 0 and dequantize to zeros
/// either way; only their code bytes depend on this rule.
///
/// A row whose width is not a multiple of 32 ends in a shorter block quantized by the same rule over
/// its weights (ggml has no such block: the byte conversion requires cols % 32 == 0).
/// Products: on VNNI machines these formats are multiplied as ggml multiplies them, with int8
/// activations per 32 columns (quant/ggml_dot.hpp, quant/vnni_ggml.hpp).
/// Error of the stored weights: |x − x̂| ≤ |d|/2 (Q8_0) and ≤ |d| (Q4_0, whose clamp at 15 costs up to
/// one step at −m) per weight, plus the fp16 rounding of d (≤ 2⁻¹¹ relative) times |q|.
///
/// **`Q4_0F32`** is Q4_0 with the scale kept in fp32 (d not rounded to fp16, so no fp16 term in its
/// error; 20 bytes per block): the same codes, order, rule and product, for scales fp16 cannot hold
/// (see the type).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "barato/core/dtype.hpp"
#include "barato/quant/format.hpp"

namespace barato::quant {

/// ggml's conversion of a float to int8 on x86: truncation toward zero of an in-range value, the low
/// byte of it otherwise (out of the int32 range or NaN: 0x80000000, low byte 0). See the file comment.
[[nodiscard]] inline std::int8_t ggml_int8(float v) noexcept {
  if (!(v > -2147483648.0f && v < 2147483648.0f)) return 0;  // NaN, ±∞ and |v| ≥ 2³¹: integer indefinite
  const auto t = static_cast<std::int64_t>(v);               // truncation toward zero
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<std::uint64_t>(t) & 0xFFu));
}

namespace detail {
/// x · id rounded to fp32. The volatile store keeps GCC (-ffp-contract=fast) and clang from fusing
/// the product into a following add (Q4_0's + 8.5f), which would round once instead of twice.
[[nodiscard]] inline float ggml_product(float x, float id) noexcept {
  volatile float p = x * id;
  return p;
}
}  // namespace detail

/// ggml's Q8_0: int8 codes, one fp16 scale per block of 32 weights of a row (see the file comment).
struct GgmlQ8_0 : BlockFacts<PerGroup<32>, 8u, f16> {
  using scale_type = f16;
  using granularity = PerGroup<32>;
  static constexpr unsigned kBits = 8;
  static constexpr unsigned kCodeBits = 8;
  static constexpr int kQMax = 127;   ///< largest |q| the rule produces
  static constexpr int kQMin = -128;  ///< smallest code a file may hold (the rule never writes it)
  static constexpr int kOffset = 0;   ///< codes are two's complement int8
  static constexpr float kScaleDivisor = 127.0f;
  static constexpr std::uint8_t kZeroCode = 0;
  static constexpr std::string_view kName = "q8_0";
  /// Bytes of one block in ggml's layout: fp16 d + 32 codes.
  static constexpr std::size_t kGgmlBlockBytes = 34;
  /// Products follow ggml's rule (quant/ggml_dot.hpp) and take its VNNI kernel.
  static constexpr bool kGgmlProduct = true;

  /// The signed integer a code stands for.
  [[nodiscard]] static constexpr int integer(std::uint8_t code) noexcept { return static_cast<std::int8_t>(code); }
  /// Unscaled value of a code.
  [[nodiscard]] static constexpr float level(std::uint8_t code) noexcept { return static_cast<float>(integer(code)); }
  /// Code of v = x · id: roundf (half away from zero), converted as ggml does.
  [[nodiscard]] static std::uint8_t encode(float v) noexcept { return static_cast<std::uint8_t>(ggml_int8(std::round(v))); }

  /// ggml's rule for one block of n ≤ 32 weights: writes n codes, returns fp16(d). O(n).
  static f16 quantize_group(const float* x, std::size_t n, std::uint8_t* codes) noexcept {
    float amax = 0.0f;
    for (std::size_t j = 0; j < n; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (std::size_t j = 0; j < n; ++j) codes[j] = encode(x[j] * id);
    return from_float<f16>(d);
  }
};

namespace detail {
/// Q4_0's codes, layout and rule with the block scale stored as S: `GgmlQ4_0` (fp16, ggml's) and
/// `Q4_0F32` (fp32) share everything else.
template <class S>
struct Q4_0Rule : BlockFacts<PerGroup<32>, 4u, S> {
  using scale_type = S;
  using granularity = PerGroup<32>;
  using packing = SplitNibblePacking<32>;
  static constexpr unsigned kBits = 4;
  static constexpr unsigned kCodeBits = 4;
  static constexpr int kQMax = 7;
  static constexpr int kQMin = -8;
  static constexpr int kOffset = 8;  ///< stored code u = q + 8
  /// |d| = |m| / 8 (the sign of d is the sign of −m).
  static constexpr float kScaleDivisor = 8.0f;
  static constexpr std::uint8_t kZeroCode = 8;
  /// Products follow ggml's rule (quant/ggml_dot.hpp) and take its VNNI kernel.
  static constexpr bool kGgmlProduct = true;

  /// The signed integer a code stands for: u − 8.
  [[nodiscard]] static constexpr int integer(std::uint8_t code) noexcept { return static_cast<int>(code & 15u) - kOffset; }
  /// Unscaled value of a code.
  [[nodiscard]] static constexpr float level(std::uint8_t code) noexcept { return static_cast<float>(integer(code)); }
  /// Code of v = x · id: min(15, int8(v + 8.5f)), the int8 conversion as ggml's (`ggml_int8`).
  [[nodiscard]] static std::uint8_t encode(float v) noexcept {
    const int u = ggml_int8(v + 8.5f);
    return static_cast<std::uint8_t>((u < 15 ? u : 15) & 15);
  }

  /// ggml's rule for one block of n ≤ 32 weights: writes n codes, returns d stored as S. O(n).
  static S quantize_group(const float* x, std::size_t n, std::uint8_t* codes) noexcept {
    float amax = 0.0f, m = 0.0f;
    for (std::size_t j = 0; j < n; ++j)
      if (amax < std::fabs(x[j])) {  // strict: the first of equal magnitudes wins
        amax = std::fabs(x[j]);
        m = x[j];
      }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (std::size_t j = 0; j < n; ++j) codes[j] = encode(ggml_product(x[j], id));
    return from_float<S>(d);
  }
};
}  // namespace detail

/// ggml's Q4_0: 4-bit codes (q + 8) in ggml's split-nibble order, one fp16 scale per block of 32
/// weights of a row (see the file comment).
struct GgmlQ4_0 : detail::Q4_0Rule<f16> {
  static constexpr std::string_view kName = "q4_0";
  /// Bytes of one block in ggml's layout: fp16 d + 16 bytes of nibbles.
  static constexpr std::size_t kGgmlBlockBytes = 18;
};

/// Q4_0 with its scale kept in fp32: the same codes, nibble order, rule (d unrounded) and product
/// (ggml's, on int8 activations; quant/vnni_ggml.hpp), 5 bits per weight instead of 4.5. For scales
/// that fp16 cannot hold: a k-quant's d · sc (an fp16 times a 6-bit integer) is exact in fp32 only,
/// so the examples' GGUF loader keeps the 4-bit groups of Q4_1 / Q4_K in this format under
/// `quant::OffsetLinear`. Not a ggml block type (no byte conversion; `GgmlBlockFormat` excludes it).
struct Q4_0F32 : detail::Q4_0Rule<float> {
  static constexpr std::string_view kName = "q4_0-f32";
};

static_assert(Format<GgmlQ8_0> && QuantizesGroups<GgmlQ8_0> && Format<GgmlQ4_0> && QuantizesGroups<GgmlQ4_0> &&
              Format<Q4_0F32> && QuantizesGroups<Q4_0F32>);
static_assert(GgmlQ8_0::kBytesPerBlock == GgmlQ8_0::kGgmlBlockBytes && GgmlQ8_0::kBitsPerWeight == 8.5);
static_assert(GgmlQ4_0::kBytesPerBlock == GgmlQ4_0::kGgmlBlockBytes && GgmlQ4_0::kBitsPerWeight == 4.5);
static_assert(Q4_0F32::kBytesPerBlock == 20 && Q4_0F32::kBitsPerWeight == 5.0);
static_assert(GgmlQ4_0::level(GgmlQ4_0::kZeroCode) == 0.0f && GgmlQ8_0::level(GgmlQ8_0::kZeroCode) == 0.0f);
static_assert(std::is_same_v<packing_of<GgmlQ4_0>, SplitNibblePacking<32>> &&
              std::is_same_v<packing_of<GgmlQ8_0>, CodePacking<8>>);

}  // namespace barato::quant
