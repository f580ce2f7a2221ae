#pragma once
/// \file
/// Model shapes for the memory planner: what a plan needs to know of a model (parameter count,
/// layers, query and KV heads, head dim, vocabulary; hidden sizes optional) and the named shapes
/// 7B, 13B, 70B and Qwen2.5-0.5B.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "barato/core/error.hpp"

namespace barato::plan {

/// The shape of a decoder-only transformer as far as memory is concerned.
struct ModelShape {
  std::string name;             ///< for printing ("7B", a file name, ...)
  double parameters = 0;        ///< weights counted by the weight format (embedding and classifier included)
  std::size_t layers = 0;       ///< transformer blocks
  std::size_t q_heads = 0;      ///< query heads per layer
  std::size_t kv_heads = 0;     ///< KV heads per layer (= q_heads for MHA, fewer for GQA, 1 for MQA)
  std::size_t head_dim = 0;     ///< d
  std::size_t vocab = 0;        ///< vocabulary size
  std::size_t dim = 0;          ///< model width (0 = unknown; q_heads · head_dim when not given)
  std::size_t hidden_dim = 0;   ///< FFN width (0 = unknown)

  /// This shape, or `value_error` naming the first zero field or a KV-head count that does not divide the query heads.
  [[nodiscard]] const ModelShape& checked() const {
    require<value_error>(parameters > 0, "plan::ModelShape '", name, "': parameters must be > 0, got ", parameters);
    require<value_error>(layers > 0 && q_heads > 0 && kv_heads > 0 && head_dim > 0,
                         "plan::ModelShape '", name, "': layers, q_heads, kv_heads and head_dim must be > 0, got ",
                         layers, ", ", q_heads, ", ", kv_heads, ", ", head_dim);
    require<value_error>(q_heads % kv_heads == 0, "plan::ModelShape '", name, "': kv_heads (", kv_heads,
                         ") must divide q_heads (", q_heads, ")");
    return *this;
  }
};

/// Parameters of a Llama-style decoder (no biases): per layer the q, k, v, o projections, the three
/// SwiGLU matrices and two norm gains; then the token embedding, the final norm and, unless the
/// classifier is tied to the embedding, a classifier of vocab × dim.
[[nodiscard]] constexpr double llama_parameter_count(std::size_t dim, std::size_t hidden_dim, std::size_t layers,
                                                     std::size_t q_heads, std::size_t kv_heads, std::size_t head_dim,
                                                     std::size_t vocab, bool tied_classifier) noexcept {
  const double d = double(dim), q = double(q_heads * head_dim), kv = double(kv_heads * head_dim);
  const double per_layer = d * q + 2 * d * kv + q * d + 3 * d * double(hidden_dim) + 2 * d;
  return double(layers) * per_layer + double(vocab) * d * (tied_classifier ? 1 : 2) + d;
}

/// 7B: 7.0e9 parameters, 32 layers, 32 query heads over 8 KV heads of 128 (GQA), vocabulary 32,000.
[[nodiscard]] inline ModelShape shape_7b() {
  return {.name = "7B", .parameters = 7.0e9, .layers = 32, .q_heads = 32, .kv_heads = 8, .head_dim = 128, .vocab = 32000,
          .dim = 4096, .hidden_dim = 11008};
}
/// 13B: 13.0e9 parameters, 40 layers, full multi-head attention with 40 heads of 128, vocabulary 32,000.
[[nodiscard]] inline ModelShape shape_13b() {
  return {.name = "13B", .parameters = 13.0e9, .layers = 40, .q_heads = 40, .kv_heads = 40, .head_dim = 128,
          .vocab = 32000, .dim = 5120, .hidden_dim = 13824};
}
/// 70B: 70e9 parameters, 80 layers, 64 query heads over 8 KV heads of 128, vocabulary 32,000.
[[nodiscard]] inline ModelShape shape_70b() {
  return {.name = "70B", .parameters = 70.0e9, .layers = 80, .q_heads = 64, .kv_heads = 8, .head_dim = 128, .vocab = 32000,
          .dim = 8192, .hidden_dim = 28672};
}
/// Qwen2.5-0.5B (the shape of examples/models/shapes.hpp): 24 layers, width 896, 14 query heads over
/// 2 KV heads of 64, FFN 4864, vocabulary 151,936, tied classifier; parameters counted by
/// `llama_parameter_count` (≈ 494 M; the q/k/v biases of the released model, 0.03 M, are not counted).
[[nodiscard]] inline ModelShape shape_qwen25_05b() {
  return {.name = "Qwen2.5-0.5B", .parameters = llama_parameter_count(896, 4864, 24, 14, 2, 64, 151936, true),
          .layers = 24, .q_heads = 14, .kv_heads = 2, .head_dim = 64, .vocab = 151936, .dim = 896, .hidden_dim = 4864};
}

/// The names `named_shape` accepts (lower case).
inline constexpr std::array<std::string_view, 4> kShapeNames = {"7b", "13b", "70b", "qwen2.5-0.5b"};

/// A named shape: "7b", "13b", "70b" or "qwen2.5-0.5b" (case-insensitive); `value_error` listing the names otherwise.
[[nodiscard]] inline ModelShape named_shape(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
  if (n == "7b") return shape_7b();
  if (n == "13b") return shape_13b();
  if (n == "70b") return shape_70b();
  if (n == "qwen2.5-0.5b") return shape_qwen25_05b();
  detail::fail<value_error>("plan::named_shape: unknown shape '", name, "' (known: 7b, 13b, 70b, qwen2.5-0.5b)");
}

}  // namespace barato::plan
