#pragma once
/// \file
/// Everything in barato: the umbrella headers of every area, lowest layer first.

#include "barato/core/core.hpp"
#include "barato/simd/simd.hpp"
#include "barato/attention/attention.hpp"
#include "barato/kv/kv.hpp"
#include "barato/nn/nn.hpp"
#include "barato/quant/quant.hpp"
#include "barato/sample/sample.hpp"
#include "barato/spec/spec.hpp"
#include "barato/batch/batch.hpp"
#include "barato/plan/plan.hpp"
#include "barato/distill/distill.hpp"
