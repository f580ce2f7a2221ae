#pragma once
/// \file
/// `kv::DenseBlock<T>`: the view a KV cache hands to attention for one KV head — `n` consecutive
/// positions starting at logical position `pos0`, keys and values as rows of `stride` elements
/// (the first `head_dim` used). Contiguous caches yield one block per head, a sliding window at most
/// two (plus sinks); paged caches yield a `PagedBlock` (kv/paged_block.hpp), quantized caches a
/// `QuantBlock` / `PagedQuantBlock` (kv/quant_block.hpp).
///
/// Block views are data and layout facts only; the kernels that fold them into the attention state
/// live in attention/kernels/ (one `attention::accumulate` overload per view). A cache with a block
/// type of its own brings its own `accumulate` overload in the block's namespace (found by
/// argument-dependent lookup; attention/kernels/accumulate.hpp states the contract).

#include <cstddef>

#include "barato/core/dtype.hpp"

namespace barato::kv {

/// Rows [0, n) of one KV head at one stride (see the file comment).
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
