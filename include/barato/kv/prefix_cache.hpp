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
#include <unordered_map>
#include <unordered_set>

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

/// Hash → physical block map of full, immutable blocks, with the set of hashes evicted so far.
/// Blocks are `std::uint32_t` ids of the owning pool; both sets allocate from `mr`.
class PrefixIndex {
 public:
  explicit PrefixIndex(std::pmr::memory_resource* mr = std::pmr::get_default_resource()) : map_(mr), evicted_(mr) {}
  /// The block registered under `hash`, or `kNone`.
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;
  [[nodiscard]] std::uint32_t find(std::uint64_t hash) const {
    const auto it = map_.find(hash);
    return it == map_.end() ? kNone : it->second;
  }
  /// True when `hash` was registered once and its block has been reclaimed since.
  [[nodiscard]] bool was_evicted(std::uint64_t hash) const { return evicted_.contains(hash); }
  /// Registers `block` under `hash` unless the hash is already present; returns whether it was added.
  bool insert(std::uint64_t hash, std::uint32_t block) {
    const bool added = map_.emplace(hash, block).second;
    if (added) evicted_.erase(hash);
    return added;
  }
  /// Removes `hash` (its block is about to be overwritten). `evicted` records it as an eviction.
  void erase(std::uint64_t hash, bool evicted) {
    map_.erase(hash);
    if (evicted) evicted_.insert(hash);
  }
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }

 private:
  std::pmr::unordered_map<std::uint64_t, std::uint32_t> map_;
  std::pmr::unordered_set<std::uint64_t> evicted_;
};

}  // namespace barato::kv
