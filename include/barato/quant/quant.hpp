#pragma once
/// \file
/// Umbrella header of barato::quant: weight formats (AbsMax per tensor / row / group, NF4, ggml's
/// Q8_0 / Q4_0 and their block bytes), packed
/// matrices, quantized mat-vec kernels and linear layers, the int8-activation path, activation-outlier
/// primitives (LLM.int8 decomposition, SmoothQuant), quality metrics and run-time scheme names.

#include "barato/quant/absmax.hpp"
#include "barato/quant/activation.hpp"
#include "barato/quant/fixed_point.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/gemv.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/ggml_blocks.hpp"
#include "barato/quant/ggml_dot.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/metrics.hpp"
#include "barato/quant/nf4.hpp"
#include "barato/quant/outliers.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/row_kernel.hpp"
#include "barato/quant/scheme.hpp"
