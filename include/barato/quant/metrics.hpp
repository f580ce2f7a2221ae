#pragma once
/// \file
/// Quality metrics of a quantized matrix: the relative Frobenius error ‖W − Ŵ‖ / ‖W‖, and the outlier
/// statistics of a weight (or activation) set that explain it — mean |w|, standard deviation, max |w|,
/// max / std, and how many values lie beyond k standard deviations (Dettmers et al., LLM.int8(), 2022,
/// on why a few large values ruin a shared absmax scale). Accumulated in double; O(n).

#include <cmath>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"

namespace barato::quant {

/// ‖w − w_hat‖₂ / ‖w‖₂ over all elements (0 when both are zero; +∞ when only w is zero).
/// Throws `shape_error` when the sizes differ.
[[nodiscard]] inline double relative_error(std::span<const float> w, std::span<const float> w_hat) {
  require(w.size() == w_hat.size(), "quant::relative_error: w has ", w.size(), " elements, w_hat has ", w_hat.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double d = double(w[i]) - double(w_hat[i]);
    num += d * d;
    den += double(w[i]) * double(w[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

/// Outlier statistics of a set of values (see `outlier_stats`).
struct OutlierStats {
  std::size_t n = 0;          ///< number of values
  double mean_abs = 0;        ///< mean |w|
  double mean = 0;            ///< mean w
  double std = 0;             ///< population standard deviation of w
  double max_abs = 0;         ///< max |w|
  double max_over_std = 0;    ///< max |w| / std (0 when std = 0)
  double k = 0;               ///< the threshold, in standard deviations
  std::size_t beyond = 0;     ///< count of |w − mean| > k · std
  double share_beyond = 0;    ///< beyond / n
};

/// Statistics of `w` with outliers counted beyond `k` standard deviations from the mean.
/// Throws `value_error` when k ≤ 0. An empty span gives all zeros.
[[nodiscard]] inline OutlierStats outlier_stats(std::span<const float> w, double k = 6.0) {
  require<value_error>(k > 0, "quant::outlier_stats: k must be > 0, got ", k);
  OutlierStats s;
  s.n = w.size();
  s.k = k;
  if (w.empty()) return s;
  double sum = 0, sum_abs = 0;
  for (float v : w) {
    sum += v;
    sum_abs += std::fabs(double(v));
    s.max_abs = std::fabs(double(v)) > s.max_abs ? std::fabs(double(v)) : s.max_abs;
  }
  s.mean = sum / double(s.n);
  s.mean_abs = sum_abs / double(s.n);
  double var = 0;
  for (float v : w) var += (double(v) - s.mean) * (double(v) - s.mean);
  s.std = std::sqrt(var / double(s.n));
  s.max_over_std = s.std > 0 ? s.max_abs / s.std : 0.0;
  for (float v : w) s.beyond += std::fabs(double(v) - s.mean) > k * s.std ? 1 : 0;
  s.share_beyond = double(s.beyond) / double(s.n);
  return s;
}

}  // namespace barato::quant
