#pragma once
/// \file
/// `kv::SlidingWindow<T>`: a bounded KV cache of one layer for StreamingLLM attention (Xiao et al.
/// 2023, "Efficient Streaming Language Models with Attention Sinks"): the query at position p attends
/// to its S sinks and its own last W positions — the p' ≤ p with p' < S or p' > p − W — however long
/// the sequence runs.
///
/// Exact for chunks. One `append` may add up to `chunk` tokens (`max_append()`; more throws
/// `shape_error`, cache unchanged), and every query of such a chunk still sees exactly its own window,
/// so prefilling a prompt in chunks of any size ≤ chunk equals feeding it token by token (to fp32
/// summation order). Two parts make that hold:
///  - the ring keeps R = W + chunk − 1 positions, so the earliest query of a chunk of m ≤ chunk tokens
///    ending at n (position n − m) still finds its W − 1 predecessors: n − m − W + 1 ≥ n − R;
///  - the cache reports `attention_window()` = {S, W} (`kv::WindowedCache`), and attention clips each
///    query's rows from below, hiding the R − W older positions a later query must not see.
/// Memory: (S + W + chunk − 1) slots per KV head for K and for V, reserved at construction
/// (`bytes_reserved()`); `bytes_used()` counts the positions currently kept.
///
/// Layout per head: [S + R, head_dim] slots; slots [0, S) hold positions [0, S); position p ≥ S lives in
/// ring slot S + (p − S) mod R. Positions stay true: `size()` counts every position ever appended,
/// keys are stored as the caller rotated them (RoPE at their true position), and every block carries
/// its true `pos0`, so causal masking and RoPE need no renumbering. `for_each_block` visits ≤ 3
/// blocks in position order: the sinks, then the ring's older part, then its newer part.
///
/// Kept positions: after appends reaching n the cache holds [0, min(S, n)) ∪ [max(S, n − R), n).
/// `truncate(n)` rolls back, but positions already evicted are not restored: the ring then holds
/// [max(S, min(lo, n)), n) where lo was its oldest. Windows therefore stay exact after a rollback by
/// at most `chunk` positions from the longest size reached (n ≥ peak − chunk: speculative decoding
/// that verifies γ + 1 tokens and rolls back needs chunk ≥ γ + 1); after a deeper rollback the next
/// queries see fewer than W recent positions until the ring refills.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/simd/convert.hpp"

namespace barato::kv {

/// Construction parameters of `SlidingWindow` (designated initialisers).
struct SlidingWindowConfig {
  std::size_t n_kv_heads = 0;  ///< KV heads of the layer
  std::size_t head_dim = 0;    ///< d
  std::size_t window = 0;      ///< W: most recent positions kept (≥ 1)
  std::size_t sinks = 0;       ///< S: first positions kept forever (attention sinks)
  std::size_t chunk = 1;       ///< most tokens one append may add with exact windows (≥ 1); costs chunk − 1 slots
};

/// A KV cache of one layer that keeps the first S positions (sinks) and the last W in a ring, with exact windowed attention.
template <Element T = float>
class SlidingWindow {
 public:
  using element_type = T;
  using block_type = DenseBlock<T>;

  /// Reserves (sinks + window + chunk − 1) slots per head for K and V from `mr`. Throws `shape_error`
  /// for a zero n_kv_heads, head_dim, window or chunk.
  explicit SlidingWindow(const SlidingWindowConfig& cfg, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : cfg_(checked(cfg)), ring_(cfg.window + cfg.chunk - 1), slots_(cfg.sinks + ring_),
        k_(cfg.n_kv_heads * slots_ * cfg.head_dim, mr), v_(cfg.n_kv_heads * slots_ * cfg.head_dim, mr),
        ring_lo_(cfg.sinks) {}
  SlidingWindow(std::size_t n_kv_heads, std::size_t head_dim, std::size_t window, std::size_t sinks = 0,
                std::size_t chunk = 1, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : SlidingWindow(SlidingWindowConfig{.n_kv_heads = n_kv_heads, .head_dim = head_dim, .window = window, .sinks = sinks,
                                          .chunk = chunk},
                      mr) {}

  SlidingWindow(SlidingWindow&&) noexcept = default;
  SlidingWindow& operator=(SlidingWindow&&) noexcept = default;

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return cfg_.n_kv_heads; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return cfg_.head_dim; }
  [[nodiscard]] std::size_t window() const noexcept { return cfg_.window; }
  [[nodiscard]] std::size_t sinks() const noexcept { return cfg_.sinks; }
  /// Most tokens one `append` accepts (the configured chunk).
  [[nodiscard]] std::size_t max_append() const noexcept { return cfg_.chunk; }
  /// Positions the ring holds: window + chunk − 1.
  [[nodiscard]] std::size_t ring_slots() const noexcept { return ring_; }
  /// The visibility rule attention applies per query: sinks + the last `window` positions (kv::WindowedCache).
  [[nodiscard]] AttentionWindow attention_window() const noexcept { return {cfg_.sinks, cfg_.window}; }
  /// Positions appended so far (the next true position); not all of them are kept.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Positions currently stored (sinks + ring); a query sees at most sinks + window of them.
  [[nodiscard]] std::size_t kept() const noexcept { return std::min(cfg_.sinks, size_) + (size_ - std::min(size_, ring_lo_)); }
  /// First position held by the ring (positions in [sinks, ring_lo) were evicted).
  [[nodiscard]] std::size_t ring_begin() const noexcept { return std::min(ring_lo_, size_); }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return k_.bytes() + v_.bytes(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return kept() * 2 * cfg_.n_kv_heads * cfg_.head_dim * sizeof(T); }

  /// Appends n_new ≤ chunk tokens given as rows [n_new, n_kv_heads, head_dim] at positions size() …,
  /// evicting the oldest non-sink positions beyond the ring (window + chunk − 1). Never full. Throws
  /// `shape_error` for mismatched spans or n_new > chunk (cache unchanged). O(n_new · n_kv_heads · d).
  void append(std::span<const float> k, std::span<const float> v) {
    const std::size_t row = cfg_.n_kv_heads * cfg_.head_dim;
    const std::size_t n_new = detail::append_tokens("kv::SlidingWindow::append", k.size(), v.size(), row);
    require(n_new <= cfg_.chunk, "kv::SlidingWindow::append: ", n_new, " tokens exceed the chunk of ", cfg_.chunk,
            " this cache was built for (SlidingWindowConfig::chunk: the most one append may add with exact windows)");
    const std::size_t end = size_ + n_new;
    for (std::size_t t = 0; t < n_new; ++t) {  // n_new ≤ chunk ≤ ring: every new position survives
      const std::size_t slot = slot_of(size_ + t);
      for (std::size_t h = 0; h < cfg_.n_kv_heads; ++h) {
        const std::size_t dst = (h * slots_ + slot) * cfg_.head_dim;
        simd::from_float<T>(k.data() + t * row + h * cfg_.head_dim, k_.data() + dst, cfg_.head_dim);
        simd::from_float<T>(v.data() + t * row + h * cfg_.head_dim, v_.data() + dst, cfg_.head_dim);
      }
    }
    size_ = end;
    ring_lo_ = std::max({ring_lo_, cfg_.sinks, end > ring_ ? end - ring_ : std::size_t{0}});
  }

  /// Rolls back to n positions (n ≤ size(), else `shape_error`); evicted positions stay evicted.
  void truncate(std::size_t n) {
    require(n <= size_, "kv::SlidingWindow::truncate: n = ", n, " exceeds size ", size_);
    ring_lo_ = std::max(cfg_.sinks, std::min(ring_lo_, n));
    size_ = n;
  }

  void clear() noexcept {
    size_ = 0;
    ring_lo_ = cfg_.sinks;
  }

  /// Calls f(DenseBlock<T>) for the kept positions of KV head h: sinks, then the ring in position
  /// order (≤ 2 blocks). Each block's pos0 is the true position of its first row. The ring may hold up
  /// to chunk − 1 positions older than a query's window; `attention_window()` tells attention to skip them.
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    BARATO_ASSERT(h < cfg_.n_kv_heads);
    const std::size_t d = cfg_.head_dim;
    const T* kh = k_.data() + h * slots_ * d;
    const T* vh = v_.data() + h * slots_ * d;
    const std::size_t n_sink = std::min(cfg_.sinks, size_);
    if (n_sink > 0) f(DenseBlock<T>{kh, vh, n_sink, d, 0});
    std::size_t pos = ring_begin();
    while (pos < size_) {
      const std::size_t slot = slot_of(pos);
      const std::size_t n = std::min(size_ - pos, slots_ - slot);  // up to the physical end of the ring
      f(DenseBlock<T>{kh + slot * d, vh + slot * d, n, d, pos});
      pos += n;
    }
  }

 private:
  static const SlidingWindowConfig& checked(const SlidingWindowConfig& c) {
    require(c.n_kv_heads > 0 && c.head_dim > 0 && c.window > 0 && c.chunk > 0,
            "kv::SlidingWindow: n_kv_heads, head_dim, window and chunk must be > 0, got ", c.n_kv_heads, ", ", c.head_dim,
            ", ", c.window, ", ", c.chunk);
    // sinks + window + chunk − 1 slots per head, K and V: the sizes must not overflow or exceed memory
    require<capacity_error>(c.window <= SIZE_MAX - c.chunk && c.sinks <= SIZE_MAX - (c.window + c.chunk),
                            "kv::SlidingWindow: sinks + window + chunk = ", c.sinks, " + ", c.window, " + ", c.chunk,
                            " overflows the position count");
    const std::size_t slots = c.sinks + c.window + c.chunk - 1;
    const std::size_t e = checked_mul(checked_mul(c.n_kv_heads, slots, "kv::SlidingWindow", "n_kv_heads x slots"), c.head_dim,
                                      "kv::SlidingWindow", "(n_kv_heads slots) x head_dim");
    require_memory(checked_mul(checked_mul(e, sizeof(T), "kv::SlidingWindow", "elements x element bytes"), 2, "kv::SlidingWindow",
                               "K and V bytes"),
                   "kv::SlidingWindow of ", slots, " slots");
    return c;
  }
  [[nodiscard]] std::size_t slot_of(std::size_t pos) const noexcept {
    return pos < cfg_.sinks ? pos : cfg_.sinks + (pos - cfg_.sinks) % ring_;
  }

  SlidingWindowConfig cfg_;
  std::size_t ring_;   // R = window + chunk − 1 ring slots
  std::size_t slots_;  // sinks + R
  Buffer<T> k_;        // [n_kv_heads, sinks + R, head_dim]
  Buffer<T> v_;        // [n_kv_heads, sinks + R, head_dim]
  std::size_t size_ = 0;
  std::size_t ring_lo_;  // oldest position the ring holds (≥ sinks)
};

static_assert(CachePolicy<SlidingWindow<float>>);
static_assert(WindowedCache<SlidingWindow<float>>);
static_assert(CachePolicy<SlidingWindow<f16>>);

}  // namespace barato::kv
