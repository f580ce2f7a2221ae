#pragma once
/// \file
/// Verification rules: given the target's logits at the γ+1 positions of one verify pass and the γ
/// drafted tokens, decide how many drafts to accept and which token to emit after them.
///
/// Rules a `requires` clause cannot express (concept `VerifyRule`):
///  - `verify(logits, drafts, q, history, rng)`: logits is [k+1, vocab] (row i = the target's next-token
///    logits after history[0, n) + drafts[0, i), n = history.size() − k), drafts is [k], q is [k, vocab]
///    (the drafter's distributions) or empty when `kNeedsDraftProbabilities` is false, and history holds
///    the committed tokens followed by the k drafts. Returns `Verdict{a, t}`: drafts[0, a) accepted
///    (a ≤ k) and t the token emitted at position n + a. Allocates nothing.
///  - The emitted sequence has exactly the distribution of sampling from the target alone
///    (greedy rule: it *is* the target's greedy sequence).

#include <concepts>
#include <cstddef>
#include <memory_resource>
#include <span>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"

namespace barato::spec {

/// The outcome of one verify pass: `accepted` drafts kept, then `next` emitted.
struct Verdict {
  std::size_t accepted;
  Token next;
};

template <class R>
concept VerifyRule = requires(R& r, std::span<const float> logits, std::span<const Token> drafts, std::span<const float> q,
                              std::span<const Token> history, sample::Rng& rng) {
  { R::kNeedsDraftProbabilities } -> std::convertible_to<bool>;
  { r.verify(logits, drafts, q, history, rng) } -> std::same_as<Verdict>;
};

/// Greedy verification: accept while the target's argmax (ties → lowest id) equals the draft; on the
/// first mismatch emit the target's argmax; if all k are accepted emit the argmax of row k (the bonus
/// token). The output is the target's greedy sequence token for token. Consumes no randomness.
/// O((a+1) · vocab).
struct GreedyVerify {
  static constexpr bool kNeedsDraftProbabilities = false;

  [[nodiscard]] Verdict verify(std::span<const float> logits, std::span<const Token> drafts, std::span<const float>,
                               std::span<const Token>, sample::Rng&) const {
    const std::size_t k = drafts.size();
    require(!logits.empty() && logits.size() % (k + 1) == 0, "spec::GreedyVerify: logits of ", logits.size(),
            " floats are not [", k + 1, ", vocab]");
    const std::size_t V = logits.size() / (k + 1);
    for (std::size_t i = 0;; ++i) {
      const Token t = sample::argmax(logits.subspan(i * V, V));
      if (i == k || t != drafts[i]) return {i, t};
    }
  }
};

/// Stochastic verification — speculative sampling (Leviathan, Kalman & Matias 2023, "Fast Inference from
/// Transformers via Speculative Decoding", Alg. 1; Chen et al. 2023, "Accelerating Large Language Model
/// Decoding with Speculative Sampling"). With p the target's sampler distribution and q the drafter's:
/// accept draft x with probability min(1, p(x)/q(x)); on the first rejection emit a token drawn from
/// normalize(max(0, p − q)); if all k are accepted draw the bonus token from row k's p. Each emitted
/// token is then distributed exactly as p (the residual makes up precisely the mass the acceptance step
/// under-samples). Consumes one uniform per examined draft plus one for the emitted token.
/// O((a+1) · (sampler cost + vocab)).
template <sample::Sampler S>
class StochasticVerify {
 public:
  static constexpr bool kNeedsDraftProbabilities = true;

  /// Verifies against `sampler`'s distribution of the target's logits (use the same sampler settings
  /// you would decode with). Buffer [vocab] from `mr`.
  explicit StochasticVerify(S sampler, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : sampler_(std::move(sampler)), p_(sampler_.vocab_size(), mr) {}

  [[nodiscard]] S& sampler() noexcept { return sampler_; }

  [[nodiscard]] Verdict verify(std::span<const float> logits, std::span<const Token> drafts, std::span<const float> q,
                               std::span<const Token> history, sample::Rng& rng) {
    const std::size_t k = drafts.size(), V = p_.size();
    require(logits.size() == (k + 1) * V && q.size() >= k * V && history.size() >= k,
            "spec::StochasticVerify: expected logits [", k + 1, ", ", V, "], q [", k, ", ", V, "] and history >= ", k,
            " tokens; got ", logits.size(), ", ", q.size(), ", ", history.size());
    const std::size_t n = history.size() - k;
    const auto p = p_.span();
    for (std::size_t i = 0;; ++i) {
      sampler_.probabilities(logits.subspan(i * V, V), history.first(n + i), p);
      if (i == k) return {k, sample::draw(p, rng)};  // all accepted: the bonus token
      const auto x = static_cast<std::size_t>(drafts[i]);
      const auto qi = q.subspan(i * V, V);
      // accept with probability min(1, p(x)/q(x)), i.e. u·q(x) < p(x) for u uniform in [0, 1)
      if (rng.uniform() * static_cast<double>(qi[x]) < static_cast<double>(p[x])) continue;
      double mass = 0.0;
      for (std::size_t j = 0; j < V; ++j) {
        p[j] = p[j] > qi[j] ? p[j] - qi[j] : 0.0f;
        mass += static_cast<double>(p[j]);
      }
      // p ≤ q everywhere can only happen through rounding when p ≈ q, where rejection has probability
      // ≈ 0; fall back to p itself rather than fail.
      if (!(mass > 0.0)) sampler_.probabilities(logits.subspan(i * V, V), history.first(n + i), p);
      return {i, sample::draw(p, rng)};
    }
  }

 private:
  S sampler_;
  Buffer<float> p_;  // [vocab] the target's distribution at the current position, then the residual
};

static_assert(VerifyRule<GreedyVerify>);

}  // namespace barato::spec
