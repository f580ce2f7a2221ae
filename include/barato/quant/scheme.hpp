#pragma once
/// \file
/// Run-time names of the common weight schemes, for command-line tools that pick the format at run
/// time (`--weights int4-g128`): `parse_scheme` maps a name to a `Scheme`, and `visit_scheme` calls a
/// generic lambda with a value of the matching format type, so the tool instantiates its code once per
/// format and keeps format facts in types (no run-time enum reaches a kernel):
///
/// ```cpp
/// auto lin = quant::visit_scheme(quant::parse_scheme(name), [&](auto format) {
///   return nn::AnyLinear(quant::Linear<decltype(format)>(rows, cols, w));
/// });
/// ```
/// All schemes use fp16 scales. `q8_0` and `q4_0` are ggml's formats (quant/ggml.hpp: ggml's layout
/// and rounding, blocks of 32), the others barato's own.

#include <array>
#include <string>
#include <string_view>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/nf4.hpp"

namespace barato::quant {

/// The named schemes (fp32 is not a quantization scheme; tools handle it themselves).
enum class Scheme { int8_tensor, int8_row, q8_0, int4_tensor, int4_row, int4_g128, q4_0, nf4 };

/// Every scheme, 8-bit codes first, then 4-bit codes.
inline constexpr std::array<Scheme, 8> kSchemes = {Scheme::int8_tensor, Scheme::int8_row,  Scheme::q8_0,
                                                   Scheme::int4_tensor, Scheme::int4_row,  Scheme::int4_g128,
                                                   Scheme::q4_0,        Scheme::nf4};

/// The command-line name: int8-tensor, int8-row, q8_0, int4-tensor, int4-row, int4-g128, q4_0, nf4.
[[nodiscard]] constexpr std::string_view scheme_name(Scheme s) noexcept {
  switch (s) {
    case Scheme::int8_tensor: return "int8-tensor";
    case Scheme::int8_row: return "int8-row";
    case Scheme::q8_0: return "q8_0";
    case Scheme::int4_tensor: return "int4-tensor";
    case Scheme::int4_row: return "int4-row";
    case Scheme::int4_g128: return "int4-g128";
    case Scheme::q4_0: return "q4_0";
    case Scheme::nf4: return "nf4";
  }
  return "?";
}

/// The scheme called `name`. Throws `value_error` listing the valid names otherwise.
[[nodiscard]] inline Scheme parse_scheme(std::string_view name) {
  std::string valid;
  for (Scheme s : kSchemes) {
    if (scheme_name(s) == name) return s;
    valid += (valid.empty() ? "" : ", ") + std::string(scheme_name(s));
  }
  throw value_error("quant::parse_scheme: unknown weight scheme '" + std::string(name) + "' (expected one of " + valid + ")");
}

/// Calls fn(F{}) with the format type of `s` and returns its result (every branch must return the
/// same type).
template <class Fn>
decltype(auto) visit_scheme(Scheme s, Fn&& fn) {
  switch (s) {
    case Scheme::int8_tensor: return std::forward<Fn>(fn)(AbsMax<8, PerTensor>{});
    case Scheme::int8_row: return std::forward<Fn>(fn)(AbsMax<8, PerRow>{});
    case Scheme::q8_0: return std::forward<Fn>(fn)(GgmlQ8_0{});
    case Scheme::int4_tensor: return std::forward<Fn>(fn)(AbsMax<4, PerTensor>{});
    case Scheme::int4_row: return std::forward<Fn>(fn)(AbsMax<4, PerRow>{});
    case Scheme::int4_g128: return std::forward<Fn>(fn)(AbsMax<4, PerGroup<128>>{});
    case Scheme::q4_0: return std::forward<Fn>(fn)(GgmlQ4_0{});
    case Scheme::nf4: break;
  }
  return std::forward<Fn>(fn)(Nf4<64>{});
}

}  // namespace barato::quant
