#pragma once
/// \file
/// The weights of a Llama decoder and where they come from: `LlamaWeights<Linear>` (per-layer
/// projections in any `nn::LinearLayer` format, fp32 embedding and norm gains), the llama2.c loader
/// (`load_llama2c`), deterministic random weights at a given shape (`random_llama_weights`) and
/// format conversion (`convert_weights`, e.g. quantizing every projection). Shapes are checked
/// against the config on every path (`barato::shape_error`).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/nn/linear_layer.hpp"
#include "models/llama2c.hpp"
#include "models/llama_config.hpp"

namespace barato_examples {

// ================================================================================================
// Weight structs
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

// ================================================================================================
// Shape checks and the llama2.c loader
// ================================================================================================

namespace detail {

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

/// Loads a llama2.c checkpoint (see llama2c.hpp) tensor by tensor: every projection and the
/// classifier built by `make_linear(values, rows, cols)` from its fp32 values (read into one scratch
/// matrix from `mr`, reused: valid only during the call), the gains and the embedding read into fp32
/// buffers from `mr` (a shared classifier is built from the embedding as loaded). So the load holds
/// the result and one fp32 matrix, never the whole checkpoint beside it. A version-2 file's matrices
/// are dequantized exactly (q · scale), unless `make_linear` also takes a `Llama2cInt8Matrix`
/// (`make_linear(int8_matrix, rows, cols)`): then it gets their codes and scales as stored (the
/// shared classifier too: the embedding's codes). Both calls must return the same type.
/// Throws `barato::format_error` / `barato::io_error` for bad or missing files.
template <class MakeLinear>
[[nodiscard]] auto load_llama2c_with(const std::filesystem::path& path, MakeLinear make_linear,
                                     std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  using T = Llama2cCheckpoint;
  using L = std::remove_cvref_t<std::invoke_result_t<MakeLinear&, std::span<const float>, std::size_t, std::size_t>>;
  constexpr bool kTakesCodes = std::is_invocable_v<MakeLinear&, const Llama2cInt8Matrix&, std::size_t, std::size_t>;
  Llama2cReader in(path);
  const LlamaConfig c = llama2c_config(in.layout());
  std::size_t largest = c.shared_classifier ? 0 : in.floats(T::kWcls);
  for (const auto id : {T::kWq, T::kWk, T::kWv, T::kWo, T::kW1, T::kW2, T::kW3}) largest = std::max(largest, in.layer_floats(id));
  const bool codes = kTakesCodes && in.layout().version == 2;
  if (codes && c.shared_classifier) largest = std::max(largest, in.floats(T::kTokenEmbedding));
  barato::Buffer<float> scratch(codes ? 0 : largest, mr);  // one matrix at a time
  barato::Buffer<std::int8_t> qs(codes ? largest : 0, mr);
  barato::Buffer<float> ss(codes ? largest / in.layout().group_size : 0, mr);
  const auto build = [&](T::TensorId id, std::size_t layer, std::size_t rows, std::size_t cols) {
    const std::size_t n = in.layout().tensors[id].layer_floats();
    if constexpr (kTakesCodes) {
      if (codes) {
        const std::size_t g = in.layout().group_size;
        in.read_int8(id, layer, qs.span().first(n), ss.span().first(n / g));
        return L(make_linear(Llama2cInt8Matrix{qs.span().first(n), ss.span().first(n / g), g}, rows, cols));
      }
    }
    const std::span<float> x = scratch.span().first(n);
    in.read(id, layer, x);
    return L(make_linear(std::span<const float>(x), rows, cols));
  };
  const auto gain = [&](T::TensorId id, std::size_t layer) {
    barato::Buffer<float> g(in.layer_floats(id), mr);
    in.read(id, layer, g.span());
    return g;
  };
  std::vector<LlamaLayerWeights<L>> layers;
  layers.reserve(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    layers.push_back(LlamaLayerWeights<L>{gain(T::kRmsAtt, i), gain(T::kRmsFfn, i), build(T::kWq, i, c.q_dim(), c.dim),
                                          build(T::kWk, i, c.kv_dim(), c.dim), build(T::kWv, i, c.kv_dim(), c.dim),
                                          build(T::kWo, i, c.dim, c.q_dim()), build(T::kW1, i, c.hidden_dim, c.dim),
                                          build(T::kW2, i, c.dim, c.hidden_dim), build(T::kW3, i, c.hidden_dim, c.dim)});
  }
  barato::Buffer<float> embedding(in.floats(T::kTokenEmbedding), mr);
  in.read(T::kTokenEmbedding, embedding.span());
  barato::Buffer<float> rms_final(in.floats(T::kRmsFinal), mr);
  in.read(T::kRmsFinal, rms_final.span());
  L classifier = [&] {
    if (c.shared_classifier && !codes) return L(make_linear(std::span<const float>(embedding.span()), c.vocab_size, c.dim));
    return build(c.shared_classifier ? T::kTokenEmbedding : T::kWcls, 0, c.vocab_size, c.dim);
  }();
  LlamaWeights<L> w{c, std::move(embedding), std::move(layers), std::move(rms_final), std::move(classifier)};
  detail::check_weights(w);
  return w;
}

/// Loads a llama2.c checkpoint (see llama2c.hpp) into fp32 dense weights allocated from `mr`.
/// Throws `barato::format_error` / `barato::io_error` for bad or missing files.
[[nodiscard]] inline LlamaWeights<barato::nn::DenseLinear> load_llama2c(
    const std::filesystem::path& path, std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  return load_llama2c_with(
      path,
      [&](std::span<const float> values, std::size_t rows, std::size_t cols) {
        return barato::nn::DenseLinear(rows, cols, values, mr);
      },
      mr);
}

// ================================================================================================
// Random weights (speed and memory measurements at real model shapes) and format conversion
// ================================================================================================

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
  // every weight is allocated and written: a config larger than the machine fails here, naming it
  barato::require_memory(barato::checked_mul(config.parameters(), sizeof(float), "random_llama_weights", "weights x 4 bytes"),
                         "random_llama_weights: ", config.parameters(), " fp32 weights");
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

/// Converts every projection with `make_linear` (e.g. quantize, wrap in `nn::AnyLinear`). From an
/// lvalue `w`, make_linear gets `const A&` and the embedding and norm gains are copied; from an
/// rvalue it gets `A&&` and everything is moved (no weight is copied). The result's format is
/// whatever `make_linear` returns.
template <class W, class F>
  requires std::same_as<std::remove_cvref_t<W>, LlamaWeights<typename std::remove_cvref_t<W>::linear_type>>
[[nodiscard]] auto convert_weights(W&& w, F make_linear) {
  constexpr bool kMove = !std::is_lvalue_reference_v<W>;
  // a projection as make_linear takes it, a gain or the embedding as the result holds it
  auto proj = [](auto& p) -> decltype(auto) {
    if constexpr (kMove) return std::move(p);
    else return std::as_const(p);
  };
  auto take = [](auto& b) {
    if constexpr (kMove) return std::move(b);
    else return b.copy();
  };
  using B = std::remove_cvref_t<decltype(make_linear(proj(w.classifier)))>;
  static_assert(barato::nn::LinearLayer<B>, "convert_weights: make_linear must return a LinearLayer");
  std::vector<LlamaLayerWeights<B>> layers;
  layers.reserve(w.layers.size());
  for (auto& l : w.layers)
    layers.push_back(LlamaLayerWeights<B>{take(l.rms_att), take(l.rms_ffn), make_linear(proj(l.wq)),
                                          make_linear(proj(l.wk)), make_linear(proj(l.wv)), make_linear(proj(l.wo)),
                                          make_linear(proj(l.w1)), make_linear(proj(l.w2)), make_linear(proj(l.w3))});
  LlamaWeights<B> out{w.config, take(w.token_embedding), std::move(layers), take(w.rms_final),
                      make_linear(proj(w.classifier))};
  detail::check_weights(out);
  return out;
}

/// `w` with every projection and the classifier moved into `nn::AnyLinear` (no weight is copied). A
/// tool that picks the format at run time then instantiates its decoder for `AnyLinear` alone.
template <barato::nn::LinearLayer A>
[[nodiscard]] LlamaWeights<barato::nn::AnyLinear> into_any_linear(LlamaWeights<A>&& w) {
  return convert_weights(std::move(w), [](A&& a) { return barato::nn::AnyLinear(std::move(a)); });
}

}  // namespace barato_examples
