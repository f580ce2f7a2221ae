#pragma once
/// \file
/// The KV cache concept. A cache holds the keys and values of one layer: `n_kv_heads()` heads of
/// `head_dim()` each, for logical positions [0, size()). Attention is written once against
/// `for_each_block`, so every policy (contiguous, growable, paged, sliding window, quantized) gets
/// every attention kernel.
///
/// Rules a `requires` clause cannot express:
///  - `append(k, v)` takes `n_new` tokens as rows [n_new, n_kv_heads, head_dim] of floats (k.size()
///    == v.size() == n_new·n_kv_heads·head_dim) and stores them at positions size() … size()+n_new−1.
///    When it cannot (capacity), it throws `barato::capacity_error` and the cache is unchanged.
///  - `truncate(n)` with n ≤ size() drops positions ≥ n (speculative-decoding rollback); n > size()
///    throws `shape_error`.
///  - `for_each_block(h, f)` calls `f(block)` for the stored positions of KV head h, in increasing
///    position order, each block a view (`kv::DenseBlock<T>` or a policy's own block type with an
///    `accumulate` overload) valid until the next mutation. A policy that evicts (sliding window)
///    visits only what it keeps; blocks carry their first logical position.
///  - `bytes_reserved()` is what the cache holds from its memory resource; `bytes_used()` the part
///    occupied by stored tokens (both include scales/metadata stored per token).

#include <concepts>
#include <cstddef>
#include <span>

namespace barato::kv {

/// A visitor that accepts any block type: the archetype used to check `for_each_block`.
struct AnyBlockVisitor {
  template <class Block>
  void operator()(const Block&) const noexcept {}
};

template <class C>
concept CachePolicy = requires(C& c, const C& cc, std::span<const float> rows, std::size_t n, AnyBlockVisitor f) {
  { cc.n_kv_heads() } -> std::convertible_to<std::size_t>;
  { cc.head_dim() } -> std::convertible_to<std::size_t>;
  { cc.size() } -> std::convertible_to<std::size_t>;
  { cc.bytes_reserved() } -> std::convertible_to<std::size_t>;
  { cc.bytes_used() } -> std::convertible_to<std::size_t>;
  c.append(rows, rows);
  c.truncate(n);
  cc.for_each_block(n, f);
};

}  // namespace barato::kv
