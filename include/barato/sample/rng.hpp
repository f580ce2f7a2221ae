#pragma once
/// \file
/// `sample::Rng`: the small, fast, seedable random generator every barato sampler and verifier draws
/// from. The generator is xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number
/// generators", 2018): 256 bits of state, period 2^256 − 1, four 64-bit words of state updated with
/// shifts, rotations and xors. Seeds are expanded into the state with SplitMix64 (Steele et al., 2014)
/// so that nearby seeds (0, 1, 2, …) give unrelated streams. The same seed always gives the same
/// stream on every platform (no `std::` distribution is involved).

#include <array>
#include <cstdint>
#include <limits>

namespace barato::sample {

/// SplitMix64 step: advances `state` by the golden-ratio increment and returns the mixed value.
[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// xoshiro256** seeded through SplitMix64. Satisfies `std::uniform_random_bit_generator`.
/// Copying an `Rng` copies its stream position (two copies produce the same numbers).
class Rng {
 public:
  using result_type = std::uint64_t;

  /// The stream for `seed` (any value, including 0).
  explicit constexpr Rng(std::uint64_t seed = 0) noexcept { reseed(seed); }

  /// Restarts the stream for `seed`.
  constexpr void reseed(std::uint64_t seed) noexcept {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }

  /// A generator with the raw xoshiro state `s` (not all zero): used to check the reference outputs.
  [[nodiscard]] static constexpr Rng from_state(const std::array<std::uint64_t, 4>& s) noexcept {
    Rng r;
    r.s_ = s;
    return r;
  }

  [[nodiscard]] static constexpr result_type min() noexcept { return 0; }
  [[nodiscard]] static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// The next 64 random bits.
  constexpr result_type operator()() noexcept {
    const std::uint64_t out = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return out;
  }

  /// A double uniform in [0, 1) with 53 random bits (multiples of 2^−53).
  [[nodiscard]] constexpr double uniform() noexcept {
    return static_cast<double>((*this)() >> 11) * 0x1.0p-53;
  }

 private:
  [[nodiscard]] static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

  std::array<std::uint64_t, 4> s_{};  // xoshiro256 state, never all zero when seeded through SplitMix64
};

}  // namespace barato::sample
