#pragma once
/// \file
/// `spec::Stats`: what a speculative decoder measures — per-position acceptance, the acceptance rate α,
/// tokens emitted per verify pass, and the time spent drafting and verifying.
///
/// α is estimated the way the theory defines it (each draft accepted independently with probability
/// α): accepted drafts / drafts *examined*, where a pass examines its drafts up to and including the
/// first rejected one (drafts after a rejection are never looked at). This is the maximum-likelihood
/// estimate under the geometric model behind `expected_tokens_per_pass`.

#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"

namespace barato::spec {

/// What a speculative decoder measures: per-position acceptance, α, tokens per pass, draft and verify time.
class Stats {
 public:
  /// Counters for passes of at most `max_gamma` drafts.
  explicit Stats(std::size_t max_gamma = 16, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : examined_at_(max_gamma, mr), accepted_at_(max_gamma, mr), accepted_hist_(max_gamma + 1, mr) {}

  /// Records one verify pass: `proposed` drafts, `accepted` of them kept (accepted ≤ proposed ≤ max_gamma),
  /// `emitted` tokens kept in the output (normally accepted + 1), and the seconds spent.
  void record(std::size_t proposed, std::size_t accepted, std::size_t emitted, double draft_s, double target_s) {
    require(accepted <= proposed && proposed <= max_gamma(), "spec::Stats::record: accepted ", accepted, " proposed ",
            proposed, " max_gamma ", max_gamma());
    ++passes_;
    if (proposed == 0) ++empty_passes_;
    proposed_ += proposed;
    accepted_ += accepted;
    emitted_ += emitted;
    for (std::size_t i = 0; i < accepted; ++i) ++accepted_at_[i];
    const std::size_t examined = accepted < proposed ? accepted + 1 : proposed;
    for (std::size_t i = 0; i < examined; ++i) ++examined_at_[i];
    examined_ += examined;
    ++accepted_hist_[accepted];
    draft_seconds_ += draft_s;
    target_seconds_ += target_s;
  }
  /// Clears every counter (keeps max_gamma).
  void clear() noexcept {
    for (auto* b : {&examined_at_, &accepted_at_, &accepted_hist_})
      for (auto& x : *b) x = 0;
    passes_ = empty_passes_ = proposed_ = accepted_ = examined_ = emitted_ = 0;
    draft_seconds_ = target_seconds_ = 0.0;
  }

  [[nodiscard]] std::size_t max_gamma() const noexcept { return accepted_at_.size(); }
  [[nodiscard]] std::size_t passes() const noexcept { return passes_; }
  /// Passes where the drafter proposed nothing (n-gram without a match, capacity end).
  [[nodiscard]] std::size_t empty_passes() const noexcept { return empty_passes_; }
  [[nodiscard]] std::size_t proposed() const noexcept { return proposed_; }
  [[nodiscard]] std::size_t accepted() const noexcept { return accepted_; }
  [[nodiscard]] std::size_t examined() const noexcept { return examined_; }
  [[nodiscard]] std::size_t emitted() const noexcept { return emitted_; }
  [[nodiscard]] double draft_seconds() const noexcept { return draft_seconds_; }
  [[nodiscard]] double target_seconds() const noexcept { return target_seconds_; }

  /// Acceptance rate α = accepted / examined (0 when nothing was examined).
  [[nodiscard]] double alpha() const noexcept { return examined_ == 0 ? 0.0 : double(accepted_) / double(examined_); }
  /// P(draft i accepted | draft i examined), i < max_gamma (0 when never examined).
  [[nodiscard]] double acceptance_at(std::size_t i) const noexcept {
    return examined_at_[i] == 0 ? 0.0 : double(accepted_at_[i]) / double(examined_at_[i]);
  }
  /// Number of passes in which draft position i was accepted.
  [[nodiscard]] std::size_t accepted_at(std::size_t i) const noexcept { return accepted_at_[i]; }
  /// Number of passes in which draft position i was examined.
  [[nodiscard]] std::size_t examined_at(std::size_t i) const noexcept { return examined_at_[i]; }
  /// Number of passes that accepted exactly a drafts, a ≤ max_gamma.
  [[nodiscard]] std::size_t passes_accepting(std::size_t a) const noexcept { return accepted_hist_[a]; }
  /// Mean tokens emitted per verify pass (0 before the first pass).
  [[nodiscard]] double tokens_per_pass() const noexcept { return passes_ == 0 ? 0.0 : double(emitted_) / double(passes_); }

 private:
  Buffer<std::size_t> examined_at_;    // [max_gamma]
  Buffer<std::size_t> accepted_at_;    // [max_gamma]
  Buffer<std::size_t> accepted_hist_;  // [max_gamma + 1] passes by number accepted
  std::size_t passes_ = 0, empty_passes_ = 0, proposed_ = 0, accepted_ = 0, examined_ = 0, emitted_ = 0;
  double draft_seconds_ = 0.0, target_seconds_ = 0.0;
};

}  // namespace barato::spec
