#pragma once
/// \file
/// Distillation losses over rows of logits and their gradients with respect to the student's logits.
///
/// Which convention each function uses (written out because libraries differ):
/// - `kl_divergence`, `forward_kl`, `reverse_kl`, `jsd`: plain divergences between softmax(z / T) rows,
///   in nats, **no T² factor** (they measure, they do not train).
/// - `cross_entropy` / `cross_entropy_gradient`: the hard-label loss −log softmax(z)[y] at T = 1, no factor.
/// - `kd_loss` / `kd_gradient`: KL(teacher_T ‖ student_T) times T² by default (`TemperatureScaling::squared`,
///   Hinton, Vinyals & Dean 2015 §2: the gradients of the soft term scale as 1/T², so multiplying by T²
///   keeps its weight against the hard term when T changes; DistilBERT (Sanh et al. 2019) does the same).
///   `TemperatureScaling::none` gives the bare KL (what e.g. a plain `KLDivLoss` on tempered logits computes).
/// - `mixed_loss` / `mixed_gradient`: α · cross_entropy(student, y) + (1 − α) · kd_loss(teacher, student),
///   the CE term at T = 1 and the KD term with its own scaling switch.
///
/// Gradients (z_s = student logits, p = softmax(z / T)): ∂KL(p_t ‖ p_s)/∂z_s = (p_s − p_t) / T, so
/// kd_gradient = c · (p_s − p_t) / T with c = T² (squared) or 1 (none), i.e. T · (p_s − p_t) by default;
/// ∂CE/∂z_s = softmax(z_s) − onehot(y).
///
/// Masked (−∞) logits: a token with probability 0 under the first argument of a KL contributes 0; a
/// token with p > 0 under the first argument and probability 0 under the second makes the KL +∞
/// (returned, not thrown). JSD stays finite (≤ ln 2) either way. Errors as in softmax.hpp.
/// Cost: O(vocab) per call, no allocation.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <ranges>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/distill/softmax.hpp"

namespace barato::distill {

/// Whether the distillation term is multiplied by T² (Hinton et al. 2015; DistilBERT) or left bare.
enum class TemperatureScaling {
  squared,  ///< T² · KL(teacher_T ‖ student_T): gradient T · (p_s − p_t); the default
  none,     ///< KL(teacher_T ‖ student_T): gradient (p_s − p_t) / T
};

/// Options of the distillation term: the temperature applied to both teacher and student, and the T² switch.
struct KdOptions {
  double temperature = 1.0;                                ///< T > 0, finite
  TemperatureScaling scaling = TemperatureScaling::squared;  ///< multiply by T² or not
};

/// Options of the mixed loss α · CE(hard) + (1 − α) · KD.
struct MixedOptions {
  double alpha = 0.5;  ///< weight of the hard-label cross-entropy, in [0, 1]
  KdOptions kd{};      ///< the distillation term
};

namespace detail {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// Σ_i p_i (log p_i − log q_i) with p = softmax(zp / T), q = softmax(zq / T), given both log-partitions.
template <std::floating_point F, std::floating_point G>
[[nodiscard]] double kl_rows(std::span<const F> zp, std::span<const G> zq, double t, double lse_p, double lse_q) noexcept {
  double kl = 0.0;
  for (std::size_t i = 0; i < zp.size(); ++i) {
    const double lp = static_cast<double>(zp[i]) / t - lse_p;
    if (lp == kNegInf) continue;  // p_i = 0: 0 · log 0 = 0
    const double lq = static_cast<double>(zq[i]) / t - lse_q;
    kl += std::exp(lp) * (lp - lq);  // lq = −∞ with p_i > 0 → +∞, the true value
  }
  return std::max(kl, 0.0);  // KL ≥ 0; rounding can leave −1e-17 for identical rows
}

template <Logits P, Logits Q>
void check_same_size(const P& p, const Q& q, const char* who) {
  require<shape_error>(std::ranges::size(p) == std::ranges::size(q), who, ": rows of ", std::ranges::size(p), " and ",
                       std::ranges::size(q), " logits");
}

[[nodiscard]] inline double scale_of(const KdOptions& o) noexcept {
  return o.scaling == TemperatureScaling::squared ? o.temperature * o.temperature : 1.0;
}

inline void check_alpha(double alpha, const char* who) {
  require<value_error>(alpha >= 0.0 && alpha <= 1.0, who, ": alpha must be in [0, 1], got ", alpha);
}

inline void check_target(Token y, std::size_t n, const char* who) {
  require<value_error>(y >= 0 && static_cast<std::size_t>(y) < n, who, ": target ", y, " outside [0, ", n, ")");
}

}  // namespace detail

/// KL(P ‖ Q) in nats with P = softmax(p_logits / T), Q = softmax(q_logits / T); no T² factor.
/// +∞ when P puts mass where Q has none.
template <Logits P, Logits Q>
[[nodiscard]] double kl_divergence(const P& p_logits, const Q& q_logits, double temperature = 1.0) {
  detail::check_same_size(p_logits, q_logits, "distill::kl_divergence");
  const auto zp = detail::row(p_logits);
  const auto zq = detail::row(q_logits);
  const double lp = detail::checked_lse(zp, temperature, "distill::kl_divergence");
  const double lq = detail::checked_lse(zq, temperature, "distill::kl_divergence");
  return detail::kl_rows(zp, zq, temperature, lp, lq);
}

/// Forward KL, KL(teacher_T ‖ student_T): mass-covering (the student is punished where the teacher has
/// mass and it has none). No T² factor. The divergence that `kd_loss` scales.
template <Logits P, Logits Q>
[[nodiscard]] double forward_kl(const P& teacher_logits, const Q& student_logits, double temperature = 1.0) {
  return kl_divergence(teacher_logits, student_logits, temperature);
}

/// Reverse KL, KL(student_T ‖ teacher_T): mode-seeking (the student is punished where it has mass and the
/// teacher has little). No T² factor.
template <Logits P, Logits Q>
[[nodiscard]] double reverse_kl(const P& teacher_logits, const Q& student_logits, double temperature = 1.0) {
  return kl_divergence(student_logits, teacher_logits, temperature);
}

/// Jensen–Shannon divergence ½ KL(P ‖ M) + ½ KL(Q ‖ M), M = (P + Q) / 2, in nats: symmetric, in [0, ln 2],
/// finite even when the supports differ (masked tokens). No T² factor.
template <Logits P, Logits Q>
[[nodiscard]] double jsd(const P& teacher_logits, const Q& student_logits, double temperature = 1.0) {
  detail::check_same_size(teacher_logits, student_logits, "distill::jsd");
  const auto zp = detail::row(teacher_logits);
  const auto zq = detail::row(student_logits);
  const double t = temperature;
  const double lse_p = detail::checked_lse(zp, t, "distill::jsd");
  const double lse_q = detail::checked_lse(zq, t, "distill::jsd");
  double s = 0.0;
  for (std::size_t i = 0; i < zp.size(); ++i) {
    const double lp = static_cast<double>(zp[i]) / t - lse_p;
    const double lq = static_cast<double>(zq[i]) / t - lse_q;
    const double hi = std::max(lp, lq);
    if (hi == detail::kNegInf) continue;  // both zero
    const double lm = hi + std::log1p(std::exp(std::min(lp, lq) - hi)) - std::numbers::ln2;  // log((p + q) / 2)
    if (lp != detail::kNegInf) s += std::exp(lp) * (lp - lm);
    if (lq != detail::kNegInf) s += std::exp(lq) * (lq - lm);
  }
  return std::clamp(0.5 * s, 0.0, std::numbers::ln2);
}

/// Hard-label cross-entropy −log softmax(student_logits)[target] at T = 1, in nats (+∞ if the target is
/// masked). value_error when the target is outside [0, vocab).
template <Logits S>
[[nodiscard]] double cross_entropy(const S& student_logits, Token target) {
  const auto z = detail::row(student_logits);
  detail::check_target(target, z.size(), "distill::cross_entropy");
  const double lse = detail::checked_lse(z, 1.0, "distill::cross_entropy");
  return lse - static_cast<double>(z[static_cast<std::size_t>(target)]);
}

/// Writes ∂cross_entropy/∂z = softmax(z) − onehot(target) into `grad` (size of the row) and returns
/// cross_entropy(student_logits, target).
template <Logits S, OutputRow O>
double cross_entropy_gradient(const S& student_logits, Token target, O&& grad) {
  const auto z = detail::row(student_logits);
  const auto g = detail::out_row(grad);
  require<shape_error>(g.size() == z.size(), "distill::cross_entropy_gradient: grad has ", g.size(), " elements, logits ",
                       z.size());
  detail::check_target(target, z.size(), "distill::cross_entropy_gradient");
  const double lse = detail::checked_lse(z, 1.0, "distill::cross_entropy_gradient");
  const double ce = lse - static_cast<double>(z[static_cast<std::size_t>(target)]);
  using G = typename decltype(g)::value_type;
  for (std::size_t i = 0; i < z.size(); ++i)
    g[i] = static_cast<G>(std::exp(static_cast<double>(z[i]) - lse) - (static_cast<std::size_t>(target) == i ? 1.0 : 0.0));
  return ce;
}

/// The distillation loss c · KL(teacher_T ‖ student_T), c = T² (`TemperatureScaling::squared`, default) or 1.
template <Logits P, Logits Q>
[[nodiscard]] double kd_loss(const P& teacher_logits, const Q& student_logits, const KdOptions& opt = {}) {
  return detail::scale_of(opt) * forward_kl(teacher_logits, student_logits, opt.temperature);
}

/// Writes ∂kd_loss/∂z_s = c · (p_s − p_t) / T into `grad` (size of the rows) and returns kd_loss.
/// Masked tokens of both rows get gradient 0.
template <Logits P, Logits Q, OutputRow O>
double kd_gradient(const P& teacher_logits, const Q& student_logits, const KdOptions& opt, O&& grad) {
  detail::check_same_size(teacher_logits, student_logits, "distill::kd_gradient");
  const auto zt = detail::row(teacher_logits);
  const auto zs = detail::row(student_logits);
  const auto g = detail::out_row(grad);
  require<shape_error>(g.size() == zs.size(), "distill::kd_gradient: grad has ", g.size(), " elements, logits ", zs.size());
  const double t = opt.temperature;
  const double lt = detail::checked_lse(zt, t, "distill::kd_gradient");
  const double ls = detail::checked_lse(zs, t, "distill::kd_gradient");
  const double c = detail::scale_of(opt) / t;
  using G = typename decltype(g)::value_type;
  for (std::size_t i = 0; i < zs.size(); ++i) {
    const double ps = std::exp(static_cast<double>(zs[i]) / t - ls);
    const double pt = std::exp(static_cast<double>(zt[i]) / t - lt);
    g[i] = static_cast<G>(c * (ps - pt));
  }
  return detail::scale_of(opt) * detail::kl_rows(zt, zs, t, lt, ls);
}

/// α · cross_entropy(student, target) + (1 − α) · kd_loss(teacher, student, opt.kd): the hard term at T = 1,
/// the soft term at opt.kd.temperature with its scaling switch (Hinton et al. 2015; DistilBERT).
template <Logits P, Logits Q>
[[nodiscard]] double mixed_loss(const P& teacher_logits, const Q& student_logits, Token target, const MixedOptions& opt = {}) {
  detail::check_alpha(opt.alpha, "distill::mixed_loss");
  // A term of weight 0 is skipped, not multiplied: 0 · ∞ would be NaN when that term is infinite.
  const double ce = opt.alpha > 0.0 ? opt.alpha * cross_entropy(student_logits, target) : 0.0;
  const double kd = opt.alpha < 1.0 ? (1.0 - opt.alpha) * kd_loss(teacher_logits, student_logits, opt.kd) : 0.0;
  return ce + kd;
}

/// Writes ∂mixed_loss/∂z_s = α · (softmax(z_s) − onehot(target)) + (1 − α) · kd_gradient into `grad` and
/// returns mixed_loss.
template <Logits P, Logits Q, OutputRow O>
double mixed_gradient(const P& teacher_logits, const Q& student_logits, Token target, const MixedOptions& opt, O&& grad) {
  detail::check_alpha(opt.alpha, "distill::mixed_gradient");
  const auto zs = detail::row(student_logits);
  const auto g = detail::out_row(grad);
  const double kd = kd_gradient(teacher_logits, student_logits, opt.kd, g);  // validates sizes and values
  detail::check_target(target, zs.size(), "distill::mixed_gradient");
  const double ce = opt.alpha > 0.0 ? cross_entropy(student_logits, target) : 0.0;
  const double lse = log_sum_exp(student_logits, 1.0);
  using G = typename decltype(g)::value_type;
  for (std::size_t i = 0; i < zs.size(); ++i) {
    const double ps = std::exp(static_cast<double>(zs[i]) - lse);
    const double hard = ps - (static_cast<std::size_t>(target) == i ? 1.0 : 0.0);
    g[i] = static_cast<G>(opt.alpha * hard + (1.0 - opt.alpha) * static_cast<double>(g[i]));
  }
  return (opt.alpha > 0.0 ? opt.alpha * ce : 0.0) + (opt.alpha < 1.0 ? (1.0 - opt.alpha) * kd : 0.0);
}

}  // namespace barato::distill
