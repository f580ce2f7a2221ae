#pragma once
/// \file
/// Head layout of one attention layer: H_q query heads over H_kv key/value heads of `head_dim`.
/// MHA (H_kv = H_q), GQA (1 < H_kv < H_q) and MQA (H_kv = 1) are the same code path with a
/// different runtime `n_kv_heads`; query heads [h·G, (h+1)·G) share KV head h (G = H_q / H_kv).

#include <cmath>
#include <cstddef>

#include "barato/core/error.hpp"

namespace barato::attention {

/// Head shape of one layer. Construct with designated initialisers and call `validate()`
/// (every barato entry point does) before use.
struct Heads {
  std::size_t n_q = 0;       ///< query heads H_q
  std::size_t n_kv = 0;      ///< key/value heads H_kv (divides H_q)
  std::size_t head_dim = 0;  ///< d

  /// Query heads per KV head, G = H_q / H_kv.
  [[nodiscard]] constexpr std::size_t group() const noexcept { return n_q / n_kv; }
  /// Floats in one token's queries: H_q·d.
  [[nodiscard]] constexpr std::size_t q_dim() const noexcept { return n_q * head_dim; }
  /// Floats in one token's keys (or values): H_kv·d.
  [[nodiscard]] constexpr std::size_t kv_dim() const noexcept { return n_kv * head_dim; }
  /// The usual softmax scale 1/√d.
  [[nodiscard]] float default_scale() const noexcept { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

  /// Throws `shape_error` for zero heads, head_dim 0, or H_q not a multiple of H_kv.
  void validate() const {
    require(n_q > 0, "attention heads: n_q must be > 0, got 0");
    require(n_kv > 0, "attention heads: n_kv must be > 0, got 0");
    require(head_dim > 0, "attention heads: head_dim must be > 0, got 0");
    require(n_q % n_kv == 0, "attention heads: n_q (", n_q, ") must be a multiple of n_kv (", n_kv, ")");
  }
};

}  // namespace barato::attention
