#pragma once
/// \file
/// Umbrella header of barato/sample: includes every public header of the area.

#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"
#include "barato/sample/steps.hpp"
