#pragma once
/// \file
/// `kv::PagedView<T>`: one (sequence, layer) of a `kv::PagedPool` (kv/paged.hpp) — the per-layer
/// cache a model holds, a model of `kv::CachePolicy`. A cheap handle (pool pointer + ids) that
/// forwards to the pool: appends, truncation and attention's block visit go through the sequence's
/// block table, so copy-on-write, prefix sharing and the capacity guarantee are the pool's.
/// Include kv/paged.hpp to build a pool; this header only declares it.

#include <cstddef>
#include <span>
#include <utility>

#include "barato/kv/page_store.hpp"
#include "barato/kv/sequence_table.hpp"

namespace barato::kv {

template <PageFormat T>
class PagedPool;

/// One (sequence, layer) of a `PagedPool`: the per-layer cache a model holds. Satisfies
/// `kv::CachePolicy`; a cheap handle (pointer + ids), copyable.
template <PageFormat T = float>
class PagedView {
 public:
  using element_type = T;
  using block_type = typename PageStore<T>::block_type;

  PagedView(PagedPool<T>& pool, SeqId seq, std::size_t layer) noexcept : pool_(&pool), seq_(seq), layer_(layer) {}

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return pool_->n_kv_heads(); }
  [[nodiscard]] std::size_t head_dim() const noexcept { return pool_->head_dim(); }
  [[nodiscard]] std::size_t size() const { return pool_->size(seq_, layer_); }
  /// This layer's share of the pages the sequence references.
  [[nodiscard]] std::size_t bytes_reserved() const {
    return pool_->block_table(seq_).size() * pool_->block_bytes() / pool_->n_layers();
  }
  /// This layer's stored positions.
  [[nodiscard]] std::size_t bytes_used() const {
    return size() * pool_->block_bytes() / (pool_->n_layers() * pool_->block_tokens());
  }
  /// See `PagedPool::append` (copy-on-write, capacity_error with nothing changed).
  void append(std::span<const float> k, std::span<const float> v) { pool_->append(seq_, layer_, k, v); }
  void truncate(std::size_t n) { pool_->truncate(seq_, layer_, n); }
  /// Room for n positions in the sequence's block table (see `PagedPool::reserve`; all layers share it).
  void reserve(std::size_t n) { pool_->reserve(seq_, n); }
  /// Free blocks appending n positions to every layer of the sequence takes (`PagedPool::blocks_to_grow`).
  [[nodiscard]] std::size_t blocks_to_grow(std::size_t n) const { return pool_->blocks_to_grow(seq_, n); }
  /// Free blocks of the pool now.
  [[nodiscard]] std::size_t free_blocks() const { return pool_->free_blocks(); }
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    pool_->for_each_block(seq_, layer_, h, std::forward<F>(f));
  }
  [[nodiscard]] SeqId sequence() const noexcept { return seq_; }
  [[nodiscard]] std::size_t layer() const noexcept { return layer_; }
  [[nodiscard]] PagedPool<T>& pool() const noexcept { return *pool_; }

 private:
  PagedPool<T>* pool_;
  SeqId seq_;
  std::size_t layer_;
};

}  // namespace barato::kv
