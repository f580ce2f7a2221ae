#pragma once
/// \file
/// `kv::Growable<T>`: a KV cache of one layer that grows in chunks of `chunk_tokens` positions as
/// tokens arrive, instead of reserving the maximum context up front. Chunks are never moved or
/// copied when the cache grows (no O(n) reallocation): each chunk is its own allocation with layout
/// [n_kv_heads, chunk_tokens, head_dim] for K and for V, and attention visits one `DenseBlock` per
/// chunk (in position order, `pos0` = first position of the chunk). `bytes_reserved()` is the
/// chunks held, `bytes_used()` the stored tokens; the gap is at most one chunk.
///
/// Growth failure (an optional `max_tokens` limit → `capacity_error`, or the memory resource
/// throwing) leaves the cache exactly as it was: new chunks are allocated before anything changes.

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/simd/convert.hpp"

namespace barato::kv {

/// Construction parameters of `Growable` (designated initialisers).
struct GrowableConfig {
  std::size_t n_kv_heads = 0;     ///< KV heads of the layer
  std::size_t head_dim = 0;       ///< d
  std::size_t chunk_tokens = 256;  ///< positions per chunk (allocation granularity)
  std::size_t max_tokens = 0;     ///< hard limit on size() (0 = only the memory resource limits growth)
};

/// A KV cache of one layer that grows in chunks of `chunk_tokens` positions as tokens arrive, never copying what it holds.
template <Element T = float>
class Growable {
 public:
  using element_type = T;
  using block_type = DenseBlock<T>;

  /// An empty cache; nothing is allocated until the first append. Throws `shape_error` for zero dims.
  explicit Growable(const GrowableConfig& cfg, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : cfg_(cfg), mr_(mr) {
    require(cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.chunk_tokens > 0,
            "kv::Growable: n_kv_heads, head_dim and chunk_tokens must be > 0, got ", cfg.n_kv_heads, ", ", cfg.head_dim,
            ", ", cfg.chunk_tokens);
    // one chunk must be able to exist (capacity_error naming its bytes otherwise); later sizes are
    // whole chunks counted in std::size_t positions
    const std::size_t elems = checked_mul(checked_mul(cfg.n_kv_heads, cfg.chunk_tokens, "kv::Growable", "n_kv_heads x chunk_tokens"),
                                          cfg.head_dim, "kv::Growable", "(n_kv_heads chunk_tokens) x head_dim");
    require_memory(checked_mul(checked_mul(elems, sizeof(T), "kv::Growable", "chunk elements x element bytes"), 2, "kv::Growable",
                               "K and V chunk bytes"),
                   "kv::Growable chunk of ", cfg.chunk_tokens, " tokens");
  }
  Growable(std::size_t n_kv_heads, std::size_t head_dim, std::size_t chunk_tokens = 256,
           std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : Growable(GrowableConfig{.n_kv_heads = n_kv_heads, .head_dim = head_dim, .chunk_tokens = chunk_tokens}, mr) {}

  Growable(Growable&&) noexcept = default;
  Growable& operator=(Growable&&) noexcept = default;

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return cfg_.n_kv_heads; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return cfg_.head_dim; }
  [[nodiscard]] std::size_t chunk_tokens() const noexcept { return cfg_.chunk_tokens; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Positions that fit without growing (not a limit: the cache grows past it).
  [[nodiscard]] std::size_t reserved_tokens() const noexcept { return chunks_.size() * cfg_.chunk_tokens; }
  [[nodiscard]] std::size_t n_chunks() const noexcept { return chunks_.size(); }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return chunks_.size() * chunk_bytes(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return size_ * token_bytes(); }

  /// Appends n_new tokens given as rows [n_new, n_kv_heads, head_dim], growing by whole chunks.
  /// Throws `shape_error` for mismatched spans, `capacity_error` beyond `max_tokens`; if the memory
  /// resource throws, the exception propagates. In every case the cache is unchanged.
  void append(std::span<const float> k, std::span<const float> v) {
    const std::size_t row = cfg_.n_kv_heads * cfg_.head_dim;
    const std::size_t n_new = detail::append_tokens("kv::Growable::append", k.size(), v.size(), row);
    require<capacity_error>(n_new <= SIZE_MAX - cfg_.chunk_tokens - size_, "kv::Growable::append: ", n_new,
                            " tokens after ", size_, " overflow the position count");
    if (cfg_.max_tokens != 0) detail::require_room("kv::Growable::append", n_new, size_, cfg_.max_tokens, "max_tokens");
    reserve(size_ + n_new);
    for (std::size_t t = 0; t < n_new; ++t) {
      const std::size_t pos = size_ + t;
      Chunk& ch = chunks_[pos / cfg_.chunk_tokens];
      const std::size_t r = pos % cfg_.chunk_tokens;
      for (std::size_t h = 0; h < cfg_.n_kv_heads; ++h) {
        const std::size_t dst = (h * cfg_.chunk_tokens + r) * cfg_.head_dim;
        simd::from_float<T>(k.data() + t * row + h * cfg_.head_dim, ch.k.data() + dst, cfg_.head_dim);
        simd::from_float<T>(v.data() + t * row + h * cfg_.head_dim, ch.v.data() + dst, cfg_.head_dim);
      }
    }
    size_ += n_new;
  }

  /// Makes room for `n` positions (whole chunks). Strong guarantee: allocates every new chunk first.
  void reserve(std::size_t n) {
    const std::size_t want = (n + cfg_.chunk_tokens - 1) / cfg_.chunk_tokens;
    if (want <= chunks_.size()) return;
    std::vector<Chunk> fresh;
    fresh.reserve(want - chunks_.size());
    const std::size_t elems = cfg_.n_kv_heads * cfg_.chunk_tokens * cfg_.head_dim;
    for (std::size_t i = chunks_.size(); i < want; ++i) fresh.push_back(Chunk{Buffer<T>(elems, mr_), Buffer<T>(elems, mr_)});
    chunks_.reserve(want);  // may throw: nothing has changed yet
    for (auto& c : fresh) chunks_.push_back(std::move(c));  // no allocation, no throw
  }

  /// Drops positions ≥ n (keeps the chunks); throws `shape_error` when n > size().
  void truncate(std::size_t n) {
    require(n <= size_, "kv::Growable::truncate: n = ", n, " exceeds size ", size_);
    size_ = n;
  }

  /// Frees chunks beyond those holding the stored positions.
  void shrink_to_fit() {
    const std::size_t keep = (size_ + cfg_.chunk_tokens - 1) / cfg_.chunk_tokens;
    while (chunks_.size() > keep) chunks_.pop_back();
  }

  void clear() noexcept { size_ = 0; }

  /// Calls f(DenseBlock<T>) once per chunk holding stored positions of KV head h, in position order.
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    BARATO_ASSERT(h < cfg_.n_kv_heads);
    const std::size_t c = cfg_.chunk_tokens;
    for (std::size_t i = 0; i * c < size_; ++i) {
      const std::size_t off = h * c * cfg_.head_dim;
      const std::size_t n = size_ - i * c < c ? size_ - i * c : c;
      f(DenseBlock<T>{chunks_[i].k.data() + off, chunks_[i].v.data() + off, n, cfg_.head_dim, i * c});
    }
  }

 private:
  struct Chunk {
    Buffer<T> k;  // [n_kv_heads, chunk_tokens, head_dim]
    Buffer<T> v;  // [n_kv_heads, chunk_tokens, head_dim]
  };
  [[nodiscard]] std::size_t token_bytes() const noexcept { return 2 * cfg_.n_kv_heads * cfg_.head_dim * sizeof(T); }
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return cfg_.chunk_tokens * token_bytes(); }

  GrowableConfig cfg_;
  std::pmr::memory_resource* mr_;
  std::vector<Chunk> chunks_;  // chunk i holds positions [i·chunk_tokens, (i+1)·chunk_tokens)
  std::size_t size_ = 0;
};

static_assert(CachePolicy<Growable<float>>);
static_assert(CachePolicy<Growable<f16>>);

}  // namespace barato::kv
