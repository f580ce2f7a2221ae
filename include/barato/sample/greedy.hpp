#pragma once
/// \file
/// `sample::Greedy`: the argmax sampler (temperature → 0). Its probability vector is one-hot at the
/// argmax (ties → lowest id), which is exactly what speculative verification needs: with one-hot p
/// and q the stochastic rule reduces to "accept iff the draft token is the target's argmax".

#include <cmath>
#include <cstddef>
#include <limits>
#include <memory_resource>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"

namespace barato::sample {

/// The argmax sampler, with a one-hot probability vector (ties go to the lowest id).
class Greedy {
 public:
  /// A greedy sampler over `vocab` tokens; its probability buffer [vocab] comes from `mr`.
  explicit Greedy(std::size_t vocab, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : vocab_(vocab), probs_(vocab, mr) {
    require(vocab > 0, "sample::Greedy: expected vocab >= 1, got 0");
  }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }

  /// probs ← one-hot(argmax(logits)). O(vocab). Edge cases: NaN logits are never chosen over a
  /// number; a +∞ logit is chosen (the first one); logits that are all NaN or −∞ leave no token to
  /// choose and throw `value_error` (as the Sampler concept says), checked once after the argmax.
  void probabilities(std::span<const float> logits, std::span<const Token>, std::span<float> probs) const {
    one_hot(checked_argmax(logits, probs.size()), probs);
  }

  /// The argmax and its one-hot vector (view valid until the next call). Consumes no randomness.
  [[nodiscard]] Sampled sample(std::span<const float> logits, std::span<const Token>, Rng&) {
    const Token t = checked_argmax(logits, vocab_);
    one_hot(t, probs_.span());
    return {t, probs_.span()};
  }

 private:
  static void one_hot(Token t, std::span<float> probs) noexcept {
    for (float& p : probs) p = 0.0f;
    probs[static_cast<std::size_t>(t)] = 1.0f;
  }
  [[nodiscard]] Token checked_argmax(std::span<const float> logits, std::size_t probs_size) const {
    require(logits.size() == vocab_ && probs_size == vocab_, "sample::Greedy: expected logits and probs of ", vocab_,
            " entries, got ", logits.size(), " and ", probs_size);
    const Token t = argmax(logits);
    const float best = logits[static_cast<std::size_t>(t)];
    require<value_error>(!std::isnan(best), "sample::Greedy: all logits are NaN");
    require<value_error>(best > -std::numeric_limits<float>::infinity(), "sample::Greedy: every logit is -inf or NaN (no token left)");
    return t;
  }

  std::size_t vocab_;
  Buffer<float> probs_;  // [vocab]
};

static_assert(Sampler<Greedy>);

}  // namespace barato::sample
