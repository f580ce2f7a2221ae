#pragma once
/// \file
/// A Llama decoder written the way a user writes a decoder loop on top of barato: RMSNorm, RoPE
/// (`attention::RopeTable`), grouped-query attention through the `kv::CachePolicy` concept
/// (`attention::attend`), a SwiGLU FFN, a tied or untied classifier. The cache layout and the weight
/// format are template parameters, so swapping either is one `using` line. The config lives in
/// models/llama_config.hpp, the weights and their loaders in models/llama_weights.hpp.
///
/// ```cpp
/// auto weights = barato_examples::load_llama2c("stories260K.bin");
/// auto caches  = barato_examples::make_contiguous_caches(weights.config, 512);
/// barato_examples::Llama<barato::kv::Contiguous<float>> model(weights, std::move(caches), {.threads = 1});
/// std::vector<float> logits(model.vocab_size());
/// model.forward_last(prompt_ids, logits);   // prefill: the prompt as one block of tokens
/// model.forward_last({&next, 1}, logits);   // decode: one token against the cache
/// ```
///
/// One forward pass over n tokens at positions p … p+n−1 (n = 1 is a decode step, the same code):
///   x = embedding rows
///   per layer: xn = RMSNorm(x); q,k,v = Wq/Wk/Wv xn (one matrix–matrix product for the block);
///              RoPE(q, k); cache.append(k, v); att = causal attention(q, cache); x += Wo att;
///              xn = RMSNorm(x); x += W2 (silu(W1 xn) ⊙ W3 xn)
///   logits = classifier(RMSNorm(x))
/// Blocks longer than the chunk size given at construction are processed chunk by chunk. Every
/// activation buffer is allocated at construction, so a forward pass allocates nothing.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <memory_resource>
#include <span>
#include <utility>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/rope.hpp"
#include "barato/batch/token_batch.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/nn/dense.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/nn/residual.hpp"
#include "barato/nn/rmsnorm.hpp"
#include "barato/nn/swiglu.hpp"
#include "barato/spec/step_model.hpp"
#include "models/llama_config.hpp"
#include "models/llama_weights.hpp"

namespace barato_examples {

using barato::Token;

/// One `kv::Contiguous<T>` per layer with room for `capacity` positions, from `mr`.
template <barato::Element T = float>
[[nodiscard]] std::vector<barato::kv::Contiguous<T>> make_contiguous_caches(
    const LlamaConfig& config, std::size_t capacity, std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  config.validate();
  std::vector<barato::kv::Contiguous<T>> caches;
  caches.reserve(config.n_layers);
  for (std::size_t i = 0; i < config.n_layers; ++i) caches.emplace_back(config.n_kv_heads, config.head_dim, capacity, mr);
  return caches;
}

/// Options of a `Llama` instance (designated initialisers).
struct LlamaOptions {
  int threads = 1;               ///< threads for matrix products and attention (a ceiling: each takes what its work repays)
  std::size_t max_chunk = 128;   ///< tokens per prefill chunk (activation buffers are sized for it); lowered
                                 ///< to the caches' max_append() when they report one (kv/cache_policy.hpp)
  std::size_t max_positions = 0; ///< RoPE table size; 0 = config.seq_len
  std::pmr::memory_resource* mr = std::pmr::get_default_resource();  ///< activation buffers + RoPE table
};

/// Called after each layer with the residual stream h ([n, dim] for the n tokens of the current chunk).
using ResidualObserver = std::function<void(std::size_t layer, std::span<const float> h)>;

namespace detail {

/// `attend` for segments [first, last) of `segs` (segments only[first] … only[last − 1] when `only`
/// is given), the threads shared out by work, counted in causal keys (`attention::causal_keys`): a
/// segment with at least 1/threads of the keys whose queries `attend` splits (`attention::query_parts`:
/// a long prefill chunk) runs alone on all the threads; the others go to the threads in contiguous runs
/// of about equal keys, one thread per segment. (Split by count, a step's prefill chunk and the decodes
/// beside it landed on one thread while the other idled.) Each segment's `attend` gives the same bits
/// for any thread count, so the split never changes a result.
template <class CacheOf>
void attend_segments(std::size_t l, std::span<const barato::batch::Segment> segs, CacheOf& cache_of,
                     std::span<const float> q, std::span<float> att, int threads, const barato::attention::Heads& heads,
                     std::size_t first, std::size_t last, const std::size_t* only = nullptr) {
  const std::size_t qd = heads.q_dim();
  auto index = [&](std::size_t j) { return only != nullptr ? only[j] : j; };  // the j-th segment attended
  auto seg = [&](std::size_t j) -> const barato::batch::Segment& { return segs[index(j)]; };
  auto one = [&](std::size_t j, int t) {
    const barato::batch::Segment& s = seg(j);
    barato::attention::attend(q.subspan(s.row0 * qd, s.rows * qd), cache_of(index(j), l), heads,
                              att.subspan(s.row0 * qd, s.rows * qd), {.threads = t});
  };
  if (last - first == 1 || threads <= 1) {
    for (std::size_t j = first; j < last; ++j) one(j, threads);
    return;
  }
  auto keys = [&](std::size_t j) { return barato::attention::causal_keys(seg(j).pos, seg(j).rows); };
  const auto T = static_cast<std::size_t>(threads);
  std::size_t total = 0;
  for (std::size_t j = first; j < last; ++j) total += keys(j);
  auto alone = [&](std::size_t j) {
    return keys(j) * T >= total && barato::attention::query_parts(seg(j).rows, heads.n_q, threads) > 1;
  };
  std::size_t shared = 0;  // keys of the segments the threads share out
  for (std::size_t j = first; j < last; ++j) {
    if (alone(j)) one(j, threads);
    else shared += keys(j);
  }
  if (shared == 0) return;
  barato::parallel_for(T, threads, [&](std::size_t lo, std::size_t hi) {
    // part p runs the shared segments whose middle key falls in [p, p + 1) · shared / T
    std::size_t before = 0;
    for (std::size_t j = first; j < last; ++j) {
      if (alone(j)) continue;
      const std::size_t w = keys(j);
      const std::size_t p = std::min(T - 1, (2 * before + w) * T / (2 * shared));
      before += w;
      if (p >= lo && p < hi) one(j, 1);
    }
  });
}

/// How a layer's attention runs over the segments once their K/V are appended: `attend` per segment
/// over its own cache — the threads shared out by work (`attend_segments`: a long prefill chunk on all
/// of them, over its queries; the other segments one thread each), or within the one segment
/// (`attention::attend`: over its queries, or over KV heads for a few queries); the same results
/// either way. `BatchedLlama`'s cascade option replaces it
/// (models/llama_batch.hpp) with shared-prefix attention for decodes that share pages.
struct SegmentAttention {
  template <class CacheOf>
  void operator()(std::size_t l, std::span<const barato::batch::Segment> segs, CacheOf& cache_of, std::span<const float> q,
                  std::span<float> att, int threads, const barato::attention::Heads& heads) const {
    attend_segments(l, segs, cache_of, q, att, threads, heads, 0, segs.size());
  }
};

/// The decoder's arithmetic over a block of token rows that belong to one or more sequences: the
/// weights, the RoPE table and the activation buffers ([max_rows, ·], allocated at construction).
/// `Llama` runs it with one segment (its own sequence); `BatchedLlama` (models/llama_batch.hpp) with one
/// segment per sequence of a step. Every per-row operation (embedding, RMSNorm, the projections —
/// batch-invariant by the LinearLayer contract —, SwiGLU, residual adds) and every per-segment one
/// (RoPE at the segment's positions, append, attention over the segment's own cache) is the same code
/// whichever other rows share the block, so a sequence's results do not depend on its batch.
template <barato::nn::LinearLayer Linear>
class LlamaStack {
 public:
  /// Attention multiply-adds (q·k and p·v over the keys each query sees) a thread must get before a
  /// step's attention takes it: two threads repaid their fork and join from about 2^18 per thread
  /// (attention alone, one vs two threads, default OpenMP waits, Zen 5 host 2026-12-06: stories260K's
  /// 8 × 8-float heads at 64 queries 0.79×, 32 queries 1.09×; 14 × 64 at 32 queries 0.76×, 16 queries
  /// 1.00×; a 14 × 64 decode over 512 positions 0.88×, over 64 1.6×).
  static constexpr std::size_t kMinAttentionWork = std::size_t{1} << 18;
  /// The same when the threads sleep between loops (`barato::passive_waits()`, OMP_WAIT_POLICY=passive):
  /// each fork wakes them (20–60 µs), and stories260K's 128-token prefill, whose only splits are its
  /// five layers' attention, ran on two threads in 1.06–1.12 of one thread's time with kMinAttentionWork,
  /// 0.99–1.01 with 8× it (alternating runs, Zen 5 host 2026-12-06). The products keep their minimums:
  /// the 0.5B shape's splits still repay a passive fork (prefill 0.54–0.84, decode 0.59–0.82 of one
  /// thread's time), and 8× theirs kept its 896 × 896 decode products on one thread.
  static constexpr std::size_t kMinAttentionWorkPassive = kMinAttentionWork * 8;

  LlamaStack(const LlamaWeights<Linear>& w, std::size_t max_rows, std::size_t max_positions, std::pmr::memory_resource* mr)
      : w_(&w), cfg_(w.config), rows_(std::max<std::size_t>(max_rows, 1)),
        rope_(cfg_.head_dim, max_positions != 0 ? max_positions : cfg_.seq_len,
              barato::attention::RopeConfig{cfg_.rope_base, cfg_.rope_style, 0}, mr),
        x_(rows_ * cfg_.dim, mr), xn_(rows_ * cfg_.dim, mr), q_(rows_ * cfg_.q_dim(), mr), k_(rows_ * cfg_.kv_dim(), mr),
        v_(rows_ * cfg_.kv_dim(), mr), att_(rows_ * cfg_.q_dim(), mr), o_(rows_ * cfg_.dim, mr),
        h1_(rows_ * cfg_.hidden_dim, mr), h3_(rows_ * cfg_.hidden_dim, mr) {
    // Quantized layers keep their prepared activations in a per-thread arena (quant/scratch.hpp): grow
    // it here, on the constructing thread, for a full block of rows, so that no step allocates.
    if constexpr (requires(const Linear& m) { m.reserve(std::size_t{1}); }) {
      for (const auto& l : w.layers)
        for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) m->reserve(rows_);
      w.classifier.reserve(rows_);
    }
  }

  [[nodiscard]] const LlamaConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] const LlamaWeights<Linear>& weights() const noexcept { return *w_; }
  [[nodiscard]] std::size_t max_rows() const noexcept { return rows_; }
  [[nodiscard]] std::size_t max_positions() const noexcept { return rope_.max_pos(); }

  /// Embeds `tokens` (≤ max_rows; ids checked by the caller) and runs every layer. `segs` partition the
  /// rows: segment s is rows [s.row0, s.row0 + s.rows) at positions s.pos …, and
  /// `cache_of(segment_index, layer)` returns that segment's cache for the layer (a kv::CachePolicy
  /// reference or value). Leaves the residual stream in rows [0, n) of x. `observer` (may be empty)
  /// sees the stream after each layer. `threads`: matrix products over all rows; attention over
  /// segments when there are several (one thread each), else within the segment — same results either way.
  template <class CacheOf, class Attention = SegmentAttention>
  void run(std::span<const Token> tokens, std::span<const barato::batch::Segment> segs, CacheOf&& cache_of, int threads,
           const ResidualObserver& observer = {}, Attention&& attention = {}) {
    const std::size_t m = tokens.size(), d = cfg_.dim;
    const Activations a = activations(m);
    for (std::size_t t = 0; t < m; ++t)
      std::ranges::copy(w_->token_embedding.row(static_cast<std::size_t>(tokens[t]), d), a.x.subspan(t * d, d).begin());
    for (std::size_t l = 0; l < cfg_.n_layers; ++l) {
      layer(w_->layers[l], l, a, segs, cache_of, threads, attention);
      if (observer) observer(l, a.x);
    }
  }

  /// logits [k, vocab] = classifier(RMSNorm(x rows `rows`)) for k = rows.size() rows of the stream.
  void classify(std::span<const std::size_t> rows, std::span<float> logits, int threads) {
    const std::size_t d = cfg_.dim, k = rows.size();
    const std::span<float> xn = xn_.rows(k, d);
    for (std::size_t i = 0; i < k; ++i) barato::nn::rms_norm(x_.row(rows[i], d), w_->rms_final.span(), xn.subspan(i * d, d), cfg_.norm_eps);
    project(w_->classifier, xn, logits, threads);
  }
  /// The same for the consecutive rows [r0, r0 + k).
  void classify_range(std::size_t r0, std::size_t k, std::span<float> logits, int threads) {
    const std::size_t d = cfg_.dim;
    const std::span<float> xn = xn_.rows(k, d);
    barato::nn::rms_norm(x_.span().subspan(r0 * d, k * d), w_->rms_final.span(), xn, cfg_.norm_eps);
    project(w_->classifier, xn, logits, threads);
  }

 private:
  /// The activation buffers' first m rows (one row per token), as spans; shapes as the members below.
  struct Activations {
    std::span<float> x, xn, q, k, v, att, o, h1, h3;
  };
  [[nodiscard]] Activations activations(std::size_t m) noexcept {
    const std::size_t d = cfg_.dim, qd = cfg_.q_dim(), kd = cfg_.kv_dim(), hd = cfg_.hidden_dim;
    return {.x = x_.rows(m, d), .xn = xn_.rows(m, d), .q = q_.rows(m, qd), .k = k_.rows(m, kd), .v = v_.rows(m, kd),
            .att = att_.rows(m, qd), .o = o_.rows(m, d), .h1 = h1_.rows(m, hd), .h3 = h3_.rows(m, hd)};
  }

  /// One decoder layer over the rows of `a`: projections over all rows at once, then RoPE, append and
  /// attention per segment, then the rest over all rows.
  template <class CacheOf, class Attention>
  void layer(const LlamaLayerWeights<Linear>& w, std::size_t l, const Activations& a,
             std::span<const barato::batch::Segment> segs, CacheOf& cache_of, int threads, Attention& attention) {
    namespace nn = barato::nn;
    const std::size_t qd = cfg_.q_dim(), kd = cfg_.kv_dim();
    // Attention block: xn = RMSNorm(x); q, k, v; per segment: RoPE, append, attend; x += Wo·att.
    nn::rms_norm(a.x, w.rms_att.span(), a.xn, cfg_.norm_eps);
    project(w.wq, a.xn, a.q, threads);
    project(w.wk, a.xn, a.k, threads);
    project(w.wv, a.xn, a.v, threads);
    // per segment: RoPE at its own positions and the append to its own cache (serial: a paged pool's
    // appends are not thread-safe), then attention over its own cache
    for (std::size_t i = 0; i < segs.size(); ++i) {
      const barato::batch::Segment& s = segs[i];
      const auto q = a.q.subspan(s.row0 * qd, s.rows * qd), k = a.k.subspan(s.row0 * kd, s.rows * kd);
      rope_.apply(q, k, cfg_.heads(), s.pos);
      cache_of(i, l).append(k, a.v.subspan(s.row0 * kd, s.rows * kd));
    }
    // threads only where the work pays for them (a decode over a short cache is a few µs: waking a
    // second thread costs about as much), so two threads are never slower than one
    std::size_t work = 0;  // multiply-adds of the step's attention (q·k and p·v over the visible keys)
    for (const auto& s : segs) work += 2 * qd * barato::attention::causal_keys(s.pos, s.rows);
    const int useful =
        barato::threads_for(work, barato::passive_waits() ? kMinAttentionWorkPassive : kMinAttentionWork, threads);
    attention(l, segs, cache_of, a.q, a.att, useful, cfg_.heads());
    project(w.wo, a.att, a.o, threads);
    nn::add_inplace(a.x, a.o);
    // FFN block: xn = RMSNorm(x); x += W2 (silu(W1 xn) ⊙ W3 xn).
    nn::rms_norm(a.x, w.rms_ffn.span(), a.xn, cfg_.norm_eps);
    project(w.w1, a.xn, a.h1, threads);
    project(w.w3, a.xn, a.h3, threads);
    nn::swiglu(a.h1, a.h3);
    project(w.w2, a.h1, a.o, threads);
    nn::add_inplace(a.x, a.o);
  }

  /// y [m, rows] = x [m, cols] · Wᵀ: one product for the m rows (m = 1 is the GEMV, bitwise).
  static void project(const Linear& w, std::span<const float> x, std::span<float> y, int threads) {
    w.apply_batch(x, y, x.size() / w.cols(), threads);
  }

  const LlamaWeights<Linear>* w_;
  LlamaConfig cfg_;
  std::size_t rows_;
  barato::attention::RopeTable rope_;  // cos/sin [max_positions, head_dim/2]
  barato::Buffer<float> x_;    // [rows, dim] residual stream
  barato::Buffer<float> xn_;   // [rows, dim] normalised
  barato::Buffer<float> q_;    // [rows, n_heads, head_dim]
  barato::Buffer<float> k_;    // [rows, n_kv_heads, head_dim]
  barato::Buffer<float> v_;    // [rows, n_kv_heads, head_dim]
  barato::Buffer<float> att_;  // [rows, n_heads, head_dim]
  barato::Buffer<float> o_;    // [rows, dim]
  barato::Buffer<float> h1_;   // [rows, hidden_dim] gate, then silu(gate) ⊙ up
  barato::Buffer<float> h3_;   // [rows, hidden_dim] up
};

}  // namespace detail

/// A Llama decoder bound to one sequence and its per-layer caches. Satisfies `spec::StepModel`.
/// The weights are not owned (or shared through a shared_ptr); they must outlive the model.
template <barato::kv::CachePolicy Cache, barato::nn::LinearLayer Linear = barato::nn::DenseLinear>
class Llama {
 public:
  using cache_type = Cache;
  using linear_type = Linear;

  /// Binds `weights` and one cache per layer (all empty or all of the same size; `n_kv_heads` ×
  /// `head_dim` as in the config). Throws `barato::shape_error` on any mismatch.
  Llama(const LlamaWeights<Linear>& weights, std::vector<Cache> caches, const LlamaOptions& opt = {})
      : caches_(std::move(caches)), opt_(opt), cfg_(weights.config), chunk_(chunk_for(opt.max_chunk, caches_)),
        stack_(checked(weights), chunk_, opt.max_positions, opt.mr) {
    barato::require(caches_.size() == cfg_.n_layers, "Llama: ", caches_.size(), " caches, expected one per layer (",
                    cfg_.n_layers, ")");
    for (std::size_t i = 0; i < caches_.size(); ++i) {
      barato::require(caches_[i].n_kv_heads() == cfg_.n_kv_heads && caches_[i].head_dim() == cfg_.head_dim, "Llama: cache ",
                      i, " holds ", caches_[i].n_kv_heads(), " heads of ", caches_[i].head_dim(), ", expected ",
                      cfg_.n_kv_heads, " of ", cfg_.head_dim);
      barato::require(caches_[i].size() == caches_[0].size(), "Llama: caches hold different numbers of positions");
    }
    barato::warm_threads(opt_.threads);  // the first request is not charged the thread team's start-up
  }
  /// Same, sharing ownership of the weights.
  Llama(std::shared_ptr<const LlamaWeights<Linear>> weights, std::vector<Cache> caches, const LlamaOptions& opt = {})
      : Llama(*weights, std::move(caches), opt) {
    owner_ = std::move(weights);
  }

  Llama(Llama&&) noexcept = default;
  Llama& operator=(Llama&&) noexcept = default;

  [[nodiscard]] const LlamaConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] const LlamaWeights<Linear>& weights() const noexcept { return stack_.weights(); }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return cfg_.vocab_size; }
  /// Positions processed so far (the caches' length).
  [[nodiscard]] std::size_t size() const noexcept { return caches_.front().size(); }
  /// Largest size(): the RoPE table, and the caches' capacity when the policy reports one.
  [[nodiscard]] std::size_t capacity() const noexcept {
    std::size_t c = stack_.max_positions();
    if constexpr (requires(const Cache& k) { { k.capacity() } -> std::convertible_to<std::size_t>; })
      for (const auto& k : caches_) c = std::min<std::size_t>(c, k.capacity());
    return c;
  }
  /// The per-layer caches.
  [[nodiscard]] std::span<const Cache> caches() const noexcept { return caches_; }
  [[nodiscard]] std::span<Cache> caches() noexcept { return caches_; }
  /// Sum of the caches' reserved bytes.
  [[nodiscard]] std::size_t kv_bytes_reserved() const noexcept {
    std::size_t b = 0;
    for (const auto& k : caches_) b += k.bytes_reserved();
    return b;
  }
  [[nodiscard]] std::size_t max_chunk() const noexcept { return chunk_; }
  [[nodiscard]] int threads() const noexcept { return opt_.threads; }
  void set_threads(int threads) {
    opt_.threads = threads;
    barato::warm_threads(threads);
  }

  /// Installs (or, with an empty function, removes) the residual-stream observer.
  void set_observer(ResidualObserver f) { observer_ = std::move(f); }

  /// Runs `tokens` at positions size() … size()+n−1, appends their K/V and writes logits
  /// [n, vocab] (row i = next-token logits after tokens[i]). Throws `capacity_error` past
  /// capacity() or past the free blocks of a paged pool, `value_error` for ids outside the
  /// vocabulary, `shape_error` for a wrong logits size; in every case the model is unchanged. Strong
  /// guarantee also when an allocation fails (the caches' room is reserved before the first append);
  /// the one trace a failure can leave is reserved room (a kv::Growable's extra chunks, a block
  /// table's capacity), never stored positions, block references or the pool's free list.
  void forward(std::span<const Token> tokens, std::span<float> logits) {
    const std::size_t n = tokens.size(), vocab = cfg_.vocab_size;
    barato::require(logits.size() == n * vocab, "Llama::forward: logits has ", logits.size(),
                    " floats, expected n*vocab = ", n, "*", vocab);
    rolled_back_on_error(tokens, [&] {
      for (std::size_t t0 = 0; t0 < n; t0 += chunk_) {
        const std::size_t m = std::min(chunk_, n - t0);
        layers(tokens.subspan(t0, m));
        stack_.classify_range(0, m, logits.subspan(t0 * vocab, m * vocab), opt_.threads);
      }
    });
  }

  /// Like `forward` but computes only the logits of the last token ([vocab]): a prefill that
  /// skips n−1 classifier rows, or a decode step.
  void forward_last(std::span<const Token> tokens, std::span<float> logits_last) {
    barato::require(logits_last.size() == cfg_.vocab_size, "Llama::forward_last: logits has ", logits_last.size(),
                    " floats, expected vocab = ", cfg_.vocab_size);
    const std::size_t n = tokens.size();
    rolled_back_on_error(tokens, [&] {
      std::size_t m = 0;  // tokens in the chunk just run
      for (std::size_t t0 = 0; t0 < n; t0 += m) {
        m = std::min(chunk_, n - t0);
        layers(tokens.subspan(t0, m));
      }
      stack_.classify_range(m - 1, 1, logits_last, opt_.threads);  // the last token of the last chunk
    });
  }

  /// Rolls every cache back to the first n positions (n ≤ size()).
  void truncate(std::size_t n) {
    barato::require(n <= size(), "Llama::truncate: n = ", n, " exceeds size ", size());
    for (auto& c : caches_) c.truncate(n);
  }
  /// Empties the caches.
  void reset() {
    for (auto& c : caches_) c.truncate(0);
  }

 private:
  static const LlamaWeights<Linear>& checked(const LlamaWeights<Linear>& w) {
    detail::check_weights(w);
    return w;
  }

  /// Runs tokens (m ≤ chunk) at positions size() … size()+m−1 through every layer: one segment.
  void layers(std::span<const Token> tokens) {
    const barato::batch::Segment seg{.chunk = 0, .row0 = 0, .rows = tokens.size(), .pos = size()};
    stack_.run(tokens, {&seg, 1}, [&](std::size_t, std::size_t l) -> Cache& { return caches_[l]; }, opt_.threads,
               observer_);
  }

  /// Validates `tokens` (n > 0, ids in the vocabulary, room up to capacity()), makes room in every
  /// cache that can `reserve` (a growable cache's chunks, a paged sequence's block table, checking
  /// first that the pool has the blocks), then runs `body`. On any exception the caches are rolled
  /// back to their size on entry. With every allocation made before the first append, the body
  /// throws only what a user observer throws; the sizes are then rolled back, but what truncation
  /// cannot undo stays (a kv::SlidingWindow's evicted positions, a paged copy-on-write copy).
  template <class Body>
  void rolled_back_on_error(std::span<const Token> tokens, Body&& body) {
    const std::size_t n = tokens.size(), p_start = size();
    barato::require(n > 0, "Llama::forward: no tokens (n = 0)");
    barato::require<barato::capacity_error>(p_start + n <= capacity(), "Llama::forward: ", n,
                                            " tokens do not fit: size ", p_start, ", capacity ", capacity());
    for (const Token t : tokens)
      barato::require<barato::value_error>(t >= 0 && static_cast<std::size_t>(t) < cfg_.vocab_size,
                                           "Llama::forward: token id ", t, " outside [0, ", cfg_.vocab_size, ")");
    if constexpr (requires(const Cache& k) { k.blocks_to_grow(n); k.free_blocks(); }) {
      // one pool sequence behind every layer's view: its blocks_to_grow counts every layer
      const std::size_t need = caches_.front().blocks_to_grow(n), free = caches_.front().free_blocks();
      barato::require<barato::capacity_error>(need <= free, "Llama::forward: ", n, " tokens need ", need,
                                              " free blocks of the pool, it has ", free);
    }
    if constexpr (requires(Cache& k) { k.reserve(n); })
      for (auto& c : caches_) c.reserve(p_start + n);  // each strong; a failure leaves only reserved room
    try {
      body();
    } catch (...) {
      for (auto& c : caches_)
        if (c.size() > p_start) c.truncate(p_start);
      throw;
    }
  }

  /// Tokens per chunk: `max_chunk` (≥ 1), at most what one append of the caches accepts when the policy
  /// limits it (kv::SlidingWindow keeps windows exact only for appends of ≤ its configured chunk).
  static std::size_t chunk_for(std::size_t max_chunk, const std::vector<Cache>& caches) {
    std::size_t c = std::max<std::size_t>(max_chunk, 1);
    if constexpr (requires(const Cache& k) { { k.max_append() } -> std::convertible_to<std::size_t>; })
      for (const auto& k : caches) c = std::min<std::size_t>(c, std::max<std::size_t>(k.max_append(), 1));
    return c;
  }

  std::shared_ptr<const LlamaWeights<Linear>> owner_;  // set when constructed from a shared_ptr
  std::vector<Cache> caches_;                          // [n_layers]
  LlamaOptions opt_;
  LlamaConfig cfg_;
  std::size_t chunk_;
  detail::LlamaStack<Linear> stack_;
  ResidualObserver observer_;
};

static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<float>>>);
static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<barato::f16>>>);

}  // namespace barato_examples
