#pragma once
/// \file
/// Umbrella header of barato/batch: includes every public header of the area.

#include "barato/batch/cost.hpp"
#include "barato/batch/executor.hpp"
#include "barato/batch/metrics.hpp"
#include "barato/batch/policy.hpp"
#include "barato/batch/request.hpp"
#include "barato/batch/scheduler.hpp"
#include "barato/batch/simulator.hpp"
#include "barato/batch/step_plan.hpp"
#include "barato/batch/token_batch.hpp"
#include "barato/batch/workload.hpp"
