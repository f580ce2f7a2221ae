#pragma once
/// \file
/// `attention::accumulate` for a paged block (`kv::PagedBlock<T>`, kv/paged_block.hpp: one KV head's
/// rows in pages of B rows reached through a page table).
///
/// With the fixed-dimension kernel (d = 64 / 128), when B is a multiple of W = float lanes (one page
/// per W-row tile) or of 8 with W = 16 (two pages per tile) and r0 is a multiple of W (what
/// `attend` and `decode_split_k` ask for), the rows [r0, r1) are cut into page stretches
/// (`detail::PageStretches`): stretches whose pages are consecutive in memory (the pool allocates
/// runs of pages; kv/paged.hpp) are folded as contiguous rows, the others through the page table
/// (`detail::PagedRows`) — one kernel call per stretch, and bitwise the state of the same rows in
/// one contiguous block (the chunk-boundary rule, stated and asserted in `PageStretches`).
/// Otherwise (other d, B or r0) the block is folded page by page through the dense kernel.

#include <algorithm>
#include <cstddef>
#include <iterator>

#include "barato/attention/kernels/dense.hpp"
#include "barato/attention/kernels/fixed_dim.hpp"
#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/rows.hpp"
#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/paged_block.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::attention::detail {

/// Rows ahead that scattered pages are prefetched (8 pages of 16 rows; measurements below).
inline constexpr std::size_t kPagePrefetchRows = 128;

/// Rows of a `kv::PagedBlock` (`ChunkedKvRows`): one table look-up per S-row run, S = W (float lanes)
/// when pages hold a multiple of W rows, or a divisor of W (pages of 8 rows with W = 16) — then a
/// W-row tile spans W / S pages. Requires page_rows % S == 0 and tiles starting at multiples of W, so
/// no run crosses a page.
///
/// The paged `accumulate` uses it only for stretches whose pages are not consecutive in memory
/// (consecutive ones are contiguous rows). The hardware prefetchers stop at the end of each
/// scattered page, so the cursor prefetches (into L2) the key and value row kPrefetchRows ahead as
/// the kernel reads each row: spread over the rows, the requests keep the memory system busy
/// without bursts. Measured in bench_kv (MHA, d = 64, n = 4096, B = 16, cold caches, pages in
/// ascending scattered order): no prefetch 2.5x the contiguous step, whole tiles 64 rows ahead at
/// each chunk 1.65x, row by row 128 rows ahead 1.3x (64: 1.4x, 192–256: 1.45x). Prefetching only the
/// first page of each run of consecutive pages instead: 1.58x vs 1.38x on a fragmented pool (runs of
/// ~2 pages).
template <Element T, std::size_t S>
struct PagedRows {
  using element_type = T;
  static constexpr bool kScaled = false;
  static constexpr std::size_t kPrefetchRows = kPagePrefetchRows;
  const kv::PagedBlock<T>& blk;
  std::size_t stride;

  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_k(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(blk.k + blk.offset(r) + c);
  }
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> load_v(std::size_t r, std::size_t c) const noexcept {
    return simd::load_as_float<Arch>(blk.v + blk.offset(r) + c);
  }
  [[nodiscard]] float k_at(std::size_t r, std::size_t c) const noexcept {
    return static_cast<float>(blk.k[blk.offset(r) + c]);
  }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept {
    return static_cast<float>(blk.v[blk.offset(r) + c]);
  }

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

static_assert(ChunkedKvRows<PagedRows<float, 16>> && ChunkedKvRows<PagedRows<float, 8>>);

/// Prefetches (into L2) the key and value rows from row r to the end of its page.
template <Element T>
void prefetch_page_from(const kv::PagedBlock<T>& blk, std::size_t r) noexcept {
  const std::size_t off = blk.offset(r);
  const std::size_t bytes = (blk.page_rows - r % blk.page_rows) * blk.stride * sizeof(T);
  prefetch_l2(blk.k + off, bytes);
  prefetch_l2(blk.v + off, bytes);
}

/// Rows [begin, end) of a paged block folded by one kernel call. `contiguous`: every page of the
/// stretch directly follows the one before in memory, so its rows lie at one stride; otherwise they
/// are read through the page table. `prefetch_end`: the page at `end` is to be prefetched before the
/// fold (a contiguous stretch that the hardware prefetchers stream up to `end` only).
struct PageStretch {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool contiguous = false;
  bool prefetch_end = false;
};

/// Rows [r0, r1) of a paged block as a range of `PageStretch`es in row order, computed as it is
/// iterated (no allocation), for a kernel that folds chunks of R rows from the start of each call.
///
/// The rule that keeps the result bitwise equal to one call over one contiguous block: the kernel
/// rescales its state once per chunk, and chunks start where a call starts, so every call must start
/// at r0 + k·R — every stretch boundary except r1 is a chunk boundary. Stretches therefore grow by
/// whole chunks (asserted in `stretch_at`), and the split of a contiguous stretch for the prefetch of
/// the next page lies kPagePrefetchRows before its end, a multiple of R (static_assert).
/// A stretch grows while the next chunk continues it: for a contiguous stretch, the chunk's pages
/// follow the stretch's last row in memory; for a scattered one, the chunk is not contiguous itself.
template <Element T, std::size_t R>
class PageStretches {
  static_assert(R > 0 && kPagePrefetchRows % R == 0, "the prefetch split must be a chunk boundary");

 public:
  PageStretches(const kv::PagedBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept : blk_(blk), r0_(r0), r1_(r1) {}

  /// Input iterator over the stretches; equal to `std::default_sentinel` past the last.
  class Iterator {
   public:
    using value_type = PageStretch;
    using difference_type = std::ptrdiff_t;
    [[nodiscard]] const PageStretch& operator*() const noexcept { return cur_; }
    Iterator& operator++() noexcept {
      cur_ = owner_->stretch_at(cur_.end);
      return *this;
    }
    void operator++(int) noexcept { ++*this; }
    [[nodiscard]] bool operator==(std::default_sentinel_t) const noexcept { return cur_.begin >= owner_->r1_; }

   private:
    friend class PageStretches;
    Iterator(const PageStretches* owner, PageStretch cur) noexcept : owner_(owner), cur_(cur) {}
    const PageStretches* owner_;
    PageStretch cur_;
  };

  [[nodiscard]] Iterator begin() const noexcept { return Iterator(this, stretch_at(r0_)); }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

 private:
  /// The stretch that starts at row a (a chunk boundary), or an empty one at a ≥ r1.
  [[nodiscard]] PageStretch stretch_at(std::size_t a) const noexcept {
    if (a >= r1_) return {a, a, false, false};
    BARATO_ASSERT((a - r0_) % R == 0);  // the bitwise rule: every call starts on a chunk boundary
    const bool contiguous = blk_.consecutive(a, std::min(R, r1_ - a));
    auto continues = [&](std::size_t c) {
      return contiguous ? blk_.consecutive(c - 1, std::min(R, r1_ - c) + 1) : !blk_.consecutive(c, std::min(R, r1_ - c));
    };
    std::size_t b = a + R;
    while (b < r1_ && continues(b)) b += R;
    b = std::min(b, r1_);
    if (!contiguous || b == r1_) return {a, b, contiguous, false};
    // the hardware prefetchers stream these rows but stop at b: the head of the next page there is
    // prefetched kPagePrefetchRows before the stretch ends (the rest starts a stretch of its own)
    if (b - a > kPagePrefetchRows) return {a, b - kPagePrefetchRows, true, false};
    return {a, b, true, true};
  }

  const kv::PagedBlock<T>& blk_;
  std::size_t r0_, r1_;
};

/// Rows per page-table look-up of `PagedRows` for pages of B rows on W float lanes: W when pages hold
/// whole tiles, 8 when a 16-lane tile spans two pages of a multiple of 8 rows, else 0 (no
/// fixed-dimension path across pages).
template <std::size_t W>
[[nodiscard]] constexpr std::size_t paged_run_rows(std::size_t B) noexcept {
  if (B % W == 0) return W;
  if (W % 16 == 0 && B % 8 == 0) return 8;
  return 0;
}

}  // namespace barato::attention::detail

namespace barato::attention {

/// Folds rows [r0, r1) of a paged block into the partial states of the query heads of `qg` (see
/// attention/kernels/accumulate.hpp for the contract): one fixed-dimension kernel call per page
/// stretch when the shapes allow it (file comment), else page by page through the dense kernel.
/// Allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const QueryGroup& qg, const kv::PagedBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  if (r0 >= r1) return;
  if (detail::has_fixed_dim_kernel<Arch>(qg.d) && r0 % W == 0) {
    const std::size_t S = detail::paged_run_rows<W>(blk.page_rows);
    if (S != 0) {
      auto fold = [&]<std::size_t D>() {
        constexpr std::size_t R = detail::kFixedChunkRowsFor<D, T, W>;
        for (const detail::PageStretch& s : detail::PageStretches<T, R>(blk, r0, r1)) {
          if (s.contiguous) {
            if (s.prefetch_end) detail::prefetch_page_from(blk, s.end);
            const std::size_t off = blk.offset(s.begin);
            detail::accumulate_fixed_dim<D, Arch>(qg, detail::ContiguousRows<T>{blk.k + off, blk.v + off, blk.stride}, 0,
                                                  s.end - s.begin);
          } else if (S == W) {
            detail::accumulate_fixed_dim<D, Arch>(qg, detail::PagedRows<T, W>{blk, blk.stride}, s.begin, s.end);
          } else if constexpr (W % 16 == 0) {
            detail::accumulate_fixed_dim<D, Arch>(qg, detail::PagedRows<T, 8>{blk, blk.stride}, s.begin, s.end);
          }
        }
      };
      if (qg.d == 64) return fold.template operator()<64>();
      return fold.template operator()<128>();
    }
  }
  const std::size_t B = blk.page_rows;
  for (std::size_t i = r0 / B; i * B < r1; ++i) {
    const kv::DenseBlock<T> pg = blk.page(i);
    const std::size_t lo = std::max(r0, i * B) - i * B, hi = std::min(r1, i * B + pg.n) - i * B;
    accumulate<Arch>(qg, pg, lo, hi);
  }
}

}  // namespace barato::attention
