#pragma once
/// \file
/// Cascade (shared-prefix) decode attention over a `kv::PagedPool` (kv/paged.hpp): S sequences of
/// one decode step whose block tables begin with the same physical blocks — forks share every
/// block, prefix hits share cached ones — read those shared pages once for all of them.
///
/// **Algorithm** (the shared-prefix "cascade" of FlashInfer, Ye et al. 2024; Hydragen, Juravsky et
/// al. 2024). Let P = `shared_prefix_positions(pool, seqs, layer)`: the leading whole blocks that are
/// the same physical block in every sequence's table and full in every one of them. For each KV
/// head h (the `threads` split over KV heads, as in `attend`):
///  1. the G query heads of h of every sequence are stacked into one query group of S·G heads
///     ([S·G, d], sequence-major, in the workspace);
///  2. one pass over rows [0, P) of the shared pages folds all S·G heads: each chunk of K/V is read
///     from memory once and from L1 for the other heads (per-sequence decode reads it S times). With
///     ≥ `kCascadeStackMinHeads` stacked heads, element pages and d = 64 / 128 this pass is the
///     stacked-query kernel (attention/kernels/stacked.hpp: vectorised over heads, no horizontal
///     reductions, fp32 FMA-bound — measured ~1.5× faster than `accumulate` on 112 stacked heads);
///     otherwise it is `accumulate` with a query group of S·G heads;
///  3. per sequence s, `accumulate` over its own rows [P, n_s) continues s's G states. This is the
///     merge of the prefix state with the suffix state (attention/partial.hpp) done by the kernel's
///     online-softmax rescale, so no second buffer of states and no separate merge pass exist;
///  4. the states are normalised and scattered to out [S, H_q, d].
/// Each query sees its whole cache (its newest position is its own: append the step's K/V first).
/// K/V bytes read per KV head: (P + Σ_s (n_s − P)) rows instead of Σ_s n_s; the arithmetic is the
/// same as S `decode` calls.
///
/// **Rounding and tolerance.** Opt-in, because the rounding differs from per-sequence
/// `attention::decode`: the stacked kernel sums each dot product in another order, and the prefix and
/// suffix meet at another online-softmax rescale. Every output element is within `kCascadeRelTol` ×
/// max |v| of decode's (outputs are convex combinations of value rows, so max |v| over the cached
/// values is their scale; measured worst ≈ 2·10⁻⁷ over the tests' cases). When the shared pass is
/// `accumulate` (fewer than kCascadeStackMinHeads stacked heads, quantized pages, other d) and P is a
/// multiple of the kernel's chunk (fixed-dim kernel: 64 rows at d = 64, 32 at d = 128 fp32), the
/// result is bitwise decode's (the suffix call starts where decode's next chunk starts). Both are
/// tested (tests/attention/cascade_test.cpp) for fp32 and fp16 pages and int8 / int4 quantized pages.
///
/// **When the executor should choose it**: for a group of ≥ 2 decode sequences that share P ≥ one
/// block (`group_shared_prefixes` finds such groups; the other decode sequences take plain
/// `decode`). The saving is (S − 1)·P rows of K and V per KV head, and, with the stacked kernel,
/// cheaper arithmetic on the shared rows; the extra cost is a gather, a transpose and a scatter of
/// S·H_q·d floats. Measured (bench_batching `BM_cascade`, one core, fp32 pages, d = 64, 16 sequences
/// × (2048 shared + 64 own)): 0.24–0.43× the per-sequence time at 8 query heads over 4 KV heads
/// (G = 2: decode is bound by K/V reads; 0.24–0.26 on the Intel and Zen 4 hosts, 0.39–0.43 on Zen 5),
/// 0.48–0.57× at 14 over 2 (G = 7: decode already reuses each K/V row 7 times and both are bound by
/// fp32 FMAs); 2–4 sequences sharing 256–2048 positions: 0.69–0.93×; fp16 pages (widened once per
/// chunk by the stacked kernel): 0.36–0.50× at both head shapes, 0.46–0.7× for 2–4 sequences (two
/// runs each). It never measured slower, so choose it for every group that shares a block.
/// A step allocates nothing: the stacked queries and states live in a `CascadeWorkspace` sized at
/// construction for the most sequences a step will pass.

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <optional>
#include <span>

#include "barato/attention/heads.hpp"
#include "barato/attention/kernels/accumulate.hpp"
#include "barato/attention/kernels/stacked.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/kv/paged.hpp"
#include "barato/simd/arch.hpp"

namespace barato::attention {

/// Tolerance of `decode_cascade` against per-sequence `decode`, relative to max |v| over the cached
/// values: the prefix and suffix states meet at a different rescale than in one pass, a few fp32
/// roundings (u ≈ 6·10⁻⁸) of each output element per rescale; 10⁻⁵ leaves headroom for contexts of
/// thousands of positions and still fails on any real error (a dropped or doubled row is ≥ 10⁻³).
inline constexpr double kCascadeRelTol = 1e-5;

/// Fewest stacked query heads (S·G) for which the shared pass uses the stacked-query kernel
/// (attention/kernels/stacked.hpp: vectorised over heads) instead of `accumulate` (vectorised over
/// the head dimension); element pages with d = 64 or 128 only.
inline constexpr std::size_t kCascadeStackMinHeads = 8;

/// Leading positions of layer `layer` that every sequence of `seqs` reads from the same physical
/// blocks: B · k for the largest k such that blocks 0 … k − 1 of every block table are identical and
/// every sequence holds ≥ B · k positions in that layer (whole, full blocks only). 0 for no
/// sequences; for one sequence, its full blocks. O(S · k). Throws `shape_error` for a bad layer and
/// what `PagedPool::size` throws for a sequence that is not live.
template <kv::PageFormat T>
[[nodiscard]] std::size_t shared_prefix_positions(const kv::PagedPool<T>& pool, std::span<const kv::SeqId> seqs,
                                                  std::size_t layer) {
  require(layer < pool.n_layers(), "attention::shared_prefix_positions: layer ", layer, " out of range (",
          pool.n_layers(), " layers)");
  if (seqs.empty()) return 0;
  const std::size_t B = pool.block_tokens();
  const auto t0 = pool.block_table(seqs[0]);
  std::size_t blocks = pool.size(seqs[0], layer) / B;  // the table covers every layer's positions
  for (const kv::SeqId s : seqs.subspan(1)) {
    const auto t = pool.block_table(s);
    blocks = std::min(blocks, pool.size(s, layer) / B);
    std::size_t i = 0;
    while (i < blocks && t[i] == t0[i]) ++i;
    blocks = i;
  }
  return blocks * B;
}

/// Scratch of `decode_cascade` for up to `max_seqs` sequences of one head shape: per KV head the
/// stacked queries and un-normalised outputs [S·G, d] and their (m, l) [S·G]. For S sequences, KV
/// head h's block starts at h·S·G (rows), so any S ≤ max_seqs packs densely.
class CascadeWorkspace {
 public:
  /// Reserves the scratch of `max_seqs` sequences for `heads` from `mr`. Throws `shape_error` for
  /// bad heads or max_seqs = 0.
  CascadeWorkspace(const Heads& heads, std::size_t max_seqs,
                   std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : heads_(validated(heads)), max_seqs_(checked_seqs(max_seqs)), q_(max_seqs * heads.q_dim(), mr),
        qt_(heads.n_kv * heads.head_dim * padded(max_seqs * heads.group()), mr), o_(max_seqs * heads.q_dim(), mr),
        stats_(max_seqs * heads.n_q, mr) {}

  [[nodiscard]] const Heads& heads() const noexcept { return heads_; }
  [[nodiscard]] std::size_t max_seqs() const noexcept { return max_seqs_; }
  /// Bytes held from the memory resource: max_seqs · H_q · (2·d·4 + 8) + H_kv · d · gp · 4 with
  /// gp = max_seqs · G rounded up to `detail::kStackedHeadPad`.
  [[nodiscard]] std::size_t bytes() const noexcept { return q_.bytes() + qt_.bytes() + o_.bytes() + stats_.bytes(); }
  /// S·G rounded up to `detail::kStackedHeadPad`: the row length of the transposed queries.
  [[nodiscard]] static constexpr std::size_t padded(std::size_t heads) noexcept {
    return (heads + detail::kStackedHeadPad - 1) / detail::kStackedHeadPad * detail::kStackedHeadPad;
  }
  /// Transposed, scaled stacked queries of KV head h for a step of S sequences: [d, padded(S·G)].
  [[nodiscard]] float* qt(std::size_t h, std::size_t S) noexcept {
    return qt_.data() + h * heads_.head_dim * padded(S * heads_.group());
  }
  /// Stacked queries of KV head h for a step of S sequences: [S·G, d].
  [[nodiscard]] float* q(std::size_t h, std::size_t S) noexcept { return q_.data() + h * S * heads_.group() * heads_.head_dim; }
  /// Un-normalised outputs of KV head h for a step of S sequences: [S·G, d].
  [[nodiscard]] float* o(std::size_t h, std::size_t S) noexcept { return o_.data() + h * S * heads_.group() * heads_.head_dim; }
  /// (m, l) of KV head h for a step of S sequences: [S·G].
  [[nodiscard]] PartialStats* stats(std::size_t h, std::size_t S) noexcept { return stats_.data() + h * S * heads_.group(); }

 private:
  static const Heads& validated(const Heads& h) {
    h.validate();
    return h;
  }
  static std::size_t checked_seqs(std::size_t s) {
    require(s > 0, "attention::CascadeWorkspace: max_seqs must be > 0, got 0");
    return s;
  }

  Heads heads_;
  std::size_t max_seqs_;
  Buffer<float> q_;             // [H_kv, S·G, d] stacked queries
  Buffer<float> qt_;            // [H_kv, d, padded(S·G)] the same, scaled and transposed (stacked kernel)
  Buffer<float> o_;             // [H_kv, S·G, d] un-normalised outputs
  Buffer<PartialStats> stats_;  // [H_kv, S·G]
};

/// Options of `decode_cascade` (designated initialisers).
struct CascadeOptions {
  std::optional<float> scale = std::nullopt;  ///< softmax scale; unset: 1/√head_dim (`Heads::default_scale()`)
  int threads = 1;                           ///< threads over KV heads (via barato::parallel_for)
};

/// One decode step of S = seqs.size() sequences of `pool`, layer `layer`, with their shared prefix
/// read once (file comment): q [S, H_q, d] holds each sequence's query of its newest position
/// (append the step's K/V first), out [S, H_q, d] receives the attention outputs. Returns the shared
/// positions P used (`shared_prefix_positions`). Results equal per-sequence `decode` within
/// `kCascadeRelTol` · max |v| (bitwise in the case the file comment names), for any thread
/// count bitwise the same. Throws `shape_error` when heads do not match the pool or the workspace,
/// for no sequences or more than `ws.max_seqs()`, a bad layer, a sequence with an empty cache, or
/// q / out not S·H_q·d floats. Allocates nothing.
template <class Arch = simd::DefaultArch, kv::PageFormat T>
std::size_t decode_cascade(std::span<const float> q, const kv::PagedPool<T>& pool, std::span<const kv::SeqId> seqs,
                           std::size_t layer, const Heads& heads, std::span<float> out, CascadeWorkspace& ws,
                           const CascadeOptions& opt = {}) {
  heads.validate();
  const std::size_t d = heads.head_dim, g = heads.group(), row = heads.q_dim();
  const std::size_t S = seqs.size();
  require(pool.n_kv_heads() == heads.n_kv && pool.head_dim() == d, "attention::decode_cascade: pool has ",
          pool.n_kv_heads(), " KV heads of dim ", pool.head_dim(), ", expected ", heads.n_kv, " of dim ", d);
  require(ws.heads().n_q == heads.n_q && ws.heads().n_kv == heads.n_kv && ws.heads().head_dim == d,
          "attention::decode_cascade: workspace built for ", ws.heads().n_q, "/", ws.heads().n_kv, " heads of dim ",
          ws.heads().head_dim, ", expected ", heads.n_q, "/", heads.n_kv, " of dim ", d);
  require(S > 0 && S <= ws.max_seqs(), "attention::decode_cascade: ", S, " sequences, expected 1 … ", ws.max_seqs(),
          " (the workspace's max_seqs)");
  require(q.size() == S * row, "attention::decode_cascade: q has ", q.size(), " floats, expected ", S, " x ", row);
  require(out.size() == S * row, "attention::decode_cascade: out has ", out.size(), " floats, expected ", S, " x ", row);
  const std::size_t P = shared_prefix_positions(pool, seqs, layer);  // also checks the layer and every sequence
  for (const kv::SeqId s : seqs)
    require(pool.size(s, layer) > 0, "attention::decode_cascade: sequence ", s, " has no positions in layer ", layer);
  const float scale = opt.scale.value_or(heads.default_scale());
  const bool stacked = Element<T> && detail::has_stacked_kernel<Arch>(d) && S * g >= kCascadeStackMinHeads;
  const std::size_t gp = CascadeWorkspace::padded(S * g);

  parallel_for(heads.n_kv, opt.threads, [&](std::size_t h_lo, std::size_t h_hi) {
    for (std::size_t h = h_lo; h < h_hi; ++h) {
      float* const qs = ws.q(h, S);             // [S·G, d]: sequence s's heads at rows s·G …
      float* const os = ws.o(h, S);             // [S·G, d]
      PartialStats* const st = ws.stats(h, S);  // [S·G]
      for (std::size_t s = 0; s < S; ++s) std::copy_n(q.data() + s * row + h * g * d, g * d, qs + s * g * d);
      std::fill(os, os + S * g * d, 0.0f);
      std::fill(st, st + S * g, PartialStats{});
      // 1. the shared pages, once, for every sequence's query heads
      if (P > 0) {
        if (stacked) {
          if constexpr (Element<T>) {
            float* const qt = ws.qt(h, S);  // [d, gp]
            for (std::size_t c = 0; c < d; ++c) {
              for (std::size_t j = 0; j < S * g; ++j) qt[c * gp + j] = scale * qs[j * d + c];
              std::fill(qt + c * gp + S * g, qt + (c + 1) * gp, 0.0f);
            }
            const detail::StackedQueries all{.qt = qt, .g = S * g, .gp = gp, .o = os, .st = st};
            pool.for_each_block(seqs[0], layer, h, [&](const kv::PagedBlock<T>& blk) {
              if (d == 64) detail::accumulate_stacked<64, Arch>(all, blk, 0, P);
              else detail::accumulate_stacked<128, Arch>(all, blk, 0, P);
            });
          }
        } else {
          const QueryGroup all{.q = qs, .g = S * g, .d = d, .scale = scale, .o = os, .st = st};
          pool.for_each_block(seqs[0], layer, h, [&](const auto& blk) { accumulate<Arch>(all, blk, 0, P); });
        }
      }
      // 2. each sequence's own rows continue its states (the merge, by the kernel's rescale)
      for (std::size_t s = 0; s < S; ++s) {
        const QueryGroup mine{.q = qs + s * g * d, .g = g, .d = d, .scale = scale, .o = os + s * g * d, .st = st + s * g};
        pool.for_each_block(seqs[s], layer, h, [&](const auto& blk) { accumulate<Arch>(mine, blk, P, blk.n); });
      }
      // 3. normalise into out [S, H_q, d]
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t i = 0; i < g; ++i) {
          float* dst = out.data() + s * row + (h * g + i) * d;
          std::copy_n(os + (s * g + i) * d, d, dst);
          finalize(dst, st[s * g + i], d);
        }
    }
  });
  return P;
}

// ---- grouping a step's decode sequences ------------------------------------------------------

/// A group of a step's decode sequences that share a prefix: seqs[begin, end) of the span
/// `group_shared_prefixes` reordered, sharing `shared` positions (> 0) — one `decode_cascade` call.
struct PrefixGroup {
  std::size_t begin = 0;   ///< first sequence of the group (index into the reordered span)
  std::size_t end = 0;     ///< one past its last
  std::size_t shared = 0;  ///< `shared_prefix_positions` of the group
};

/// Options of `group_shared_prefixes` (designated initialisers).
struct PrefixGroupOptions {
  std::size_t min_seqs = 2;    ///< smallest group worth a cascade (≥ 1)
  std::size_t min_shared = 1;  ///< fewest shared positions worth a cascade (groups sharing fewer are not made)
};

/// Finds the groups of `seqs` (a step's decode sequences) that share leading blocks in layer
/// `layer`, for an executor that runs `decode_cascade` per group and plain `decode` for the rest.
/// Simple by design: sequences are keyed by their first block (when they hold it fully), `seqs` is
/// sorted in place by (key, id) — so sequences with the same first block are adjacent, the others
/// last — and each run of one key becomes a group when it has ≥ opt.min_seqs sequences and its
/// `shared_prefix_positions` is ≥ max(1, opt.min_shared). A run is one group even when subsets of it
/// share more (two families forked from one system prompt share that prompt only). Writes the
/// groups in order into `groups` and returns how many; the sequences outside every group are those
/// between them. O(S log S + S · shared blocks); allocates nothing. Throws `shape_error` when
/// `groups` has fewer than S / min_seqs entries (enough for any input) or min_seqs = 0.
template <kv::PageFormat T>
[[nodiscard]] std::size_t group_shared_prefixes(const kv::PagedPool<T>& pool, std::span<kv::SeqId> seqs,
                                                std::size_t layer, std::span<PrefixGroup> groups,
                                                const PrefixGroupOptions& opt = {}) {
  require(opt.min_seqs > 0, "attention::group_shared_prefixes: min_seqs must be > 0, got 0");
  require(groups.size() >= seqs.size() / opt.min_seqs, "attention::group_shared_prefixes: room for ", groups.size(),
          " groups, expected ≥ ", seqs.size() / opt.min_seqs, " (sequences / min_seqs)");
  require(layer < pool.n_layers(), "attention::group_shared_prefixes: layer ", layer, " out of range (",
          pool.n_layers(), " layers)");
  using BlockId = typename kv::PagedPool<T>::BlockId;
  const std::size_t B = pool.block_tokens();
  auto key = [&](kv::SeqId s) -> BlockId {
    return pool.size(s, layer) >= B ? pool.block_table(s)[0] : kv::PagedPool<T>::kNoBlock;
  };
  for (const kv::SeqId s : seqs) (void)pool.size(s, layer);  // throws for a sequence that is not live
  std::sort(seqs.begin(), seqs.end(), [&](kv::SeqId a, kv::SeqId b) {
    const BlockId ka = key(a), kb = key(b);
    return ka != kb ? ka < kb : a < b;
  });
  std::size_t n = 0;
  for (std::size_t i = 0; i < seqs.size();) {
    const BlockId k = key(seqs[i]);
    std::size_t j = i + 1;
    while (j < seqs.size() && key(seqs[j]) == k) ++j;
    if (k != kv::PagedPool<T>::kNoBlock && j - i >= opt.min_seqs) {
      const std::size_t shared = shared_prefix_positions(pool, std::span<const kv::SeqId>(seqs.subspan(i, j - i)), layer);
      if (shared >= std::max<std::size_t>(1, opt.min_shared)) groups[n++] = {i, j, shared};
    }
    i = j;
  }
  return n;
}

}  // namespace barato::attention
