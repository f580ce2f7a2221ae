#pragma once
/// \file
/// Umbrella header of barato/attention: includes every public header of the area.

#include "barato/attention/attend.hpp"
#include "barato/attention/cascade.hpp"
#include "barato/attention/cost.hpp"
#include "barato/attention/eigen_baseline.hpp"
#include "barato/attention/heads.hpp"
#include "barato/attention/kernels/accumulate.hpp"
#include "barato/attention/partial.hpp"
#include "barato/attention/recompute.hpp"
#include "barato/attention/rope.hpp"
#include "barato/attention/split_k.hpp"
