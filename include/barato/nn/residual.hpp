#pragma once
/// \file
/// The residual connection of a transformer block (He et al. 2016; Vaswani et al. 2017): the block's
/// output is added onto the residual stream, x ← x + f(x). Elementwise and vectorised; each element
/// is one correctly rounded fp32 addition, so the result does not depend on the SIMD width.

#include <cstddef>
#include <span>

#include "barato/core/error.hpp"
#include "barato/simd/arch.hpp"

namespace barato::nn {

/// x[i] += y[i] over spans of equal size (e.g. the residual stream [n, dim] and a block's output
/// [n, dim]). x and y must not overlap unless they are the same span. O(n), allocates nothing.
/// Throws `shape_error` when the sizes differ.
template <class Arch = simd::DefaultArch>
inline void add_inplace(std::span<float> x, std::span<const float> y) {
  const std::size_t n = x.size();
  require(y.size() == n, "nn::add_inplace: y has ", y.size(), " elements, expected ", n, " (size of x)");
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const std::size_t full = n / W * W;  // the tail loop is written from `full` so a constant n folds it away
  for (std::size_t i = 0; i < full; i += W)
    (B::load_unaligned(x.data() + i) + B::load_unaligned(y.data() + i)).store_unaligned(x.data() + i);
  for (std::size_t i = full; i < n; ++i) x[i] += y[i];
}

}  // namespace barato::nn
