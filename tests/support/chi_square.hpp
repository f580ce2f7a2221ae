#pragma once
// Pearson's chi-square goodness-of-fit test with a proper p-value: the upper tail of the chi-square
// distribution, Q(k/2, x/2), the regularized upper incomplete gamma function — by its power series for
// x < a + 1 and by its continued fraction (modified Lentz) otherwise.

#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>

namespace barato::test {

/// Significance level of the tests' goodness-of-fit checks: a correct sampler fails one with
/// probability 10⁻³ (the seeds are fixed, so a passing test stays passing), while the biases the
/// tests look for give p-values many orders of magnitude smaller.
inline constexpr double kChiSquareAlpha = 1e-3;

/// Regularized upper incomplete gamma Q(a, x) = 1 − P(a, x), a > 0, x ≥ 0.
inline double gamma_q(double a, double x) {
  if (a <= 0 || x < 0) throw std::domain_error("gamma_q: a > 0 and x >= 0 required");
  if (x == 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {  // Σ_n x^n / ((a)(a+1)…(a+n)) · e^{−x} x^a / Γ(a)
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-16) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Q(a, x) = e^{−x} x^a / Γ(a) · 1/(x+1−a− 1·(1−a)/(x+3−a− 2·(2−a)/(x+5−a− …)))
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

/// Regularized lower incomplete gamma P(a, x).
inline double gamma_p(double a, double x) { return 1.0 - gamma_q(a, x); }

/// P(X ≥ x) for X ~ chi-square with `dof` degrees of freedom.
inline double chi_square_sf(double x, double dof) { return gamma_q(dof / 2.0, x / 2.0); }

struct ChiSquare {
  double statistic;
  std::size_t dof;
  double p_value;
};

/// Goodness of fit of `counts` (n trials) to `probs`. Cells whose expected count is below 5 are
/// pooled into one cell (the usual validity rule); cells with probability 0 must have count 0
/// (otherwise the p-value is 0).
inline ChiSquare chi_square_test(std::span<const std::size_t> counts, std::span<const double> probs) {
  double n = 0;
  for (auto c : counts) n += double(c);
  double stat = 0, pool_obs = 0, pool_exp = 0;
  std::size_t cells = 0;
  bool impossible = false;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n, o = double(counts[i]);
    if (probs[i] == 0.0) {
      impossible = impossible || counts[i] != 0;
      continue;
    }
    if (e < 5.0) {
      pool_obs += o;
      pool_exp += e;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pool_exp > 0) {
    stat += (pool_obs - pool_exp) * (pool_obs - pool_exp) / pool_exp;
    ++cells;
  }
  const std::size_t dof = cells > 1 ? cells - 1 : 1;
  return {stat, dof, impossible ? 0.0 : chi_square_sf(stat, double(dof))};
}

}  // namespace barato::test
