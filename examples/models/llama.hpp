#pragma once
/// \file
/// A Llama decoder written the way a user writes a decoder loop on top of barato: RMSNorm, RoPE
/// (`attention::RopeTable`), grouped-query attention through the `kv::CachePolicy` concept
/// (`attention::attend`), a SwiGLU FFN, a tied or untied classifier. The cache layout and the weight
/// format are template parameters, so swapping either is one `using` line:
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
/// One forward pass over n tokens at positions p … p+n−1 (n = 1 is a decode step):
///   x = embedding rows
///   per layer: xn = RMSNorm(x); q,k,v = Wq/Wk/Wv xn (one matrix–matrix product for the block);
///              RoPE(q, k); cache.append(k, v); att = causal attention(q, cache); x += Wo att;
///              xn = RMSNorm(x); x += W2 (silu(W1 xn) ⊙ W3 xn)
///   logits = classifier(RMSNorm(x))
/// Blocks longer than the chunk size given at construction are processed chunk by chunk. Every
/// activation buffer is allocated at construction, so a forward pass allocates nothing.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/heads.hpp"
#include "barato/attention/partial.hpp"
#include "barato/attention/rope.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/nn/dense.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/nn/rmsnorm.hpp"
#include "barato/nn/swiglu.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"
#include "barato/spec/step_model.hpp"
#include "models/llama2c.hpp"

namespace barato_examples {

using barato::Token;
using barato::attention::RopeStyle;

// ================================================================================================
// Configuration
// ================================================================================================

/// Shape and hyper-parameters of a Llama decoder. `validate()` throws `barato::shape_error` for
/// zero sizes, n_heads not a multiple of n_kv_heads, or an odd head_dim.
struct LlamaConfig {
  std::size_t dim = 0;          ///< model width (residual stream)
  std::size_t hidden_dim = 0;   ///< FFN width
  std::size_t n_layers = 0;
  std::size_t n_heads = 0;      ///< query heads
  std::size_t n_kv_heads = 0;   ///< key/value heads (GQA when < n_heads)
  std::size_t vocab_size = 0;
  std::size_t seq_len = 0;      ///< maximum positions (size of the RoPE table)
  std::size_t head_dim = 0;     ///< per-head width (llama2.c: dim / n_heads); must be set
  float rope_base = 10000.0f;   ///< RoPE θ base
  float norm_eps = 1e-5f;       ///< RMSNorm epsilon
  RopeStyle rope_style = RopeStyle::adjacent;  ///< llama2.c: adjacent pairs; HF Llama/Qwen: half_split
  bool shared_classifier = true;  ///< classifier tied to the token embedding (informational)

  /// Floats of one token's queries (n_heads · head_dim).
  [[nodiscard]] std::size_t q_dim() const noexcept { return n_heads * head_dim; }
  /// Floats of one token's keys (n_kv_heads · head_dim).
  [[nodiscard]] std::size_t kv_dim() const noexcept { return n_kv_heads * head_dim; }
  /// The attention head layout.
  [[nodiscard]] barato::attention::Heads heads() const noexcept { return {n_heads, n_kv_heads, head_dim}; }

  void validate() const {
    const auto pos = [](std::size_t v, const char* name) {
      barato::require(v > 0, "LlamaConfig: ", name, " must be > 0, got 0");
    };
    pos(dim, "dim");
    pos(hidden_dim, "hidden_dim");
    pos(n_layers, "n_layers");
    pos(n_heads, "n_heads");
    pos(n_kv_heads, "n_kv_heads");
    pos(vocab_size, "vocab_size");
    pos(seq_len, "seq_len");
    pos(head_dim, "head_dim");
    barato::require(n_heads % n_kv_heads == 0, "LlamaConfig: n_heads (", n_heads, ") must be a multiple of n_kv_heads (",
                    n_kv_heads, ")");
    barato::require(head_dim % 2 == 0, "LlamaConfig: head_dim must be even for RoPE, got ", head_dim);
    barato::require<barato::value_error>(norm_eps > 0.0f && rope_base > 0.0f, "LlamaConfig: norm_eps (", norm_eps,
                                         ") and rope_base (", rope_base, ") must be > 0");
  }
};

// ================================================================================================
// Weights
// ================================================================================================

/// Weights of one decoder layer. Matrices are [out, in]: wq [q_dim, dim], wk/wv [kv_dim, dim],
/// wo [dim, q_dim], w1/w3 [hidden, dim] (gate / up), w2 [dim, hidden] (down).
template <barato::nn::LinearLayer Linear = barato::nn::DenseLinear>
struct LlamaLayerWeights {
  barato::Buffer<float> rms_att;  // [dim]
  barato::Buffer<float> rms_ffn;  // [dim]
  Linear wq, wk, wv, wo, w1, w2, w3;
};

/// All weights of a Llama decoder, projections in the `Linear` format. The token embedding stays
/// fp32 (one row is read per token); a tied classifier is stored as its own `Linear` (a copy of the
/// embedding in the classifier's format), so quantizing the classifier does not touch the lookup.
template <barato::nn::LinearLayer Linear = barato::nn::DenseLinear>
struct LlamaWeights {
  using linear_type = Linear;
  LlamaConfig config;
  barato::Buffer<float> token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights<Linear>> layers;  // [n_layers]
  barato::Buffer<float> rms_final;        // [dim]
  Linear classifier;                      // [vocab, dim]

  /// Bytes of all projections (what a decode step streams, classifier included).
  [[nodiscard]] std::size_t linear_bytes() const noexcept {
    std::size_t b = classifier.bytes();
    for (const auto& l : layers)
      b += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() + l.w1.bytes() + l.w2.bytes() + l.w3.bytes();
    return b;
  }
  /// Bytes of everything: projections, embedding and norm gains.
  [[nodiscard]] std::size_t bytes() const noexcept {
    std::size_t b = linear_bytes() + token_embedding.bytes() + rms_final.bytes();
    for (const auto& l : layers) b += l.rms_att.bytes() + l.rms_ffn.bytes();
    return b;
  }
};

namespace detail {

inline barato::Buffer<float> copy_to_buffer(std::span<const float> x, std::pmr::memory_resource* mr) {
  barato::Buffer<float> b(x.size(), mr);
  if (!x.empty()) std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
  return b;
}

/// Checks that a LlamaWeights holds tensors of the shapes its config implies.
template <class Linear>
void check_weights(const LlamaWeights<Linear>& w) {
  const LlamaConfig& c = w.config;
  c.validate();
  const auto mat = [](const Linear& l, std::size_t rows, std::size_t cols, const char* name, std::size_t layer) {
    barato::require(l.rows() == rows && l.cols() == cols, "LlamaWeights: layer ", layer, " ", name, " is [", l.rows(), ", ",
                    l.cols(), "], expected [", rows, ", ", cols, "]");
  };
  barato::require(w.token_embedding.size() == c.vocab_size * c.dim, "LlamaWeights: token_embedding has ",
                  w.token_embedding.size(), " floats, expected vocab*dim = ", c.vocab_size * c.dim);
  barato::require(w.rms_final.size() == c.dim, "LlamaWeights: rms_final has ", w.rms_final.size(), " floats, expected ", c.dim);
  barato::require(w.layers.size() == c.n_layers, "LlamaWeights: ", w.layers.size(), " layers, expected ", c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    const auto& l = w.layers[i];
    barato::require(l.rms_att.size() == c.dim && l.rms_ffn.size() == c.dim, "LlamaWeights: layer ", i,
                    " norm gains must have dim = ", c.dim, " floats");
    mat(l.wq, c.q_dim(), c.dim, "wq", i);
    mat(l.wk, c.kv_dim(), c.dim, "wk", i);
    mat(l.wv, c.kv_dim(), c.dim, "wv", i);
    mat(l.wo, c.dim, c.q_dim(), "wo", i);
    mat(l.w1, c.hidden_dim, c.dim, "w1", i);
    mat(l.w2, c.dim, c.hidden_dim, "w2", i);
    mat(l.w3, c.hidden_dim, c.dim, "w3", i);
  }
  mat(w.classifier, c.vocab_size, c.dim, "classifier", c.n_layers);
}

}  // namespace detail

/// The config of a llama2.c checkpoint (adjacent-pair RoPE, θ = 10000, eps 1e-5).
[[nodiscard]] inline LlamaConfig llama2c_config(const Llama2cLayout& L) {
  LlamaConfig c;
  c.dim = L.dim;
  c.hidden_dim = L.hidden_dim;
  c.n_layers = L.n_layers;
  c.n_heads = L.n_heads;
  c.n_kv_heads = L.n_kv_heads;
  c.vocab_size = L.vocab;
  c.seq_len = L.seq_len;
  c.head_dim = L.head_size;
  c.rope_style = RopeStyle::adjacent;
  c.shared_classifier = L.shared_classifier;
  return c;
}

/// Loads a llama2.c checkpoint (see llama2c.hpp) into fp32 dense weights allocated from `mr`.
/// Throws `barato::format_error` / `barato::io_error` for bad or missing files.
[[nodiscard]] inline LlamaWeights<barato::nn::DenseLinear> load_llama2c(
    const std::filesystem::path& path, std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  using barato::nn::DenseLinear;
  using T = Llama2cCheckpoint;
  const Llama2cCheckpoint ck = read_llama2c(path, mr);
  const LlamaConfig c = llama2c_config(ck.layout());
  const auto dense = [&](T::TensorId id, std::size_t layer, std::size_t rows, std::size_t cols) {
    return DenseLinear(rows, cols, ck.layer(id, layer), mr);
  };
  std::vector<LlamaLayerWeights<DenseLinear>> layers;
  layers.reserve(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    layers.push_back(LlamaLayerWeights<DenseLinear>{
        detail::copy_to_buffer(ck.layer(T::kRmsAtt, i), mr), detail::copy_to_buffer(ck.layer(T::kRmsFfn, i), mr),
        dense(T::kWq, i, c.q_dim(), c.dim), dense(T::kWk, i, c.kv_dim(), c.dim), dense(T::kWv, i, c.kv_dim(), c.dim),
        dense(T::kWo, i, c.dim, c.q_dim()), dense(T::kW1, i, c.hidden_dim, c.dim), dense(T::kW2, i, c.dim, c.hidden_dim),
        dense(T::kW3, i, c.hidden_dim, c.dim)});
  }
  LlamaWeights<DenseLinear> w{c, detail::copy_to_buffer(ck.tensor(T::kTokenEmbedding), mr), std::move(layers),
                              detail::copy_to_buffer(ck.tensor(T::kRmsFinal), mr),
                              DenseLinear(c.vocab_size, c.dim, ck.classifier(), mr)};
  detail::check_weights(w);
  return w;
}

namespace detail {

/// Fills `x` with uniform values in [−a, a) from a xorshift64* stream. The stream of element i
/// depends only on (seed, i / kRandomChunk), so the result does not depend on the thread count.
inline constexpr std::size_t kRandomChunk = std::size_t{1} << 16;
inline void fill_uniform(std::span<float> x, float a, std::uint64_t seed, int threads) {
  const std::size_t chunks = (x.size() + kRandomChunk - 1) / kRandomChunk;
  barato::parallel_for(chunks, threads, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t c = lo; c < hi; ++c) {
      // SplitMix64 of (seed, chunk) as the chunk's xorshift state (never 0).
      std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (c + 1);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      std::uint64_t s = (z ^ (z >> 31)) | 1;
      const std::size_t end = std::min(x.size(), (c + 1) * kRandomChunk);
      for (std::size_t i = c * kRandomChunk; i < end; ++i) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        const auto u = static_cast<std::uint32_t>((s * 0x2545F4914F6CDD1Dull) >> 40);  // 24 bits
        x[i] = (static_cast<float>(u) * (2.0f / 16777216.0f) - 1.0f) * a;
      }
    }
  });
}

}  // namespace detail

/// Random fp32 weights of shape `config` (e.g. a Qwen2.5-0.5B-shaped model for speed and memory
/// measurements): matrices uniform with variance 1/cols, embedding uniform in [−1, 1), norm gains 1.
/// Deterministic for a seed, whatever `threads`; ~1 GB/s per thread (500M floats in ~1–2 s on 2 threads).
[[nodiscard]] inline LlamaWeights<barato::nn::DenseLinear> random_llama_weights(
    const LlamaConfig& config, std::uint64_t seed, std::pmr::memory_resource* mr = std::pmr::get_default_resource(),
    int threads = 2) {
  using barato::nn::DenseLinear;
  config.validate();
  std::uint64_t stream = seed * 1000003ull;
  const auto dense = [&](std::size_t rows, std::size_t cols) {
    DenseLinear d(rows, cols, mr);
    detail::fill_uniform(d.weights(), std::sqrt(3.0f / static_cast<float>(cols)), ++stream, threads);
    return d;
  };
  const auto ones = [&](std::size_t n) {
    barato::Buffer<float> b(n, mr);
    std::fill(b.begin(), b.end(), 1.0f);
    return b;
  };
  const LlamaConfig& c = config;
  std::vector<LlamaLayerWeights<DenseLinear>> layers;
  layers.reserve(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    layers.push_back(LlamaLayerWeights<DenseLinear>{ones(c.dim), ones(c.dim), dense(c.q_dim(), c.dim),
                                                    dense(c.kv_dim(), c.dim), dense(c.kv_dim(), c.dim),
                                                    dense(c.dim, c.q_dim()), dense(c.hidden_dim, c.dim),
                                                    dense(c.dim, c.hidden_dim), dense(c.hidden_dim, c.dim)});
  }
  barato::Buffer<float> emb(c.vocab_size * c.dim, mr);
  detail::fill_uniform(emb.span(), 1.0f, ++stream, threads);
  DenseLinear cls = c.shared_classifier ? DenseLinear(c.vocab_size, c.dim, emb.span(), mr) : dense(c.vocab_size, c.dim);
  return LlamaWeights<DenseLinear>{c, std::move(emb), std::move(layers), ones(c.dim), std::move(cls)};
}

/// Converts every projection with `make_linear(const A&)` (e.g. quantize, wrap in `nn::AnyLinear`);
/// embedding and norm gains are copied. The result's format is whatever `make_linear` returns.
template <barato::nn::LinearLayer A, class F>
  requires barato::nn::LinearLayer<std::remove_cvref_t<std::invoke_result_t<F&, const A&>>>
[[nodiscard]] auto convert_weights(const LlamaWeights<A>& w, F make_linear) {
  using B = std::remove_cvref_t<std::invoke_result_t<F&, const A&>>;
  std::vector<LlamaLayerWeights<B>> layers;
  layers.reserve(w.layers.size());
  for (const auto& l : w.layers)
    layers.push_back(LlamaLayerWeights<B>{l.rms_att.copy(), l.rms_ffn.copy(), make_linear(l.wq), make_linear(l.wk),
                                          make_linear(l.wv), make_linear(l.wo), make_linear(l.w1), make_linear(l.w2),
                                          make_linear(l.w3)});
  LlamaWeights<B> out{w.config, w.token_embedding.copy(), std::move(layers), w.rms_final.copy(), make_linear(w.classifier)};
  detail::check_weights(out);
  return out;
}

// ================================================================================================
// Caches
// ================================================================================================

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

// ================================================================================================
// The decoder
// ================================================================================================

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
        o_(chunk_ * cfg_.dim, opt.mr), h1_(chunk_ * cfg_.hidden_dim, opt.mr), h3_(chunk_ * cfg_.hidden_dim, opt.mr),
        stats_(chunk_ * cfg_.n_heads, opt.mr) {
    detail::check_weights(weights);
    barato::require(caches_.size() == cfg_.n_layers, "Llama: ", caches_.size(), " caches, expected one per layer (",
                    cfg_.n_layers, ")");
    for (std::size_t i = 0; i < caches_.size(); ++i) {
      barato::require(caches_[i].n_kv_heads() == cfg_.n_kv_heads && caches_[i].head_dim() == cfg_.head_dim, "Llama: cache ",
                      i, " holds ", caches_[i].n_kv_heads(), " heads of ", caches_[i].head_dim(), ", expected ",
                      cfg_.n_kv_heads, " of ", cfg_.head_dim);
      barato::require(caches_[i].size() == caches_[0].size(), "Llama: caches hold different numbers of positions");
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
    const std::size_t n = tokens.size();
    barato::require(logits.size() == n * cfg_.vocab_size, "Llama::forward: logits has ", logits.size(),
                    " floats, expected n*vocab = ", n, "*", cfg_.vocab_size);
    run(tokens, [&](std::size_t t0, std::size_t m) {
      nn_norm_rows(m);
      apply(w_->classifier, xn_.data(), logits.data() + t0 * cfg_.vocab_size, m, cfg_.dim, cfg_.vocab_size);
    });
  }

  /// Like `forward` but computes only the logits of the last token ([vocab]): a prefill that
  /// skips n−1 classifier rows, or a decode step.
  void forward_last(std::span<const Token> tokens, std::span<float> logits_last) {
    barato::require(logits_last.size() == cfg_.vocab_size, "Llama::forward_last: logits has ", logits_last.size(),
                    " floats, expected vocab = ", cfg_.vocab_size);
    const std::size_t n = tokens.size();
    run(tokens, [&](std::size_t t0, std::size_t m) {
      if (t0 + m != n) return;  // not the chunk holding the last token
      const std::span<const float> last(x_.data() + (m - 1) * cfg_.dim, cfg_.dim);
      barato::nn::rms_norm(last, w_->rms_final.span(), std::span<float>(xn_.data(), cfg_.dim), cfg_.norm_eps);
      w_->classifier.apply(std::span<const float>(xn_.data(), cfg_.dim), logits_last, opt_.threads);
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
  /// y [m, rows] = x [m, cols] · Wᵀ; the single-vector kernel for m = 1.
  void apply(const Linear& w, const float* x, float* y, std::size_t m, std::size_t cols, std::size_t rows) const {
    if (m == 1) {
      w.apply(std::span<const float>(x, cols), std::span<float>(y, rows), opt_.threads);
    } else {
      w.apply_batch(std::span<const float>(x, m * cols), std::span<float>(y, m * rows), m, opt_.threads);
    }
  }

  /// xn[0..m) = RMSNorm(x[0..m)) with the final gain.
  void nn_norm_rows(std::size_t m) {
    for (std::size_t t = 0; t < m; ++t)
      barato::nn::rms_norm(std::span<const float>(x_.data() + t * cfg_.dim, cfg_.dim), w_->rms_final.span(),
                           std::span<float>(xn_.data() + t * cfg_.dim, cfg_.dim), cfg_.norm_eps);
  }

  /// Validates, then runs the layers chunk by chunk; `head(t0, m)` is called after each chunk with
  /// the final residual stream of tokens [t0, t0+m) in x_. On any exception the caches are rolled
  /// back to their size on entry.
  template <class Head>
  void run(std::span<const Token> tokens, Head&& head) {
    const std::size_t n = tokens.size();
    barato::require(n > 0, "Llama::forward: no tokens (n = 0)");
    const std::size_t p_start = size();
    barato::require<barato::capacity_error>(p_start + n <= capacity(), "Llama::forward: ", n,
                                            " tokens do not fit: size ", p_start, ", capacity ", capacity());
    for (const Token t : tokens)
      barato::require<barato::value_error>(t >= 0 && static_cast<std::size_t>(t) < cfg_.vocab_size,
                                           "Llama::forward: token id ", t, " outside [0, ", cfg_.vocab_size, ")");
    try {
      for (std::size_t t0 = 0; t0 < n; t0 += chunk_) {
        const std::size_t m = std::min(chunk_, n - t0);
        layers(tokens.subspan(t0, m), p_start + t0);
        head(t0, m);
      }
    } catch (...) {
      for (auto& c : caches_)
        if (c.size() > p_start) c.truncate(p_start);
      throw;
    }
  }

  /// The decoder layers for m ≤ chunk tokens at positions p0 … p0+m−1; leaves the residual in x_.
  void layers(std::span<const Token> tokens, std::size_t p0) {
    const std::size_t m = tokens.size();
    const std::size_t d = cfg_.dim, qd = cfg_.q_dim(), kd = cfg_.kv_dim(), hd = cfg_.hidden_dim;
    const barato::attention::Heads heads = cfg_.heads();
    for (std::size_t t = 0; t < m; ++t)  // embedding rows
      std::memcpy(x_.data() + t * d, w_->token_embedding.data() + static_cast<std::size_t>(tokens[t]) * d, d * sizeof(float));

    for (std::size_t l = 0; l < cfg_.n_layers; ++l) {
      const LlamaLayerWeights<Linear>& L = w_->layers[l];
      // Attention block: xn = RMSNorm(x); q, k, v; RoPE; append; attend; x += Wo·att.
      for (std::size_t t = 0; t < m; ++t)
        barato::nn::rms_norm(std::span<const float>(x_.data() + t * d, d), L.rms_att.span(),
                             std::span<float>(xn_.data() + t * d, d), cfg_.norm_eps);
      apply(L.wq, xn_.data(), q_.data(), m, d, qd);
      apply(L.wk, xn_.data(), k_.data(), m, d, kd);
      apply(L.wv, xn_.data(), v_.data(), m, d, kd);
      for (std::size_t t = 0; t < m; ++t) {
        rope_.apply(std::span<float>(q_.data() + t * qd, qd), cfg_.n_heads, p0 + t);
        rope_.apply(std::span<float>(k_.data() + t * kd, kd), cfg_.n_kv_heads, p0 + t);
      }
      caches_[l].append(std::span<const float>(k_.data(), m * kd), std::span<const float>(v_.data(), m * kd));
      // head_dim below the float lanes (stories260K: 8 vs 16 on AVX-512) takes the packed-row kernel
      // of attention/small_dim_kernel.hpp inside attend.
      barato::attention::attend(std::span<const float>(q_.data(), m * qd), caches_[l], heads,
                                std::span<float>(att_.data(), m * qd), {.threads = opt_.threads});
      apply(L.wo, att_.data(), o_.data(), m, qd, d);
      add_into(x_.data(), o_.data(), m * d);

      // FFN block: x += W2 (silu(W1 xn) ⊙ W3 xn).
      for (std::size_t t = 0; t < m; ++t)
        barato::nn::rms_norm(std::span<const float>(x_.data() + t * d, d), L.rms_ffn.span(),
                             std::span<float>(xn_.data() + t * d, d), cfg_.norm_eps);
      apply(L.w1, xn_.data(), h1_.data(), m, d, hd);
      apply(L.w3, xn_.data(), h3_.data(), m, d, hd);
      barato::nn::swiglu(std::span<float>(h1_.data(), m * hd), std::span<const float>(h3_.data(), m * hd));
      apply(L.w2, h1_.data(), o_.data(), m, hd, d);
      add_into(x_.data(), o_.data(), m * d);

      if (observer_) observer_(l, std::span<const float>(x_.data(), m * d));
    }
  }

  static void add_into(float* x, const float* y, std::size_t n) noexcept { barato::simd::axpy(1.0f, y, x, n); }

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
  barato::Buffer<barato::attention::PartialStats> stats_;  // [chunk, n_heads]
  ResidualObserver observer_;
};

static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<float>>>);
static_assert(barato::spec::StepModel<Llama<barato::kv::Contiguous<barato::f16>>>);

}  // namespace barato_examples
