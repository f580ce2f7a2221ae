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
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
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
  int threads = 1;               ///< threads for matrix products and attention (over KV heads)
  std::size_t max_chunk = 128;   ///< tokens per prefill chunk (activation buffers are sized for it); lowered
                                 ///< to the caches' max_append() when they report one (kv/cache_policy.hpp)
  std::size_t max_positions = 0; ///< RoPE table size; 0 = config.seq_len
  std::pmr::memory_resource* mr = std::pmr::get_default_resource();  ///< activation buffers + RoPE table
};

/// Called after each layer with the residual stream h ([n, dim] for the n tokens of the current chunk).
using ResidualObserver = std::function<void(std::size_t layer, std::span<const float> h)>;

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
      : w_(&weights), caches_(std::move(caches)), opt_(opt), cfg_(weights.config),
        rope_(cfg_.head_dim, opt.max_positions != 0 ? opt.max_positions : cfg_.seq_len,
              barato::attention::RopeConfig{cfg_.rope_base, cfg_.rope_style, 0}, opt.mr),
        chunk_(chunk_for(opt.max_chunk, caches_)),
        x_(chunk_ * cfg_.dim, opt.mr), xn_(chunk_ * cfg_.dim, opt.mr), q_(chunk_ * cfg_.q_dim(), opt.mr),
        k_(chunk_ * cfg_.kv_dim(), opt.mr), v_(chunk_ * cfg_.kv_dim(), opt.mr), att_(chunk_ * cfg_.q_dim(), opt.mr),
        o_(chunk_ * cfg_.dim, opt.mr), h1_(chunk_ * cfg_.hidden_dim, opt.mr), h3_(chunk_ * cfg_.hidden_dim, opt.mr) {
    detail::check_weights(weights);
    barato::require(caches_.size() == cfg_.n_layers, "Llama: ", caches_.size(), " caches, expected one per layer (",
                    cfg_.n_layers, ")");
    for (std::size_t i = 0; i < caches_.size(); ++i) {
      barato::require(caches_[i].n_kv_heads() == cfg_.n_kv_heads && caches_[i].head_dim() == cfg_.head_dim, "Llama: cache ",
                      i, " holds ", caches_[i].n_kv_heads(), " heads of ", caches_[i].head_dim(), ", expected ",
                      cfg_.n_kv_heads, " of ", cfg_.head_dim);
      barato::require(caches_[i].size() == caches_[0].size(), "Llama: caches hold different numbers of positions");
    }
    // Quantized layers keep their prepared activations in a per-thread arena (quant/scratch.hpp): grow
    // it here, on the constructing thread, for a full chunk, so that no step allocates.
    if constexpr (requires(const Linear& l) { l.reserve(std::size_t{1}); }) {
      for (const auto& l : weights.layers)
        for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) m->reserve(chunk_);
      weights.classifier.reserve(chunk_);
    }
  }
  /// Same, sharing ownership of the weights.
  Llama(std::shared_ptr<const LlamaWeights<Linear>> weights, std::vector<Cache> caches, const LlamaOptions& opt = {})
      : Llama(*weights, std::move(caches), opt) {
    owner_ = std::move(weights);
  }

  Llama(Llama&&) noexcept = default;
  Llama& operator=(Llama&&) noexcept = default;

  [[nodiscard]] const LlamaConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] const LlamaWeights<Linear>& weights() const noexcept { return *w_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return cfg_.vocab_size; }
  /// Positions processed so far (the caches' length).
  [[nodiscard]] std::size_t size() const noexcept { return caches_.front().size(); }
  /// Largest size(): the RoPE table, and the caches' capacity when the policy reports one.
  [[nodiscard]] std::size_t capacity() const noexcept {
    std::size_t c = rope_.max_pos();
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
  void set_threads(int threads) noexcept { opt_.threads = threads; }

  /// Installs (or, with an empty function, removes) the residual-stream observer.
  void set_observer(ResidualObserver f) { observer_ = std::move(f); }

  /// Runs `tokens` at positions size() … size()+n−1, appends their K/V and writes logits
  /// [n, vocab] (row i = next-token logits after tokens[i]). Throws `capacity_error` past
  /// capacity(), `value_error` for ids outside the vocabulary, `shape_error` for a wrong logits size;
  /// in every case the model is unchanged.
  void forward(std::span<const Token> tokens, std::span<float> logits) {
    const std::size_t n = tokens.size(), vocab = cfg_.vocab_size;
    barato::require(logits.size() == n * vocab, "Llama::forward: logits has ", logits.size(),
                    " floats, expected n*vocab = ", n, "*", vocab);
    rolled_back_on_error(tokens, [&] {
      for (std::size_t t0 = 0; t0 < n; t0 += chunk_) {
        const std::size_t m = std::min(chunk_, n - t0);
        layers(tokens.subspan(t0, m));
        classify(x_.rows(m, cfg_.dim), logits.subspan(t0 * vocab, m * vocab));
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
      classify(x_.row(m - 1, cfg_.dim), logits_last);  // the last token of the last chunk
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
  /// The activation buffers' first m rows (one row per token), as spans; shapes as the members below.
  struct Activations {
    std::span<float> x, xn, q, k, v, att, o, h1, h3;
  };

  /// Embeds tokens (m ≤ chunk) at positions size() … size()+m−1 and runs every layer, one call per
  /// layer; leaves the residual stream in x_ [m, dim].
  void layers(std::span<const Token> tokens) {
    const std::size_t m = tokens.size(), d = cfg_.dim, qd = cfg_.q_dim(), kd = cfg_.kv_dim(), hd = cfg_.hidden_dim;
    const std::size_t pos = size();
    const Activations a{.x = x_.rows(m, d), .xn = xn_.rows(m, d), .q = q_.rows(m, qd), .k = k_.rows(m, kd),
                        .v = v_.rows(m, kd), .att = att_.rows(m, qd), .o = o_.rows(m, d), .h1 = h1_.rows(m, hd),
                        .h3 = h3_.rows(m, hd)};
    for (std::size_t t = 0; t < m; ++t)
      std::ranges::copy(w_->token_embedding.row(static_cast<std::size_t>(tokens[t]), d), a.x.subspan(t * d, d).begin());
    for (std::size_t l = 0; l < cfg_.n_layers; ++l) {
      layer(w_->layers[l], caches_[l], a, pos);
      if (observer_) observer_(l, a.x);
    }
  }

  /// One decoder layer over the m tokens of `a` at positions pos … pos+m−1.
  void layer(const LlamaLayerWeights<Linear>& w, Cache& cache, const Activations& a, std::size_t pos) {
    namespace nn = barato::nn;
    // Attention block: xn = RMSNorm(x); q, k, v; RoPE; append; attend; x += Wo·att.
    nn::rms_norm(a.x, w.rms_att.span(), a.xn, cfg_.norm_eps);
    project(w.wq, a.xn, a.q);
    project(w.wk, a.xn, a.k);
    project(w.wv, a.xn, a.v);
    rope_.apply(a.q, a.k, cfg_.heads(), pos);
    cache.append(a.k, a.v);
    barato::attention::attend(a.q, cache, cfg_.heads(), a.att, {.threads = opt_.threads});
    project(w.wo, a.att, a.o);
    nn::add_inplace(a.x, a.o);
    // FFN block: xn = RMSNorm(x); x += W2 (silu(W1 xn) ⊙ W3 xn).
    nn::rms_norm(a.x, w.rms_ffn.span(), a.xn, cfg_.norm_eps);
    project(w.w1, a.xn, a.h1);
    project(w.w3, a.xn, a.h3);
    nn::swiglu(a.h1, a.h3);
    project(w.w2, a.h1, a.o);
    nn::add_inplace(a.x, a.o);
  }

  /// logits [k, vocab] = classifier(RMSNorm(x)) for the k rows of x ([k, dim], rows of x_).
  void classify(std::span<const float> x, std::span<float> logits) {
    const std::span<float> xn = xn_.rows(x.size() / cfg_.dim, cfg_.dim);
    barato::nn::rms_norm(x, w_->rms_final.span(), xn, cfg_.norm_eps);
    project(w_->classifier, xn, logits);
  }

  /// y [m, rows] = x [m, cols] · Wᵀ: one product for the m tokens (m = 1 is the GEMV, bitwise).
  void project(const Linear& w, std::span<const float> x, std::span<float> y) const {
    w.apply_batch(x, y, x.size() / w.cols(), opt_.threads);
  }

  /// Validates `tokens` (n > 0, ids in the vocabulary, room up to capacity()), then runs `body`. On
  /// any exception the caches are rolled back to their size on entry.
  template <class Body>
  void rolled_back_on_error(std::span<const Token> tokens, Body&& body) {
    const std::size_t n = tokens.size(), p_start = size();
    barato::require(n > 0, "Llama::forward: no tokens (n = 0)");
    barato::require<barato::capacity_error>(p_start + n <= capacity(), "Llama::forward: ", n,
                                            " tokens do not fit: size ", p_start, ", capacity ", capacity());
    for (const Token t : tokens)
      barato::require<barato::value_error>(t >= 0 && static_cast<std::size_t>(t) < cfg_.vocab_size,
                                           "Llama::forward: token id ", t, " outside [0, ", cfg_.vocab_size, ")");
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

  const LlamaWeights<Linear>* w_;
  std::shared_ptr<const LlamaWeights<Linear>> owner_;  // set when constructed from a shared_ptr
  std::vector<Cache> caches_;                          // [n_layers]
  LlamaOptions opt_;
  LlamaConfig cfg_;
  barato::attention::RopeTable rope_;  // cos/sin [max_positions, head_dim/2]
  std::size_t chunk_;
  barato::Buffer<float> x_;    // [chunk, dim] residual stream
  barato::Buffer<float> xn_;   // [chunk, dim] normalised
  barato::Buffer<float> q_;    // [chunk, n_heads, head_dim]
  barato::Buffer<float> k_;    // [chunk, n_kv_heads, head_dim]
  barato::Buffer<float> v_;    // [chunk, n_kv_heads, head_dim]
  barato::Buffer<float> att_;  // [chunk, n_heads, head_dim]
  barato::Buffer<float> o_;    // [chunk, dim]
  barato::Buffer<float> h1_;   // [chunk, hidden_dim] gate, then silu(gate) ⊙ up
  barato::Buffer<float> h3_;   // [chunk, hidden_dim] up
  ResidualObserver observer_;
};

static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<float>>>);
static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<barato::f16>>>);

}  // namespace barato_examples
