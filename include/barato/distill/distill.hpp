#pragma once
/// \file
/// The distill area: knowledge-distillation helpers — softmax with temperature and soft targets, KL /
/// reverse KL / JSD, the KD loss with its T² switch and gradient, the mixed hard + soft loss, and top-k
/// sparse KD from cached teacher top-k logits.

#include "barato/distill/losses.hpp"
#include "barato/distill/softmax.hpp"
#include "barato/distill/top_k.hpp"
