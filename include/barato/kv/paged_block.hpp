#pragma once
/// \file
/// `kv::PagedBlock<T>`: the block a paged cache (kv/paged.hpp) hands to attention for one KV head —
/// all of the head's positions, whose rows live in pages of `page_rows` (B) rows reached through a
/// page table: row r is at base + table[r / B]·page_stride + (r mod B)·stride. One block per head
/// (instead of one per page) lets attention make one kernel call over every page.
///
/// Its `accumulate` overload (found by argument-dependent lookup) runs the fixed-dimension kernel
/// (attention/fixed_dim_kernel.hpp, d = 64 / 128) across page boundaries when B is a multiple of W =
/// float lanes (one page per W-row tile) or of 8 with W = 16 (two pages per tile), and r0 is a
/// multiple of W — what `attention::attend` asks for: stretches of kernel chunks whose pages are
/// consecutive in memory (the pool allocates runs of pages; kv/paged.hpp) as contiguous rows, the
/// other chunks through `PagedRowAddress`. It then produces bitwise the state of the same rows in one
/// contiguous block. Otherwise (other d, B or r0) it folds page by page through the dense kernel.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "barato/attention/fixed_dim_kernel.hpp"
#include "barato/attention/online_softmax.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/dtype.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/simd/arch.hpp"

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
  /// Address of key row r (value row: the same offset from v).
  [[nodiscard]] std::size_t offset(std::size_t r) const noexcept {
    return table[r / page_rows] * page_stride + (r % page_rows) * stride;
  }
  /// Logical page i as a dense block (rows [i·B, min(n, (i + 1)·B))).
  [[nodiscard]] DenseBlock<T> page(std::size_t i) const noexcept {
    const std::size_t off = table[i] * page_stride;
    return {k + off, v + off, std::min(page_rows, n - i * page_rows), stride, pos0 + i * page_rows};
  }
};

/// Row-address policy of a `PagedBlock` for `attention::accumulate_fixed_dim_rows`: one table look-up
/// per S-row run, S = W (float lanes) when pages hold a multiple of W rows, or a divisor of W (pages of
/// 8 rows with W = 16) — then a W-row tile spans W / S pages. Requires page_rows % S == 0 and tiles
/// starting at multiples of W, so no run crosses a page.
///
/// `accumulate` uses it only for chunks whose pages are not consecutive in memory (consecutive ones
/// take the contiguous row address). The hardware prefetchers stop at the end of each scattered page,
/// so the cursor prefetches (into L2) the key and value row kPrefetchRows ahead as the kernel reads
/// each row: spread over the rows, the requests keep the memory system busy without bursts. Measured
/// in bench_kv (MHA, d = 64, n = 4096, B = 16, cold caches, pages in ascending scattered order): no
/// prefetch 2.5x the contiguous step, whole tiles 64 rows ahead at each chunk 1.65x, row by row 128
/// rows ahead 1.3x (64: 1.4x, 192–256: 1.45x). Prefetching only the first page of each run of
/// consecutive pages instead: 1.58x vs 1.38x on a fragmented pool (runs of ~2 pages).
template <Element T, std::size_t S>
struct PagedRowAddress {
  using element_type = T;
  static constexpr std::size_t kPrefetchRows = 128;  // 8 pages of 16 rows
  const PagedBlock<T>& blk;
  std::size_t stride;
  template <std::size_t W, std::size_t R>
  struct Cursor {
    static_assert(W % S == 0 || S % W == 0);
    static constexpr std::size_t kRun = S < R ? S : R;
    static constexpr std::size_t kRuns = (R + kRun - 1) / kRun;
    const T* kr[kRuns];     // first key row of each run of the chunk
    const T* vr[kRuns];     // first value row of each run
    const char* kp[kRuns];  // key row kPrefetchRows past each run's first, or null past the end
    const char* vp[kRuns];  // value row, same
    std::size_t stride;     // elements between consecutive rows of a page
    std::size_t row_bytes;  // stride · sizeof(T)
    [[nodiscard]] const T* k_row(std::size_t t, std::size_t j) const noexcept {
      if constexpr (kRun % W == 0) {
        return kr[t / kRun] + j * stride;  // a tile lies in one run
      } else {
        return kr[(t + j) / kRun] + ((t + j) % kRun) * stride;
      }
    }
    [[nodiscard]] const T* v(std::size_t t) const noexcept { return vr[t / kRun]; }
    void prefetch_k(std::size_t t, std::size_t j) const noexcept { prefetch_row(kp, t + j); }
    void prefetch_v(std::size_t t, std::size_t j) const noexcept { prefetch_row(vp, t + j); }

   private:
    void prefetch_row(const char* const* runs, std::size_t i) const noexcept {
      if (i < kRuns * kRun && runs[i / kRun] != nullptr) prefetch_l2(runs[i / kRun] + (i % kRun) * row_bytes, row_bytes);
    }
  };
  template <std::size_t W, std::size_t R>
  [[nodiscard]] Cursor<W, R> chunk(std::size_t c0, std::size_t nr) const noexcept {
    using Cur = Cursor<W, R>;
    Cur cur;
    cur.stride = stride;
    cur.row_bytes = stride * sizeof(T);
    for (std::size_t t = 0, i = 0; t < nr; t += Cur::kRun, ++i) {
      const std::size_t r = c0 + t;
      const std::size_t off = blk.offset(r);
      cur.kr[i] = blk.k + off;
      cur.vr[i] = blk.v + off;
      const std::size_t ra = r + kPrefetchRows;  // a run start: its rows lie in one (allocated) page
      cur.kp[i] = cur.vp[i] = nullptr;
      if (ra < blk.n) {
        const std::size_t pa = blk.offset(ra);
        cur.kp[i] = reinterpret_cast<const char*>(blk.k + pa);
        cur.vp[i] = reinterpret_cast<const char*>(blk.v + pa);
      }
    }
    return cur;
  }
};

/// Prefetches (into L2) the key and value rows from row r to the end of its page.
template <Element T>
void prefetch_page_from(const PagedBlock<T>& blk, std::size_t r) noexcept {
  const std::size_t off = blk.offset(r);
  const std::size_t bytes = (blk.page_rows - r % blk.page_rows) * blk.stride * sizeof(T);
  prefetch_l2(blk.k + off, bytes);
  prefetch_l2(blk.v + off, bytes);
}

/// Folds rows [r0, r1) of a paged block into the partial states of the `g` query heads at q. Same
/// contract as the dense `attention::accumulate`. Allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const float* q, std::size_t g, std::size_t d, float scale, const PagedBlock<T>& blk, std::size_t r0,
                std::size_t r1, float* o, attention::PartialStats* st) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  if (r0 >= r1) return;
  if (attention::has_fixed_dim_kernel<Arch>(d) && r0 % W == 0) {
    std::size_t S = 0;  // rows per table look-up of the paged row address
    if (blk.page_rows % W == 0) {
      S = W;
    } else if (W % 16 == 0 && blk.page_rows % 8 == 0) {  // pages of 8 rows: a tile spans W / 8 pages
      S = 8;
    }
    if (S != 0) {
      auto fold = [&]<std::size_t D>() {
        // The kernel folds chunks of R rows from r0. Stretches of whole chunks whose pages are
        // consecutive in memory go through the contiguous row address, the others through the page
        // table: the same chunks in the same order, so the same result bit for bit.
        constexpr std::size_t R = attention::kFixedChunkRowsFor<D, T, W>;
        for (std::size_t a = r0; a < r1;) {
          const bool flat = blk.consecutive(a, std::min(R, r1 - a));
          std::size_t b = a + R;
          // a flat stretch grows while the next chunk continues it in memory (from the row before it)
          auto continues = [&](std::size_t c) {
            return flat ? blk.consecutive(c - 1, std::min(R, r1 - c) + 1) : !blk.consecutive(c, std::min(R, r1 - c));
          };
          while (b < r1 && continues(b)) b += R;
          b = std::min(b, r1);
          if (flat) {
            // the hardware prefetchers stream these rows but stop at b: the head of the next page
            // there is prefetched kPrefetchRows before the stretch ends (b − a is then a multiple of R,
            // and so is the split: the same chunks)
            auto rows = [&](std::size_t x, std::size_t y) {
              if (x == y) return;
              const std::size_t off = blk.offset(x);
              attention::accumulate_fixed_dim_rows<D, Arch>(
                  q, g, scale, attention::ContiguousRowAddress<T>{blk.k + off, blk.v + off, blk.stride}, 0, y - x, o, st);
            };
            constexpr std::size_t ahead = PagedRowAddress<T, W>::kPrefetchRows;
            static_assert(ahead % R == 0);
            const std::size_t pre = b < r1 && b - a > ahead ? b - ahead : a;
            rows(a, pre);
            if (b < r1) prefetch_page_from(blk, b);
            rows(pre, b);
          } else if (S == W) {
            attention::accumulate_fixed_dim_rows<D, Arch>(q, g, scale, PagedRowAddress<T, W>{blk, blk.stride}, a, b, o,
                                                          st);
          } else if constexpr (W % 16 == 0) {
            attention::accumulate_fixed_dim_rows<D, Arch>(q, g, scale, PagedRowAddress<T, 8>{blk, blk.stride}, a, b, o,
                                                          st);
          }
          a = b;
        }
      };
      if (d == 64) return fold.template operator()<64>();
      return fold.template operator()<128>();
    }
  }
  const std::size_t B = blk.page_rows;
  for (std::size_t i = r0 / B; i * B < r1; ++i) {
    const DenseBlock<T> pg = blk.page(i);
    const std::size_t lo = std::max(r0, i * B) - i * B, hi = std::min(r1, i * B + pg.n) - i * B;
    attention::accumulate<Arch>(q, g, d, scale, pg, lo, hi, o, st);
  }
}

/// The block a paged pool of quantized pages (`PagedPool<QuantizedPages<KF, VF>>`) hands to attention
/// for one KV head: all of its positions, whose code rows and scales live in pages of `page_rows` (B)
/// rows — row r is physical row table[r / B]·page_stride + r mod B of the pool's code and scale
/// arrays. It has `QuantBlock`'s row interface, so the quantized kernel (`accumulate` in
/// kv/quantized.hpp) runs over every page in one call; `page(i)` is logical page i as a `QuantBlock`.
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
  [[nodiscard]] std::size_t pages() const noexcept { return (n + page_rows - 1) / page_rows; }
  [[nodiscard]] QuantBlock<KF, VF> page(std::size_t i) const noexcept {
    const std::size_t r0 = table[i] * page_stride;
    return {k + r0 * k_stride, k_scale + r0, v + r0 * v_stride, v_scale + r0, std::min(page_rows, n - i * page_rows),
            k_stride, v_stride, pos0 + i * page_rows};
  }
};

/// Folds rows [r0, r1) of a paged quantized block into the partial states of the `g` query heads at
/// q (the quantized kernel of kv/quantized.hpp over the page table). Same contract as the dense
/// `attention::accumulate`; bitwise the result over one contiguous `QuantBlock` of the same rows when
/// pages divide the kernel's 32-row GQA stages. A scattered page is short (16 rows of int8 codes at
/// d = 64 are 1 KiB per head), so the codes and scales of the page kPrefetchPages ahead are prefetched
/// as each page is folded unless that page directly follows its predecessor in memory. Allocates
/// nothing.
template <class Arch = simd::DefaultArch, KvFormat KF, KvFormat VF>
void accumulate(const float* q, std::size_t g, std::size_t d, float scale, const PagedQuantBlock<KF, VF>& blk,
                std::size_t r0, std::size_t r1, float* o, attention::PartialStats* st) noexcept {
  constexpr std::size_t kPrefetchPages = 8;
  if (r0 >= r1) return;
  const std::size_t B = blk.page_rows;
  auto prefetch_page = [&](std::size_t i) {
    if (i * B >= blk.n) return;
    const QuantBlock<KF, VF> pg = blk.page(i);
    prefetch_l2(pg.k, pg.n * pg.k_stride);
    prefetch_l2(pg.v, pg.n * pg.v_stride);
    prefetch_l2(pg.k_scale, pg.n * sizeof(float));
    prefetch_l2(pg.v_scale, pg.n * sizeof(float));
  };
  // true when page i directly follows page i − 1 in memory (the hardware prefetchers stream it)
  const bool back_to_back = blk.page_stride == B;
  auto follows = [&](std::size_t i) {
    return back_to_back && i > 0 && i < blk.pages() && detail::pages_follow(blk.table, i - 1, i);
  };
  if (g > 1) {
    // GQA: rows are dequantised into L1 stages once per row, across page boundaries; calls of whole
    // stages keep the stage boundaries (and so the rounding) of one call over [r0, r1).
    const std::size_t step = kStageRows % B == 0 ? kStageRows : B;
    for (std::size_t a = r0; a < r1;) {
      const std::size_t next = std::min(r1, a + step);
      for (std::size_t i = a / B; i * B < next; ++i)
        if (!follows(i + kPrefetchPages)) prefetch_page(i + kPrefetchPages);
      detail::accumulate_quantized<Arch>(q, g, d, scale, blk, a, next, o, st);
      a = next;
    }
    return;
  }
  // One query head: the row kernel reads codes per vector of a row, so a page-table look-up per read
  // would cost more than the arithmetic (measured 1.6x the contiguous fp32 step at MHA d = 64, page
  // by page 1.1x): fold page by page — up to kPrefetchPages consecutive pages as one block.
  for (std::size_t i = r0 / B; i * B < r1;) {
    std::size_t j = i + 1;
    while (j * B < r1 && j - i < kPrefetchPages && follows(j)) ++j;
    for (std::size_t p = i; p < j; ++p)
      if (!follows(p + kPrefetchPages)) prefetch_page(p + kPrefetchPages);
    QuantBlock<KF, VF> run = blk.page(i);  // pages [i, j): consecutive rows
    run.n = std::min(blk.n, j * B) - i * B;
    const std::size_t lo = std::max(r0, i * B) - i * B, hi = std::min(r1, j * B) - i * B;
    detail::accumulate_quantized<Arch>(q, g, d, scale, run, lo, hi, o, st);
    i = j;
  }
}

}  // namespace barato::kv
