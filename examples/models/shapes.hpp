#pragma once
/// \file
/// Named model shapes used by the tutorials and benchmarks (one place, so every program measures the
/// same thing). Only shapes: weights for them come from `random_llama_weights` (synthetic) or a file.

#include <cstddef>

#include "barato/core/memory.hpp"
#include "models/llama.hpp"

namespace barato_examples {

/// The shape of Qwen2.5-0.5B: 24 layers, hidden 896, 14 query heads over 2 KV heads of 64, SwiGLU FFN
/// 4864, vocabulary 151,936, tied embedding, RoPE θ = 10⁶ on half-split pairs, RMSNorm ε = 10⁻⁶.
/// About 494 M parameters: 1.98 GB of fp32 matrices per decode step (classifier included).
[[nodiscard]] inline LlamaConfig qwen25_05b_shape(std::size_t seq_len = 32768) {
  LlamaConfig c;
  c.dim = 896;
  c.hidden_dim = 4864;
  c.n_layers = 24;
  c.n_heads = 14;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 151936;
  c.seq_len = seq_len;
  c.rope_base = 1e6f;
  c.norm_eps = 1e-6f;
  c.rope_style = RopeStyle::half_split;
  c.shared_classifier = true;
  return c;
}

/// Bytes of every projection and the classifier of `w`: what one decode step streams from memory for
/// its matrix–vector products (the other reads — one embedding row, the norm gains — are < 0.01 %).
template <class Linear>
[[nodiscard]] std::size_t matrix_bytes(const LlamaWeights<Linear>& w) {
  std::size_t b = w.classifier.bytes();
  for (const auto& l : w.layers)
    b += l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() + l.w1.bytes() + l.w2.bytes() + l.w3.bytes();
  return b;
}

}  // namespace barato_examples
