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
///
/// Optional members (detected with `requires`, absent from every unbounded-attention policy):
///  - `attention_window()` → `kv::AttentionWindow{sinks, window}` (concept `kv::WindowedCache`): the
///    query at position p may see only positions p' ≤ p with p' < sinks or p' > p − window. The
///    cache may store more than that (a sliding window keeps room for a whole chunk of queries);
///    `attention::attend` and `attention::decode_split_k` clip each (query, block) row range from
///    below with `AttentionWindow::visible_rows`, so the rule holds for every query of a multi-token
///    chunk. Caches without the member compile to the plain causal code (no per-row or per-block work).
///  - `max_append()` → the most tokens one `append` accepts (more throws `shape_error`, cache
///    unchanged); a decoder splits longer blocks into pieces of at most this many tokens.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"

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

/// The per-query visibility rule of a windowed cache (StreamingLLM attention with sinks): the query
/// at position p sees the positions p' ≤ p with p' < `sinks` or p' > p − `window` — its sinks and its
/// own last `window` positions, itself included.
struct AttentionWindow {
  std::size_t sinks = 0;   ///< S: first positions every query sees
  std::size_t window = 1;  ///< W ≥ 1: most recent positions a query sees (itself included)

  /// First non-sink position the query at `p` sees: max(0, p + 1 − W).
  [[nodiscard]] constexpr std::size_t lowest(std::size_t p) const noexcept { return p + 1 > window ? p + 1 - window : 0; }

  /// Calls f(lo, hi) for the ≤ 2 disjoint, increasing sub-ranges of rows [a, b) of a block whose row 0
  /// is position `pos0` that the query at position p may see (rows [a, b) must already be ≤ p: this
  /// applies only the lower bound). O(1); nothing is called for an empty result.
  template <class F>
  constexpr void visible_rows(std::size_t p, std::size_t pos0, std::size_t a, std::size_t b, F&& f) const {
    const std::size_t lo = lowest(p);
    if (lo <= sinks) {  // sinks and window overlap: everything up to p is visible
      if (a < b) f(a, b);
      return;
    }
    const std::size_t sink_end = sinks > pos0 ? std::min(b, sinks - pos0) : a;  // rows < sinks
    const std::size_t win_begin = lo > pos0 ? std::max(a, lo - pos0) : a;       // rows ≥ lo
    if (a < sink_end) f(a, sink_end);
    if (win_begin < b) f(win_begin, b);  // win_begin ≥ sink_end because lo > sinks
  }
};

/// A cache whose queries see a window (sinks + last W positions) rather than every earlier position.
template <class C>
concept WindowedCache = CachePolicy<C> && requires(const C& cc) {
  { cc.attention_window() } -> std::same_as<AttentionWindow>;
};

namespace detail {
/// The argument checks every `append(k, v)` shares: k and v of equal size, a whole number of rows of
/// n_kv_heads·head_dim floats. Returns the number of tokens; throws `shape_error` naming `where`
/// (e.g. "kv::Contiguous::append") otherwise.
[[nodiscard]] inline std::size_t append_tokens(const char* where, std::size_t k_size, std::size_t v_size,
                                               std::size_t row) {
  require(k_size == v_size, where, ": k has ", k_size, " floats but v has ", v_size);
  require(k_size % row == 0, where, ": expected a multiple of n_kv_heads*head_dim = ", row, " floats, got ", k_size);
  return k_size / row;
}

/// Throws `capacity_error` naming `where` unless `n_new` more tokens fit after `size` (of `capacity`).
inline void require_room(const char* where, std::size_t n_new, std::size_t size, std::size_t capacity,
                         const char* capacity_name = "capacity") {
  require<capacity_error>(size + n_new <= capacity, where, ": ", n_new, " tokens do not fit: size ", size, ", ",
                          capacity_name, " ", capacity);
}
}  // namespace detail

}  // namespace barato::kv
