#pragma once
/// \file
/// Generation loops over a Llama-like model (anything with `reset`, `forward_last` and
/// `vocab_size`), with llama2.c `run.c`'s semantics:
///  - `steps` is run.c's `-n`: total positions including the prompt (BOS counts). Positions
///    0 … steps−1 are forwarded; at every position where the prompt is used up one token is sampled,
///    so n_generated = steps − n_prompt + 1 (0 when steps < n_prompt).
///  - Generation stops early when BOS (id 1) is sampled; that id is the last generated one.
///  - Temperature 0 is greedy argmax (ties → lowest id). Otherwise run.c's `sample`, in its float
///    arithmetic: softmax(logits / T), one draw of run.c's xorshift* generator per sampled token,
///    then the inverse-CDF pick over the whole distribution, or over its top-p nucleus (run.c's `-p`,
///    default 0.9; `sample_runc`). With the same logits, seed, T and p the ids are run.c's.
///  - Cached mode prefills the prompt as one block, then decodes one token per step against the
///    cache. Uncached mode (`use_cache = false`) empties the cache and recomputes the whole
///    sequence at every step (the baseline a KV cache removes).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"

namespace barato_examples {

using barato::Token;

/// Options of `generate` (designated initialisers).
struct GenerateOptions {
  std::size_t steps = 256;   ///< total positions including the prompt (run.c's -n)
  float temperature = 0.0f;  ///< 0 = greedy
  float top_p = 0.9f;        ///< run.c's -p (its default): nucleus mass when sampling; <= 0 or >= 1: no nucleus
  std::uint64_t seed = 0;    ///< sampling seed (run.c's default is the time; pass one explicitly)
  bool use_cache = true;     ///< false: recompute the whole sequence every step
};

/// What `generate` produced, with its timings.
struct GenerateResult {
  std::vector<Token> generated;  ///< sampled ids in order (ends with BOS when stopped_on_bos)
  bool stopped_on_bos = false;
  double prefill_ms = 0.0;       ///< the forward pass over the prompt (first sampled logits)
  double decode_ms = 0.0;        ///< all later forward passes
  std::size_t decode_steps = 0;  ///< number of later forward passes
  [[nodiscard]] double decode_ms_per_token() const noexcept {
    return decode_steps == 0 ? 0.0 : decode_ms / static_cast<double>(decode_steps);
  }
};

/// Index of the largest logit (the lowest id among equal maxima).
[[nodiscard]] inline Token argmax(std::span<const float> logits) noexcept {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<Token>(best);
}

/// llama2.c's xorshift* generator (random_u32 / random_f32 in run.c).
class XorshiftRng {
 public:
  explicit XorshiftRng(std::uint64_t seed) noexcept : state_(seed == 0 ? 0x9E3779B97F4A7C15ull : seed) {}
  std::uint32_t next_u32() noexcept {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  }
  /// Uniform in [0, 1).
  float next_f32() noexcept { return static_cast<float>(next_u32() >> 8) / 16777216.0f; }

 private:
  std::uint64_t state_;
};

/// One candidate of run.c's top-p draw: a probability and its id.
struct ProbIndex {
  float prob = 0.0f;
  Token index = 0;
};

/// run.c's `sample` at temperature > 0, in run.c's float arithmetic (so that the same logits, seed,
/// temperature and top_p pick run.c's id): logits[i] /= temperature; softmax (max, expf(x − max)
/// summed in float in id order, each divided by the sum); one coin = rng.next_f32(); then
///  - top_p <= 0 or >= 1: `sample_mult`, the first id whose running float sum of probabilities
///    exceeds the coin (the last id if rounding leaves none);
///  - else `sample_topp`: the ids with p >= (1 − top_p) / (n − 1), by p descending (equal p in id
///    order: a stable sort, as glibc's merge-sort qsort leaves them), cut after the first whose
///    running float sum exceeds top_p, and the first of those whose running sum exceeds
///    coin × that sum (the cut's last id if rounding leaves none).
/// `logits` becomes the probabilities; `scratch` needs logits.size() entries when 0 < top_p < 1.
/// Throws `value_error` for a temperature that is not finite and > 0, `shape_error` for a short scratch.
[[nodiscard]] inline Token sample_runc(std::span<float> logits, float temperature, float top_p, XorshiftRng& rng,
                                       std::span<ProbIndex> scratch = {}) {
  barato::require<barato::value_error>(temperature > 0.0f && std::isfinite(temperature),
                                       "sample_runc: temperature must be finite and > 0, got ", temperature);
  const std::size_t n = logits.size();
  for (float& x : logits) x /= temperature;
  float m = logits[0];
  for (const float x : logits) m = x > m ? x : m;
  float sum = 0.0f;
  for (float& x : logits) {
    x = std::exp(x - m);
    sum += x;
  }
  for (float& x : logits) x /= sum;
  const float coin = rng.next_f32();
  if (top_p <= 0.0f || top_p >= 1.0f || n < 2) {
    float cdf = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      cdf += logits[i];
      if (coin < cdf) return static_cast<Token>(i);
    }
    return static_cast<Token>(n - 1);
  }
  barato::require(scratch.size() >= n, "sample_runc: top-p scratch has ", scratch.size(), " entries, expected ", n);
  const float cutoff = (1.0f - top_p) / static_cast<float>(n - 1);
  std::size_t n0 = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (logits[i] >= cutoff) scratch[n0++] = {logits[i], static_cast<Token>(i)};
  if (n0 == 0) return argmax(logits);  // a uniform-ish distribution and a tiny top_p (run.c reads probindex[-1])
  const auto cand = scratch.first(n0);
  std::stable_sort(cand.begin(), cand.end(), [](const ProbIndex& a, const ProbIndex& b) { return a.prob > b.prob; });
  float cumulative = 0.0f;
  std::size_t last = n0 - 1;
  for (std::size_t i = 0; i < n0; ++i) {
    cumulative += cand[i].prob;
    if (cumulative > top_p) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += cand[i].prob;
    if (r < cdf) return cand[i].index;
  }
  return cand[last].index;
}

/// `sample_runc` over the whole distribution (no top-p): softmax(logits / temperature) by inverse
/// CDF; `logits` is overwritten with the probabilities. temperature must be > 0.
[[nodiscard]] inline Token sample_temperature(std::span<float> logits, float temperature, XorshiftRng& rng) {
  return sample_runc(logits, temperature, 1.0f, rng);
}

/// Runs run.c's generation loop on `model` from `prompt` (which should start with BOS). The model is
/// reset first. `logits` is caller scratch of vocab_size() floats (so the loop allocates nothing but
/// the result vector, reserved up front, and top-p's candidate list, allocated once).
template <class Model>
  requires requires(Model& m, std::span<const Token> t, std::span<float> l) {
    m.reset();
    m.forward_last(t, l);
    { m.vocab_size() } -> std::convertible_to<std::size_t>;
  }
GenerateResult generate(Model& model, std::span<const Token> prompt, const GenerateOptions& opt, std::span<float> logits) {
  using clock = std::chrono::steady_clock;
  barato::require<barato::value_error>(!prompt.empty(), "generate: the prompt must hold at least one token (BOS)");
  barato::require(logits.size() == model.vocab_size(), "generate: logits scratch has ", logits.size(), " floats, expected ",
                  model.vocab_size());
  GenerateResult r;
  const std::size_t steps = opt.steps;
  if (steps < prompt.size()) {  // run.c only feeds the prompt: nothing is sampled
    model.reset();
    if (steps > 0) {
      const auto t0 = clock::now();
      model.forward_last(prompt.first(steps), logits);
      r.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    }
    return r;
  }
  const std::size_t n_gen = steps - prompt.size() + 1;
  r.generated.reserve(n_gen);
  std::vector<Token> seq;  // whole sequence, for the uncached mode
  if (!opt.use_cache) {
    seq.reserve(steps);
    seq.assign(prompt.begin(), prompt.end());
  }
  XorshiftRng rng(opt.seed);
  const bool nucleus = opt.temperature > 0.0f && opt.top_p > 0.0f && opt.top_p < 1.0f;
  std::vector<ProbIndex> candidates(nucleus ? logits.size() : 0);  // run.c's probindex, allocated once
  const auto pick = [&] {
    return opt.temperature == 0.0f ? argmax(logits) : sample_runc(logits, opt.temperature, opt.top_p, rng, candidates);
  };

  model.reset();
  auto t0 = clock::now();
  model.forward_last(prompt, logits);
  r.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  Token next = pick();
  r.generated.push_back(next);
  if (next == 1) {
    r.stopped_on_bos = true;
    return r;
  }
  t0 = clock::now();
  while (r.generated.size() < n_gen) {
    if (opt.use_cache) {
      model.forward_last(std::span<const Token>(&next, 1), logits);
    } else {
      seq.push_back(next);
      model.reset();
      model.forward_last(seq, logits);
    }
    ++r.decode_steps;
    next = pick();
    r.generated.push_back(next);
    if (next == 1) {
      r.stopped_on_bos = true;
      break;
    }
  }
  r.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  return r;
}

}  // namespace barato_examples
