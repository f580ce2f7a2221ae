#pragma once
/// \file
/// Umbrella header of barato/batch: includes every public header of the area.

#include "barato/batch/step_plan.hpp"
#include "barato/batch/token_batch.hpp"
