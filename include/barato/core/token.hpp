#pragma once
/// \file
/// Token ids.

#include <cstdint>

namespace barato {

/// A token id (vocabulary index).
using Token = std::int32_t;

}  // namespace barato
