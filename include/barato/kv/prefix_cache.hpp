#pragma once
/// \file
/// Automatic prefix caching for a paged KV cache (the idea of vLLM's automatic prefix caching and
/// SGLang's RadixAttention, as a hash chain): a *full* block of `B` tokens is identified by
///   hash_i = H(hash_{i−1}, tokens[i·B, (i+1)·B)),   hash_{−1} = kRootHash,
/// so equal hashes mean equal whole prefixes, not only equal blocks. `PrefixIndex` maps such hashes to
/// physical blocks, verifies the stored tokens and parent hash on every hit (a 64-bit collision can
/// never alias two prefixes), remembers hashes whose block was evicted (to name the miss reason),
/// and keeps the statistics a user reads: lookups, blocks hit, prefill tokens saved, and why a
/// lookup stopped.

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <string_view>
#include <vector>

#include "barato/core/error.hpp"

#include "barato/core/token.hpp"

namespace barato::kv {

/// Hash of the empty prefix.
inline constexpr std::uint64_t kRootHash = 0x6a09e667f3bcc909ULL;

namespace detail {
/// splitmix64 finaliser: a bijective 64-bit mix.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace detail

/// Hash of a full block of `tokens` following the prefix whose hash is `parent`. O(B).
[[nodiscard]] inline std::uint64_t block_hash(std::uint64_t parent, std::span<const Token> tokens) noexcept {
  std::uint64_t h = detail::mix64(parent ^ (0x243f6a8885a308d3ULL * (tokens.size() + 1)));
  for (const Token t : tokens) h = detail::mix64(h ^ static_cast<std::uint32_t>(t));
  return h;
}

/// Extends `hashes`, the chain of the full blocks of B tokens that `tokens` starts with (hashes[i] =
/// hash of block i after blocks 0 … i − 1), to every full block of `tokens`. O(B) per new block.
template <class Hashes>
void extend_hash_chain(std::span<const Token> tokens, std::size_t B, Hashes& hashes) {
  while ((hashes.size() + 1) * B <= tokens.size()) {
    const std::size_t i = hashes.size();
    hashes.push_back(block_hash(i == 0 ? kRootHash : hashes[i - 1], tokens.subspan(i * B, B)));
  }
}

/// Why a prefix lookup stopped.
enum class PrefixMiss {
  none,       ///< every usable full block of the prompt was cached
  too_short,  ///< the prompt has no usable full block (fewer than B + 1 tokens: the last token is always computed)
  differs,    ///< the first uncached block was never cached (its content differs from every cached prefix)
  evicted,    ///< the first uncached block had been cached, but its physical block was since reused
};

[[nodiscard]] constexpr std::string_view to_string(PrefixMiss m) noexcept {
  switch (m) {
    case PrefixMiss::none: return "none";
    case PrefixMiss::too_short: return "shorter than one block";
    case PrefixMiss::differs: return "first differing block";
    case PrefixMiss::evicted: return "evicted";
  }
  return "?";
}

/// Result of one prefix lookup (returned by `PagedPool::admit`).
struct PrefixMatch {
  std::size_t cached_tokens = 0;  ///< leading prompt positions whose K/V are reused (prefill starts here)
  std::size_t blocks_hit = 0;     ///< cached blocks reused
  std::size_t usable_blocks = 0;  ///< full blocks of the prompt that could have been reused
  PrefixMiss stop = PrefixMiss::too_short;  ///< why the walk stopped (`none` when all usable blocks hit)
};

/// Cumulative prefix-cache statistics.
struct PrefixCacheStats {
  std::size_t lookups = 0;          ///< prompts looked up
  std::size_t lookups_with_hit = 0;  ///< lookups that reused ≥ 1 block
  std::size_t blocks_hit = 0;       ///< blocks reused in total
  std::size_t tokens_saved = 0;     ///< prefill positions skipped in total
  std::size_t stop_full = 0;        ///< lookups that reused every usable block
  std::size_t miss_too_short = 0;   ///< lookups stopped because the prompt was shorter than one block
  std::size_t miss_differs = 0;     ///< lookups stopped at a block never cached
  std::size_t miss_evicted = 0;     ///< lookups stopped at an evicted block
  std::size_t blocks_evicted = 0;   ///< cached blocks reclaimed by the allocator
  std::size_t blocks_registered = 0;  ///< full blocks entered into the index

  void count(const PrefixMatch& m) noexcept {
    ++lookups;
    lookups_with_hit += m.blocks_hit > 0 ? 1 : 0;
    blocks_hit += m.blocks_hit;
    tokens_saved += m.cached_tokens;
    switch (m.stop) {
      case PrefixMiss::none: ++stop_full; break;
      case PrefixMiss::too_short: ++miss_too_short; break;
      case PrefixMiss::differs: ++miss_differs; break;
      case PrefixMiss::evicted: ++miss_evicted; break;
    }
  }
};

namespace detail {
/// A fixed-capacity open-addressing map from 64-bit hashes (already well mixed) to 32-bit block ids:
/// linear probing, deletion by backward shift (no tombstones). Room for `max_entries` is allocated
/// at construction (slots = the power of two ≥ 2·max_entries, so a probe run stays short); nothing
/// allocates afterwards, so insert / erase cannot throw. Holding more than `max_entries` is a
/// programmer error (debug assert).
class HashSlots {
 public:
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  HashSlots(std::size_t max_entries, std::pmr::memory_resource* mr)
      : max_(max_entries), keys_(slots_for(max_entries), 0, mr), vals_(keys_.size(), kNone, mr) {}
  [[nodiscard]] std::uint32_t find(std::uint64_t key) const noexcept {
    if (keys_.empty()) return kNone;
    for (std::size_t i = home(key);; i = next(i)) {
      if (vals_[i] == kNone) return kNone;
      if (keys_[i] == key) return vals_[i];
    }
  }
  /// Adds key → val unless key is present; returns whether it was added.
  bool insert(std::uint64_t key, std::uint32_t val) noexcept {
    BARATO_ASSERT(val != kNone && size_ < max_);
    std::size_t i = home(key);
    for (; vals_[i] != kNone; i = next(i))
      if (keys_[i] == key) return false;
    keys_[i] = key;
    vals_[i] = val;
    ++size_;
    return true;
  }
  /// Removes key if present; returns its value or kNone.
  std::uint32_t erase(std::uint64_t key) noexcept {
    if (keys_.empty()) return kNone;
    std::size_t i = home(key);
    for (; vals_[i] != kNone; i = next(i))
      if (keys_[i] == key) break;
    const std::uint32_t val = vals_[i];
    if (val == kNone) return kNone;
    // Backward shift: move later entries of the run into the hole when their home allows it.
    for (std::size_t j = next(i);; j = next(j)) {
      if (vals_[j] == kNone) break;
      const std::size_t h = home(keys_[j]);
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        keys_[i] = keys_[j];
        vals_[i] = vals_[j];
        i = j;
      }
    }
    vals_[i] = kNone;
    --size_;
    return val;
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static std::size_t slots_for(std::size_t n) {
    if (n == 0) return 0;
    std::size_t s = 2;
    while (s < 2 * n) s *= 2;
    return s;
  }
  [[nodiscard]] std::size_t home(std::uint64_t key) const noexcept { return static_cast<std::size_t>(key) & (keys_.size() - 1); }
  [[nodiscard]] std::size_t next(std::size_t i) const noexcept { return (i + 1) & (keys_.size() - 1); }

  std::size_t max_;
  std::size_t size_ = 0;
  std::pmr::vector<std::uint64_t> keys_;  // [slots]
  std::pmr::vector<std::uint32_t> vals_;  // [slots] kNone: empty slot
};
}  // namespace detail

/// Hash → physical block map of full, immutable blocks, with the hashes evicted so far (the last one
/// evicted from each block, until that prefix is registered again). Blocks are `std::uint32_t` ids
/// < `n_blocks` of the owning pool. Everything is allocated from `mr` at construction, so no member
/// allocates or throws afterwards: a pool's append can register and evict blocks after it has
/// started changing, and still give the strong guarantee.
class PrefixIndex {
 public:
  /// An index for blocks [0, n_blocks): at most one hash registered and one remembered as evicted per block.
  explicit PrefixIndex(std::size_t n_blocks, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : map_(n_blocks, mr), evicted_(n_blocks, mr), evicted_of_(n_blocks, 0, mr), has_evicted_(n_blocks, 0, mr) {}
  /// The block registered under `hash`, or `kNone`.
  static constexpr std::uint32_t kNone = detail::HashSlots::kNone;
  [[nodiscard]] std::uint32_t find(std::uint64_t hash) const noexcept { return map_.find(hash); }
  /// True when `hash` was registered once, its block has been reclaimed since, and that block has not
  /// been evicted again under another hash (one remembered eviction per block bounds the memory).
  [[nodiscard]] bool was_evicted(std::uint64_t hash) const noexcept { return evicted_.find(hash) != kNone; }
  /// Registers `block` under `hash` unless the hash is already present; returns whether it was added.
  /// A block holds at most one registered hash at a time.
  bool insert(std::uint64_t hash, std::uint32_t block) noexcept {
    if (!map_.insert(hash, block)) return false;
    if (const std::uint32_t b = evicted_.erase(hash); b != kNone) has_evicted_[b] = 0;
    return true;
  }
  /// Removes `hash` (its block is about to be overwritten). `evicted` records it as an eviction.
  void erase(std::uint64_t hash, bool evicted) noexcept {
    const std::uint32_t b = map_.erase(hash);
    if (!evicted || b == kNone) return;
    if (has_evicted_[b] != 0) evicted_.erase(evicted_of_[b]);
    if (const std::uint32_t other = evicted_.erase(hash); other != kNone) has_evicted_[other] = 0;
    evicted_.insert(hash, b);
    evicted_of_[b] = hash;
    has_evicted_[b] = 1;
  }
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }

 private:
  detail::HashSlots map_;                       // registered hash → block
  detail::HashSlots evicted_;                   // evicted hash → the block it was evicted from
  std::pmr::vector<std::uint64_t> evicted_of_;  // [n_blocks] the hash last evicted from each block
  std::pmr::vector<std::uint8_t> has_evicted_;  // [n_blocks] 1: evicted_of_ is in evicted_
};

}  // namespace barato::kv
