#pragma once
/// \file
/// Paged KV cache (PagedAttention, Kwon et al. 2023, "Efficient Memory Management for Large Language
/// Model Serving with PagedAttention"): one pool of fixed-size blocks shared by many sequences.
/// `PagedPool` orchestrates three parts, each in its own header:
///  - the **page store** (kv/page_store.hpp): K/V rows [n_layers, n_kv_heads, n_blocks, B, d] in one
///    page format and the per-head views attention reads. A block holds every layer, so one block
///    table per sequence serves all layers and a fork, copy-on-write or prefix hit is one table edit;
///  - the **block allocator** (kv/block_allocator.hpp): reference counts, the free list (clean blocks
///    first, cached ones evicted least recently freed first) and runs of consecutive pages;
///  - the **prefix registry** (kv/prefix_registry.hpp): full blocks registered under their chain
///    hash, so `admit(prompt)` reuses the longest cached prefix and the model prefills only the rest.
/// The pool holds the sequences (kv/sequence_table.hpp) and the rules that tie the parts together:
/// `fork` shares every block; appending into a shared block copies it first (copy-on-write), into a
/// cached one un-registers it; an append that needs more free blocks than exist throws
/// `capacity_error` before touching anything; `blocks_to_grow` / `blocks_to_admit` say beforehand
/// what an append / an admission takes. Every array the pool owns comes from its memory resource.
/// A model holds a `PagedView` (kv/paged_view.hpp); views refer to the pool, which never moves.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/block_allocator.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/page_store.hpp"
#include "barato/kv/paged_config.hpp"
#include "barato/kv/paged_view.hpp"
#include "barato/kv/prefix_registry.hpp"
#include "barato/kv/sequence_table.hpp"

namespace barato::kv {

/// A pool of KV blocks shared by sequences, in page format T: sequences, forks, copy-on-write and
/// prefix sharing over a page store, a block allocator and a prefix registry.
template <PageFormat T = float>
class PagedPool {
 public:
  using element_type = T;
  using block_type = typename PageStore<T>::block_type;
  using BlockId = BlockAllocator::BlockId;
  static constexpr BlockId kNoBlock = BlockAllocator::kNoBlock;
  /// Allocates the whole pool from `mr` up front. Throws `shape_error` for a zero dimension,
  /// `capacity_error` for a pool that cannot exist (more than 2^32 − 2 blocks, a size that overflows,
  /// more K/V bytes than the machine's physical memory; the requested and available sizes named).
  explicit PagedPool(const PagedConfig& cfg, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : cfg_(sized(cfg)),
        store_({.n_layers = cfg.n_layers, .n_kv_heads = cfg.n_kv_heads, .n_blocks = cfg.n_blocks, .block_tokens = cfg.block_tokens},
               cfg.head_dim, mr),
        alloc_(cfg.n_blocks, cfg.extent(), mr), prefix_(cfg.n_blocks, cfg.block_tokens, cfg.prefix_caching, mr),
        seqs_(cfg.n_layers, mr) {}
  PagedPool(const PagedPool&) = delete;
  PagedPool& operator=(const PagedPool&) = delete;

  // ---- shape and memory ------------------------------------------------------------------------
  [[nodiscard]] const PagedConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t n_layers() const noexcept { return cfg_.n_layers; }
  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return cfg_.n_kv_heads; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return cfg_.head_dim; }
  [[nodiscard]] std::size_t block_tokens() const noexcept { return cfg_.block_tokens; }
  [[nodiscard]] std::size_t n_blocks() const noexcept { return cfg_.n_blocks; }
  /// Blocks free now, cached ones an allocation may reclaim included: what appends and admissions
  /// take from (compare with `blocks_to_grow` and `blocks_to_admit`).
  [[nodiscard]] std::size_t free_blocks() const noexcept { return alloc_.free_blocks(); }
  [[nodiscard]] std::size_t used_blocks() const noexcept { return alloc_.used_blocks(); }
  /// Bytes of one block (all layers, K and V).
  [[nodiscard]] std::size_t block_bytes() const noexcept { return store_.layout().block_rows() * PageStore<T>::row_bytes(cfg_.head_dim); }
  /// Bytes of the pool's K/V pages, scales included (the tables, counts and hashes come on top).
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return store_.bytes(); }
  /// Bytes of the blocks currently referenced by some sequence.
  [[nodiscard]] std::size_t bytes_in_use() const noexcept { return used_blocks() * block_bytes(); }
  /// Bytes occupied by stored positions: Σ over live sequences of their positions (max over layers),
  /// counting a shared position once per sequence that sees it (so it can exceed bytes_in_use()).
  [[nodiscard]] std::size_t bytes_used() const noexcept {
    return seqs_.positions() * block_bytes() / cfg_.block_tokens;
  }

  // ---- sequences --------------------------------------------------------------------------------
  /// A new, empty sequence (no tokens declared).
  [[nodiscard]] SeqId add_sequence() { return seqs_.add(); }
  /// Result of `admit`.
  struct Admission {
    SeqId seq;          ///< the new sequence
    PrefixMatch match;  ///< match.cached_tokens positions are already filled: prefill prompt[cached …]
  };
  /// A new sequence for `prompt`: declares its tokens and reuses the longest chain of cached full
  /// blocks (at most (prompt.size() − 1) / B of them, so the last prompt token is always computed and
  /// yields logits). Allocates no block, so it cannot run out of pool. Updates `prefix_stats()`.
  /// Strong guarantee: if an allocation throws, the pool (statistics included) is unchanged.
  /// `expected_tokens` reserves room for that many known tokens, so that declaring the tokens of a
  /// generation up to that length allocates nothing (and cannot throw).
  [[nodiscard]] Admission admit(std::span<const Token> prompt, std::size_t expected_tokens = 0) {
    // Strong guarantee: the sequence is built aside (every allocation), then inserted; the
    // references taken and the statistics counted after that cannot throw.
    PagedSequence s = seqs_.fresh();
    const std::size_t known = std::max(prompt.size(), expected_tokens);
    s.tokens.reserve(known);
    s.hashes.reserve(known / cfg_.block_tokens);
    const PrefixMatch m = prefix_.lookup(prompt, [&](BlockId b) { s.table.push_back(b); });
    std::fill(s.len.begin(), s.len.end(), m.cached_tokens);
    s.registered = m.blocks_hit;
    s.declare(prompt, cfg_.block_tokens);
    const SeqId id = seqs_.insert(std::move(s));
    PagedSequence& live = seqs_.at(id);
    for (const BlockId b : live.table) alloc_.retain(b);
    register_full_blocks(live);  // registers nothing new (the hit blocks are cached); cannot throw
    prefix_.count(m);
    return {id, m};
  }
  /// What admitting `prompt` and prefilling all of it in every layer would take; changes nothing.
  struct AdmitCost {
    PrefixMatch match;       ///< the prefix hit `admit` would find now (not counted in the statistics)
    std::size_t blocks = 0;  ///< free blocks taken: pages after the hit + hit blocks that are free now
  };
  /// The cost of admitting `prompt` now (O(B) per block of its prefix hit); allocates nothing.
  [[nodiscard]] AdmitCost blocks_to_admit(std::span<const Token> prompt) const {
    std::size_t reclaimed = 0;
    const PrefixMatch m = prefix_.lookup(prompt, [&](BlockId b) { reclaimed += alloc_.refcount(b) == 0 ? 1 : 0; });
    const std::size_t B = cfg_.block_tokens;
    return {m, (prompt.size() + B - 1) / B - m.blocks_hit + reclaimed};
  }
  /// Free blocks that appending n positions to every layer of sequence `id` takes (new pages and
  /// copies of shared pages written); such appends throw `capacity_error` iff it exceeds
  /// free_blocks(). Changes nothing. O(pages written · n_layers).
  [[nodiscard]] std::size_t blocks_to_grow(SeqId id, std::size_t n) const {
    const PagedSequence& s = seqs_.at(id);
    if (n == 0) return 0;
    const std::size_t B = cfg_.block_tokens;
    const auto [lo, hi] = std::minmax_element(s.len.begin(), s.len.end());
    std::size_t need = 0;
    for (std::size_t i = *lo / B; i <= (*hi + n - 1) / B; ++i) need += s.writes(i, n, B) && takes_block(s, i) ? 1 : 0;
    return need;
  }
  /// Records tokens at the end of the sequence's known tokens (prompt, then sampled tokens). Only
  /// blocks whose tokens are known can be registered for prefix sharing. Strong guarantee.
  void declare_tokens(SeqId id, std::span<const Token> tokens) {
    PagedSequence& s = seqs_.at(id);
    s.declare(tokens, cfg_.block_tokens);
    register_full_blocks(s);
  }
  /// A new sequence sharing every block of `id` (counts + 1, no copy; O(blocks)). Strong guarantee.
  [[nodiscard]] SeqId fork(SeqId id) {
    const SeqId c = seqs_.insert(seqs_.copy_of(id));  // strong: copied aside, then inserted
    for (const BlockId b : seqs_[c].table) alloc_.retain(b);
    return c;
  }
  /// Makes room in the sequence's block table for `positions` positions, so that appends up to that
  /// length allocate nothing (they then throw only `capacity_error` / `shape_error`, before any
  /// change). Allocates only; changes nothing observable. Strong guarantee.
  void reserve(SeqId id, std::size_t positions) {
    PagedSequence& s = seqs_.at(id);
    const std::size_t pages = (positions + cfg_.block_tokens - 1) / cfg_.block_tokens;
    if (s.table.capacity() < pages) s.table.reserve(std::max(pages, 2 * s.table.capacity()));
  }
  /// Ends a sequence: every block's count drops by one; blocks reaching zero return to the free list.
  /// Allocates nothing.
  void release(SeqId id) {
    for (const BlockId b : seqs_.at(id).table) alloc_.release(b);
    seqs_.remove(id);
  }
  /// Rolls every layer of the sequence back to n positions (and its known tokens to ≤ n).
  void truncate(SeqId id, std::size_t n) {
    PagedSequence& s = seqs_.at(id);
    require(n <= s.shortest(), "kv::PagedPool::truncate: n = ", n, " exceeds the sequence length ", s.shortest());
    for (auto& l : s.len) l = n;
    shrink(s);
  }
  /// Rolls one layer back to n positions (n ≤ its size, else `shape_error`).
  void truncate(SeqId id, std::size_t layer, std::size_t n) {
    PagedSequence& s = seqs_.at(id);
    check_layer(layer);
    require(n <= s.len[layer], "kv::PagedPool::truncate: n = ", n, " exceeds size ", s.len[layer], " of layer ", layer);
    s.len[layer] = n;
    shrink(s);
  }
  /// Appends n_new tokens of one layer given as rows [n_new, n_kv_heads, head_dim]. Copies shared
  /// blocks it writes into (copy-on-write) and takes new blocks from the free list. Throws
  /// `shape_error` for mismatched spans and `capacity_error` when the pool has too few free blocks;
  /// in both cases nothing changed. Strong guarantee also when an allocation throws: the block
  /// table's growth is the only allocation and comes first (the prefix registry never allocates).
  void append(SeqId id, std::size_t layer, std::span<const float> k, std::span<const float> v) {
    PagedSequence& s = seqs_.at(id);
    check_layer(layer);
    const std::size_t d = cfg_.head_dim, H = cfg_.n_kv_heads, B = cfg_.block_tokens;
    const std::size_t row = H * d;
    const std::size_t n_new = detail::append_tokens("kv::PagedPool::append", k.size(), v.size(), row);
    if (n_new == 0) return;
    const std::size_t p0 = s.len[layer], p1 = p0 + n_new;
    const std::size_t first = p0 / B, last = (p1 - 1) / B;  // logical blocks written
    std::size_t need = 0;  // counted before changing anything
    for (std::size_t i = first; i <= last; ++i) need += takes_block(s, i) ? 1 : 0;
    require<capacity_error>(need <= free_blocks(), "kv::PagedPool::append: ", n_new, " tokens need ", need,
                            " free blocks, the pool has ", free_blocks(), " of ", cfg_.n_blocks);
    if (s.table.capacity() < last + 1)  // the only allocation (amortised); may throw before any change
      s.table.reserve(std::max(last + 1, 2 * s.table.capacity()));
    for (std::size_t i = first; i <= last; ++i) {
      if (i >= s.table.size()) s.table.push_back(take(s.table.empty() ? kNoBlock : s.table.back()));
      else s.table[i] = writable(s.table[i], i > 0 ? s.table[i - 1] : kNoBlock);
    }
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t src = (p - p0) * row + h * d;
        store_.write(store_.layout().row(s.table[p / B], layer, h) + p % B, k.data() + src, v.data() + src);
      }
    s.len[layer] = p1;
    register_full_blocks(s);
  }
  /// Calls f once for KV head h of (sequence, layer) when it holds positions: one block spanning all
  /// of them (pos0 = 0), rows reached through the sequence's block table — a `PagedBlock<T>` for
  /// element pages, a `PagedQuantBlock<KF, VF>` for quantized pages (`page(i)` is logical page i).
  /// The view points into the pool and the table (valid until the next mutation).
  template <class F>
  void for_each_block(SeqId id, std::size_t layer, std::size_t h, F&& f) const {
    const PagedSequence& s = seqs_[id];
    BARATO_ASSERT(s.live && layer < cfg_.n_layers && h < cfg_.n_kv_heads);
    if (s.len[layer] != 0) f(store_.block(layer, h, s.table.data(), s.len[layer]));
  }
  /// The view of one (sequence, layer): what a model's layer holds. Valid while the sequence lives.
  [[nodiscard]] PagedView<T> view(SeqId id, std::size_t layer) {
    (void)seqs_.at(id);
    check_layer(layer);
    return PagedView<T>(*this, id, layer);
  }

  // ---- introspection (tests, tutorials) ---------------------------------------------------------
  [[nodiscard]] bool is_live(SeqId id) const noexcept { return seqs_.contains(id); }
  [[nodiscard]] std::size_t size(SeqId id, std::size_t layer) const { return seqs_.at(id).len[layer]; }
  [[nodiscard]] std::span<const BlockId> block_table(SeqId id) const { return seqs_.at(id).table; }
  [[nodiscard]] std::span<const Token> tokens(SeqId id) const { return seqs_.at(id).tokens; }
  [[nodiscard]] std::uint32_t refcount(BlockId b) const { return alloc_.refcount(b); }
  /// True when block b holds registered (shareable) prefix content.
  [[nodiscard]] bool is_cached(BlockId b) const { return alloc_.is_cached(b); }
  /// The free blocks in list order: those without cached content first, then cached ones least
  /// recently freed first (O(n_blocks); allocates).
  [[nodiscard]] std::vector<BlockId> free_list() const { return alloc_.free_list(); }
  [[nodiscard]] const PrefixCacheStats& prefix_stats() const noexcept { return prefix_.stats(); }
  [[nodiscard]] std::size_t cached_blocks() const noexcept { return prefix_.cached_blocks(); }
  /// Key / value row (layer, head, position) of a sequence: a view into the pool's page.
  [[nodiscard]] std::span<const T> key(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const
    requires Element<T> { return store_.key(row_of(id, layer, h, pos)); }
  [[nodiscard]] std::span<const T> value(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const
    requires Element<T> { return store_.value(row_of(id, layer, h, pos)); }

 private:
  /// cfg.checked(), then the K/V pages' bytes against what can exist (before any allocation).
  static const PagedConfig& sized(const PagedConfig& cfg) {
    const std::size_t rows = cfg.checked().elements() / cfg.head_dim;
    const std::size_t bytes = checked_mul(rows, PageStore<T>::row_bytes(cfg.head_dim), "kv::PagedPool", "rows x K/V row bytes");
    require_memory(bytes, "kv::PagedPool of ", cfg.n_blocks, " blocks of ", cfg.block_tokens, " tokens");
    return cfg;
  }
  void check_layer(std::size_t layer) const {
    require(layer < cfg_.n_layers, "kv::PagedPool: layer ", layer, " out of range (", cfg_.n_layers, " layers)");
  }
  [[nodiscard]] std::size_t row_of(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const {
    const PagedSequence& s = seqs_.at(id);
    require(layer < cfg_.n_layers && h < cfg_.n_kv_heads && pos < s.len[layer], "kv::PagedPool: (layer ", layer,
            ", head ", h, ", pos ", pos, ") out of range");
    return store_.layout().row(s.table[pos / cfg_.block_tokens], layer, h) + pos % cfg_.block_tokens;
  }
  /// True when writing logical page i of s takes a free block: a new page, or a copy of a shared one.
  [[nodiscard]] bool takes_block(const PagedSequence& s, std::size_t i) const noexcept {
    return i >= s.table.size() || alloc_.shared(s.table[i]);
  }
  /// A free block for the page after `after`; a cached block it reclaims leaves the registry.
  BlockId take(BlockId after) {
    const auto [b, evicted] = alloc_.take(after);
    if (evicted) prefix_.evict(b);
    return b;
  }
  /// Block b of a table, made writable: copied if shared (count > 1), un-registered if cached.
  BlockId writable(BlockId b, BlockId after) {
    if (alloc_.shared(b)) {
      const BlockId c = take(after);
      copy_block(store_, c, b);
      alloc_.release(b);
      return c;
    }
    if (alloc_.is_cached(b)) {
      prefix_.forget(b);
      alloc_.set_cached(b, false);
    }
    return b;
  }
  /// Drops table entries beyond every layer's length and the known tokens beyond the shortest layer.
  void shrink(PagedSequence& s) {
    const std::size_t keep = (s.longest() + cfg_.block_tokens - 1) / cfg_.block_tokens;
    for (; s.table.size() > keep; s.table.pop_back()) alloc_.release(s.table.back());
    s.forget_beyond_shortest(cfg_.block_tokens);
  }
  /// Registers blocks that are now full in every layer and whose tokens are known.
  void register_full_blocks(PagedSequence& s) {
    if (!prefix_.enabled()) return;
    const std::size_t B = cfg_.block_tokens;
    const std::size_t full = std::min(s.shortest() / B, s.hashes.size());
    for (; s.registered < full; ++s.registered) {
      const std::size_t i = s.registered;
      if (alloc_.is_cached(s.table[i])) continue;  // already shared content
      if (prefix_.insert(s.table[i], s.hashes[i], i == 0 ? kRootHash : s.hashes[i - 1],
                         std::span<const Token>(s.tokens).subspan(i * B, B)))
        alloc_.set_cached(s.table[i], true);  // else: the same prefix is cached in another block
    }
  }

  PagedConfig cfg_;
  PageStore<T> store_;      // rows [n_layers, n_kv_heads, n_blocks, B] of K and V (and scales)
  BlockAllocator alloc_;    // counts, free list, extents, cached bits
  PrefixRegistry prefix_;   // cached prefixes and their statistics
  SequenceTable seqs_;      // block tables, lengths, known tokens
};

static_assert(CachePolicy<PagedView<float>>);
static_assert(CachePolicy<PagedView<f16>>);
static_assert(CachePolicy<PagedView<QuantizedPages<Int8>>>);
static_assert(CachePolicy<PagedView<QuantizedPages<Int8, Int4>>>);

}  // namespace barato::kv
