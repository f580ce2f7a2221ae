#pragma once
/// \file
/// `sample::Chain<Steps...>`: a sampler built from logits steps applied in the order written, then a
/// softmax and one categorical draw. `Chain<>` is plain sampling at temperature 1.
///
/// ```cpp
/// sample::Chain chain(vocab, sample::RepetitionPenalty{1.1f, 64}, sample::TopK{40}, sample::TopP{0.95f},
///                     sample::Temperature{0.8f});
/// sample::Rng rng(42);
/// auto [token, probs] = chain.sample(logits, history, rng);
/// ```
/// All scratch ([vocab] ids, values, marks, probabilities) is allocated at construction; a call allocates
/// nothing.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory_resource>
#include <span>
#include <tuple>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"
#include "barato/sample/steps.hpp"

namespace barato::sample {

/// A sampler made of logits steps applied in order, then a softmax and one categorical draw.
template <LogitsStep... Steps>
class Chain {
 public:
  /// A chain over `vocab` tokens; scratch from `mr`.
  Chain(std::pmr::memory_resource* mr, std::size_t vocab, Steps... steps)
      : vocab_(vocab), steps_(std::move(steps)...), index_(vocab, mr), values_(vocab, mr), mark_(vocab, mr),
        probs_(vocab, mr) {
    require(vocab > 0, "sample::Chain: expected vocab >= 1, got 0");
  }
  /// A chain over `vocab` tokens; scratch from the default memory resource.
  explicit Chain(std::size_t vocab, Steps... steps) : Chain(std::pmr::get_default_resource(), vocab, std::move(steps)...) {}

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }
  /// The steps, in application order.
  [[nodiscard]] const std::tuple<Steps...>& steps() const noexcept { return steps_; }

  /// probs ← softmax(steps(logits)), the steps applied left to right to a copy of the logits held in
  /// `probs`. O(vocab) plus the steps' cost. Throws `value_error` for NaN or +∞ logits (checked before
  /// the steps, which rank tokens by value) and for logits left all −∞; −∞ (masked) entries are allowed.
  void probabilities(std::span<const float> logits, std::span<const Token> history, std::span<float> probs) {
    require(logits.size() == vocab_ && probs.size() == vocab_, "sample::Chain: expected logits and probs of ", vocab_,
            " entries, got ", logits.size(), " and ", probs.size());
    // NaN / +∞ are refused before any step runs: the steps rank tokens by value, and a NaN has no
    // rank (a sort with it is undefined behaviour). One pass, folded into the copy.
    bool bad = false;
    for (std::size_t i = 0; i < vocab_; ++i) {
      probs[i] = logits[i];
      bad |= !(logits[i] < std::numeric_limits<float>::infinity());
    }
    require<value_error>(!bad, "sample::Chain: the logits contain NaN or +inf");
    const Workspace ws{index_.span(), values_.span(), mark_.span()};
    std::apply([&](const auto&... s) { (s.apply(probs, history, ws), ...); }, steps_);
    softmax_into(probs, probs);
  }

  /// `probabilities` then `draw` (one `rng.uniform()`); the vector is valid until the next call.
  [[nodiscard]] Sampled sample(std::span<const float> logits, std::span<const Token> history, Rng& rng) {
    probabilities(logits, history, probs_.span());
    return {draw(probs_.span(), rng), probs_.span()};
  }

 private:
  std::size_t vocab_;
  std::tuple<Steps...> steps_;
  Buffer<Token> index_;         // [vocab] step scratch
  Buffer<float> values_;        // [vocab] step scratch
  Buffer<std::uint8_t> mark_;   // [vocab] step scratch, zero between calls
  Buffer<float> probs_;         // [vocab] the last sampled distribution
};

template <class... Steps>
Chain(std::size_t, Steps...) -> Chain<Steps...>;
template <class... Steps>
Chain(std::pmr::memory_resource*, std::size_t, Steps...) -> Chain<Steps...>;

static_assert(Sampler<Chain<>>);
static_assert(Sampler<Chain<Temperature, TopK, TopP, MinP, RepetitionPenalty>>);

}  // namespace barato::sample
