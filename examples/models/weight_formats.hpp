#pragma once
/// \file
/// The `--weights` flag of the example tools: a weight scheme name (`quant::parse_scheme`: int8-tensor,
/// int8-row, q8_0, int4-tensor, int4-row, int4-g128, q4_0, nf4, or fp32) applied to every projection and the
/// classifier of fp32 weights, quantized at load time and held as `nn::AnyLinear` so one instantiation
/// of the tool serves every scheme.

#include <cstddef>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>

#include "barato/core/error.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/scheme.hpp"
#include "models/llama_weights.hpp"

namespace barato_examples {

/// The scheme `name` names; throws `barato::value_error` starting "--weights: " for an unknown one.
[[nodiscard]] inline barato::quant::Scheme weight_scheme(std::string_view name) {
  try {
    return barato::quant::parse_scheme(name);
  } catch (const barato::value_error& e) {
    throw barato::value_error(std::string("--weights: ") + e.what());
  }
}

/// One fp32 matrix (`rows` × `cols`, row-major) quantized to `scheme` (`quant::Linear` of the
/// scheme's format, packed matrix from `mr`), as nn::AnyLinear. Defined in weight_formats.cpp (the
/// example models' compiled part, ARCHITECTURE.md): every scheme's kernels are instantiated there,
/// once, not in each program that quantizes a model.
[[nodiscard]] barato::nn::AnyLinear quantized_linear(barato::quant::Scheme scheme, std::size_t rows, std::size_t cols,
                                                     std::span<const float> weights,
                                                     std::pmr::memory_resource* mr = std::pmr::get_default_resource());

/// `dense` with every projection and the classifier quantized to `scheme` (`quantized_linear`).
[[nodiscard]] inline LlamaWeights<barato::nn::AnyLinear> quantize_weights(const LlamaWeights<barato::nn::DenseLinear>& dense,
                                                                          barato::quant::Scheme scheme,
                                                                          std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  return convert_weights(dense, [&](const barato::nn::DenseLinear& d) {
    return quantized_linear(scheme, d.rows(), d.cols(), d.weights(), mr);
  });
}

}  // namespace barato_examples
