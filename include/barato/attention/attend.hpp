#pragma once
/// \file
/// One attention code path over every KV cache policy: queries for consecutive positions
/// p0, p0+1, … attend causally to the cache (query at position p sees cached positions ≤ p).
/// The queries are the cache's newest positions: their K/V are appended first, so n queries sit at
/// p0 = size − n … size − 1. Prefill is n = P; decode is the one-query case (n = 1), with the same
/// arguments.
/// A windowed cache (`kv::WindowedCache`, e.g. kv::SlidingWindow) adds a per-query lower bound: the
/// query at p sees only p' < sinks or p' > p − window, applied as a clip of each (query, tile) row
/// range, so every query of a multi-token chunk gets exactly its own window. Other caches compile to
/// the plain causal walk.
/// For each KV head, the cache's blocks are visited once in position order and split into tiles of
/// `kPrefillTileRows`; every query of the chunk folds the visible part of the tile into its partial
/// state (flash-style tiling: the tile stays in L1 across queries, and no P×P matrix exists — the
/// only extra memory is P·H_q partial (m, l) pairs). For GQA the G query heads of a KV head are
/// folded together, so K/V are streamed once per group.

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "barato/attention/heads.hpp"
#include "barato/attention/kernels/accumulate.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/error.hpp"
#include "barato/core/parallel.hpp"
#include "barato/kv/cache_policy.hpp"

namespace barato::attention {

/// Rows of a KV tile reused across the queries of a prefill chunk (16 KiB of K at d = 64, fp32).
inline constexpr std::size_t kPrefillTileRows = 64;

/// Options of `attend` / `decode` (designated initialisers).
struct AttendOptions {
  std::optional<float> scale = std::nullopt;  ///< softmax scale; unset: 1/√head_dim (`Heads::default_scale()`)
  int threads = 1;                           ///< threads (via barato::parallel_for): over queries, each thread
                                             ///< at least kMinQueriesPerThread of them, else over KV heads
};

/// Partial states (one per query head and query) `attend` keeps on its stack (32 KiB): longer blocks
/// of queries run in batches of kAttendStackStats / H_q; only H_q > kAttendStackStats allocates.
inline constexpr std::size_t kAttendStackStats = 4096;

/// Keys the causal queries at p0 … p0 + n − 1 see in total, Σ (p0 + t + 1) = n·p0 + n(n + 1)/2
/// (before any window clips them): per query head, attention's q·k (and p·v) work is this × head_dim.
[[nodiscard]] constexpr std::size_t causal_keys(std::size_t p0, std::size_t n) noexcept {
  return n * p0 + n * (n + 1) / 2;
}

/// Queries per thread from which a multi-threaded `attend` splits the queries rather than the KV heads.
inline constexpr std::size_t kMinQueriesPerThread = 8;

/// Parts a multi-threaded `attend` of n_tok queries and n_q query heads splits the queries into (a
/// scheduler of several attends, one per sequence of a batch, asks it too): `threads` when every part
/// gets kMinQueriesPerThread queries, else 1 (the threads then split the KV heads). Also 1 for more
/// than kAttendStackStats query heads: a part's (m, l) states would then come from the heap, inside
/// the parallel region, where an allocation failure could not propagate. Over heads, the threads'
/// output columns interleave in every row of `out` ([n, H_q, d]), and each fold of a key tile
/// rewrites a query's columns: with small heads (stories260K: two query heads of 8 floats, one 64-byte
/// line per KV head) the cores fight over the rows' cache lines, and two threads ran a 128-token
/// prefill's attention in about the time of one (Zen 5 host, 2026-12-06). Over queries, each thread
/// owns whole rows.
[[nodiscard]] inline int query_parts(std::size_t n_tok, std::size_t n_q, int threads) noexcept {
  const bool split = threads > 1 && n_q <= kAttendStackStats &&
                     n_tok >= kMinQueriesPerThread * static_cast<std::size_t>(threads);
  return split ? threads : 1;
}

namespace detail {
inline void check_attend(std::size_t q_size, std::size_t out_size, std::size_t n_tok, std::size_t stats_size,
                         const Heads& heads, std::size_t cache_heads, std::size_t cache_dim) {
  heads.validate();
  require(cache_heads == heads.n_kv && cache_dim == heads.head_dim, "attention::attend: cache has ", cache_heads,
          " KV heads of dim ", cache_dim, ", expected ", heads.n_kv, " of dim ", heads.head_dim);
  require(n_tok > 0, "attention::attend: no queries (n = 0)");
  require(q_size == n_tok * heads.q_dim(), "attention::attend: q has ", q_size, " floats, expected ", n_tok, " x ",
          heads.q_dim());
  require(out_size == q_size, "attention::attend: out has ", out_size, " floats, expected ", q_size);
  require(stats_size >= n_tok * heads.n_q, "attention::attend: stats scratch has ", stats_size, " entries, expected ",
          n_tok * heads.n_q);
}

/// Runs fn(stats) with n partial states of scratch on the stack, else from the default resource.
/// Tiers of 64, 1024 and kAttendStackStats: most models decode with ≤ 64 query heads, and 8 KiB of
/// default-initialised stats cost ~80 ns a step, more than the whole step at n = 16.
template <std::size_t N, class Fn>
void with_stack_stats(std::size_t n, Fn& fn) {
  std::array<PartialStats, N> stats;
  fn(std::span<PartialStats>(stats.data(), n));
}
template <class Fn>
void with_stats(std::size_t n, Fn&& fn) {
  if (n <= 64) {
    with_stack_stats<64>(n, fn);
  } else if (n <= 1024) {
    with_stack_stats<1024>(n, fn);
  } else if (n <= kAttendStackStats) {
    with_stack_stats<kAttendStackStats>(n, fn);
  } else {
    std::vector<PartialStats> stats(n);
    fn(std::span<PartialStats>(stats));
  }
}

/// The walk of `attend` for queries at p0 … p0+n_tok−1 with scratch `stats` (≥ n_tok·H_q empty
/// states). `tile` rows per prefill tile, 0 for whole blocks (a decode step).
template <class Arch, kv::CachePolicy Cache>
void attend_into(std::span<const float> q, std::size_t p0, const Cache& cache, const Heads& heads, std::span<float> out,
                 std::span<PartialStats> stats, std::size_t tile_rows, const AttendOptions& opt) {
  const std::size_t d = heads.head_dim;
  const std::size_t n_tok = heads.q_dim() == 0 ? 0 : q.size() / heads.q_dim();
  detail::check_attend(q.size(), out.size(), n_tok, stats.size(), heads, cache.n_kv_heads(), cache.head_dim());
  require(p0 + n_tok <= cache.size(), "attention::attend: queries reach position ", p0 + n_tok - 1,
          " but the cache holds ", cache.size(), " positions");
  const float scale = opt.scale.value_or(heads.default_scale());
  const std::size_t g = heads.group();
  const std::size_t row = heads.q_dim();
  [[maybe_unused]] kv::AttentionWindow window{};
  if constexpr (kv::WindowedCache<Cache>) window = cache.attention_window();

  std::fill(out.begin(), out.end(), 0.0f);  // the stats arrive empty (with_stats value-initialises them)

  parallel_for(heads.n_kv, opt.threads, [&](std::size_t h_lo, std::size_t h_hi) {
    for (std::size_t h = h_lo; h < h_hi; ++h) {
      const std::size_t col = h * g * d;  // first query head of this group, in floats
      cache.for_each_block(h, [&](const auto& blk) {
        for (std::size_t a = 0, b = 0; a < blk.n; a = b) {
          if constexpr (kv::WindowedCache<Cache>) {
            // tiles end at positions that are multiples of kPrefillTileRows, for decode steps too: a
            // query's window starts anywhere, and the kernel's row runs start at each call's first row,
            // so a query folds the same row ranges whatever chunk it came in and wherever the block
            // (a ring's older part, which eviction moves) starts — chunked = token by token, bitwise
            const std::size_t p = blk.pos0 + a;
            b = std::min(blk.n, p - p % kPrefillTileRows + kPrefillTileRows - blk.pos0);
          } else {
            b = tile_rows == 0 ? blk.n : std::min(blk.n, a + tile_rows);
          }
          for (std::size_t t = 0; t < n_tok; ++t) {
            const std::size_t pos = p0 + t;
            if (pos < blk.pos0 + a) continue;  // the whole tile is in this query's future
            const std::size_t end = std::min(b, pos - blk.pos0 + 1);
            const QueryGroup qg{.q = q.data() + t * row + col, .g = g, .d = d, .scale = scale,
                                .o = out.data() + t * row + col, .st = stats.data() + t * heads.n_q + h * g};
            if constexpr (kv::WindowedCache<Cache>) {  // clip from below: sinks + this query's last W positions
              window.visible_rows(pos, blk.pos0, a, end,
                                  [&](std::size_t lo, std::size_t hi) { accumulate<Arch>(qg, blk, lo, hi); });
            } else {
              accumulate<Arch>(qg, blk, a, end);
            }
          }
        }
      });
      for (std::size_t t = 0; t < n_tok; ++t)
        for (std::size_t i = 0; i < g; ++i)
          finalize(out.data() + t * row + col + i * d, stats[t * heads.n_q + h * g + i], d);
    }
  });
}

/// First query of part i of `parts` (i = parts gives n_tok) for queries at p0 … p0 + n_tok − 1: the
/// parts split the causal work `causal_keys(p0, n_tok)` as evenly as whole queries allow, so the later
/// queries, which see more keys, come in shorter parts. (A windowed cache's queries see at most its
/// window, so there the first part gets more than its share; the results are the same.)
[[nodiscard]] inline std::size_t causal_split(std::size_t p0, std::size_t n_tok, std::size_t i, std::size_t parts) noexcept {
  auto work = [&](std::size_t t) { return causal_keys(p0, t); };  // nondecreasing in t
  if (i >= parts) return n_tok;
  const std::size_t target = work(n_tok) / parts * i + work(n_tok) % parts * i / parts;
  std::size_t lo = 0, hi = n_tok;  // the smallest t with work(t) >= target
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (work(mid) < target) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace detail

/// Causal attention of the queries `q` ([n, H_q, d]) of the cache's newest n positions
/// (p0 = cache.size() − n … cache.size() − 1: append their K/V first) against `cache`, windowed per
/// query when the cache is a `kv::WindowedCache`, written to `out` ([n, H_q, d]). n = 1 is a decode
/// step (see `decode`); a prefill block is n > 1 — the same call. Throws `shape_error` on any
/// mismatch, or when the cache holds fewer than n positions. Allocates nothing for H_q ≤
/// `kAttendStackStats`: its only scratch, (m, l) pairs per query head and query, lives on the stack, and
/// a block of more than kAttendStackStats / H_q queries runs in batches of that many (each query folds
/// the same tiles in the same order either way, so the result is the same bit for bit).
/// Numeric edge cases (propagated, never checked per element): a NaN or ±∞ in a query, or in a key or
/// value a query sees, makes that query head's output non-finite (NaN in → NaN out); rows the query
/// does not see (later positions, outside its window, other KV heads) do not affect it. Equal keys
/// give the plain mean of the visible values. A quantized cache stores a non-finite K/V row as
/// zeros (kv::quantize_row), so over it the output stays finite.
template <class Arch = simd::DefaultArch, kv::CachePolicy Cache>
void attend(std::span<const float> q, const Cache& cache, const Heads& heads, std::span<float> out,
            const AttendOptions& opt = {}) {
  heads.validate();
  const std::size_t n_tok = q.size() / heads.q_dim();
  require(n_tok <= cache.size(), "attention::attend: ", n_tok, " queries but the cache holds ", cache.size(),
          " positions (append the queries' K/V first)");
  detail::check_attend(q.size(), out.size(), n_tok, n_tok * heads.n_q, heads, cache.n_kv_heads(), cache.head_dim());
  const std::size_t row = heads.q_dim();
  const std::size_t tile = n_tok == 1 ? 0 : kPrefillTileRows;  // the whole call's tiling, in every part
  const std::size_t p0 = cache.size() - n_tok;
  const std::size_t per = std::max<std::size_t>(1, kAttendStackStats / heads.n_q);  // queries per batch
  // queries [lo, hi) in batches of `per`, `threads` over KV heads
  auto queries = [&](std::size_t lo, std::size_t hi, int threads) {
    AttendOptions o = opt;
    o.threads = threads;
    for (std::size_t t0 = lo; t0 < hi; t0 += per) {
      const std::size_t m = std::min(per, hi - t0);
      detail::with_stats(m * heads.n_q, [&](std::span<PartialStats> stats) {
        detail::attend_into<Arch>(q.subspan(t0 * row, m * row), p0 + t0, cache, heads, out.subspan(t0 * row, m * row),
                                  stats, tile, o);
      });
    }
  };
  const int parts = query_parts(n_tok, heads.n_q, opt.threads);
  if (parts <= 1) {
    queries(0, n_tok, opt.threads);
    return;
  }
  parallel_for(static_cast<std::size_t>(parts), parts, [&](std::size_t i_lo, std::size_t i_hi) {
    for (std::size_t i = i_lo; i < i_hi; ++i)
      queries(detail::causal_split(p0, n_tok, i, static_cast<std::size_t>(parts)),
              detail::causal_split(p0, n_tok, i + 1, static_cast<std::size_t>(parts)), 1);
  });
}

/// One decode step: `attend` for one query — `q` ([H_q, d]) of the newest position (size − 1) against
/// the whole cache (its sinks + last W positions for a `kv::WindowedCache`), into `out` ([H_q, d]).
/// Throws `shape_error` for an empty cache or a q that is not one token's H_q·d floats. Allocates
/// nothing for H_q ≤ kAttendStackStats.
template <class Arch = simd::DefaultArch, kv::CachePolicy Cache>
void decode(std::span<const float> q, const Cache& cache, const Heads& heads, std::span<float> out,
            const AttendOptions& opt = {}) {
  require(cache.size() > 0, "attention::decode: the cache is empty (n = 0)");
  heads.validate();
  require(q.size() == heads.q_dim(), "attention::decode: q has ", q.size(), " floats, expected one token's ",
          heads.q_dim());
  attend<Arch>(q, cache, heads, out, opt);
}

}  // namespace barato::attention
