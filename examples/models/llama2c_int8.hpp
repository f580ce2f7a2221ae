#pragma once
/// \file
/// A llama2.c version-2 (int8) matrix as a layer of the example decoder (`--weights file` on such a
/// file: models/model_file.hpp, `llama2c_int8_weights`). The file format is models/llama2c.hpp's.

#include <cstddef>
#include <memory_resource>

#include "barato/nn/any_linear.hpp"
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

}  // namespace barato_examples
