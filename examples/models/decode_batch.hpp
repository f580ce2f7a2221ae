#pragma once
/// \file
/// A batched decode step as a measurement fixture (tutorial_batching, bench_batching): B sequences in
/// one `kv::PagedPool`, each holding `context` positions of K/V, and the `StepPlan` that decodes one
/// token for each of them. The cached K/V are random (their values do not change the cost of a step),
/// so a 64-sequence batch of a 0.5B-shaped model is ready in milliseconds instead of a 4,096-token
/// prefill. After each step, `rewind()` drops the appended position so every measured step sees the
/// same context.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "barato/batch/step_plan.hpp"
#include "barato/kv/paged.hpp"
#include "models/llama_config.hpp"

namespace barato_examples {

/// B sequences with `context` cached positions each and the plan of one decode step for all of them.
template <barato::kv::PageFormat T = float>
class DecodeBatch {
 public:
  /// A pool for `batch` sequences of `context` + 1 positions (blocks of `block_tokens`), filled with
  /// random K/V; token ids random in the vocabulary (fixed seed).
  DecodeBatch(const LlamaConfig& c, std::size_t batch, std::size_t context, std::size_t block_tokens = 16,
              std::uint64_t seed = 1)
      : pool_({.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = block_tokens,
               .n_blocks = batch * ((context + 1 + block_tokens - 1) / block_tokens)}),
        context_(context) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k(context * c.kv_dim()), v(context * c.kv_dim());
    tokens_.resize(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      const barato::kv::SeqId s = pool_.add_sequence();
      seqs_.push_back(s);
      for (std::size_t l = 0; l < c.n_layers && context > 0; ++l) {
        for (auto& x : k) x = u(rng);
        for (auto& x : v) x = u(rng);
        pool_.append(s, l, k, v);
      }
      tokens_[b] = static_cast<barato::Token>(rng() % c.vocab_size);
    }
    for (std::size_t b = 0; b < batch; ++b)
      chunks_.push_back({.request = b, .slot = b, .seq = seqs_[b], .pos = context,
                         .tokens = {&tokens_[b], 1}, .wants_logits = true, .decode = true});
  }
  DecodeBatch(const DecodeBatch&) = delete;
  DecodeBatch& operator=(const DecodeBatch&) = delete;

  [[nodiscard]] barato::kv::PagedPool<T>& pool() noexcept { return pool_; }
  [[nodiscard]] std::size_t size() const noexcept { return seqs_.size(); }
  [[nodiscard]] std::size_t context() const noexcept { return context_; }
  /// One decode token for every sequence, at position context().
  [[nodiscard]] barato::batch::StepPlan plan() const noexcept {
    barato::batch::StepPlan p{.step = 0, .chunks = chunks_};
    p.decode_tokens = chunks_.size();
    p.context_tokens = chunks_.size() * (context_ + 1);
    p.logits_rows = chunks_.size();
    return p;
  }
  /// Drops the position the last step appended (every sequence back to context()).
  void rewind() {
    for (const auto s : seqs_)
      if (pool_.size(s, 0) > context_) pool_.truncate(s, context_);
  }

 private:
  barato::kv::PagedPool<T> pool_;
  std::size_t context_;
  std::vector<barato::kv::SeqId> seqs_;
  std::vector<barato::Token> tokens_;
  std::vector<barato::batch::SeqChunk> chunks_;
};

}  // namespace barato_examples
