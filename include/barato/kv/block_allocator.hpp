#pragma once
/// \file
/// `kv::BlockAllocator`: which blocks of a paged pool are free, who references the others, and which
/// hold cached prefix content. It knows nothing of sequences, pages or hashes — a block is an id.
///
///  - **Reference counts.** `take` hands out a free block with count 1, `retain` adds a reference
///    (a fork, a prefix hit), `release` drops one; a block whose count reaches zero is free again.
///  - **Free list** (intrusive, allocated once): blocks without cached content at the front, reused
///    first; cached blocks at the back in least-recently-freed order, so the block `take` evicts
///    once no clean block is free is the cached one freed longest ago.
///  - **The cached bit** of each block is set and cleared by the owner of the prefix registry
///    (`set_cached`, only on referenced blocks); `take` clears it when it evicts.
///  - **Page runs.** `take(after)` prefers the block after `after` (the caller's previous page) when
///    it is free and clean, else the first block of a wholly free clean extent (per-extent counts
///    make the check O(1), the search a scan of extents), else the free list's head — so sequences
///    growing side by side get runs of consecutive blocks (see kv/paged.hpp for why).
///
/// All arrays come from the memory resource given at construction; no member allocates afterwards
/// except `free_list()` (introspection).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <vector>

#include "barato/core/error.hpp"

namespace barato::kv {

/// The block allocator of a paged KV pool: reference counts, a free list that evicts cached
/// blocks least recently freed first, and extents for runs of consecutive blocks.
class BlockAllocator {
 public:
  using BlockId = std::uint32_t;
  /// "No block": the `after` of a sequence's first page.
  static constexpr BlockId kNoBlock = 0xFFFFFFFFu;

  /// `n_blocks` free clean blocks in id order, grouped in extents of `extent_blocks` (≥ 1; the last
  /// extent may be shorter). n_blocks < kNoBlock.
  BlockAllocator(std::size_t n_blocks, std::size_t extent_blocks,
                 std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : n_blocks_(n_blocks), extent_(extent_blocks), ref_(n_blocks, 0, mr), cached_(n_blocks, 0, mr),
        prev_(n_blocks + 1, 0, mr), next_(n_blocks + 1, 0, mr), ext_clean_((n_blocks + extent_ - 1) / extent_, 0, mr) {
    BARATO_ASSERT(extent_ > 0 && n_blocks < kNoBlock);
    const BlockId s = sentinel();
    prev_[s] = next_[s] = s;
    for (BlockId b = 0; b < n_blocks_; ++b) push_back_free(b);
  }

  [[nodiscard]] std::size_t n_blocks() const noexcept { return n_blocks_; }
  [[nodiscard]] std::size_t extent() const noexcept { return extent_; }
  /// Free blocks, cached ones included (`take` may reclaim them).
  [[nodiscard]] std::size_t free_blocks() const noexcept { return n_free_; }
  [[nodiscard]] std::size_t used_blocks() const noexcept { return n_blocks_ - n_free_; }
  /// Reference count of block b (`std::out_of_range` for b ≥ n_blocks).
  [[nodiscard]] std::uint32_t refcount(BlockId b) const { return ref_.at(b); }
  /// True when block b holds cached prefix content (`std::out_of_range` for b ≥ n_blocks).
  [[nodiscard]] bool is_cached(BlockId b) const { return cached_.at(b) != 0; }
  /// True when more than one reference holds block b (a writer must copy it first).
  [[nodiscard]] bool shared(BlockId b) const noexcept { return ref_[b] > 1; }
  /// The free blocks in list order: clean first, then cached least recently freed first (O(n_blocks)).
  [[nodiscard]] std::vector<BlockId> free_list() const {
    std::vector<BlockId> out;
    for (BlockId b = next_[sentinel()]; b != sentinel(); b = next_[b]) out.push_back(b);
    return out;
  }

  /// What `take` handed out.
  struct Taken {
    BlockId block;  ///< the block, now with count 1 and clean
    bool evicted;   ///< it held cached content, which its new owner overwrites
  };
  /// A free block for the page after `after` (kNoBlock: a first page); requires free_blocks() > 0.
  /// Clean blocks first — the block after `after` if it is free and clean, else the first block of
  /// a wholly free clean extent (round robin), else the free list's head — then, once no clean
  /// block is free, the cached block freed longest ago.
  [[nodiscard]] Taken take(BlockId after) noexcept {
    BlockId b = next_[sentinel()];
    BARATO_ASSERT(b != sentinel());
    if (cached_[b] == 0) {  // clean blocks come first in the list: some are free
      if (after != kNoBlock && after + 1 < n_blocks_ && ref_[after + 1] == 0 && cached_[after + 1] == 0) {
        b = after + 1;
      } else if (const BlockId e = clean_extent(); e != kNoBlock) {
        b = e;
      }
    }
    unlink_free(b);
    const bool evicted = cached_[b] != 0;
    cached_[b] = 0;
    ref_[b] = 1;
    return {b, evicted};
  }
  /// One more reference to block b; a free block (a cached one a prefix hit reuses) leaves the list.
  void retain(BlockId b) noexcept {
    if (ref_[b] == 0) unlink_free(b);
    ++ref_[b];
  }
  /// One reference fewer to block b (count > 0); at zero it is free: clean blocks at the front of
  /// the list, cached ones at the back (their content is kept as long as possible).
  void release(BlockId b) noexcept {
    BARATO_ASSERT(ref_[b] > 0);
    if (--ref_[b] == 0) {
      if (cached_[b] != 0) link_after(prev_[sentinel()], b);
      else link_after(sentinel(), b);
    }
  }
  /// Marks referenced block b as holding cached content, or clean again before it is overwritten.
  void set_cached(BlockId b, bool cached) noexcept {
    BARATO_ASSERT(ref_[b] > 0);  // free blocks change the extent counts: only referenced ones are marked
    cached_[b] = cached ? 1 : 0;
  }

 private:
  [[nodiscard]] BlockId sentinel() const noexcept { return static_cast<BlockId>(n_blocks_); }
  [[nodiscard]] std::size_t extent_size(std::size_t e) const noexcept { return std::min(extent_, n_blocks_ - e * extent_); }
  void push_back_free(BlockId b) noexcept { link_after(prev_[sentinel()], b); }
  void link_after(BlockId at, BlockId b) noexcept {
    prev_[b] = at;
    next_[b] = next_[at];
    prev_[next_[at]] = b;
    next_[at] = b;
    ++n_free_;
    if (cached_[b] == 0) {
      const std::size_t e = b / extent_;
      if (++ext_clean_[e] == extent_size(e)) ++n_clean_extents_;
    }
  }
  void unlink_free(BlockId b) noexcept {
    next_[prev_[b]] = next_[b];
    prev_[next_[b]] = prev_[b];
    --n_free_;
    if (cached_[b] == 0) {
      const std::size_t e = b / extent_;
      if (ext_clean_[e]-- == extent_size(e)) --n_clean_extents_;
    }
  }
  /// First block of a wholly free extent without cached content (round robin), or kNoBlock.
  [[nodiscard]] BlockId clean_extent() noexcept {
    if (n_clean_extents_ == 0) return kNoBlock;
    const std::size_t n_ext = ext_clean_.size();
    for (std::size_t i = 0; i < n_ext; ++i) {
      const std::size_t e = (ext_next_ + i) % n_ext;
      if (ext_clean_[e] == extent_size(e)) {
        ext_next_ = (e + 1) % n_ext;
        return static_cast<BlockId>(e * extent_);
      }
    }
    BARATO_ASSERT(false);
    return kNoBlock;
  }

  std::size_t n_blocks_;
  std::size_t extent_;                         // blocks per extent
  std::pmr::vector<std::uint32_t> ref_;        // [n_blocks] reference counts
  std::pmr::vector<std::uint8_t> cached_;      // [n_blocks] 1: holds cached prefix content
  std::pmr::vector<BlockId> prev_, next_;      // [n_blocks + 1] intrusive free list, sentinel last
  std::pmr::vector<std::uint32_t> ext_clean_;  // [n_extents] free clean blocks per extent
  std::size_t n_free_ = 0;
  std::size_t n_clean_extents_ = 0;  // extents whose blocks are all free and clean
  std::size_t ext_next_ = 0;         // where clean_extent() looks first
};

}  // namespace barato::kv
