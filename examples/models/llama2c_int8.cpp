// llama2c_int8.hpp's out-of-line part: `llama2c_int8_linear`, where quant::Linear<AbsMax<8,
// PerGroup<32 or 16>, float>> is built behind nn::AnyLinear (the kernels gguf_llama.cpp instantiates
// for GGUF's integer block types too). Compiled once (target barato_example_models).

#include "models/llama2c_int8.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/linear.hpp"

namespace barato_examples {

barato::nn::AnyLinear llama2c_int8_linear(const Llama2cInt8Matrix& m, std::size_t rows, std::size_t cols,
                                          std::pmr::memory_resource* mr) {
  const std::size_t n = rows * cols, g = m.group;
  barato::require(g > 0 && m.q.size() == n && m.scales.size() == n / g && n % g == 0, "llama2c_int8_linear: ", m.q.size(),
                  " values and ", m.scales.size(), " scales of group ", g, " for a ", rows, " x ", cols, " matrix");
  const auto as_groups = [&](auto format) {
    using F = decltype(format);
    constexpr std::size_t sub = F::granularity::kGroup;
    barato::Buffer<std::uint8_t> codes(n, mr);
    std::memcpy(codes.data(), m.q.data(), n);  // AbsMax<8>'s codes are the int8 values' bytes
    barato::Buffer<float> scales(n / sub, mr);
    for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = m.scales[i * sub / g];
    return barato::nn::AnyLinear(
        barato::quant::Linear<F>(barato::quant::QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales))));
  };
  const std::size_t sub = llama2c_row_group(cols, g);
  if (sub == 32) return as_groups(barato::quant::AbsMax<8, barato::quant::PerGroup<32>, float>{});
  if (sub == 16) return as_groups(barato::quant::AbsMax<8, barato::quant::PerGroup<16>, float>{});
  barato::nn::DenseLinear d(rows, cols, mr);
  const std::span<float> w = d.weights();
  for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(m.q[i]) * m.scales[i / g];
  return barato::nn::AnyLinear(std::move(d));
}

}  // namespace barato_examples
