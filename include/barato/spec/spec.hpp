#pragma once
/// \file
/// Umbrella header of barato/spec: includes every public header of the area.

#include "barato/spec/drafter.hpp"
#include "barato/spec/model_drafter.hpp"
#include "barato/spec/ngram_drafter.hpp"
#include "barato/spec/plain.hpp"
#include "barato/spec/speculative.hpp"
#include "barato/spec/stats.hpp"
#include "barato/spec/step_model.hpp"
#include "barato/spec/step_model_ref.hpp"
#include "barato/spec/theory.hpp"
#include "barato/spec/verify.hpp"
