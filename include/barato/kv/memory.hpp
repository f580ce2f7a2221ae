#pragma once
/// \file
/// KV-cache memory arithmetic. Every figure here is also measured (tests compare it with a
/// `CountingResource`): bytes/token = 2 · layers · kv_heads · head_dim · sizeof(element).

#include <cstddef>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"

namespace barato::kv {

/// Bytes one token occupies in the KV cache of a whole model: 2 (K and V) · layers · kv_heads ·
/// head_dim · element bytes. MHA, GQA and MQA differ only in `kv_heads`.
[[nodiscard]] constexpr std::size_t bytes_per_token(std::size_t layers, std::size_t kv_heads, std::size_t head_dim,
                                                    DType dtype) noexcept {
  return 2 * layers * kv_heads * head_dim * dtype_size(dtype);
}

/// Bytes of a KV cache holding `tokens` tokens for each of `batch` sequences.
[[nodiscard]] constexpr std::size_t kv_bytes(std::size_t layers, std::size_t kv_heads, std::size_t head_dim, DType dtype,
                                             std::size_t tokens, std::size_t batch = 1) noexcept {
  return bytes_per_token(layers, kv_heads, head_dim, dtype) * tokens * batch;
}

}  // namespace barato::kv
