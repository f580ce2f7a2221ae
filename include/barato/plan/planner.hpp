#pragma once
/// \file
/// The memory planner: "with how much context, and for how many users at once?" for a model shape,
/// a weight format, a KV-cache format, a memory budget and a runtime reserve.
///
/// The plain plan is the sum  weights + KV bytes/token · tokens + reserve, where
///   weights        = ⌈parameters · bits_per_weight / 8⌉,
///   KV bytes/token = layers · kv_heads · (K + V code bytes of one row of head_dim).
/// Each refinement is a separate, named switch in `Refinements` (off by default):
///  - `kv_scales`: the quantized caches' two fp32 scales per token, KV head and layer (what
///    `kv::Quantized` and `kv::QuantizedPages` store on top of the codes);
///  - `block_tokens` (paging, `kv::PagedPool`): each sequence's tokens round up to whole blocks of B;
///  - `window` (+ `sinks`, `chunk`; `kv::SlidingWindow`): a fixed (S + W + chunk − 1) slots per KV head
///    and sequence, whatever the context;
///  - `shared_prefix_tokens`: a prefix every user shares is counted once (with paging only its whole
///    blocks can be shared, as in `PagedPool::fork` and prefix hits);
///  - `step_tokens` (+ `rope_positions`): the example decoder's activation buffers for that many tokens
///    per step, once (`decoder_activation_bytes`).
/// With `kv_scales` on, the KV bytes are exactly what barato's caches allocate: L `kv::Contiguous`,
/// `kv::Quantized` or `kv::SlidingWindow` caches per sequence, or the page store of a `kv::PagedPool`
/// of `blocks(context, users)` blocks (tests/plan/planner_test.cpp measures them with a
/// `CountingResource`). A pool's bookkeeping — block counts, free list and prefix registry, sized at
/// construction — is `paged_pool_metadata_bytes` and not part of the KV bytes; the per-sequence
/// bookkeeping (a sequence-table slot, per-layer lengths, the block table of 4 bytes per block grown
/// as the sequence grows, its known tokens) is not counted anywhere.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/paged_config.hpp"
#include "barato/plan/format.hpp"
#include "barato/plan/shape.hpp"

namespace barato::plan {

/// The runtime reserve of a plan unless given: 1.5 GiB for the process, allocator slack and buffers not planned.
inline constexpr std::size_t kDefaultReserve = 3 * kGiB / 2;
/// What `max_context` and `max_users` return when the limit does not depend on it (a window cache's context).
inline constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

/// The refinements on top of the plain plan, each a named switch (designated initialisers).
struct Refinements {
  bool kv_scales = false;                ///< count the quantized caches' fp32 scales (2 per token, KV head, layer)
  std::size_t block_tokens = 0;          ///< paging: each sequence rounds up to whole blocks of this many tokens; 0 = off
  std::size_t window = 0;                ///< sliding-window cache of W recent positions; 0 = off
  std::size_t sinks = 0;                 ///< window: first positions kept forever
  std::size_t chunk = 1;                 ///< window: most tokens one append adds (costs chunk − 1 slots)
  std::size_t shared_prefix_tokens = 0;  ///< a prefix of this many tokens shared by every user, counted once
  std::size_t step_tokens = 0;           ///< activation buffers of a decoder for this many tokens per step
                                         ///< (`decoder_activation_bytes`), counted once; 0 = off
  std::size_t rope_positions = 0;        ///< with step_tokens: positions of its RoPE table

  /// Every refinement barato's caches imply: scales counted (the rest depends on the cache chosen).
  [[nodiscard]] static Refinements exact() { return {.kv_scales = true}; }
};

/// The inputs of a plan (designated initialisers).
struct PlanInput {
  ModelShape shape;                       ///< the model
  WeightFormat weights{"fp16", 16};       ///< weight storage
  KvCacheFormat kv{KvStorage::fp16};      ///< KV-cache storage
  std::size_t budget = 0;                 ///< bytes of memory available in all
  std::size_t reserve = kDefaultReserve;  ///< bytes kept for the runtime
  Refinements refine{};                   ///< refinements switched on
};

/// Bytes of the activation buffers of a Llama-style decoder that processes up to `rows` tokens per
/// step (at least 1) — exactly what the example model allocates at construction (`LlamaStack`,
/// examples/models/llama.hpp): fp32 [rows, ·] buffers for the residual stream, its norm, q, k, v, the
/// attention output, the output projection and the two FFN halves, i.e. rows · (3 · dim + 2 · q_dim +
/// 2 · kv_dim + 2 · hidden_dim) floats, and a RoPE table of `positions` × head_dim/2 cos and sin
/// floats. The caller's logits ([rows, vocab]) are not included. Needs `dim` and `hidden_dim`
/// (`value_error` when the shape leaves them 0).
[[nodiscard]] inline std::size_t decoder_activation_bytes(const ModelShape& s, std::size_t rows, std::size_t positions) {
  require<value_error>(s.dim > 0 && s.hidden_dim > 0, "plan::decoder_activation_bytes: shape '", s.name,
                       "' needs dim and hidden_dim (got ", s.dim, ", ", s.hidden_dim, ")");
  const std::size_t r = std::max<std::size_t>(rows, 1);
  const std::size_t q_dim = s.q_heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  const std::size_t per_row = 3 * s.dim + 2 * q_dim + 2 * kv_dim + 2 * s.hidden_dim;
  return sizeof(float) * (r * per_row + 2 * positions * (s.head_dim / 2));
}

namespace detail {
/// a · b, or kUnlimited when it overflows.
[[nodiscard]] constexpr std::size_t sat_mul(std::size_t a, std::size_t b) noexcept {
  return (a != 0 && b > kUnlimited / a) ? kUnlimited : a * b;
}
/// a + b, or kUnlimited when it overflows.
[[nodiscard]] constexpr std::size_t sat_add(std::size_t a, std::size_t b) noexcept {
  return b > kUnlimited - a ? kUnlimited : a + b;
}
}  // namespace detail

/// A memory plan: the answers for one `PlanInput`. All byte figures are exact integers; limits are floors.
class Plan {
 public:
  /// Checks the input: `value_error` for a zero budget, a bad shape or format, or refinements that
  /// do not go together (a window with paging or a shared prefix; sinks or chunk without a window).
  explicit Plan(PlanInput in) : in_(std::move(in)) {
    (void)in_.shape.checked();
    (void)in_.weights.checked();
    const Refinements& r = in_.refine;
    require<value_error>(in_.budget > 0, "plan::Plan: the budget must be > 0 bytes, got 0");
    require<value_error>(r.chunk > 0, "plan::Plan: the window chunk must be ≥ 1, got 0");
    require<value_error>(r.window > 0 || (r.sinks == 0 && r.chunk == 1),
                         "plan::Plan: sinks and chunk need a window (window = 0)");
    require<value_error>(r.window == 0 || (r.block_tokens == 0 && r.shared_prefix_tokens == 0),
                         "plan::Plan: a sliding-window cache is neither paged nor shares prefixes in barato");
    (void)activation_bytes();  // value_error when step_tokens is set on a shape without dim / hidden_dim
  }

  [[nodiscard]] const PlanInput& input() const noexcept { return in_; }

  // ---- fixed costs ---------------------------------------------------------------------------
  /// ⌈parameters · bits_per_weight / 8⌉.
  [[nodiscard]] std::size_t weight_bytes() const { return plan::weight_bytes(in_.shape.parameters, in_.weights); }
  /// The activation buffers switched on by `step_tokens` (0 when off).
  [[nodiscard]] std::size_t activation_bytes() const {
    const Refinements& r = in_.refine;
    return r.step_tokens == 0 ? 0 : decoder_activation_bytes(in_.shape, r.step_tokens, r.rope_positions);
  }
  /// Weights + reserve (+ activation buffers when switched on).
  [[nodiscard]] std::size_t fixed_bytes() const {
    return detail::sat_add(detail::sat_add(weight_bytes(), in_.reserve), activation_bytes());
  }
  /// True when the weights and the reserve (and activations) fit in the budget.
  [[nodiscard]] bool weights_fit() const { return fixed_bytes() <= in_.budget; }
  /// Bytes by which the fixed bytes (weights + reserve + activations) exceed the budget (0 when they fit): the "does not fit" line.
  [[nodiscard]] std::size_t shortfall() const { return weights_fit() ? 0 : fixed_bytes() - in_.budget; }
  /// Bytes left for the KV cache: budget − fixed bytes (0 when they do not fit).
  [[nodiscard]] std::size_t kv_budget() const { return weights_fit() ? in_.budget - fixed_bytes() : 0; }

  // ---- the KV cache --------------------------------------------------------------------------
  /// Bytes of one row (one token, one KV head, one layer; K and V): codes, + scales with `kv_scales`.
  [[nodiscard]] std::size_t row_bytes() const noexcept {
    return in_.refine.kv_scales ? in_.kv.row_bytes(in_.shape.head_dim) : in_.kv.code_bytes(in_.shape.head_dim);
  }
  /// KV bytes of one token of the whole model: layers · kv_heads · row_bytes().
  [[nodiscard]] std::size_t kv_bytes_per_token() const noexcept {
    return in_.shape.layers * in_.shape.kv_heads * row_bytes();
  }
  /// Bytes of one paged block (all layers, B tokens): B · kv_bytes_per_token(); 0 without paging.
  [[nodiscard]] std::size_t block_bytes() const noexcept { return in_.refine.block_tokens * kv_bytes_per_token(); }
  /// Bytes of one sliding-window cache set (all layers) of one sequence; 0 without a window.
  [[nodiscard]] std::size_t window_bytes() const noexcept {
    const Refinements& r = in_.refine;
    return r.window == 0 ? 0 : (r.sinks + r.window + r.chunk - 1) * kv_bytes_per_token();
  }
  /// Most tokens resident at once, over all sequences: ⌊kv_budget / kv_bytes_per_token⌋, in whole
  /// blocks with paging (⌊kv_budget / block_bytes⌋ · B); for a window cache, the slots that fit.
  [[nodiscard]] std::size_t max_tokens() const {
    if (in_.refine.block_tokens != 0) return kv_budget() / block_bytes() * in_.refine.block_tokens;
    return kv_budget() / kv_bytes_per_token();
  }
  /// Paged blocks that `users` sequences of `context` tokens take: the shared prefix's whole blocks
  /// once, then ⌈context / B⌉ minus those per user. Requires paging (`value_error` otherwise).
  [[nodiscard]] std::size_t blocks(std::size_t context, std::size_t users) const {
    const std::size_t B = in_.refine.block_tokens;
    require<value_error>(B != 0, "plan::Plan::blocks: the plan is not paged (block_tokens = 0)");
    if (users == 0) return 0;
    const std::size_t shared = std::min(in_.refine.shared_prefix_tokens, context) / B;
    const std::size_t own = (context + B - 1) / B - shared;
    return detail::sat_add(shared, detail::sat_mul(users, own));
  }
  /// KV bytes of `users` sequences of `context` tokens each, with every refinement switched on.
  [[nodiscard]] std::size_t kv_bytes(std::size_t context, std::size_t users) const {
    if (users == 0) return 0;
    return detail::sat_add(shared_bytes(context), detail::sat_mul(users, own_bytes(context)));
  }
  /// Weights + KV bytes + reserve for `users` sequences of `context` tokens.
  [[nodiscard]] std::size_t total_bytes(std::size_t context, std::size_t users) const {
    return detail::sat_add(fixed_bytes(), kv_bytes(context, users));
  }
  /// True when `users` sequences of `context` tokens fit in the budget.
  [[nodiscard]] bool fits(std::size_t context, std::size_t users) const { return total_bytes(context, users) <= in_.budget; }
  /// Bytes missing for `users` sequences of `context` tokens (0 when they fit).
  [[nodiscard]] std::size_t shortfall(std::size_t context, std::size_t users) const {
    const std::size_t t = total_bytes(context, users);
    return t <= in_.budget ? 0 : t - in_.budget;
  }
  /// Most users with `context` tokens each (0 when even the weights do not fit; kUnlimited when
  /// each user adds no bytes, as when the whole context is a shared prefix).
  [[nodiscard]] std::size_t max_users(std::size_t context) const {
    if (!weights_fit()) return 0;
    const std::size_t shared = shared_bytes(context), own = own_bytes(context), room = kv_budget();
    if (shared > room || (own != 0 && room - shared < own)) return 0;
    return own == 0 ? kUnlimited : (room - shared) / own;
  }
  /// Longest context each of `users` users can have at once (users ≥ 1, else `value_error`): 0 when
  /// not even one token fits; kUnlimited for a window cache that fits (its bytes do not grow).
  [[nodiscard]] std::size_t max_context(std::size_t users) const {
    require<value_error>(users > 0, "plan::Plan::max_context: users must be ≥ 1, got 0");
    if (!fits(1, users)) return 0;
    if (in_.refine.window != 0) return kUnlimited;
    std::size_t lo = 1, hi = 2;  // fits(lo), and hi is not known to fit
    while (fits(hi, users)) {
      lo = hi;
      if (hi > (std::size_t{1} << 52)) return lo;
      hi *= 2;
    }
    while (hi - lo > 1) {  // kv_bytes grows with the context: fits(lo), !fits(hi)
      const std::size_t mid = lo + (hi - lo) / 2;
      (fits(mid, users) ? lo : hi) = mid;
    }
    return lo;
  }

 private:
  /// Bytes counted once for all users: the shared prefix (its whole blocks when paged).
  [[nodiscard]] std::size_t shared_bytes(std::size_t context) const {
    const Refinements& r = in_.refine;
    if (r.window != 0) return 0;
    const std::size_t p = std::min(r.shared_prefix_tokens, context);
    if (r.block_tokens != 0) return detail::sat_mul(p / r.block_tokens, block_bytes());
    return detail::sat_mul(p, kv_bytes_per_token());
  }
  /// Bytes each user adds on top of the shared part.
  [[nodiscard]] std::size_t own_bytes(std::size_t context) const {
    const Refinements& r = in_.refine;
    if (r.window != 0) return window_bytes();
    const std::size_t p = std::min(r.shared_prefix_tokens, context);
    if (r.block_tokens != 0) {
      const std::size_t B = r.block_tokens;
      return detail::sat_mul((context + B - 1) / B - p / B, block_bytes());
    }
    return detail::sat_mul(context - p, kv_bytes_per_token());
  }

  PlanInput in_;
};

/// Bytes a `kv::PagedPool` allocates at construction besides its page store: the block allocator's
/// counts, cached flags, free list and per-extent counters, the prefix registry's hashes and tokens,
/// and (with prefix caching) its fixed-size index: two open-addressing tables of the power of two
/// ≥ 2·n_blocks slots of (8-byte hash, 4-byte block) plus the last evicted hash and a flag per block
/// (kv/block_allocator.hpp, kv/prefix_registry.hpp, kv/prefix_cache.hpp). Block tables, per
/// sequence, come later.
[[nodiscard]] inline std::size_t paged_pool_metadata_bytes(const kv::PagedConfig& cfg) {
  const std::size_t n = cfg.n_blocks, extents = (n + cfg.extent() - 1) / cfg.extent();
  const std::size_t allocator = n * 4 + n * 1 + 2 * (n + 1) * 4 + extents * 4;
  const std::size_t registry = n * 8 + n * 8 + n * cfg.block_tokens * sizeof(Token);
  const std::size_t indexed = cfg.prefix_caching ? n : 0;
  std::size_t slots = indexed == 0 ? 0 : 2;
  while (slots != 0 && slots < 2 * indexed) slots *= 2;
  const std::size_t index = 2 * slots * (8 + 4) + indexed * (8 + 1);
  return allocator + registry + index;
}

// ---- search ------------------------------------------------------------------------------------

/// A measured quality figure for one weight × KV format pair (perplexity, KL divergence, ...), supplied by the user.
struct QualityFigure {
  std::string weights;  ///< weight format name
  std::string kv;       ///< KV-cache format name
  double value = 0;     ///< the figure (lower is better for perplexity and KL)
};

/// What to search (designated initialisers): the shape, the budget and reserve, the workload, the
/// refinements, the formats to try (default: fp16, int8, int4, nf4 weights × every KV format) and
/// optional quality figures.
struct SearchQuery {
  ModelShape shape;                                                     ///< the model
  std::size_t budget = 0;                                               ///< bytes available in all
  std::size_t reserve = kDefaultReserve;                                ///< runtime reserve
  std::size_t context = 4096;                                           ///< tokens per user
  std::size_t users = 1;                                                ///< users at once
  Refinements refine = Refinements::exact();                            ///< refinements
  std::vector<WeightFormat> weights = {{"fp16", 16}, {"int8", 8}, {"int4", 4.125}, {"nf4", 4.25}};  ///< tried
  std::vector<KvCacheFormat> kv{kKvCacheFormats.begin(), kKvCacheFormats.end()};                   ///< tried
  std::vector<QualityFigure> quality;                                   ///< optional measured figures
};

/// One weight × KV format combination that fits.
struct Candidate {
  WeightFormat weights;           ///< weight format
  KvCacheFormat kv;               ///< KV-cache format
  std::size_t total_bytes = 0;    ///< weights + KV + reserve for the query's context and users
  std::size_t max_users = 0;      ///< users at the query's context
  std::size_t max_context = 0;    ///< context for the query's users
  std::optional<double> quality;  ///< the user's figure for this pair, when given
};

/// The weight × KV combinations that fit `q.users` users of `q.context` tokens in `q.budget`,
/// smallest total first (ties: the order of q.weights, then q.kv). `value_error` for bad input.
[[nodiscard]] inline std::vector<Candidate> search(const SearchQuery& q) {
  require<value_error>(q.users > 0, "plan::search: users must be ≥ 1, got 0");
  std::vector<Candidate> out;
  for (const WeightFormat& w : q.weights)
    for (const KvCacheFormat& kv : q.kv) {
      const Plan p({.shape = q.shape, .weights = w, .kv = kv, .budget = q.budget, .reserve = q.reserve, .refine = q.refine});
      if (!p.fits(q.context, q.users)) continue;
      Candidate c{.weights = w, .kv = kv, .total_bytes = p.total_bytes(q.context, q.users),
                  .max_users = p.max_users(q.context), .max_context = p.max_context(q.users), .quality = std::nullopt};
      for (const QualityFigure& f : q.quality)
        if (f.weights == w.name && f.kv == kv.name()) c.quality = f.value;
      out.push_back(std::move(c));
    }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.total_bytes < b.total_bytes; });
  return out;
}

}  // namespace barato::plan
