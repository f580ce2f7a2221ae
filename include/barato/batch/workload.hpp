#pragma once
/// \file
/// `batch::skewed_workload`: a seeded, reproducible set of requests with the skewed output lengths
/// of chat traffic (most answers short, a few very long), for the batching benchmark and tutorial.
///
/// Output lengths are stratified log-normal: the n quantiles median · exp(σ · Φ⁻¹((i + ½) / n)),
/// clamped to [1, max_output], in an order shuffled by the seed — so the median, the longest and the
/// total are properties of (n, median, σ), not of luck: n = 64, median 18, σ = 1.05 gives median 18,
/// longest 228 and 1,959 tokens in total. Prompts are random tokens (uniform lengths in
/// [prompt_min, prompt_max]) after an optional prefix shared by every request; arrivals are a
/// Poisson process with mean gap `arrival_gap` steps (0 = everything at step 0). The generated
/// requests are greedy, with no stop tokens: each output is exactly its max_tokens.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "barato/batch/request.hpp"
#include "barato/core/error.hpp"
#include "barato/sample/rng.hpp"

namespace barato::batch {

/// Parameters of `skewed_workload` (designated initialisers).
struct WorkloadConfig {
  std::size_t requests = 64;        ///< how many
  double median_output = 18.0;      ///< median of the output lengths
  double sigma = 1.05;              ///< log-normal spread of the output lengths
  std::size_t max_output = 512;     ///< output lengths are clamped to this
  std::size_t prompt_min = 16;      ///< shortest prompt (shared prefix included)
  std::size_t prompt_max = 64;      ///< longest prompt
  std::size_t shared_prefix = 0;    ///< leading tokens common to every prompt (≤ prompt_min)
  double arrival_gap = 0.0;         ///< mean steps between arrivals (0 = all at step 0)
  std::size_t vocab = 64;           ///< tokens are drawn from [0, vocab)
  std::uint64_t seed = 1;           ///< everything random comes from this
};

/// Φ⁻¹(p), the standard normal quantile, by bisection on erfc (|error| < 1e-12; 0 < p < 1).
[[nodiscard]] inline double normal_quantile(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-13; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

/// The requests of the workload `cfg` (see the file comment), in arrival order. Throws
/// `value_error` for 0 requests, an empty vocab, prompt_min = 0 or > prompt_max, a shared prefix
/// longer than prompt_min, or a non-positive median.
[[nodiscard]] inline std::vector<Request> skewed_workload(const WorkloadConfig& cfg) {
  require<value_error>(cfg.requests > 0 && cfg.vocab > 0 && cfg.prompt_min > 0 && cfg.prompt_min <= cfg.prompt_max &&
                           cfg.shared_prefix <= cfg.prompt_min && cfg.median_output > 0.0 && cfg.max_output > 0 &&
                           cfg.arrival_gap >= 0.0,
                       "batch::skewed_workload: bad WorkloadConfig (requests, vocab, prompt_min > 0; prompt_min <= prompt_max; "
                       "shared_prefix <= prompt_min; median_output, max_output > 0; arrival_gap >= 0)");
  const std::size_t n = cfg.requests;
  std::vector<std::size_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double q = cfg.median_output * std::exp(cfg.sigma * normal_quantile((static_cast<double>(i) + 0.5) / static_cast<double>(n)));
    out[i] = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(q)), 1, cfg.max_output);
  }
  sample::Rng rng(cfg.seed);
  for (std::size_t i = n; i-- > 1;) std::swap(out[i], out[rng() % (i + 1)]);  // Fisher–Yates
  std::vector<Token> prefix(cfg.shared_prefix);
  for (Token& t : prefix) t = static_cast<Token>(rng() % cfg.vocab);
  std::vector<Request> reqs(n);
  double t_arrive = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    Request& r = reqs[i];
    const std::size_t len = cfg.prompt_min + static_cast<std::size_t>(rng() % (cfg.prompt_max - cfg.prompt_min + 1));
    r.prompt = prefix;
    while (r.prompt.size() < len) r.prompt.push_back(static_cast<Token>(rng() % cfg.vocab));
    r.max_tokens = out[i];
    r.seed = cfg.seed * 1000003 + i;
    if (cfg.arrival_gap > 0.0 && i > 0) t_arrive += -std::log(1.0 - rng.uniform()) * cfg.arrival_gap;
    r.arrival = static_cast<std::size_t>(t_arrive);
  }
  return reqs;
}

}  // namespace barato::batch
