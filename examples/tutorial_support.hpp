#pragma once
/// \file
/// Small formatting helpers shared by the tutorials (examples/NN_*.cpp; tutorials get -I examples).

#include <cstddef>
#include <cstdint>
#include <string>

namespace barato_examples {

/// `x` in decimal with thousands separators: 67108864 → "67,108,864".
inline std::string grouped(std::uint64_t x) {
  const std::string digits = std::to_string(x);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace barato_examples
