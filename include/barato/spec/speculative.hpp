#pragma once
/// \file
/// `spec::Speculative<Target, D, R>`: the speculative decoding driver (Leviathan et al. 2023; Chen et al.
/// 2023). Each pass:
///   1. the drafter `D` proposes up to γ tokens x_0 … x_{γ−1} (a cheap model on its own cache, or an
///      n-gram lookup);
///   2. the target runs ONE forward over γ+1 positions — the last committed token followed by the drafts —
///      giving its next-token logits after every prefix;
///   3. the rule `R` (`GreedyVerify` or `StochasticVerify<S>`) accepts a prefix of the drafts and emits
///      one more token (the correction, or the bonus token when all were accepted);
///   4. the target rolls back with `truncate` to the committed length, so its cache equals a fresh
///      pass over the accepted tokens; the drafter rolls itself back on its next `propose`.
/// A pass emits between 1 and γ+1 tokens for one target forward, and the output is exactly what the
/// target alone would produce (greedy) or is distributed exactly as it (stochastic).
///
/// Invariant between passes: the committed sequence has n ≥ 1 tokens and the target's cache holds the
/// first n − 1 (the last committed token is the first input of the next pass).
/// A pass allocates nothing: buffers ([γ+1, vocab] logits, [γ, vocab] q, the committed ids) are sized at
/// construction from the target's capacity.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory_resource>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/spec/drafter.hpp"
#include "barato/spec/stats.hpp"
#include "barato/spec/step_model.hpp"
#include "barato/spec/verify.hpp"

namespace barato::spec {

/// Driver settings.
struct SpecOptions {
  std::size_t gamma = 4;             ///< drafts per pass (γ ≥ 1)
  std::optional<Token> stop_token = std::nullopt;  ///< `generate` stops after emitting this token (kept in the output)
};

/// The speculative decoding driver: draft γ tokens, verify them in one target pass, accept a prefix, roll back.
template <StepModel Target, Drafter D, VerifyRule R>
class Speculative {
 public:
  /// Binds `target` and `drafter` (not owned; they must outlive the driver) and takes the rule.
  /// Throws `value_error` for γ = 0 and `shape_error` when the drafter's vocabulary differs.
  Speculative(Target& target, D& drafter, R rule, SpecOptions opt = {},
              std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : target_(&target), drafter_(&drafter), rule_(std::move(rule)), opt_(opt), vocab_(target.vocab_size()),
        tokens_(target.capacity() + 1 + opt.gamma, mr), drafts_(opt.gamma, mr), logits_((opt.gamma + 1) * vocab_, mr),
        q_(R::kNeedsDraftProbabilities ? opt.gamma * vocab_ : 0, mr), stats_(opt.gamma, mr) {
    require<value_error>(opt.gamma >= 1, "spec::Speculative: expected gamma >= 1, got 0");
    require(drafter.vocab_size() == vocab_, "spec::Speculative: drafter vocab ", drafter.vocab_size(),
            " != target vocab ", vocab_);
  }

  [[nodiscard]] const SpecOptions& options() const noexcept { return opt_; }
  [[nodiscard]] const Stats& stats() const noexcept { return stats_; }
  void clear_stats() noexcept { stats_.clear(); }
  [[nodiscard]] R& rule() noexcept { return rule_; }
  /// The committed sequence: prompt followed by every emitted token.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return tokens_.span().first(n_); }

  /// Starts a sequence: resets the target and forwards prompt[0, n−1) in chunks of γ+1 (the last prompt
  /// token is the first input of the first pass). Throws `value_error` for an empty prompt and
  /// `capacity_error` when the prompt does not fit the target's cache (driver unchanged).
  void start(std::span<const Token> prompt) {
    require<value_error>(!prompt.empty(), "spec::Speculative::start: empty prompt");
    require<capacity_error>(prompt.size() <= target_->capacity(), "spec::Speculative::start: prompt of ", prompt.size(),
                            " tokens exceeds the target capacity ", target_->capacity());
    target_->reset();
    n_ = 0;
    std::copy(prompt.begin(), prompt.end(), tokens_.begin());
    const std::size_t chunk = opt_.gamma + 1;
    for (std::size_t pos = 0; pos + 1 < prompt.size(); pos += chunk) {
      const std::size_t m = std::min(chunk, prompt.size() - 1 - pos);
      target_->forward(prompt.subspan(pos, m), logits_.span().first(m * vocab_));
    }
    n_ = prompt.size();
  }

  /// One draft + verify pass emitting at most `max_emit` (≥ 1) tokens; returns them (a view valid until
  /// the next call). Throws `capacity_error` when the sequence already fills the target (n > capacity).
  std::span<const Token> step(sample::Rng& rng, std::size_t max_emit = static_cast<std::size_t>(-1)) {
    require<value_error>(n_ >= 1, "spec::Speculative::step: call start() first");
    require<capacity_error>(n_ <= target_->capacity(), "spec::Speculative::step: sequence of ", n_,
                            " tokens fills the target capacity ", target_->capacity());
    require(target_->size() + 1 == n_, "spec::Speculative::step: the target's cache holds ", target_->size(),
            " positions, expected ", n_ - 1, " (was the target used by someone else?)");
    require<value_error>(max_emit >= 1, "spec::Speculative::step: max_emit must be >= 1");
    // the verify forward writes positions n−1 … n−1+γ: γ ≤ capacity − n; a pass emits ≤ γ+1 tokens
    const std::size_t gamma = std::min({opt_.gamma, target_->capacity() - n_, max_emit - 1});
    using Clock = std::chrono::steady_clock;

    const auto t0 = Clock::now();
    const auto q = q_.span().first(R::kNeedsDraftProbabilities ? gamma * vocab_ : 0);
    const std::size_t k = gamma == 0 ? 0 : drafter_->propose(tokens(), drafts_.span().first(gamma), q, rng);
    require(k <= gamma, "spec::Speculative::step: the drafter proposed ", k, " tokens, at most ", gamma, " allowed");
    const auto t1 = Clock::now();

    std::copy_n(drafts_.begin(), k, tokens_.begin() + n_);
    const auto input = std::span<const Token>(tokens_.span()).subspan(n_ - 1, k + 1);
    const auto logits = logits_.span().first((k + 1) * vocab_);
    target_->forward(input, logits);
    const Verdict v = rule_.verify(logits, std::span<const Token>(drafts_.span()).first(k), q.first(R::kNeedsDraftProbabilities ? k * vocab_ : 0),
                                   std::span<const Token>(tokens_.span()).first(n_ + k), rng);
    target_->truncate(n_ + v.accepted);  // = committed length after the pass − 1
    tokens_[n_ + v.accepted] = v.next;
    const std::size_t first = n_;
    n_ += v.accepted + 1;
    const auto t2 = Clock::now();

    stats_.record(k, v.accepted, v.accepted + 1, seconds(t1 - t0), seconds(t2 - t1));
    return tokens_.span().subspan(first, v.accepted + 1);
  }

  /// Rolls the committed sequence back to its first `n` tokens (1 ≤ n ≤ current length): used to cut
  /// a pass's output after a stop token. The statistics are not rewound (they count the work done).
  void rollback(std::size_t n) {
    require(n >= 1 && n <= n_, "spec::Speculative::rollback: expected 1 <= n <= ", n_, ", got ", n);
    target_->truncate(n - 1);
    n_ = n;
  }

  /// Decodes up to `max_new` tokens after `prompt` (fewer if the stop token is emitted) and returns
  /// them. Throws `capacity_error` up front when prompt.size() + max_new exceeds capacity + 1 (the
  /// last token is sampled but never forwarded, as in plain decoding).
  [[nodiscard]] std::vector<Token> generate(std::span<const Token> prompt, std::size_t max_new, sample::Rng& rng) {
    require<capacity_error>(prompt.size() + max_new <= target_->capacity() + 1, "spec::Speculative::generate: ",
                            prompt.size(), " prompt + ", max_new, " new tokens exceed the target capacity ",
                            target_->capacity(), " + 1");
    start(prompt);
    const std::size_t end = n_ + max_new;
    while (n_ < end) {
      const auto out = step(rng, end - n_);
      if (opt_.stop_token) {
        const auto it = std::find(out.begin(), out.end(), *opt_.stop_token);
        if (it != out.end()) {
          rollback(n_ - out.size() + static_cast<std::size_t>(it - out.begin()) + 1);
          break;
        }
      }
    }
    return {tokens_.begin() + static_cast<std::ptrdiff_t>(prompt.size()), tokens_.begin() + static_cast<std::ptrdiff_t>(n_)};
  }

 private:
  template <class Dur>
  static double seconds(Dur d) noexcept {
    return std::chrono::duration<double>(d).count();
  }

  Target* target_;
  D* drafter_;
  R rule_;
  SpecOptions opt_;
  std::size_t vocab_;
  Buffer<Token> tokens_;  // [capacity + 1 + γ] committed ids, then the current drafts
  std::size_t n_ = 0;     // committed length; target_->size() == n_ − 1 between passes
  Buffer<Token> drafts_;  // [γ]
  Buffer<float> logits_;  // [γ+1, vocab] the verify pass's target logits
  Buffer<float> q_;       // [γ, vocab] the drafter's distributions (empty for greedy verification)
  Stats stats_;
};

}  // namespace barato::spec
