#pragma once
/// \file
/// Softmax with a temperature, its logarithm and the soft targets of knowledge distillation
/// (Hinton, Vinyals & Dean 2015, "Distilling the Knowledge in a Neural Network", arXiv:1503.02531):
///     p_i(T) = exp(z_i / T) / Σ_j exp(z_j / T).
/// T > 1 flattens the distribution (the "dark knowledge" of the small probabilities becomes visible),
/// T < 1 sharpens it, T = 1 is the model's own distribution.
///
/// Conventions shared by the whole distill area:
/// - logits are any contiguous range of `float` or `double` (`std::vector`, `std::span`, arrays);
///   every sum is accumulated in double and every log-partition is a log-sum-exp (max subtracted);
/// - a logit of −∞ is a masked token: probability exactly 0, log-probability −∞, no NaN anywhere;
/// - NaN or +∞ logits, a row with every logit −∞, a temperature that is not finite and > 0 throw
///   `barato::value_error`; mismatched sizes and empty rows throw `barato::shape_error`.
/// Cost: O(n) per call, no allocation.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/error.hpp"

namespace barato::distill {

/// A row of logits: a contiguous range of float or double (read only).
template <class R>
concept Logits = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                 std::floating_point<std::ranges::range_value_t<R>>;

/// A writable row of float or double (probabilities, log-probabilities, gradients).
template <class R>
concept OutputRow = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                    std::floating_point<std::ranges::range_value_t<R>> &&
                    !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

namespace detail {

/// The elements of a logits range as a span (no copy).
template <Logits R>
[[nodiscard]] auto row(const R& r) noexcept {
  using F = std::ranges::range_value_t<R>;
  return std::span<const F>(std::ranges::data(r), std::ranges::size(r));
}

/// The elements of an output range as a span (no copy).
template <OutputRow R>
[[nodiscard]] auto out_row(R&& r) noexcept {
  using F = std::ranges::range_value_t<R>;
  return std::span<F>(std::ranges::data(r), std::ranges::size(r));
}

/// Throws value_error unless T is finite and > 0.
inline void check_temperature(double temperature, const char* who) {
  require<value_error>(std::isfinite(temperature) && temperature > 0.0, who, ": temperature must be finite and > 0, got ",
                       temperature);
}

/// Throws value_error on NaN or +∞ logits (−∞ = masked is allowed), shape_error on an empty row.
template <std::floating_point F>
void check_logits(std::span<const F> z, const char* who) {
  require<shape_error>(!z.empty(), who, ": empty logits row");
  for (std::size_t i = 0; i < z.size(); ++i) {
    const F x = z[i];
    if (std::isnan(x) || x == std::numeric_limits<F>::infinity()) [[unlikely]]
      barato::detail::fail<value_error>(who, ": logit ", i, " is ", static_cast<double>(x),
                                        " (expected a finite number or -inf for a masked token)");
  }
}

/// log Σ_i exp(z_i / T), in double; value_error when every logit is −∞ (no mass to normalise).
template <std::floating_point F>
[[nodiscard]] double log_sum_exp(std::span<const F> z, double temperature, const char* who) {
  double m = -std::numeric_limits<double>::infinity();
  for (const F x : z) m = std::max(m, static_cast<double>(x) / temperature);
  require<value_error>(m != -std::numeric_limits<double>::infinity(), who,
                       ": every logit is -inf (every token masked), nothing to normalise");
  double s = 0.0;
  for (const F x : z) s += std::exp(static_cast<double>(x) / temperature - m);  // exp(−∞) = 0 for masked tokens
  return m + std::log(s);
}

/// Validates z and T and returns log Σ exp(z / T).
template <std::floating_point F>
[[nodiscard]] double checked_lse(std::span<const F> z, double temperature, const char* who) {
  check_temperature(temperature, who);
  check_logits(z, who);
  return log_sum_exp(z, temperature, who);
}

}  // namespace detail

/// log Σ_i exp(z_i / T) (the log-partition at temperature T), max-subtracted, in double.
template <Logits R>
[[nodiscard]] double log_sum_exp(const R& logits, double temperature = 1.0) {
  return detail::checked_lse(detail::row(logits), temperature, "distill::log_sum_exp");
}

/// out_i = log softmax(z / T)_i = z_i / T − log Σ_j exp(z_j / T); −∞ for a masked token.
/// `out` has the size of `logits` (shape_error otherwise).
template <Logits R, OutputRow O>
void log_softmax(const R& logits, double temperature, O&& out) {
  const auto z = detail::row(logits);
  const auto o = detail::out_row(out);
  require<shape_error>(o.size() == z.size(), "distill::log_softmax: out has ", o.size(), " elements, logits ", z.size());
  const double lse = detail::checked_lse(z, temperature, "distill::log_softmax");
  using G = typename decltype(o)::value_type;
  for (std::size_t i = 0; i < z.size(); ++i) o[i] = static_cast<G>(static_cast<double>(z[i]) / temperature - lse);
}

/// out = softmax(z / T): probabilities that sum to 1 (up to the rounding of `out`'s type); exactly 0 for
/// a masked (−∞) token. `out` has the size of `logits` (shape_error otherwise).
template <Logits R, OutputRow O>
void softmax(const R& logits, double temperature, O&& out) {
  const auto z = detail::row(logits);
  const auto o = detail::out_row(out);
  require<shape_error>(o.size() == z.size(), "distill::softmax: out has ", o.size(), " elements, logits ", z.size());
  const double lse = detail::checked_lse(z, temperature, "distill::softmax");
  using G = typename decltype(o)::value_type;
  for (std::size_t i = 0; i < z.size(); ++i) o[i] = static_cast<G>(std::exp(static_cast<double>(z[i]) / temperature - lse));
}

/// The soft targets of distillation: the teacher's distribution at temperature T, softmax(z_teacher / T)
/// (Hinton et al. 2015, eq. 1). The same numbers as `softmax`; the name says what they are for.
template <Logits R, OutputRow O>
void soft_targets(const R& teacher_logits, double temperature, O&& out) {
  softmax(teacher_logits, temperature, std::forward<O>(out));
}

}  // namespace barato::distill
