#pragma once
/// \file
/// Split-K decode ("flash-decoding", Dao et al. 2023) for long caches: the cached positions of
/// every KV head are cut into S chunks of consecutive positions; the S·H_kv (chunk, KV head) pairs
/// are independent work items (run in parallel with `barato::parallel_for`), each folding its chunk
/// into a partial state with the fused kernel; the S partial states of every query head are then
/// merged with `attention::merge` (partial.hpp) and normalised. Decode of one sequence has only
/// H_kv independent streams otherwise — one for MQA — which cannot keep several cores busy.
///
/// The result equals `attention::decode` up to fp32 summation order (including the per-query window
/// of a `kv::WindowedCache`). The partial states live in a
/// `SplitKWorkspace` sized at construction, so a step allocates nothing.

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <optional>
#include <span>

#include "barato/attention/heads.hpp"
#include "barato/attention/kernels/accumulate.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/simd/arch.hpp"

namespace barato::attention {

/// Chunk boundaries are rounded up to multiples of this many positions (one kernel tile of 16 rows
/// for AVX-512 fp32), so only the last chunk has a partial tile.
inline constexpr std::size_t kSplitKRowAlign = 16;

/// Partial states of S splits for one layer's head shape: o [S, H_q, d] and (m, l) [S, H_q].
class SplitKWorkspace {
 public:
  /// Reserves the states of `splits` chunks for `heads`. Throws `shape_error` for bad heads or 0 splits.
  SplitKWorkspace(const Heads& heads, std::size_t splits,
                  std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : heads_(validated(heads)), splits_(checked_splits(splits)), o_(splits * heads.q_dim(), mr),
        stats_(splits * heads.n_q, mr) {}

  [[nodiscard]] const Heads& heads() const noexcept { return heads_; }
  [[nodiscard]] std::size_t splits() const noexcept { return splits_; }
  /// Bytes held from the memory resource.
  [[nodiscard]] std::size_t bytes() const noexcept { return o_.bytes() + stats_.bytes(); }
  /// Un-normalised outputs of split s: [H_q, d].
  [[nodiscard]] float* o(std::size_t s) noexcept { return o_.data() + s * heads_.q_dim(); }
  /// (m, l) of split s: [H_q].
  [[nodiscard]] PartialStats* stats(std::size_t s) noexcept { return stats_.data() + s * heads_.n_q; }

 private:
  static const Heads& validated(const Heads& h) {
    h.validate();
    return h;
  }
  static std::size_t checked_splits(std::size_t s) {
    require(s > 0, "attention::SplitKWorkspace: splits must be > 0, got 0");
    return s;
  }

  Heads heads_;
  std::size_t splits_;
  Buffer<float> o_;             // [splits, H_q, d]
  Buffer<PartialStats> stats_;  // [splits, H_q]
};

/// Options of `decode_split_k` (designated initialisers).
struct SplitKOptions {
  std::optional<float> scale = std::nullopt;  ///< softmax scale; unset: 1/√head_dim (`Heads::default_scale()`)
  int threads = 1;                           ///< threads over the S·H_kv (chunk, KV head) work items
};

namespace detail {
/// First position of chunk s of S over n positions (aligned up to kSplitKRowAlign, clamped to n).
[[nodiscard]] constexpr std::size_t split_k_begin(std::size_t n, std::size_t s, std::size_t splits) noexcept {
  const std::size_t raw = n * s / splits;
  const std::size_t aligned = (raw + kSplitKRowAlign - 1) / kSplitKRowAlign * kSplitKRowAlign;
  return aligned < n ? aligned : n;
}
}  // namespace detail

/// One decode step, split-K: the query `q` ([H_q, d]) of the newest position against the whole
/// cache, into `out` ([H_q, d]), using `ws.splits()` chunks. Chunks may be empty (n < S·16); empty
/// states merge as identities. Throws `shape_error` on mismatched shapes, a workspace built for
/// other heads, or an empty cache. Complexity O(H_q·n·d) + O(S·H_q·d) for the merge; allocates nothing.
template <class Arch = simd::DefaultArch, kv::CachePolicy Cache>
void decode_split_k(std::span<const float> q, const Cache& cache, const Heads& heads, std::span<float> out,
                    SplitKWorkspace& ws, const SplitKOptions& opt = {}) {
  heads.validate();
  const std::size_t d = heads.head_dim;
  require(ws.heads().n_q == heads.n_q && ws.heads().n_kv == heads.n_kv && ws.heads().head_dim == d,
          "attention::decode_split_k: workspace built for ", ws.heads().n_q, "/", ws.heads().n_kv, " heads of dim ",
          ws.heads().head_dim, ", expected ", heads.n_q, "/", heads.n_kv, " of dim ", d);
  require(cache.n_kv_heads() == heads.n_kv && cache.head_dim() == d, "attention::decode_split_k: cache has ",
          cache.n_kv_heads(), " KV heads of dim ", cache.head_dim(), ", expected ", heads.n_kv, " of dim ", d);
  require(q.size() == heads.q_dim(), "attention::decode_split_k: q has ", q.size(), " floats, expected ", heads.q_dim());
  require(out.size() == heads.q_dim(), "attention::decode_split_k: out has ", out.size(), " floats, expected ",
          heads.q_dim());
  const std::size_t n = cache.size();
  require(n > 0, "attention::decode_split_k: the cache is empty (n = 0)");
  const float scale = opt.scale.value_or(heads.default_scale());
  const std::size_t g = heads.group();
  const std::size_t splits = ws.splits();

  // Phase 1: one partial state per (chunk, KV head) — independent work items.
  parallel_for(splits * heads.n_kv, opt.threads, [&](std::size_t w_lo, std::size_t w_hi) {
    for (std::size_t w = w_lo; w < w_hi; ++w) {
      const std::size_t s = w / heads.n_kv;
      const std::size_t h = w % heads.n_kv;
      const std::size_t lo = detail::split_k_begin(n, s, splits);
      const std::size_t hi = detail::split_k_begin(n, s + 1, splits);
      float* o = ws.o(s) + h * g * d;          // [G, d]
      PartialStats* st = ws.stats(s) + h * g;  // [G]
      std::fill(o, o + g * d, 0.0f);
      std::fill(st, st + g, PartialStats{});
      if (lo == hi) continue;
      const QueryGroup qg{.q = q.data() + h * g * d, .g = g, .d = d, .scale = scale, .o = o, .st = st};
      cache.for_each_block(h, [&](const auto& blk) {
        const std::size_t a = std::max(lo, blk.pos0);
        const std::size_t b = std::min(hi, blk.pos0 + blk.n);
        if (a >= b) return;
        if constexpr (kv::WindowedCache<Cache>) {  // the newest query's sinks + last W positions only
          cache.attention_window().visible_rows(n - 1, blk.pos0, a - blk.pos0, b - blk.pos0,
                                                 [&](std::size_t r0, std::size_t r1) {
                                                   accumulate<Arch>(qg, blk, r0, r1);
                                                 });
        } else {
          accumulate<Arch>(qg, blk, a - blk.pos0, b - blk.pos0);
        }
      });
    }
  });

  // Phase 2: merge the S states of every query head in chunk order, then normalise.
  for (std::size_t j = 0; j < heads.n_q; ++j) {
    float* oj = out.data() + j * d;
    PartialStats acc{};
    std::fill(oj, oj + d, 0.0f);
    for (std::size_t s = 0; s < splits; ++s) merge(oj, acc, ws.o(s) + j * d, ws.stats(s)[j], d);
    finalize(oj, acc, d);
  }
}

}  // namespace barato::attention
