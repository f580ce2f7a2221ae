#pragma once
/// \file
/// `spec::ModelDrafter<M, S>`: a drafter that is itself a step model — a smaller model, or the same
/// model with quantized weights — sampling autoregressively on its own KV cache with its own sampler.
///
/// Cache protocol: the drafter mirrors the token ids in its model's cache. On `propose(context, …)` it
/// keeps the longest common prefix of that mirror and context[0, len − 1), `truncate`s the rest (the
/// rejected drafts of the previous pass), forwards the missing context tokens in chunks (the
/// last one yields the logits of the first draft), then samples γ tokens forwarding each but the
/// last. After a pass with k accepted drafts the catch-up is 1 token (or 2 when all γ were accepted).

#include <algorithm>
#include <cstddef>
#include <memory_resource>
#include <span>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"
#include "barato/spec/drafter.hpp"
#include "barato/spec/step_model.hpp"

namespace barato::spec {

/// A drafter that runs a (smaller or quantized) step model with its own sampler on its own cache.
template <StepModel M, sample::Sampler S>
class ModelDrafter {
 public:
  /// Drafts with `model` (not owned; must outlive the drafter and not be used by anyone else meanwhile —
  /// if it is, the drafter notices the size change and restarts from an empty cache) and `sampler`.
  /// Catch-up forwards run in chunks of `chunk` tokens; buffers ([capacity] ids, [chunk, vocab] logits)
  /// come from `mr`.
  ModelDrafter(M& model, S sampler, std::size_t chunk = 16,
               std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : model_(&model), sampler_(std::move(sampler)), chunk_(chunk), cached_(model.capacity(), mr),
        logits_(chunk * model.vocab_size(), mr) {
    require(chunk >= 1, "spec::ModelDrafter: expected chunk >= 1, got 0");
    require(sampler_.vocab_size() == model.vocab_size(), "spec::ModelDrafter: sampler vocab ", sampler_.vocab_size(),
            " != model vocab ", model.vocab_size());
    model_->reset();
  }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return model_->vocab_size(); }
  [[nodiscard]] M& model() noexcept { return *model_; }
  [[nodiscard]] S& sampler() noexcept { return sampler_; }
  /// The token ids held in the draft model's cache.
  [[nodiscard]] std::span<const Token> cached() const noexcept { return cached_.span().first(n_cached_); }

  /// Proposes up to out.size() tokens (fewer when the draft model's capacity runs out). See drafter.hpp.
  [[nodiscard]] std::size_t propose(std::span<const Token> context, std::span<Token> out, std::span<float> q,
                                    sample::Rng& rng) {
    const std::size_t V = vocab_size();
    require(!context.empty(), "spec::ModelDrafter::propose: empty context");
    require(q.empty() || q.size() >= out.size() * V, "spec::ModelDrafter::propose: q has ", q.size(),
            " floats, expected at least ", out.size() * V);
    const std::size_t len = context.size(), cap = model_->capacity();
    if (out.empty() || len > cap) return 0;
    const std::size_t gamma = std::min(out.size(), cap - len + 1);  // the last draft is not forwarded

    if (model_->size() != n_cached_) {  // someone else used the model: start over
      model_->reset();
      n_cached_ = 0;
    }
    const auto mirror = cached_.span().first(n_cached_);
    const std::size_t limit = std::min(n_cached_, len - 1);
    const std::size_t keep = static_cast<std::size_t>(
        std::mismatch(mirror.begin(), mirror.begin() + static_cast<std::ptrdiff_t>(limit), context.begin()).first -
        mirror.begin());
    if (keep < n_cached_) {
      model_->truncate(keep);
      n_cached_ = keep;
    }
    std::size_t rows = 0;
    for (std::size_t pos = keep; pos < len; pos += rows) rows = forward(context.subspan(pos, std::min(chunk_, len - pos)));

    for (std::size_t i = 0; i < gamma; ++i) {
      const auto row = std::span<const float>(logits_.span()).subspan((rows - 1) * V, V);
      const auto history = std::span<const Token>(cached_.span()).first(n_cached_);
      if (q.empty()) {
        out[i] = sampler_.sample(row, history, rng).token;
      } else {
        const auto qi = q.subspan(i * V, V);
        sampler_.probabilities(row, history, qi);
        out[i] = sample::draw(qi, rng);
      }
      if (i + 1 < gamma) rows = forward(out.subspan(i, 1));
    }
    return gamma;
  }

 private:
  /// Forwards `tokens` (≤ chunk) through the draft model and mirrors them; returns the number of rows.
  std::size_t forward(std::span<const Token> tokens) {
    model_->forward(tokens, logits_.span().first(tokens.size() * vocab_size()));
    std::copy(tokens.begin(), tokens.end(), cached_.begin() + n_cached_);
    n_cached_ += tokens.size();
    return tokens.size();
  }

  M* model_;
  S sampler_;
  std::size_t chunk_;
  Buffer<Token> cached_;      // [capacity] token ids in the draft model's cache
  std::size_t n_cached_ = 0;  // == model_->size() while nobody else touches the model
  Buffer<float> logits_;      // [chunk, vocab]
};

}  // namespace barato::spec
