// core/token.hpp: Token is the 32-bit signed vocabulary index every sampler, drafter and model uses.
#include "barato/core/token.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

TEST_CASE("Token is a signed 32-bit integer: any vocabulary below 2^31 and a negative sentinel fit") {
  static_assert(std::is_same_v<barato::Token, std::int32_t>);
  static_assert(std::numeric_limits<barato::Token>::is_signed);
  // llama2.c stores token ids as int32; 152,064 (Qwen2.5) and 256,000 (Gemma) vocabularies fit
  const std::vector<barato::Token> ids = {0, 1, 151'935, 255'999, std::numeric_limits<barato::Token>::max()};
  const std::span<const barato::Token> view(ids);
  CHECK(view.size_bytes() == ids.size() * 4);
  CHECK(view.back() == 2'147'483'647);
  constexpr barato::Token kNone = -1;  // what a caller may use for "no token"
  CHECK(kNone < view.front());
}
