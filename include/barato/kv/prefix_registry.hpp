#pragma once
/// \file
/// `kv::PrefixRegistry`: the cached prefixes of a paged pool's blocks — for every registered block
/// its chain hash, the hash of the prefix before it and its B tokens (kv/prefix_cache.hpp: equal
/// chain hashes mean equal whole prefixes; the tokens and parent are verified on every hit, so a
/// 64-bit collision never aliases two prefixes) — the longest-cached-prefix lookup of a prompt, and
/// the statistics a user reads (lookups, hits, tokens saved, why lookups stopped, registrations,
/// evictions).
///
/// It decides nothing about memory: the block allocator (kv/block_allocator.hpp) keeps the cached
/// bit of each block and chooses which free block to reclaim; the pool tells the registry when a
/// block is registered, rewritten (`forget`) or reclaimed (`evict`). All its arrays come from the
/// memory resource given at construction.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <vector>

#include "barato/core/token.hpp"
#include "barato/kv/prefix_cache.hpp"

namespace barato::kv {

/// Registry of the full blocks of a paged pool that hold shareable prefix content: chain hashes,
/// verified lookup, eviction records and `PrefixCacheStats`.
class PrefixRegistry {
 public:
  using BlockId = std::uint32_t;

  /// A registry for `n_blocks` blocks of `block_tokens` (B) tokens; `enabled` = false registers
  /// nothing and every lookup misses.
  PrefixRegistry(std::size_t n_blocks, std::size_t block_tokens, bool enabled,
                 std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : B_(block_tokens), enabled_(enabled), hash_(n_blocks, 0, mr), parent_(n_blocks, 0, mr),
        tok_(n_blocks * block_tokens, 0, mr), index_(enabled ? n_blocks : 0, mr) {}

  [[nodiscard]] bool enabled() const noexcept { return enabled_; }
  [[nodiscard]] std::size_t block_tokens() const noexcept { return B_; }
  /// Blocks registered now.
  [[nodiscard]] std::size_t cached_blocks() const noexcept { return index_.size(); }
  [[nodiscard]] const PrefixCacheStats& stats() const noexcept { return stats_; }

  /// The longest chain of registered blocks that `prompt` starts with, at most (prompt.size() − 1) / B
  /// blocks (the last prompt token is always computed); calls `on_hit(block)` for each, in order.
  /// Changes nothing (statistics included: see `count`). O(B) per block looked at.
  template <class OnHit>
  [[nodiscard]] PrefixMatch lookup(std::span<const Token> prompt, OnHit&& on_hit) const {
    PrefixMatch m;
    m.usable_blocks = prompt.empty() ? 0 : (prompt.size() - 1) / B_;
    m.stop = m.usable_blocks == 0 ? PrefixMiss::too_short : PrefixMiss::none;
    if (!enabled_) {
      if (m.usable_blocks > 0) m.stop = PrefixMiss::differs;
      return m;
    }
    std::uint64_t h = kRootHash;
    for (; m.blocks_hit < m.usable_blocks; ++m.blocks_hit) {
      const auto toks = prompt.subspan(m.blocks_hit * B_, B_);
      const std::uint64_t next = block_hash(h, toks);
      const BlockId b = index_.find(next);
      if (b == PrefixIndex::kNone || !holds(b, h, toks)) {
        m.stop = b == PrefixIndex::kNone && index_.was_evicted(next) ? PrefixMiss::evicted : PrefixMiss::differs;
        break;
      }
      on_hit(b);
      h = next;
    }
    m.cached_tokens = m.blocks_hit * B_;
    return m;
  }
  /// Adds a lookup that a sequence was admitted with to the statistics.
  void count(const PrefixMatch& m) noexcept { stats_.count(m); }

  /// Registers block b as the block of `tokens` (B of them) after the prefix whose chain hash is
  /// `parent`, under its chain hash `hash`. False (nothing changes) when that prefix is already
  /// registered in another block. Allocates nothing and does not throw.
  bool insert(BlockId b, std::uint64_t hash, std::uint64_t parent, std::span<const Token> tokens) {
    if (!index_.insert(hash, b)) return false;
    hash_[b] = hash;
    parent_[b] = parent;
    std::copy_n(tokens.begin(), B_, tok_.begin() + static_cast<std::ptrdiff_t>(b * B_));
    ++stats_.blocks_registered;
    return true;
  }
  /// Registered block b is about to be rewritten by its only owner: its prefix is no longer cached.
  void forget(BlockId b) noexcept { index_.erase(hash_[b], /*evicted=*/false); }
  /// Registered block b was reclaimed by the allocator: a later lookup of its prefix reports
  /// `PrefixMiss::evicted`; counted in `stats().blocks_evicted`.
  void evict(BlockId b) noexcept {
    index_.erase(hash_[b], /*evicted=*/true);
    ++stats_.blocks_evicted;
  }

 private:
  /// True when registered block b holds `toks` after the prefix hashed `parent`.
  [[nodiscard]] bool holds(BlockId b, std::uint64_t parent, std::span<const Token> toks) const noexcept {
    return parent_[b] == parent &&
           std::equal(toks.begin(), toks.end(), tok_.begin() + static_cast<std::ptrdiff_t>(b * B_));
  }

  std::size_t B_;
  bool enabled_;
  std::pmr::vector<std::uint64_t> hash_;    // [n_blocks] chain hash of a registered block
  std::pmr::vector<std::uint64_t> parent_;  // [n_blocks] chain hash of the prefix before it
  std::pmr::vector<Token> tok_;             // [n_blocks, B] its tokens (verified on every hit)
  PrefixIndex index_;
  PrefixCacheStats stats_;
};

}  // namespace barato::kv
