#pragma once
/// \file
/// `kv::SlidingWindow<T>`: a bounded KV cache of one layer that keeps the first `sinks` positions
/// (attention sinks) and the last `window` positions, as in StreamingLLM (Xiao et al. 2023,
/// "Efficient Streaming Language Models with Attention Sinks"). Memory is fixed at
/// (sinks + window) positions however long the sequence runs.
///
/// Layout per head: [sinks + window, head_dim] slots; slots [0, S) hold positions [0, S); position
/// p ≥ S lives in ring slot S + (p − S) mod W. Positions stay true: `size()` counts every position
/// ever appended, keys are stored as the caller rotated them (RoPE at their true position), and
/// every block carries its true `pos0`, so causal masking and RoPE need no renumbering.
/// `for_each_block` visits ≤ 3 blocks in position order: the sinks, then the ring's older part,
/// then its newer part (the ring wraps at most once).
///
/// Semantics: after each append the cache holds positions [0, min(S, n)) ∪ [max(S, n − W), n).
/// A single-token decode step therefore attends exactly to the sinks plus the last W positions
/// (including itself). An append of several tokens evicts before attention runs, so a query early
/// in a multi-token chunk sees fewer than W recent positions; feed chunks of ≤ 1 token (or accept
/// that) when exact per-token windows matter. `truncate(n)` rolls back, but positions already
/// evicted are not restored: the ring then holds [max(S, min(lo, n)), n) where lo was its oldest.

#include <algorithm>
#include <cstddef>
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
};

template <Element T = float>
class SlidingWindow {
 public:
  using element_type = T;
  using block_type = DenseBlock<T>;

  /// Reserves (sinks + window) slots per head for K and V from `mr`. Throws `shape_error` for zero dims or window.
  explicit SlidingWindow(const SlidingWindowConfig& cfg, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : cfg_(checked(cfg)), slots_(cfg.sinks + cfg.window), k_(cfg.n_kv_heads * slots_ * cfg.head_dim, mr),
        v_(cfg.n_kv_heads * slots_ * cfg.head_dim, mr), ring_lo_(cfg.sinks) {}
  SlidingWindow(std::size_t n_kv_heads, std::size_t head_dim, std::size_t window, std::size_t sinks = 0,
                std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : SlidingWindow(SlidingWindowConfig{.n_kv_heads = n_kv_heads, .head_dim = head_dim, .window = window, .sinks = sinks},
                      mr) {}

  SlidingWindow(SlidingWindow&&) noexcept = default;
  SlidingWindow& operator=(SlidingWindow&&) noexcept = default;

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return cfg_.n_kv_heads; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return cfg_.head_dim; }
  [[nodiscard]] std::size_t window() const noexcept { return cfg_.window; }
  [[nodiscard]] std::size_t sinks() const noexcept { return cfg_.sinks; }
  /// Positions appended so far (the next true position); not all of them are kept.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Positions currently stored (sinks + ring).
  [[nodiscard]] std::size_t kept() const noexcept { return std::min(cfg_.sinks, size_) + (size_ - std::min(size_, ring_lo_)); }
  /// First position held by the ring (positions in [sinks, ring_lo) were evicted).
  [[nodiscard]] std::size_t ring_begin() const noexcept { return std::min(ring_lo_, size_); }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return k_.bytes() + v_.bytes(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return kept() * 2 * cfg_.n_kv_heads * cfg_.head_dim * sizeof(T); }

  /// Appends n_new tokens given as rows [n_new, n_kv_heads, head_dim] at positions size() …, evicting
  /// the oldest non-sink positions beyond the window. Never full. Throws `shape_error` for mismatched
  /// spans (cache unchanged).
  void append(std::span<const float> k, std::span<const float> v) {
    const std::size_t row = cfg_.n_kv_heads * cfg_.head_dim;
    require(k.size() == v.size(), "kv::SlidingWindow::append: k has ", k.size(), " floats but v has ", v.size());
    require(k.size() % row == 0, "kv::SlidingWindow::append: expected a multiple of n_kv_heads*head_dim = ", row,
            " floats, got ", k.size());
    const std::size_t n_new = k.size() / row;
    const std::size_t end = size_ + n_new;
    const std::size_t S = cfg_.sinks, W = cfg_.window;
    // Only positions that survive this append are written.
    for (std::size_t pos = size_; pos < end; ++pos) {
      if (pos >= S && end - pos > W) continue;  // evicted before anyone can see it
      const std::size_t t = pos - size_;
      const std::size_t slot = slot_of(pos);
      for (std::size_t h = 0; h < cfg_.n_kv_heads; ++h) {
        const std::size_t dst = (h * slots_ + slot) * cfg_.head_dim;
        simd::from_float<T>(k.data() + t * row + h * cfg_.head_dim, k_.data() + dst, cfg_.head_dim);
        simd::from_float<T>(v.data() + t * row + h * cfg_.head_dim, v_.data() + dst, cfg_.head_dim);
      }
    }
    size_ = end;
    ring_lo_ = std::max({ring_lo_, S, end > W ? end - W : std::size_t{0}});
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
  /// order (≤ 2 blocks). Each block's pos0 is the true position of its first row.
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
    require(c.n_kv_heads > 0 && c.head_dim > 0 && c.window > 0, "kv::SlidingWindow: n_kv_heads, head_dim and window must be > 0, got ",
            c.n_kv_heads, ", ", c.head_dim, ", ", c.window);
    return c;
  }
  [[nodiscard]] std::size_t slot_of(std::size_t pos) const noexcept {
    return pos < cfg_.sinks ? pos : cfg_.sinks + (pos - cfg_.sinks) % cfg_.window;
  }

  SlidingWindowConfig cfg_;
  std::size_t slots_;  // sinks + window
  Buffer<T> k_;        // [n_kv_heads, sinks + window, head_dim]
  Buffer<T> v_;        // [n_kv_heads, sinks + window, head_dim]
  std::size_t size_ = 0;
  std::size_t ring_lo_;  // oldest position the ring holds (≥ sinks)
};

static_assert(CachePolicy<SlidingWindow<float>>);
static_assert(CachePolicy<SlidingWindow<f16>>);

}  // namespace barato::kv
