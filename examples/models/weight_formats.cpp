// weight_formats.hpp's out-of-line part: `quantized_linear`, where quant::visit_scheme instantiates
// quant::Linear<F> behind nn::AnyLinear, and with it the packing and matrix-product kernels of every
// scheme. Compiled once (target barato_example_models) instead of in every tool, tutorial and test
// that quantizes a model.

#include "models/weight_formats.hpp"

#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/nn/any_linear.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/scheme.hpp"

namespace barato_examples {

barato::nn::AnyLinear quantized_linear(barato::quant::Scheme scheme, std::size_t rows, std::size_t cols,
                                       std::span<const float> weights, std::pmr::memory_resource* mr) {
  return barato::quant::visit_scheme(
      scheme, [&](auto format) { return barato::nn::AnyLinear(barato::quant::Linear<decltype(format)>(rows, cols, weights, mr)); });
}

}  // namespace barato_examples
