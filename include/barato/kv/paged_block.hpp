#pragma once
/// \file
/// `kv::PagedBlock<T>`: the view a paged cache (kv/paged.hpp) hands to attention for one KV head —
/// all of the head's positions, whose rows live in pages of `page_rows` (B) rows reached through a
/// page table: row r is at base + table[r / B]·page_stride + (r mod B)·stride. One block per head
/// (instead of one per page) lets attention make one kernel call over every page.
///
/// Data and layout facts only (`offset`, `consecutive`, `page`): the kernel that folds it into the
/// attention state, with its page stretches and prefetching, is attention/kernels/paged.hpp.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "barato/core/dtype.hpp"
#include "barato/kv/block.hpp"

namespace barato::kv {

namespace detail {
/// True when each logical page in (p0, p1] of a page table is the physical page right after the
/// one before it (the pool then stores them back to back when its page stride is one page).
[[nodiscard]] inline bool pages_follow(const std::uint32_t* table, std::size_t p0, std::size_t p1) noexcept {
  for (std::size_t p = p0 + 1; p <= p1; ++p)
    if (table[p] != table[p - 1] + 1) return false;
  return true;
}
}  // namespace detail

/// The paged view of one KV head's rows (see the file comment); what `PagedPool` views hand out.
template <Element T>
struct PagedBlock {
  using element_type = T;
  const T* k = nullptr;                 ///< key rows of this head in physical page 0 (page p at k + p·page_stride)
  const T* v = nullptr;                 ///< value rows, same layout
  const std::uint32_t* table = nullptr;  ///< [⌈n / page_rows⌉] physical page of each logical page
  std::size_t page_rows = 0;            ///< B: rows per page
  std::size_t page_stride = 0;          ///< elements between consecutive physical pages
  std::size_t n = 0;                    ///< rows in the block
  std::size_t stride = 0;               ///< elements between consecutive rows of a page (≥ head_dim)
  std::size_t pos0 = 0;                 ///< logical position of row 0

  /// Logical pages spanned by the block.
  [[nodiscard]] std::size_t pages() const noexcept { return (n + page_rows - 1) / page_rows; }
  /// True when rows [r, r + nr) (nr > 0) lie at one stride in memory: their pages are consecutive
  /// physical pages stored back to back (the pool allocates such runs; kv/paged.hpp).
  [[nodiscard]] bool consecutive(std::size_t r, std::size_t nr) const noexcept {
    return page_stride == page_rows * stride && detail::pages_follow(table, r / page_rows, (r + nr - 1) / page_rows);
  }
  /// Offset in elements of key row r from k (value row r: the same offset from v).
  [[nodiscard]] std::size_t offset(std::size_t r) const noexcept {
    return table[r / page_rows] * page_stride + (r % page_rows) * stride;
  }
  /// Writes the offsets of rows [r, r + n) into out[0, n): `offset` of each, with one division
  /// instead of one per row.
  void offsets(std::size_t r, std::size_t n, std::size_t* out) const noexcept {
    std::size_t page = r / page_rows, in_page = r % page_rows;
    for (std::size_t j = 0; j < n; ++j) {
      out[j] = table[page] * page_stride + in_page * stride;
      if (++in_page == page_rows) {
        in_page = 0;
        ++page;
      }
    }
  }
  /// Logical page i as a dense block (rows [i·B, min(n, (i + 1)·B))).
  [[nodiscard]] DenseBlock<T> page(std::size_t i) const noexcept {
    const std::size_t off = table[i] * page_stride;
    return {k + off, v + off, std::min(page_rows, n - i * page_rows), stride, pos0 + i * page_rows};
  }
};

}  // namespace barato::kv
