#pragma once
/// \file
/// The sampler concept and the two primitives every sampler ends with: `argmax` (greedy choice, ties →
/// lowest id) and `draw` (one categorical draw from a probability vector by inverse CDF).
///
/// A sampler turns the logits of one position into a probability vector and draws a token from it.
/// Speculative decoding needs the vector itself (the target's p and the drafter's q), so every
/// sampler exposes both halves.
///
/// Rules a `requires` clause cannot express:
///  - `probabilities(logits, history, probs)`: logits.size() == probs.size() == vocab_size(); `probs`
///    is overwritten with the distribution the sampler would draw from (non-negative, sums to 1 up to
///    rounding, masked tokens exactly 0). `history` is the sequence so far (prompt + generated), used by
///    penalties. Deterministic: no randomness is consumed. Allocates nothing.
///  - `sample(logits, history, rng)` returns the drawn token and a view of the vector it was drawn from,
///    valid until the next call on the same sampler. It equals `probabilities` followed by
///    `draw(probs, rng)` (a greedy sampler may skip the draw: it consumes no randomness).
///  - Mismatched sizes throw `barato::shape_error`; logits that leave no finite probability (all −∞,
///    NaN) throw `barato::value_error`.

#include <concepts>
#include <cstddef>
#include <limits>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/simd/ops.hpp"

namespace barato::sample {

/// What a sampler returns: the token and the probability vector [vocab] it was drawn from.
struct Sampled {
  Token token;
  std::span<const float> probs;
};

template <class S>
concept Sampler = requires(S& s, const S& cs, std::span<const float> logits, std::span<const Token> history,
                           std::span<float> probs, Rng& rng) {
  { cs.vocab_size() } -> std::convertible_to<std::size_t>;
  s.probabilities(logits, history, probs);
  { s.sample(logits, history, rng) } -> std::same_as<Sampled>;
};

/// Index of the largest element; ties go to the lowest index (so greedy decoding is reproducible
/// across kernels that only differ in summation order of *other* tokens). NaN entries are never chosen
/// unless all are NaN (then 0); a +∞ wins (the first one). O(n). Requires n ≥ 1 (0 is returned for
/// an empty span, which is not an index: callers check the size).
[[nodiscard]] inline Token argmax(std::span<const float> x) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
  return static_cast<Token>(best);
}

/// One draw from the categorical distribution `probs` (non-negative weights, any positive total): the
/// first index whose running sum exceeds u·total for u = rng.uniform() ∈ [0, 1). Zero-weight entries
/// are never drawn. Consumes exactly one `uniform()`. Throws `value_error` when the total is not a
/// positive finite number: an empty span, all zeros, a NaN or +∞ weight. Subnormal weights are
/// drawn like any other (the sum is in double). O(vocab), sums in double.
[[nodiscard]] inline Token draw(std::span<const float> probs, Rng& rng) {
  double total = 0.0;
  for (float p : probs) total += static_cast<double>(p);
  require<value_error>(total > 0.0 && total < std::numeric_limits<double>::infinity(),
                       "sample::draw: expected non-negative weights with a positive finite total, got total ", total);
  const double target = rng.uniform() * total;
  double cum = 0.0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) {
      cum += static_cast<double>(probs[i]);
      last_positive = i;
      if (cum > target) return static_cast<Token>(i);
    }
  }
  return static_cast<Token>(last_positive);  // rounding left target ≥ cum: the last token with weight
}

/// probs ← softmax(logits) (numerically stable; −∞ logits get probability exactly 0). `probs` may alias
/// `logits`. Throws `value_error` when the result is not a distribution (no logits, all logits −∞, a
/// +∞ or a NaN anywhere); equal logits give exactly 1/n each.
inline void softmax_into(std::span<const float> logits, std::span<float> probs) {
  require(logits.size() == probs.size(), "sample::softmax_into: logits has ", logits.size(), " entries, probs ",
          probs.size());
  if (probs.data() != logits.data())
    for (std::size_t i = 0; i < logits.size(); ++i) probs[i] = logits[i];
  const float m = simd::max(probs.data(), probs.size());
  require<value_error>(m > -std::numeric_limits<float>::infinity() && m < std::numeric_limits<float>::infinity(),
                       "sample: expected at least one finite logit and no +inf, got max logit ", m);
  const float s = simd::softmax(probs.data(), probs.size());
  require<value_error>(s == s, "sample: logits contain NaN");
}

}  // namespace barato::sample
