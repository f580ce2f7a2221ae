#pragma once
/// \file
/// `batch::StepCost`: what a step plan costs in seconds, for the simulator (batch/simulator.hpp) —
/// and `batch::TableCost`, a cost model built from numbers the caller measured on a real model:
/// step seconds for a few decode batch sizes, seconds per prefill token, seconds per context token.
///
/// TableCost charges a plan
///   decode(R) + prefill_tokens · prefill_token_seconds + context_tokens · context_token_seconds,
/// where R = decode rows + padding slots (a static-shape executor still runs a row per finished member;
/// `CostTable::charge_padding = false` for one that skips them) and
/// decode(R) interpolates the measured (B, seconds) points linearly — clamped to the first point
/// below it, extrapolated with the last segment's slope above it. A step that only prefills pays
/// decode(1) for its one pass over the weights; an empty plan costs 0.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <utility>
#include <vector>

#include "barato/batch/step_plan.hpp"
#include "barato/core/error.hpp"

namespace barato::batch {

/// A cost model: `seconds(plan)` ≥ 0, a pure function of the plan.
template <class C>
concept StepCost = requires(const C& c, const StepPlan& plan) {
  { c.seconds(plan) } -> std::convertible_to<double>;
};

/// Measured costs TableCost interpolates (designated initialisers).
struct CostTable {
  std::vector<std::pair<std::size_t, double>> decode;  ///< (decode rows B ≥ 1, step seconds), B ascending
  double prefill_token_seconds = 0.0;                  ///< extra seconds per prefill token
  double context_token_seconds = 0.0;                  ///< extra seconds per context token attention reads
  bool charge_padding = true;  ///< padding slots cost a decode row (a static-shape executor runs them);
                               ///< false for an executor that skips finished members (barato's BatchedLlama)
};

/// The table-based cost model (see the file comment).
class TableCost {
 public:
  /// Throws `value_error` for an empty table, B = 0 or not ascending, or a negative / non-finite value.
  explicit TableCost(CostTable t) : t_(std::move(t)) {
    require<value_error>(!t_.decode.empty(), "batch::TableCost: the decode table is empty");
    for (std::size_t i = 0; i < t_.decode.size(); ++i) {
      const auto [b, s] = t_.decode[i];
      require<value_error>(b >= 1 && (i == 0 || b > t_.decode[i - 1].first), "batch::TableCost: decode batch sizes must be >= 1 and ascending, got ",
                           b, " at entry ", i);
      require<value_error>(s >= 0.0 && std::isfinite(s), "batch::TableCost: step seconds must be finite and >= 0, got ", s);
    }
    require<value_error>(t_.prefill_token_seconds >= 0.0 && std::isfinite(t_.prefill_token_seconds) &&
                             t_.context_token_seconds >= 0.0 && std::isfinite(t_.context_token_seconds),
                         "batch::TableCost: per-token seconds must be finite and >= 0");
  }

  /// Seconds of a step with `rows` decode rows (interpolated; 0 rows → 0).
  [[nodiscard]] double decode_seconds(std::size_t rows) const noexcept {
    if (rows == 0) return 0.0;
    const auto& d = t_.decode;
    if (rows <= d.front().first) return d.front().second;
    std::size_t i = 1;
    while (i + 1 < d.size() && d[i].first < rows) ++i;
    if (d.size() == 1) return d.front().second;
    const double x0 = static_cast<double>(d[i - 1].first), x1 = static_cast<double>(d[i].first);
    const double y0 = d[i - 1].second, y1 = d[i].second;
    const double y = y0 + (y1 - y0) * (static_cast<double>(rows) - x0) / (x1 - x0);
    return y > 0.0 ? y : 0.0;
  }
  /// Seconds charged for `plan`.
  [[nodiscard]] double seconds(const StepPlan& plan) const noexcept {
    std::size_t rows = plan.decode_tokens + (t_.charge_padding ? plan.padding_slots : 0);
    if (rows == 0 && plan.prefill_tokens > 0) rows = 1;
    return decode_seconds(rows) + static_cast<double>(plan.prefill_tokens) * t_.prefill_token_seconds +
           static_cast<double>(plan.context_tokens) * t_.context_token_seconds;
  }
  [[nodiscard]] const CostTable& table() const noexcept { return t_; }

 private:
  CostTable t_;
};

static_assert(StepCost<TableCost>);

}  // namespace barato::batch
