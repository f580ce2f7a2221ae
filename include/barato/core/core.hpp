#pragma once
/// \file
/// Umbrella header of barato/core: includes every public header of the area.

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/core/token.hpp"
