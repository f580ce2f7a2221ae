#pragma once
/// \file
/// `kv::DenseBlock<T>`: the view a KV cache hands to attention for one KV head — `n` consecutive
/// positions starting at logical position `pos0`, keys and values as rows of `stride` elements
/// (the first `head_dim` used). Contiguous caches yield one block per head, a sliding window at most
/// two (plus sinks); paged caches yield their own `PagedBlock` (kv/paged_block.hpp). Other block types (quantized) come with their
/// own `accumulate` overload, found by argument-dependent lookup.

#include <cstddef>

#include "barato/core/dtype.hpp"

namespace barato::kv {

template <Element T>
struct DenseBlock {
  using element_type = T;
  const T* k = nullptr;     ///< [n, stride] key rows
  const T* v = nullptr;     ///< [n, stride] value rows
  std::size_t n = 0;        ///< rows in the block
  std::size_t stride = 0;   ///< elements between consecutive rows (≥ head_dim)
  std::size_t pos0 = 0;     ///< logical position of row 0
};

}  // namespace barato::kv
