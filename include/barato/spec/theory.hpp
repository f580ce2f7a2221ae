#pragma once
/// \file
/// The arithmetic of speculative decoding (Leviathan et al. 2023, §3.1–3.4), under its model: each draft
/// is accepted independently with probability α, a draft forward costs c target forwards, and a verify
/// pass over γ+1 positions costs one target forward (true while decoding is memory-bound).
///
///   tokens per verify pass   E = (1 − α^(γ+1)) / (1 − α)  = 1 + α + … + α^γ
///   speedup over plain decoding  = E / (γ·c + 1)
///
/// The traps the formulas show: speedup < 1 whenever γ·c + 1 > E — a poor drafter (small α), an
/// expensive drafter (large c), or a γ that is too long for α. And c is the *measured* time ratio: when
/// the target itself is tiny (so a verify pass over γ+1 positions is not as cheap as one step, and
/// fixed per-forward costs dominate) the model's premise fails and speculation is slower than predicted.

#include <cmath>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"

namespace barato::spec {

namespace detail {
inline void check_alpha(double alpha, const char* who) {
  require<value_error>(alpha >= 0.0 && alpha <= 1.0, who, ": expected 0 <= alpha <= 1, got ", alpha);
}
}  // namespace detail

/// Expected tokens emitted per verify pass, (1 − α^(γ+1)) / (1 − α), evaluated as the geometric sum
/// Σ_{i=0}^{γ} α^i so α = 1 gives its limit γ + 1 exactly and α near 1 loses no precision.
/// Throws `value_error` for α outside [0, 1].
[[nodiscard]] inline double expected_tokens_per_pass(double alpha, std::size_t gamma) {
  detail::check_alpha(alpha, "spec::expected_tokens_per_pass");
  double sum = 0.0, term = 1.0;
  for (std::size_t i = 0; i <= gamma; ++i) {
    sum += term;
    term *= alpha;
  }
  return sum;
}

/// Expected wall-clock speedup over plain decoding, (1 − α^(γ+1)) / ((1 − α)(γc + 1)), for draft cost
/// ratio c = (time of one draft step) / (time of one target step) ≥ 0. `verify_cost` generalises the
/// "+1": the time of the target's forward over γ+1 positions in units of one single-token target step
/// (1 in the memory-bound regime the formula assumes; measure it on small models, where it is not).
/// Throws `value_error` for α outside [0, 1], c < 0 or verify_cost ≤ 0.
[[nodiscard]] inline double expected_speedup(double alpha, std::size_t gamma, double cost_ratio, double verify_cost = 1.0) {
  require<value_error>(cost_ratio >= 0.0 && std::isfinite(cost_ratio),
                       "spec::expected_speedup: expected a finite cost ratio c >= 0, got ", cost_ratio);
  require<value_error>(verify_cost > 0.0 && std::isfinite(verify_cost),
                       "spec::expected_speedup: expected a finite verify cost > 0, got ", verify_cost);
  return expected_tokens_per_pass(alpha, gamma) / (static_cast<double>(gamma) * cost_ratio + verify_cost);
}

/// The γ in [1, max_gamma] with the largest `expected_speedup` (the smallest such γ on ties).
[[nodiscard]] inline std::size_t best_gamma(double alpha, double cost_ratio, std::size_t max_gamma = 16) {
  require<value_error>(max_gamma >= 1, "spec::best_gamma: expected max_gamma >= 1");
  std::size_t best = 1;
  for (std::size_t g = 2; g <= max_gamma; ++g)
    if (expected_speedup(alpha, g, cost_ratio) > expected_speedup(alpha, best, cost_ratio)) best = g;
  return best;
}

/// Probability that speculative sampling accepts one draft drawn from q when the target's distribution
/// is p: β = Σ_x min(p(x), q(x)) = 1 − TV(p, q) (Leviathan et al. 2023, Def. 3.1 / Cor. 3.6). α is its
/// mean over positions. Throws `shape_error` for different sizes.
[[nodiscard]] inline double acceptance_probability(std::span<const float> p, std::span<const float> q) {
  require(p.size() == q.size(), "spec::acceptance_probability: p has ", p.size(), " entries, q ", q.size());
  double s = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) s += static_cast<double>(p[i] < q[i] ? p[i] : q[i]);
  return s;
}

}  // namespace barato::spec
