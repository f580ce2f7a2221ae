#pragma once
/// \file
/// Umbrella header of barato/nn: includes every public header of the area.

#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/nn/residual.hpp"
#include "barato/nn/rmsnorm.hpp"
#include "barato/nn/swiglu.hpp"
