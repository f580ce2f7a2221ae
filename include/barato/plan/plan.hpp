#pragma once
/// \file
/// The plan area: the memory planner (how much context, for how many users) — model shapes, format
/// facts, plans with named refinements, and the search over weight × KV formats.

#include "barato/plan/format.hpp"
#include "barato/plan/planner.hpp"
#include "barato/plan/shape.hpp"
