#pragma once
/// \file
/// `BatchedLlama`: the Llama decoder of models/llama.hpp run over a whole batched step
/// (`barato::batch::StepPlan`): several sequences, each with its own cache and its own new tokens —
/// one token for a decoding sequence, a chunk of its prompt for a prefilling one. All the step's
/// tokens go through the projections as one matrix product (token-level batching, the weights read
/// once for the step); RoPE, the cache append and attention run per sequence over its own cache at
/// its own positions; the classifier runs only on the last row of each chunk that wants logits.
///
/// ```cpp
/// kv::PagedPool<float> pool(cfg);                          // one pool for every sequence
/// BatchedLlama model(weights, PoolCaches<float>{&pool}, {.max_tokens = 256, .max_chunks = 64});
/// model.step(plan, logits);                                // logits [plan.logits_rows, vocab]
/// ```
///
/// Where the caches live is a template parameter: `PoolCaches<T>` (views of one `kv::PagedPool`, a
/// chunk's sequence is `chunk.seq`) or `SlotCaches<Cache>` (one vector of per-layer caches per slot,
/// e.g. `kv::Contiguous<float>`; a chunk at position 0 starts its slot afresh).
///
/// Exactness: every per-row operation is batch-invariant (the LinearLayer contract) and every
/// per-sequence one reads only that sequence's rows and cache, so the step's results for a sequence
/// are bitwise those of running it alone through the same chunks (tests/examples/llama_batch_test.cpp).
/// Buffers are sized at construction for `max_tokens` tokens and `max_chunks` sequences per step;
/// a step allocates nothing (the paged pool's block tables grow amortised, see kv/paged.hpp).

#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>
#include <cstddef>
#include <memory_resource>
#include <span>
#include <utility>
#include <vector>

#include "barato/attention/cascade.hpp"
#include "barato/batch/step_plan.hpp"
#include "barato/batch/token_batch.hpp"
#include "barato/core/error.hpp"
#include "barato/core/parallel.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/paged.hpp"
#include "models/llama.hpp"

namespace barato_examples {

/// The caches of a step's sequences as views of one `kv::PagedPool<T>` (sequence = chunk.seq).
template <barato::kv::PageFormat T>
struct PoolCaches {
  barato::kv::PagedPool<T>* pool = nullptr;  ///< not owned; outlives the model

  [[nodiscard]] barato::kv::PagedView<T> operator()(const barato::batch::SeqChunk& c, std::size_t layer) const {
    return pool->view(c.seq, layer);
  }
  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return pool->n_kv_heads(); }
  [[nodiscard]] std::size_t head_dim() const noexcept { return pool->head_dim(); }
  [[nodiscard]] std::size_t n_layers() const noexcept { return pool->n_layers(); }
  /// Positions stored for the chunk's sequence (every layer; `shape_error` if the layers differ).
  [[nodiscard]] std::size_t size(const barato::batch::SeqChunk& c) const {
    const std::size_t n = pool->size(c.seq, 0);
    for (std::size_t l = 1; l < pool->n_layers(); ++l)
      barato::require(pool->size(c.seq, l) == n, "PoolCaches: sequence ", c.seq, " holds ", n, " positions in layer 0 and ",
                      pool->size(c.seq, l), " in layer ", l);
    return n;
  }
  /// Nothing to prepare: the scheduler admits and releases the pool's sequences.
  void begin(const barato::batch::SeqChunk&) const noexcept {}
  /// Before a step changes anything: `capacity_error` unless the pool has the free blocks every
  /// chunk's appends take (Σ blocks_to_grow: a block two chunks' sequences share counts for both,
  /// as in the scheduler's accounting), then room in each sequence's block table — so the appends
  /// of the step allocate nothing and cannot fail half-way.
  void reserve(std::span<const barato::batch::SeqChunk> chunks) const {
    std::size_t need = 0;
    for (const auto& c : chunks) need += pool->blocks_to_grow(c.seq, c.tokens.size());
    barato::require<barato::capacity_error>(need <= pool->free_blocks(), "PoolCaches: the step's ", chunks.size(),
                                            " chunks need ", need, " free blocks, the pool has ", pool->free_blocks(),
                                            " of ", pool->n_blocks());
    for (const auto& c : chunks) pool->reserve(c.seq, c.pos + c.tokens.size());
  }
  /// Rolls every layer of the chunk's sequence that holds more than n positions back to n.
  void rollback(const barato::batch::SeqChunk& c, std::size_t n) const {
    for (std::size_t l = 0; l < pool->n_layers(); ++l)
      if (pool->size(c.seq, l) > n) pool->truncate(c.seq, l, n);
  }
};

/// The caches of a step's sequences as one vector of per-layer caches per slot (slot = chunk.slot).
template <barato::kv::CachePolicy Cache>
struct SlotCaches {
  std::vector<std::vector<Cache>> slots;  ///< [slots][n_layers]

  [[nodiscard]] Cache& operator()(const barato::batch::SeqChunk& c, std::size_t layer) { return slots[c.slot][layer]; }
  [[nodiscard]] std::size_t n_kv_heads() const { return slots.at(0).at(0).n_kv_heads(); }
  [[nodiscard]] std::size_t head_dim() const { return slots.at(0).at(0).head_dim(); }
  [[nodiscard]] std::size_t n_layers() const { return slots.at(0).size(); }
  [[nodiscard]] std::size_t size(const barato::batch::SeqChunk& c) const {
    barato::require(c.slot < slots.size(), "SlotCaches: slot ", c.slot, " out of range (", slots.size(), " slots)");
    return slots[c.slot].front().size();
  }
  /// A chunk at position 0 is a new request in its slot: the slot's caches start empty.
  void begin(const barato::batch::SeqChunk& c) {
    if (c.pos == 0) rollback(c, 0);
  }
  /// Rolls every layer of the slot that holds more than n positions back to n.
  void rollback(const barato::batch::SeqChunk& c, std::size_t n) {
    for (auto& k : slots[c.slot])
      if (k.size() > n) k.truncate(n);
  }
};

/// Shared-prefix (cascade) attention for a step over a `kv::PagedPool<T>`: the step's decode
/// sequences whose block tables start with the same physical pages (forks, prefix hits) are grouped
/// per layer (`attention::group_shared_prefixes`) and each group runs one `attention::decode_cascade`
/// — the shared pages read once for all of them —, the other segments plain `attend`. Results equal
/// per-sequence attention within `attention::kCascadeRelTol` · max |v| (not bitwise: opt-in).
/// Scratch for `max_chunks` sequences is allocated at construction.
template <barato::kv::PageFormat T>
class CascadeAttention {
 public:
  CascadeAttention(const barato::kv::PagedPool<T>& pool, const barato::attention::Heads& heads, std::size_t max_chunks,
                   std::pmr::memory_resource* mr)
      : pool_(&pool), ws_(heads, max_chunks, mr), ids_(max_chunks, mr), seg_(max_chunks, mr), rest_(max_chunks, mr),
        groups_(max_chunks, mr), q_(max_chunks * heads.q_dim(), mr), o_(max_chunks * heads.q_dim(), mr) {}

  /// The plan of the step about to run (segment i ↔ chunks[i]).
  void bind(std::span<const barato::batch::SeqChunk> chunks) noexcept { chunks_ = chunks; }
  /// Decode sequences attended through a cascade so far (all layers).
  [[nodiscard]] std::size_t cascaded() const noexcept { return cascaded_; }

  template <class CacheOf>
  void operator()(std::size_t l, std::span<const barato::batch::Segment> segs, CacheOf& cache_of, std::span<const float> q,
                  std::span<float> att, int threads, const barato::attention::Heads& heads) {
    const std::size_t qd = heads.q_dim();
    std::size_t n = 0, rest = 0;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      if (segs[i].rows == 1 && chunks_[i].decode) ids_[n++] = chunks_[i].seq;
      else rest_[rest++] = i;
    }
    const std::span<barato::kv::SeqId> ids(ids_.data(), n);
    const std::size_t ng = n >= 2 ? barato::attention::group_shared_prefixes(*pool_, ids, l, groups_.span()) : 0;
    auto segment_of = [&](barato::kv::SeqId s) {
      for (std::size_t i = 0; i < segs.size(); ++i)
        if (chunks_[i].seq == s && segs[i].rows == 1) return i;
      return segs.size();
    };
    std::size_t next = 0;  // ids before a group (or after the last) take plain attend
    auto plain = [&](std::size_t a, std::size_t b) {
      for (std::size_t j = a; j < b; ++j) rest_[rest++] = segment_of(ids[j]);
    };
    for (std::size_t g = 0; g < ng; ++g) {
      const auto& gr = groups_[g];
      plain(next, gr.begin);
      next = gr.end;
      const std::size_t S = gr.end - gr.begin;
      for (std::size_t j = 0; j < S; ++j) {
        seg_[j] = segment_of(ids[gr.begin + j]);
        std::copy_n(q.data() + segs[seg_[j]].row0 * qd, qd, q_.data() + j * qd);
      }
      barato::attention::decode_cascade(std::span<const float>(q_.data(), S * qd), *pool_,
                                        std::span<const barato::kv::SeqId>(ids.subspan(gr.begin, S)), l, heads,
                                        std::span<float>(o_.data(), S * qd), ws_, {.threads = threads});
      for (std::size_t j = 0; j < S; ++j) std::copy_n(o_.data() + j * qd, qd, att.data() + segs[seg_[j]].row0 * qd);
      cascaded_ += S;
    }
    plain(next, n);
    detail::attend_segments(l, segs, cache_of, q, att, threads, heads, 0, rest, rest_.data());
  }

 private:
  const barato::kv::PagedPool<T>* pool_;
  barato::attention::CascadeWorkspace ws_;
  barato::Buffer<barato::kv::SeqId> ids_;                  // [max_chunks] the step's decode sequences
  barato::Buffer<std::size_t> seg_;                        // [max_chunks] segment of each sequence of a group
  barato::Buffer<std::size_t> rest_;                       // [max_chunks] segments attended plainly
  barato::Buffer<barato::attention::PrefixGroup> groups_;  // [max_chunks]
  barato::Buffer<float> q_;                                // [max_chunks, q_dim] a group's queries
  barato::Buffer<float> o_;                                // [max_chunks, q_dim] a group's outputs
  std::span<const barato::batch::SeqChunk> chunks_;
  std::size_t cascaded_ = 0;
};

/// Options of a `BatchedLlama` (designated initialisers).
struct BatchedLlamaOptions {
  int threads = 1;                ///< threads for the products and attention (results identical for any count)
  std::size_t max_tokens = 256;   ///< tokens per step (decodes + prefill chunks): the activation buffers' rows
  std::size_t max_chunks = 64;    ///< sequences per step
  std::size_t max_positions = 0;  ///< RoPE table size; 0 = config.seq_len
  bool cascade = false;           ///< shared-prefix attention for decodes sharing pages (PoolCaches only;
                                  ///< within attention::kCascadeRelTol of plain attention, not bitwise)
  std::pmr::memory_resource* mr = std::pmr::get_default_resource();  ///< activation buffers + RoPE table
};

namespace detail {
template <class Caches>
struct PoolOf {
  using type = void;
};
template <barato::kv::PageFormat T>
struct PoolOf<PoolCaches<T>> {
  using type = T;
};
}  // namespace detail

/// The Llama decoder over batched steps: a `StepPlan` in, next-token logits of the chunks that want
/// them out. The weights and the caches' storage (the pool) are not owned and must outlive the model.
template <class Caches, barato::nn::LinearLayer Linear = barato::nn::DenseLinear>
class BatchedLlama {
 public:
  using linear_type = Linear;

  /// Binds `weights` and the caches. Throws `shape_error` when the caches' heads or layers differ
  /// from the config or a size option is 0.
  BatchedLlama(const LlamaWeights<Linear>& weights, Caches caches, const BatchedLlamaOptions& opt = {})
      : caches_(std::move(caches)), opt_(opt), cfg_(weights.config), batch_(opt.max_tokens, opt.max_chunks, opt.mr),
        stack_(checked(weights), opt.max_tokens, opt.max_positions, opt.mr) {
    barato::require(caches_.n_layers() == cfg_.n_layers && caches_.n_kv_heads() == cfg_.n_kv_heads &&
                        caches_.head_dim() == cfg_.head_dim,
                    "BatchedLlama: caches of ", caches_.n_layers(), " layers × ", caches_.n_kv_heads(), " heads of ",
                    caches_.head_dim(), ", expected ", cfg_.n_layers, " × ", cfg_.n_kv_heads, " of ", cfg_.head_dim);
    if constexpr (kPaged) {
      if (opt_.cascade) cascade_.emplace(*caches_.pool, cfg_.heads(), opt_.max_chunks, opt_.mr);
    } else {
      barato::require<barato::value_error>(!opt_.cascade, "BatchedLlama: cascade attention needs a paged pool (PoolCaches)");
    }
    barato::warm_threads(opt_.threads);
  }

  [[nodiscard]] const LlamaConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return cfg_.vocab_size; }
  /// Decode sequence-layers attended through a cascade so far (0 without the cascade option).
  [[nodiscard]] std::size_t cascaded() const noexcept {
    if constexpr (kPaged) return cascade_ ? cascade_->cascaded() : 0;
    else return 0;
  }
  [[nodiscard]] std::size_t max_tokens() const noexcept { return batch_.max_tokens(); }
  [[nodiscard]] std::size_t max_chunks() const noexcept { return batch_.max_chunks(); }
  /// Largest position + 1 a sequence may reach (the RoPE table).
  [[nodiscard]] std::size_t max_positions() const noexcept { return stack_.max_positions(); }
  [[nodiscard]] Caches& caches() noexcept { return caches_; }
  [[nodiscard]] const Caches& caches() const noexcept { return caches_; }
  [[nodiscard]] int threads() const noexcept { return opt_.threads; }
  void set_threads(int t) {
    opt_.threads = t;
    barato::warm_threads(t);
  }

  /// Runs the step: every chunk's tokens at positions chunk.pos … of its sequence (whose caches must
  /// hold exactly chunk.pos positions), appending their K/V; writes logits [plan.logits_rows, vocab]
  /// (row i: after the last token of the i-th chunk with wants_logits). Throws `shape_error` (wrong
  /// logits size, a cache not at chunk.pos), `value_error` (token id outside the vocabulary),
  /// `capacity_error` (more tokens / chunks than the model was built for, a position past
  /// max_positions(), a full pool); in every case each cache is rolled back to its length on entry.
  /// Over a pool (PoolCaches) the step is strong, allocation failures included: the free blocks
  /// are checked and the block tables' room reserved before the first append, so a failure leaves
  /// every sequence's table, every block's count and the free list as they were. Over slot caches,
  /// sizes and contents are restored; a kv::Growable may keep chunks it grew.
  void step(const barato::batch::StepPlan& plan, std::span<float> logits) {
    const std::size_t vocab = cfg_.vocab_size;
    std::size_t want = 0;
    for (const auto& c : plan.chunks) want += c.wants_logits ? 1 : 0;
    barato::require(logits.size() == want * vocab, "BatchedLlama::step: logits has ", logits.size(),
                    " floats, expected ", want, " rows × vocab ", vocab);
    if (plan.chunks.empty()) return;
    batch_.assign(plan);  // capacity checks, nothing changed on failure
    for (const auto& c : plan.chunks) {
      for (const Token t : c.tokens)
        barato::require<barato::value_error>(t >= 0 && static_cast<std::size_t>(t) < vocab, "BatchedLlama::step: token id ", t,
                                             " of request ", c.request, " outside [0, ", vocab, ")");
      barato::require<barato::capacity_error>(c.pos + c.tokens.size() <= max_positions(), "BatchedLlama::step: request ",
                                              c.request, " reaches position ", c.pos + c.tokens.size(), ", max ",
                                              max_positions());
    }
    if constexpr (requires { caches_.reserve(plan.chunks); }) caches_.reserve(plan.chunks);  // nothing changed yet
    std::size_t begun = 0;
    try {
      for (; begun < plan.chunks.size(); ++begun) {
        const auto& c = plan.chunks[begun];
        caches_.begin(c);
        const std::size_t have = caches_.size(c);
        barato::require(have == c.pos, "BatchedLlama::step: request ", c.request, " has ", have,
                        " positions in its cache, the plan says ", c.pos);
      }
      auto cache_of = [&](std::size_t i, std::size_t l) -> decltype(auto) { return caches_(plan.chunks[i], l); };
      if constexpr (kPaged) {
        if (cascade_) {
          cascade_->bind(plan.chunks);
          stack_.run(batch_.tokens(), batch_.segments(), cache_of, opt_.threads, {}, *cascade_);
        } else {
          stack_.run(batch_.tokens(), batch_.segments(), cache_of, opt_.threads);
        }
      } else {
        stack_.run(batch_.tokens(), batch_.segments(), cache_of, opt_.threads);
      }
      stack_.classify(batch_.logits_rows(), logits, opt_.threads);
    } catch (...) {
      for (std::size_t i = 0; i < begun && i < plan.chunks.size(); ++i) caches_.rollback(plan.chunks[i], plan.chunks[i].pos);
      throw;
    }
  }

  /// `step`, timed: returns the step's wall-clock seconds (the executor interface of batch::run).
  double run(const barato::batch::StepPlan& plan, std::span<float> logits) {
    const auto t0 = std::chrono::steady_clock::now();
    step(plan, logits);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  static const LlamaWeights<Linear>& checked(const LlamaWeights<Linear>& w) {
    detail::check_weights(w);
    return w;
  }

  using PageType = typename detail::PoolOf<Caches>::type;
  static constexpr bool kPaged = !std::is_void_v<PageType>;
  struct NoCascade {};
  using CascadeType = std::conditional_t<kPaged, std::optional<CascadeAttention<std::conditional_t<kPaged, PageType, float>>>, NoCascade>;

  Caches caches_;
  BatchedLlamaOptions opt_;
  LlamaConfig cfg_;
  barato::batch::TokenBatch batch_;
  detail::LlamaStack<Linear> stack_;
  CascadeType cascade_;
};

}  // namespace barato_examples
