#pragma once
/// \file
/// The shape and hyper-parameters of a Llama-family decoder (`LlamaConfig`): widths, head layout,
/// RoPE and RMSNorm settings. Weights (models/llama_weights.hpp) and the decoder (models/llama.hpp)
/// are built from it; a llama2.c checkpoint's config comes from `llama2c_config`.

#include <cstddef>
#include <cstdint>

#include "barato/attention/heads.hpp"
#include "barato/attention/rope.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"

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

  /// Weights of the model (embedding, every layer's matrices and norm gains, final norm; a separate
  /// classifier not counted). Throws `barato::capacity_error` naming the product that overflows
  /// std::size_t, so an absurd config never wraps around to a small allocation.
  [[nodiscard]] std::size_t parameters() const {
    using barato::checked_mul;
    const char* w = "LlamaConfig";
    const std::size_t attn = checked_mul(dim, checked_mul(2, q_dim_checked(), w, "2 x q_dim"), w, "dim x 2 q_dim");
    const std::size_t kv = checked_mul(dim, checked_mul(2, checked_mul(n_kv_heads, head_dim, w, "n_kv_heads x head_dim"), w, "2 x kv_dim"), w,
                                       "dim x 2 kv_dim");
    const std::size_t ffn = checked_mul(3, checked_mul(dim, hidden_dim, w, "dim x hidden_dim"), w, "3 x dim x hidden_dim");
    const auto add = [w](std::size_t a, std::size_t b) {
      barato::require<barato::capacity_error>(a <= SIZE_MAX - b, w, ": ", a, " + ", b, " weights overflow std::size_t");
      return a + b;
    };
    const std::size_t per_layer = add(add(add(attn, kv), ffn), checked_mul(2, dim, w, "2 x dim"));
    const std::size_t layers = checked_mul(n_layers, per_layer, w, "n_layers x per-layer weights");
    return add(add(layers, checked_mul(vocab_size, dim, w, "vocab_size x dim")), dim);
  }

  /// Throws `barato::shape_error` / `barato::value_error` for a config no decoder can run (see above),
  /// `barato::capacity_error` when its sizes overflow (`parameters`) or its RoPE table of seq_len ·
  /// head_dim cannot exist.
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
    (void)parameters();
    (void)barato::checked_mul(seq_len, head_dim, "LlamaConfig", "seq_len x head_dim (RoPE table)");
  }

 private:
  [[nodiscard]] std::size_t q_dim_checked() const { return barato::checked_mul(n_heads, head_dim, "LlamaConfig", "n_heads x head_dim"); }

 public:
};

}  // namespace barato_examples
