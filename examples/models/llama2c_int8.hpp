#pragma once
/// \file
/// A llama2.c version-2 (int8) matrix as a layer of the example decoder (`--weights file` on such a
/// file: models/model_file.hpp, `llama2c_int8_weights`). The file format is models/llama2c.hpp's.

#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "models/llama2c.hpp"

namespace barato_examples {

/// A llama2.c version-2 matrix (`m`: int8 values, an fp32 scale per `m.group` values of the flattened
/// matrix) as `--weights file` keeps it: when each row holds whole groups (cols a multiple of the
/// group) and the group is 16 or a multiple of 32, the codes as they are with each scale repeated
/// over the 16 or 32 values it covers (quant::AbsMax<8, PerGroup<16 or 32>, float>, the format of
/// llama2.c's export: the same values, 9 bits per weight); otherwise (groups that cross rows) the
/// exact fp32 values q · scale as nn::DenseLinear. Defined in llama2c_int8.cpp.
[[nodiscard]] barato::nn::AnyLinear llama2c_int8_linear(const Llama2cInt8Matrix& m, std::size_t rows, std::size_t cols,
                                                        std::pmr::memory_resource* mr = std::pmr::get_default_resource());

/// The `make_linear` of `load_llama2c_with` that keeps a llama2.c file's own precision: fp32 values as
/// nn::DenseLinear, a version-2 matrix's codes through `llama2c_int8_linear` (from `mr`).
struct Llama2cFileLinear {
  std::pmr::memory_resource* mr = std::pmr::get_default_resource();
  barato::nn::AnyLinear operator()(std::span<const float> x, std::size_t rows, std::size_t cols) const {
    return barato::nn::AnyLinear(barato::nn::DenseLinear(rows, cols, x, mr));
  }
  barato::nn::AnyLinear operator()(const Llama2cInt8Matrix& q, std::size_t rows, std::size_t cols) const {
    return llama2c_int8_linear(q, rows, cols, mr);
  }
};

}  // namespace barato_examples
