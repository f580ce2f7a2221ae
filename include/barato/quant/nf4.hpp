#pragma once
/// \file
/// `quant::Nf4<Block, Scale>`: 4-bit NormalFloat (Dettmers et al., "QLoRA", 2023). The 16 levels are
/// quantiles of a standard normal, normalised to [−1, 1] with an exact 0, so that weights drawn from
/// a normal distribution fill every level about equally. Each block of `Block` consecutive weights of
/// a row (64 in QLoRA) has an absmax scale; a weight is stored as the index of the nearest level to
/// w / absmax. With an fp16 scale a block of 64 costs 32 + 2 bytes: 4.25 bits per weight.
///
/// The levels are QLoRA's: with δ = 1 − ½(1/32 + 1/30) (= 0.9677…), the 8 positive levels are
/// Φ⁻¹ of 8 equally spaced points from δ down to ½ (exclusive), the 7 negative ones −Φ⁻¹ of 7 equally
/// spaced points from δ down to ½ (exclusive), plus 0, all divided by the largest. The test rebuilds
/// them from that definition.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "barato/core/dtype.hpp"
#include "barato/quant/format.hpp"

namespace barato::quant {

/// The 16 NF4 levels in increasing order (index = code).
inline constexpr std::array<float, 16> kNf4Levels = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/// 4-bit NormalFloat format: 16 normal-quantile levels, one absmax Scale per Block weights of a row.
template <std::size_t Block = 64, Element Scale = f16>
struct Nf4 : BlockFacts<PerGroup<Block>, 4u, Scale> {
  using scale_type = Scale;
  using granularity = PerGroup<Block>;
  static constexpr unsigned kBits = 4;
  static constexpr unsigned kCodeBits = 4;
  static constexpr float kScaleDivisor = 1.0f;  // levels span [−1, 1]: the scale is the absmax itself
  static constexpr std::uint8_t kZeroCode = 7;
  static constexpr std::string_view kName = "nf4";

  [[nodiscard]] static constexpr float level(std::uint8_t code) noexcept { return kNf4Levels[code & 15u]; }
  /// Index of the nearest level to v (v in [−1, 1]); a tie goes to the lower level.
  [[nodiscard]] static constexpr std::uint8_t encode(float v) noexcept {
    std::uint8_t code = 0;
    for (std::uint8_t i = 1; i < 16; ++i) {
      // midpoint between level i−1 and i: above it, level i is strictly nearer
      if (v > 0.5f * (kNf4Levels[i - 1] + kNf4Levels[i])) code = i;
    }
    return code;
  }
};

static_assert(Format<Nf4<>>);
static_assert(Nf4<64>::kBitsPerWeight == 4.25 && Nf4<64>::kBytesPerBlock == 34);
static_assert(Nf4<64, float>::kBitsPerWeight == 4.5);
static_assert(Nf4<>::level(Nf4<>::kZeroCode) == 0.0f);

}  // namespace barato::quant
