#pragma once
/// \file
/// The shape and hyper-parameters of a Llama-family decoder (`LlamaConfig`): widths, head layout,
/// RoPE and RMSNorm settings. Weights (models/llama_weights.hpp) and the decoder (models/llama.hpp)
/// are built from it; a llama2.c checkpoint's config comes from `llama2c_config`.

#include <cstddef>

#include "barato/attention/heads.hpp"
#include "barato/attention/rope.hpp"
#include "barato/core/error.hpp"

namespace barato_examples {

using barato::attention::RopeStyle;

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

  /// Throws `barato::shape_error` / `barato::value_error` for a config no decoder can run (see above).
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

}  // namespace barato_examples
