#pragma once
/// \file
/// Umbrella header of barato/simd: includes every public header of the area.

#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"
#include "barato/simd/ops.hpp"
