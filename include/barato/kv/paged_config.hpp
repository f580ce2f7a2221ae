#pragma once
/// \file
/// `kv::PagedConfig`: the shape of a paged KV pool (kv/paged.hpp) — layers, KV heads and head_dim
/// per block, positions per block, blocks, the allocation extent and whether prefixes are shared —
/// given with designated initialisers, and checked once where a pool is built.

#include <algorithm>
#include <cstddef>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/block_allocator.hpp"

namespace barato::kv {

/// Construction parameters of `PagedPool` (designated initialisers).
struct PagedConfig {
  std::size_t n_layers = 1;        ///< layers stored per block
  std::size_t n_kv_heads = 0;      ///< KV heads per layer
  std::size_t head_dim = 0;        ///< d
  std::size_t block_tokens = 16;   ///< B: positions per block
  std::size_t n_blocks = 0;        ///< blocks in the pool (capacity = n_blocks · B positions, shared)
  std::size_t extent_blocks = 0;   ///< blocks per allocation extent: a sequence starts a new run of pages
                                   ///< at a wholly free extent (see BlockAllocator); 0 = extent()
  bool prefix_caching = true;      ///< register full blocks for automatic prefix sharing

  /// Tokens per extent when extent_blocks is 0: runs of 2048 tokens are 512 KiB per head at d = 64
  /// fp32, long enough that one core reads them as fast as one stream (bench_kv; runs of 1024 tokens
  /// cost 3–9 % more at B = 16, of 512 tokens 8–12 % at B = 8).
  static constexpr std::size_t kAutoExtentTokens = 2048;
  /// Blocks per extent: extent_blocks, or kAutoExtentTokens / block_tokens (≥ 1) when it is 0.
  [[nodiscard]] constexpr std::size_t extent() const noexcept {
    if (extent_blocks != 0) return extent_blocks;
    return block_tokens == 0 ? 1 : std::max<std::size_t>(1, kAutoExtentTokens / block_tokens);
  }
  /// This config, or `shape_error` for a zero dimension, `capacity_error` for n_blocks ≥ 2^32 − 1
  /// (block ids are 32-bit) or a pool whose row count n_layers · n_kv_heads · n_blocks · B · head_dim
  /// overflows std::size_t (the requested and the largest sizes are named).
  [[nodiscard]] const PagedConfig& checked() const {
    require(n_layers > 0 && n_kv_heads > 0 && head_dim > 0 && block_tokens > 0 && n_blocks > 0,
            "kv::PagedPool: n_layers, n_kv_heads, head_dim, block_tokens and n_blocks must be > 0, got ", n_layers, ", ",
            n_kv_heads, ", ", head_dim, ", ", block_tokens, ", ", n_blocks);
    require<capacity_error>(n_blocks < BlockAllocator::kNoBlock, "kv::PagedPool: n_blocks = ", n_blocks,
                            " requested, at most 2^32 - 2 = ", BlockAllocator::kNoBlock - 1, " (block ids are 32-bit)");
    (void)elements();
    return *this;
  }
  /// K (or V) elements of the whole pool: n_layers · n_kv_heads · n_blocks · B · head_dim;
  /// `capacity_error` when the product overflows.
  [[nodiscard]] std::size_t elements() const {
    std::size_t e = checked_mul(n_layers, n_kv_heads, "kv::PagedPool", "n_layers x n_kv_heads");
    e = checked_mul(e, n_blocks, "kv::PagedPool", "(n_layers n_kv_heads) x n_blocks");
    e = checked_mul(e, block_tokens, "kv::PagedPool", "(n_layers n_kv_heads n_blocks) x block_tokens");
    return checked_mul(e, head_dim, "kv::PagedPool", "rows x head_dim");
  }
};

}  // namespace barato::kv
