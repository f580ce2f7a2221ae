#pragma once
/// \file
/// Top-k sparse distillation: the teacher's k largest logits per position are cached (ids + logits, k
/// floats and k ids instead of a vocabulary row), and the student is trained on them.
///
/// Renormalisation (the choice made here): both distributions are renormalised over the same k ids —
///     p_j = softmax(teacher_logits / T)_j            over the k cached entries,
///     q_j = exp(s[id_j] / T) / Σ_{l<k} exp(s[id_l] / T)   the student restricted to the k ids,
///     sparse_kd_loss = c · Σ_j p_j (log p_j − log q_j),   c = T² or 1 as in losses.hpp (`KdOptions`).
/// The loss is a KL between two distributions on the k ids, ≥ 0, and 0 exactly when the student's logits
/// at the k ids equal the teacher's up to a constant; it ignores the student's tail outside the k ids
/// (its gradient there is 0), so it does not push the tail down — pair it with the hard-label CE (or
/// a large enough k) when the tail matters. Gradient w.r.t. s[id_j]: c · (q_j − p_j) / T.
/// Errors as in softmax.hpp; ids outside [0, vocab) throw value_error; ids must be distinct (checked in
/// debug builds). Cost: O(k) per call for the losses, O(vocab · k) worst case (O(vocab) typical) for
/// `top_k`; no allocation.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/distill/losses.hpp"
#include "barato/distill/softmax.hpp"

namespace barato::distill {

/// Writes the k = ids.size() largest logits of `logits` and their ids, largest first (ties: the lower id
/// first). `values.size()` must equal `ids.size()`, 1 ≤ k ≤ vocab (shape_error otherwise); NaN / +∞ logits
/// throw value_error. −∞ logits can be selected when fewer than k tokens are unmasked.
template <Logits R>
void top_k(const R& logits, std::span<Token> ids, std::span<float> values) {
  const auto z = detail::row(logits);
  const std::size_t k = ids.size();
  require<shape_error>(values.size() == k, "distill::top_k: ", k, " ids but ", values.size(), " values");
  require<shape_error>(k >= 1 && k <= z.size(), "distill::top_k: k = ", k, " must be in [1, ", z.size(), "]");
  detail::check_logits(z, "distill::top_k");
  std::size_t filled = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const float x = static_cast<float>(z[i]);
    if (filled == k && !(x > values[k - 1])) continue;  // not better than the current k-th (ties keep the lower id)
    std::size_t j = filled < k ? filled++ : k - 1;
    while (j > 0 && x > values[j - 1]) {  // insertion: shift smaller entries down
      values[j] = values[j - 1];
      ids[j] = ids[j - 1];
      --j;
    }
    values[j] = x;
    ids[j] = static_cast<Token>(i);
  }
}

namespace detail {

/// Validates a cached top-k entry against the student row; returns the teacher's log-partition over k.
template <Logits S>
double check_sparse(std::span<const Token> ids, std::span<const float> teacher, const S& student, double t, const char* who) {
  require<shape_error>(ids.size() == teacher.size(), who, ": ", ids.size(), " ids but ", teacher.size(), " teacher logits");
  const auto zs = row(student);
  for (std::size_t j = 0; j < ids.size(); ++j) {
    require<value_error>(ids[j] >= 0 && static_cast<std::size_t>(ids[j]) < zs.size(), who, ": id ", ids[j], " outside [0, ",
                         zs.size(), ")");
    for (std::size_t l = 0; l < j; ++l) BARATO_ASSERT(ids[l] != ids[j]);
  }
  return checked_lse(teacher, t, who);
}

/// log Σ_j exp(s[id_j] / T) for the student restricted to the ids (validates the gathered logits).
template <std::floating_point F>
double restricted_lse(std::span<const Token> ids, std::span<const F> zs, double t, const char* who) {
  double m = kNegInf;
  for (const Token id : ids) {
    const F x = zs[static_cast<std::size_t>(id)];
    if (std::isnan(x) || x == std::numeric_limits<F>::infinity()) [[unlikely]]
      barato::detail::fail<value_error>(who, ": student logit of id ", id, " is ", static_cast<double>(x));
    m = std::max(m, static_cast<double>(x) / t);
  }
  require<value_error>(m != kNegInf, who, ": the student masks every one of the k ids");
  double s = 0.0;
  for (const Token id : ids) s += std::exp(static_cast<double>(zs[static_cast<std::size_t>(id)]) / t - m);
  return m + std::log(s);
}

}  // namespace detail

/// c · KL(p ‖ q) over the k cached ids, both renormalised over those ids (see the file comment);
/// c = T² (`TemperatureScaling::squared`, default) or 1. `student_logits` is the full vocabulary row.
template <Logits S>
[[nodiscard]] double sparse_kd_loss(std::span<const Token> ids, std::span<const float> teacher_logits, const S& student_logits,
                                    const KdOptions& opt = {}) {
  const char* who = "distill::sparse_kd_loss";
  const double t = opt.temperature;
  const double lt = detail::check_sparse(ids, teacher_logits, student_logits, t, who);
  const auto zs = detail::row(student_logits);
  const double ls = detail::restricted_lse(ids, zs, t, who);
  double kl = 0.0;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const double lp = static_cast<double>(teacher_logits[j]) / t - lt;
    if (lp == detail::kNegInf) continue;
    const double lq = static_cast<double>(zs[static_cast<std::size_t>(ids[j])]) / t - ls;
    kl += std::exp(lp) * (lp - lq);
  }
  return detail::scale_of(opt) * std::max(kl, 0.0);
}

/// Writes ∂sparse_kd_loss/∂s[id_j] = c · (q_j − p_j) / T into grad[j] (size k; the gradient w.r.t. every
/// other student logit is 0) and returns sparse_kd_loss.
template <Logits S>
double sparse_kd_gradient(std::span<const Token> ids, std::span<const float> teacher_logits, const S& student_logits,
                          const KdOptions& opt, std::span<double> grad) {
  const char* who = "distill::sparse_kd_gradient";
  require<shape_error>(grad.size() == ids.size(), who, ": grad has ", grad.size(), " elements, k = ", ids.size());
  const double t = opt.temperature;
  const double lt = detail::check_sparse(ids, teacher_logits, student_logits, t, who);
  const auto zs = detail::row(student_logits);
  const double ls = detail::restricted_lse(ids, zs, t, who);
  const double c = detail::scale_of(opt);
  double kl = 0.0;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const double lp = static_cast<double>(teacher_logits[j]) / t - lt;
    const double lq = static_cast<double>(zs[static_cast<std::size_t>(ids[j])]) / t - ls;
    const double p = std::exp(lp);
    if (lp != detail::kNegInf) kl += p * (lp - lq);
    grad[j] = c * (std::exp(lq) - p) / t;
  }
  return c * std::max(kl, 0.0);
}

}  // namespace barato::distill
