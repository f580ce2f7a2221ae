#pragma once
/// \file
/// The block views of quantized KV storage: `kv::QuantBlock<KF, VF>` (rows of one KV head of a
/// `kv::Quantized` cache) and `kv::PagedQuantBlock<KF, VF>` (all rows of one KV head of a pool of
/// quantized pages, kv/paged.hpp). Data and layout facts only — where row r's codes and scales are;
/// the attention kernel that reads them is attention/kernels/quantized.hpp.
///
/// Both have the same row interface (`k_row(r)`, `v_row(r)`, `k_scale_at(r)`, `v_scale_at(r)`,
/// `pos0`, `key_format`, `value_format`), so one kernel reads either.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "barato/kv/kv_format.hpp"
#include "barato/kv/paged_block.hpp"

namespace barato::kv {

/// The view a quantized cache hands to attention for one KV head: `n` rows from logical position `pos0`.
template <KvFormat KF, KvFormat VF>
struct QuantBlock {
  using key_format = KF;
  using value_format = VF;
  const std::uint8_t* k = nullptr;   ///< [n, k_stride] key codes
  const float* k_scale = nullptr;    ///< [n] key row scales
  const std::uint8_t* v = nullptr;   ///< [n, v_stride] value codes
  const float* v_scale = nullptr;    ///< [n] value row scales
  std::size_t n = 0;                 ///< rows in the block
  std::size_t k_stride = 0;          ///< bytes between key rows (≥ KF::row_bytes(d))
  std::size_t v_stride = 0;          ///< bytes between value rows
  std::size_t pos0 = 0;              ///< logical position of row 0

  /// Codes and scale of row r (the row interface the quantized kernel reads; a paged block has the
  /// same interface over its page table).
  [[nodiscard]] const std::uint8_t* k_row(std::size_t r) const noexcept { return k + r * k_stride; }
  [[nodiscard]] const std::uint8_t* v_row(std::size_t r) const noexcept { return v + r * v_stride; }
  [[nodiscard]] float k_scale_at(std::size_t r) const noexcept { return k_scale[r]; }
  [[nodiscard]] float v_scale_at(std::size_t r) const noexcept { return v_scale[r]; }
};

/// The block a paged pool of quantized pages (`PagedPool<QuantizedPages<KF, VF>>`) hands to attention
/// for one KV head: all of its positions, whose code rows and scales live in pages of `page_rows` (B)
/// rows — row r is physical row table[r / B]·page_stride + r mod B of the pool's code and scale
/// arrays. It has `QuantBlock`'s row interface, so the quantized kernel runs over every page in one
/// call; `page(i)` is logical page i as a `QuantBlock`.
template <KvFormat KF, KvFormat VF>
struct PagedQuantBlock {
  using key_format = KF;
  using value_format = VF;
  const std::uint8_t* k = nullptr;       ///< key codes of this head's row 0 in physical page 0
  const float* k_scale = nullptr;        ///< its scale (scales are one float per row, same row numbering)
  const std::uint8_t* v = nullptr;       ///< value codes, same layout
  const float* v_scale = nullptr;
  const std::uint32_t* table = nullptr;  ///< [⌈n / page_rows⌉] physical page of each logical page
  std::size_t page_rows = 0;             ///< B: rows per page
  std::size_t page_stride = 0;           ///< rows between consecutive physical pages
  std::size_t n = 0;                     ///< rows in the block
  std::size_t k_stride = 0;              ///< bytes between key code rows
  std::size_t v_stride = 0;              ///< bytes between value code rows
  std::size_t pos0 = 0;                  ///< logical position of row 0
  unsigned page_shift = 0;               ///< log2(page_rows) when it is a power of two, else kNoShift

  static constexpr unsigned kNoShift = ~0u;
  /// page_shift for B rows per page.
  [[nodiscard]] static constexpr unsigned shift_for(std::size_t B) noexcept {
    if (B == 0 || (B & (B - 1)) != 0) return kNoShift;
    unsigned s = 0;
    while ((std::size_t{1} << s) < B) ++s;
    return s;
  }
  /// Physical row (in units of rows from k / k_scale) of logical row r. The kernel asks per row and
  /// per vector of a row: a shift, not a division, for the usual power-of-two page sizes.
  [[nodiscard]] std::size_t row(std::size_t r) const noexcept {
    if (page_shift != kNoShift) return table[r >> page_shift] * page_stride + (r & (page_rows - 1));
    return table[r / page_rows] * page_stride + r % page_rows;
  }
  [[nodiscard]] const std::uint8_t* k_row(std::size_t r) const noexcept { return k + row(r) * k_stride; }
  [[nodiscard]] const std::uint8_t* v_row(std::size_t r) const noexcept { return v + row(r) * v_stride; }
  [[nodiscard]] float k_scale_at(std::size_t r) const noexcept { return k_scale[row(r)]; }
  [[nodiscard]] float v_scale_at(std::size_t r) const noexcept { return v_scale[row(r)]; }
  /// Logical pages spanned by the block.
  [[nodiscard]] std::size_t pages() const noexcept { return (n + page_rows - 1) / page_rows; }
  /// True when logical page i (0 < i < pages()) directly follows page i − 1 in memory (pages stored
  /// back to back): the hardware prefetchers then stream it.
  [[nodiscard]] bool page_follows(std::size_t i) const noexcept {
    return page_stride == page_rows && i > 0 && i < pages() && detail::pages_follow(table, i - 1, i);
  }
  /// Logical page i as a dense quantized block (rows [i·B, min(n, (i + 1)·B))).
  [[nodiscard]] QuantBlock<KF, VF> page(std::size_t i) const noexcept {
    const std::size_t r0 = table[i] * page_stride;
    return {k + r0 * k_stride, k_scale + r0, v + r0 * v_stride, v_scale + r0, std::min(page_rows, n - i * page_rows),
            k_stride, v_stride, pos0 + i * page_rows};
  }
};

}  // namespace barato::kv
