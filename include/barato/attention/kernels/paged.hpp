#pragma once
/// \file
/// `attention::accumulate` for a paged block (`kv::PagedBlock<T>`, kv/paged_block.hpp: one KV head's
/// rows in pages of B rows reached through a page table). Bitwise the state of the same rows in one
/// contiguous block (`kv::DenseBlock`) folded by the dense `accumulate`, for every B.
///
/// The chunk-boundary rule. Each dense kernel folds its rows in chunks of R rows counted from the
/// start of the call — R = the chunk of the fixed-dimension kernel (`kFixedChunkRowsFor`, 16 … 64
/// rows) at the head sizes it serves (multiples of 16 up to 128), the W-row tile of the
/// small-dimension kernel or of the generic routine (W of the arch it runs on) otherwise — and
/// rounds at chunk boundaries only (one rescale per chunk, the state stored between chunks). So a
/// call over [r0, r1) may be cut into several calls only at rows r0 + k·R: the paged fold cuts
/// [r0, r1) into page stretches (`detail::PageStretches`) that start on chunk boundaries, and folds
///  - a stretch whose pages are consecutive in memory (the pool allocates runs of pages;
///    kv/paged.hpp) as one dense block (the dense dispatch: the same kernel as the contiguous cache);
///  - a scattered stretch (no chunk of it lies in consecutive pages) through the page table, with
///    chunks that span pages:
///    - fixed-dimension d, when B is a multiple of W = float lanes (one page per W-row tile) or of 8 with
///      W = 16 (two pages per tile) and r0 is a multiple of W (what `attend` and `decode_split_k`
///      ask for): the fixed-dimension kernel over `detail::PagedRows` (one table look-up per run);
///    - the generic routine: over `detail::PagedRows`, one table look-up per row read;
///    - otherwise (small d, or fixed-dimension d with other B or r0): chunk by chunk, each chunk's rows
///      gathered into an L1 stage (`detail::fold_staged`) that the dense kernel folds.
/// Folding page by page instead (a call per page) is bitwise only when B is a multiple of R: with
/// pages of 4 rows and d = 8 the small-d kernel's 16-row tiles would become 4-row tiles, each with
/// its own max and rescale.

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <type_traits>

#include "barato/attention/kernels/dense.hpp"
#include "barato/attention/kernels/fixed_dim.hpp"
#include "barato/attention/kernels/generic.hpp"
#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/rows.hpp"
#include "barato/attention/kernels/small_dim.hpp"
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
/// Its `KvRows` members (`load_k`, `k_at`, …) look the page up for every row and have no
/// requirement on S or the page size: the generic routine reads scattered stretches through them.
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
    return barato::to_float(blk.k[blk.offset(r) + c]);
  }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept {
    return barato::to_float(blk.v[blk.offset(r) + c]);
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

/// Calls contiguous(dense) for every stretch of `PageStretches<T, R>(blk, r0, r1)` whose pages are
/// consecutive in memory — `dense` its rows as one `kv::DenseBlock` (row 0 = the stretch's first),
/// the head of the next page prefetched first when the stretch asks for it — and scattered(a, b)
/// for every other stretch [a, b), in row order.
template <std::size_t R, Element T, class Contiguous, class Scattered>
void for_each_page_stretch(const kv::PagedBlock<T>& blk, std::size_t r0, std::size_t r1, Contiguous&& contiguous,
                           Scattered&& scattered) {
  for (const PageStretch& s : PageStretches<T, R>(blk, r0, r1)) {
    if (!s.contiguous) {
      scattered(s.begin, s.end);
      continue;
    }
    if (s.prefetch_end) prefetch_page_from(blk, s.end);
    const std::size_t off = blk.offset(s.begin);
    contiguous(kv::DenseBlock<T>{blk.k + off, blk.v + off, s.end - s.begin, blk.stride, blk.pos0 + s.begin});
  }
}

/// Folds rows [a, b) of `blk` chunk by chunk through `fold(stage)`: the rows of each chunk of R rows
/// (from a) gathered, through the page table, into an L1 stage of packed rows (stride d ≤ MaxD), a
/// `kv::DenseBlock` whose row 0 is the chunk's first. For a kernel whose chunk is R and whose
/// dispatch does not depend on the row stride (or blocks already packed), the fold of each stage
/// is bitwise the fold of the same rows of one contiguous block. Allocates nothing (2·R·MaxD
/// elements of stack).
template <std::size_t R, std::size_t MaxD, Element T, class Fold>
void fold_staged(const kv::PagedBlock<T>& blk, std::size_t d, std::size_t a, std::size_t b, Fold&& fold) {
  BARATO_ASSERT(d <= MaxD);
  alignas(64) T kt[R * MaxD];  // [R, d] key rows of a chunk
  alignas(64) T vt[R * MaxD];  // [R, d] value rows
  for (std::size_t c = a; c < b; c += R) {
    const std::size_t nr = std::min(R, b - c);
    for (std::size_t j = 0; j < nr; ++j) {
      const std::size_t off = blk.offset(c + j);
      std::copy_n(blk.k + off, d, kt + j * d);
      std::copy_n(blk.v + off, d, vt + j * d);
    }
    fold(kv::DenseBlock<T>{kt, vt, nr, d, blk.pos0 + c});
  }
}

/// The paged fold for a head dimension D of the fixed-dimension kernel (chunks of
/// kFixedChunkRowsFor<D, T, W> rows): contiguous stretches as contiguous rows; scattered ones through
/// the page table (`PagedRows`) when the page size and r0 allow it, else staged chunk by chunk.
template <std::size_t D, class Arch, Element T>
void accumulate_paged_fixed_dim(const QueryGroup& qg, const kv::PagedBlock<T>& blk, std::size_t r0,
                                std::size_t r1) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  constexpr std::size_t R = kFixedChunkRowsFor<D, T, W>;
  static_assert(R * D * sizeof(T) <= kFixedChunkBytes, "a staged chunk fits the kernel's L1 budget");
  const std::size_t S = r0 % W == 0 ? paged_run_rows<W>(blk.page_rows) : 0;
  for_each_page_stretch<R>(
      blk, r0, r1,
      [&](const kv::DenseBlock<T>& rows) {
        accumulate_fixed_dim<D, Arch>(qg, ContiguousRows<T>{rows.k, rows.v, rows.stride}, 0, rows.n);
      },
      [&](std::size_t a, std::size_t b) {
        if (S == W) {
          accumulate_fixed_dim<D, Arch>(qg, PagedRows<T, W>{blk, blk.stride}, a, b);
        } else if (S != 0) {
          if constexpr (W % 16 == 0) accumulate_fixed_dim<D, Arch>(qg, PagedRows<T, 8>{blk, blk.stride}, a, b);
        } else {
          fold_staged<R, D>(blk, D, a, b, [&](const kv::DenseBlock<T>& stage) {
            accumulate_fixed_dim<D, Arch>(qg, ContiguousRows<T>{stage.k, stage.v, stage.stride}, 0, stage.n);
          });
        }
      });
}

}  // namespace barato::attention::detail

namespace barato::attention {

/// Folds rows [r0, r1) of a paged block into the partial states of the query heads of `qg` (see
/// attention/kernels/accumulate.hpp for the contract): bitwise the state the dense `accumulate`
/// gives over the same rows in one contiguous block with the same row stride, for every page size
/// (file comment: the chunk-boundary rule). Allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const QueryGroup& qg, const kv::PagedBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
  if (r0 >= r1) return;
  // the same kernel choice as the dense `accumulate` (attention/kernels/dense.hpp), with its chunk
  if (detail::with_fixed_dim<Arch>(qg.d, [&]<std::size_t D>() { detail::accumulate_paged_fixed_dim<D, Arch>(qg, blk, r0, r1); }))
    return;
  auto dense = [&](const kv::DenseBlock<T>& rows) { accumulate<Arch>(qg, rows, 0, rows.n); };
  if constexpr (detail::kHasSmallDimKernel<Arch>) {
    if (detail::has_small_dim_kernel<Arch>(qg.d, blk.stride)) {  // tiles of W rows; stride == d ≤ 8
      return detail::for_each_page_stretch<W>(blk, r0, r1, dense, [&](std::size_t a, std::size_t b) {
        detail::fold_staged<W, 8>(blk, qg.d, a, b, dense);
      });
    }
  }
  // the generic routine, on the half-width arch for odd multiples of 8 (as the dense dispatch):
  // tiles of that arch's lanes
  auto generic = [&]<class A>(A) {
    constexpr std::size_t WA = simd::Batch<float, A>::size;
    detail::for_each_page_stretch<WA>(blk, r0, r1, dense, [&](std::size_t a, std::size_t b) {
      detail::accumulate_rows<A>(qg, detail::PagedRows<T, WA>{blk, blk.stride}, a, b);
    });
  };
  if constexpr (!std::is_void_v<simd::HalfWidthArch<Arch>>) {
    if (qg.d % 16 == 8) return generic(simd::HalfWidthArch<Arch>{});
  }
  generic(Arch{});
}

}  // namespace barato::attention
