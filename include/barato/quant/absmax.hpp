#pragma once
/// \file
/// `quant::AbsMax<Bits, Granularity, Scale>`: symmetric absmax integer quantization (LLM.int8 /
/// llama2.c Q8_0 / GPTQ-style round-to-nearest). Integers live in [−2^(b−1), 2^(b−1)−1] with
/// scale = absmax / (2^(b−1)−1), so the largest |w| of a group maps to ±(2^(b−1)−1) and −2^(b−1) is
/// never produced. Rounding is to nearest, ties to even (as llama2.c's export with torch.round).
///
/// Storage: b ∈ 5…8 in one byte per weight (two's complement int8); b ∈ 3…4 in 4-bit codes and
/// b = 2 in 2-bit codes, both offset binary (stored u = q + 2^(container−1)). The scale type is part
/// of the format: fp16 by default, fp32 allowed.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "barato/core/dtype.hpp"
#include "barato/quant/format.hpp"

namespace barato::quant {

/// Symmetric absmax integer format of Bits bits per weight, one Scale per tensor / row / group (see the file comment).
template <unsigned Bits, Granularity Gran, Element Scale = f16>
struct AbsMax : BlockFacts<Gran, (Bits > 4 ? 8u : (Bits > 2 ? 4u : 2u)), Scale> {
  static_assert(Bits >= 2 && Bits <= 8, "AbsMax supports 2 to 8 bits");
  using scale_type = Scale;
  using granularity = Gran;
  static constexpr unsigned kBits = Bits;
  static constexpr unsigned kCodeBits = Bits > 4 ? 8u : (Bits > 2 ? 4u : 2u);
  /// Largest integer magnitude produced: 2^(b−1) − 1.
  static constexpr int kQMax = (1 << (Bits - 1)) - 1;
  static constexpr int kQMin = -(1 << (Bits - 1));
  /// Offset of the stored code: 0 for byte codes (two's complement), 2^(container−1) otherwise.
  static constexpr int kOffset = kCodeBits == 8 ? 0 : (1 << (kCodeBits - 1));
  static constexpr float kScaleDivisor = static_cast<float>(kQMax);
  static constexpr std::uint8_t kZeroCode = static_cast<std::uint8_t>(kOffset);
  static constexpr std::string_view kName = "absmax";

  /// The signed integer a code stands for.
  [[nodiscard]] static constexpr int integer(std::uint8_t code) noexcept {
    if constexpr (kCodeBits == 8) return static_cast<int>(static_cast<std::int8_t>(code));
    else return static_cast<int>(code) - kOffset;
  }
  /// Code of the integer q (q in [kQMin, kQMax]).
  [[nodiscard]] static constexpr std::uint8_t code_of(int q) noexcept {
    if constexpr (kCodeBits == 8) return static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    else return static_cast<std::uint8_t>(q + kOffset);
  }
  /// Unscaled value of a code.
  [[nodiscard]] static constexpr float level(std::uint8_t code) noexcept { return static_cast<float>(integer(code)); }
  /// Nearest code to v = w / scale: round half to even, clamped to [kQMin, kQMax].
  [[nodiscard]] static std::uint8_t encode(float v) noexcept {
    float q = std::nearbyint(v);
    q = q < float(kQMin) ? float(kQMin) : (q > float(kQMax) ? float(kQMax) : q);
    return code_of(static_cast<int>(q));
  }
};

/// Common names.
template <Element Scale = f16>
using Int8PerTensor = AbsMax<8, PerTensor, Scale>;
template <Element Scale = f16>
using Int8PerRow = AbsMax<8, PerRow, Scale>;
template <Element Scale = f16>
using Int4PerTensor = AbsMax<4, PerTensor, Scale>;
template <Element Scale = f16>
using Int4PerRow = AbsMax<4, PerRow, Scale>;
template <std::size_t G, Element Scale = f16>
using Int4Group = AbsMax<4, PerGroup<G>, Scale>;
template <std::size_t G, Element Scale = f16>
using Int8Group = AbsMax<8, PerGroup<G>, Scale>;

// The facts the issue states, checked at compile time.
static_assert(Format<AbsMax<8, PerRow>> && Format<AbsMax<4, PerGroup<128>>> && Format<AbsMax<2, PerTensor, float>>);
static_assert(AbsMax<4, PerGroup<128>>::kBitsPerWeight == 4.125);
static_assert(AbsMax<4, PerGroup<128>>::kBytesPerBlock == 66);
static_assert(AbsMax<8, PerGroup<32>, float>::kBytesPerBlock == 36 && AbsMax<8, PerGroup<32>, float>::kBitsPerWeight == 9.0);
static_assert(AbsMax<4, PerGroup<32>>::kBitsPerWeight == 4.5 && AbsMax<4, PerGroup<64>>::kBitsPerWeight == 4.25);
static_assert(AbsMax<8, PerRow>::kQMax == 127 && AbsMax<4, PerRow>::kQMax == 7 && AbsMax<2, PerRow>::kQMax == 1);
static_assert(AbsMax<3, PerRow>::kCodeBits == 4 && AbsMax<6, PerRow>::kCodeBits == 8 && AbsMax<2, PerRow>::kCodeBits == 2);

}  // namespace barato::quant
