#pragma once
/// \file
/// `batch::RequestMetrics` (what a scheduler records per request, in steps and in seconds) and
/// `batch::Summary` / `batch::summarize` (throughput and latency aggregates of a finished run).
///
/// Clock: the scheduler's clock starts at 0 and advances by the `step_seconds` given to each
/// `complete()`. A request arrives at the start of the step at which it is queued (its arrival step,
/// or the first step after its submission when that is later). Latencies in steps count whole
/// steps from that start to the end of the step that produced the token: a request arriving at step
/// 3 whose first token is sampled at the end of step 3 has TTFT 1 step.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "barato/batch/request.hpp"

namespace barato::batch {

/// Everything a scheduler records about one request.
struct RequestMetrics {
  std::size_t arrival_step = 0;     ///< step at which it entered the queue
  double arrival_seconds = 0.0;     ///< clock at the start of that step
  std::size_t admit_step = 0;       ///< step of its first admission
  std::size_t admit_rank = 0;       ///< its place in the order of first admissions (0 = admitted first)
  double admit_seconds = 0.0;       ///< clock at the start of that step
  std::size_t first_token_step = 0; ///< steps from arrival to the end of the step of its first token
  double first_token_seconds = 0.0; ///< seconds from arrival to that point (TTFT)
  std::size_t finish_step = 0;      ///< steps from arrival to the end of its last step (end-to-end)
  double finish_seconds = 0.0;      ///< seconds from arrival to that point (end-to-end latency)
  std::size_t generated = 0;        ///< tokens output
  std::size_t preemptions = 0;      ///< times it was preempted (recomputed later)
  std::size_t prefix_hit_tokens = 0;  ///< prefill positions skipped thanks to the prefix cache (all admissions)
  std::size_t prefill_tokens = 0;   ///< prefill positions computed (recomputation after preemption included)

  /// Steps waited in the queue before the first admission.
  [[nodiscard]] std::size_t queue_steps() const noexcept { return admit_step - arrival_step; }
  /// Seconds waited in the queue before the first admission.
  [[nodiscard]] double queue_seconds() const noexcept { return admit_seconds - arrival_seconds; }
  /// Time per output token after the first, in steps (0 for ≤ 1 token).
  [[nodiscard]] double tpot_steps() const noexcept {
    return generated > 1 ? static_cast<double>(finish_step - first_token_step) / static_cast<double>(generated - 1) : 0.0;
  }
  /// Time per output token after the first, in seconds (0 for ≤ 1 token).
  [[nodiscard]] double tpot_seconds() const noexcept {
    return generated > 1 ? (finish_seconds - first_token_seconds) / static_cast<double>(generated - 1) : 0.0;
  }
};

/// Mean, median and 99th percentile of one latency.
struct LatencyStats {
  double mean = 0.0;  ///< arithmetic mean
  double p50 = 0.0;   ///< median (nearest rank)
  double p99 = 0.0;   ///< 99th percentile (nearest rank)
};

/// Aggregates of a run: throughput and latency distribution over the finished requests.
struct Summary {
  std::size_t requests = 0;         ///< requests that finished (rejected ones excluded)
  std::size_t rejected = 0;         ///< requests rejected
  std::size_t steps = 0;            ///< steps run
  double seconds = 0.0;             ///< clock at the end
  std::size_t tokens = 0;           ///< tokens generated
  std::size_t preemptions = 0;      ///< preemptions in total
  std::size_t prefix_hit_tokens = 0;  ///< prefill positions skipped in total
  double tokens_per_second = 0.0;   ///< tokens / seconds
  double tokens_per_step = 0.0;     ///< tokens / steps
  LatencyStats latency_seconds;     ///< end-to-end latency, seconds
  LatencyStats latency_steps;       ///< end-to-end latency, steps
  LatencyStats ttft_seconds;        ///< time to first token, seconds
  LatencyStats ttft_steps;          ///< time to first token, steps
};

/// Mean and nearest-rank p50 / p99 of `v` (sorted in place); zeros when empty.
[[nodiscard]] inline LatencyStats latency_stats(std::vector<double>& v) {
  LatencyStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  const auto rank = [&](double q) {
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(r, 1, v.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  return s;
}

/// The aggregates of a run of `steps` steps ending at clock `seconds`, over per-request metrics and
/// finish reasons (requests not finished are left out). Allocates; call it after a run.
[[nodiscard]] inline Summary summarize(std::span<const RequestMetrics> m, std::span<const FinishReason> reasons,
                                       std::size_t steps, double seconds) {
  Summary s;
  s.steps = steps;
  s.seconds = seconds;
  std::vector<double> lat_s, lat_n, ttft_s, ttft_n;
  for (std::size_t i = 0; i < m.size() && i < reasons.size(); ++i) {
    if (reasons[i] == FinishReason::rejected) { ++s.rejected; continue; }
    if (reasons[i] == FinishReason::none) continue;
    ++s.requests;
    s.tokens += m[i].generated;
    s.preemptions += m[i].preemptions;
    s.prefix_hit_tokens += m[i].prefix_hit_tokens;
    lat_s.push_back(m[i].finish_seconds);
    lat_n.push_back(static_cast<double>(m[i].finish_step));
    if (m[i].generated > 0) {
      ttft_s.push_back(m[i].first_token_seconds);
      ttft_n.push_back(static_cast<double>(m[i].first_token_step));
    }
  }
  s.tokens_per_second = seconds > 0.0 ? static_cast<double>(s.tokens) / seconds : 0.0;
  s.tokens_per_step = steps > 0 ? static_cast<double>(s.tokens) / static_cast<double>(steps) : 0.0;
  s.latency_seconds = latency_stats(lat_s);
  s.latency_steps = latency_stats(lat_n);
  s.ttft_seconds = latency_stats(ttft_s);
  s.ttft_steps = latency_stats(ttft_n);
  return s;
}

}  // namespace barato::batch
