#pragma once
// The batch::Scheduler property (tests/batch/scheduler_test.cpp and the fuzz harness
// tests/fuzz/scheduler_fuzz.cpp share it): a workload — scheduler config, pool size, requests with
// arrivals, lengths, budgets, prefix-sharing prompts — drawn from any source of numbers (a seeded
// Rng in the test, the fuzz input in the harness), run to completion on a SimExecutor with every
// plan checked before it runs, then every request's outcome checked against the request run alone.
// A violated invariant throws PropertyViolation naming the check, its line and the facts.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <concepts>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "barato/batch/batch.hpp"
#include "barato/kv/paged.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"

namespace barato::test {

/// A scheduler invariant that does not hold.
class PropertyViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
inline std::string property_text() { return {}; }
template <class T, class... Ts>
std::string property_text(const T& first, const Ts&... rest) {
  std::string s;
  if constexpr (std::is_convertible_v<const T&, std::string>) s = first;
  else s = std::to_string(first);
  return s + property_text(rest...);
}
}  // namespace detail

#define BARATO_PROPERTY(cond, ...)                                                                                      \
  do {                                                                                                                  \
    if (!(cond))                                                                                                        \
      throw ::barato::test::PropertyViolation(std::string("scheduler property, line ") + std::to_string(__LINE__) + \
                                              ": " #cond " " + ::barato::test::detail::property_text(__VA_ARGS__));    \
  } while (0)

using SchedPool = kv::PagedPool<float>;

/// The fake model's vocabulary.
inline constexpr std::size_t kSchedVocab = 48;

inline kv::PagedConfig sched_pool_config(std::size_t n_blocks, std::size_t block_tokens, std::size_t layers = 2) {
  return {.n_layers = layers, .n_kv_heads = 2, .head_dim = 4, .block_tokens = block_tokens, .n_blocks = n_blocks};
}

inline batch::TableCost sched_test_cost() {
  return batch::TableCost({.decode = {{1, 1e-3}, {8, 1.5e-3}, {64, 4e-3}}, .prefill_token_seconds = 2e-5, .context_token_seconds = 1e-7});
}

/// Temperature sampling through the request's Rng: exercises the (seed, position) stream.
inline Token sched_temperature_sampler(std::span<const float> logits, std::span<const Token>, sample::Rng& rng) {
  std::vector<float> scaled(logits.begin(), logits.end()), probs(logits.size());
  for (float& x : scaled) x *= 8.0f;
  sample::softmax_into(scaled, probs);
  return sample::draw(probs, rng);
}

/// One run's parameters.
struct SchedulerWorkload {
  batch::SchedulerConfig cfg;
  std::size_t block_tokens = 1;
  std::size_t n_blocks = 1;
  std::vector<batch::Request> requests;
};

/// A source of numbers for `make_workload`: `uni(lo, hi)` in [lo, hi] and `bits()` (64 bits).
template <class S>
concept WorkloadSource = requires(S& s, std::size_t n) {
  { s.uni(n, n) } -> std::convertible_to<std::size_t>;
  { s.bits() } -> std::convertible_to<std::uint64_t>;
};

/// A seeded Rng as a WorkloadSource.
struct RngSource {
  sample::Rng rng;
  std::size_t uni(std::size_t lo, std::size_t hi) { return lo + static_cast<std::size_t>(rng() % (hi - lo + 1)); }
  std::uint64_t bits() { return rng(); }
};

/// A workload: 1–8 slots, budgets, chunks, contexts, block sizes 1–8, 1–16 requests from 1–3 prompt
/// families sharing prefixes (sometimes too long: rejected), stop tokens, temperature sampling,
/// arrivals and priorities, and pools from "one request barely fits" (preemption) to roomy.
template <WorkloadSource S>
SchedulerWorkload make_workload(S& src) {
  const auto uni = [&](std::size_t lo, std::size_t hi) { return src.uni(lo, hi); };
  const auto rnd = [&] { return src.bits(); };
  SchedulerWorkload w;
  const std::size_t slots = uni(1, 8);
  w.cfg = {.max_slots = slots, .token_budget = uni(slots, slots + 40), .prefill_chunk = uni(1, 24), .max_context = uni(12, 96)};
  const batch::SchedulerConfig& cfg = w.cfg;
  const std::size_t B = std::size_t{1} << uni(0, 3);
  w.block_tokens = B;
  const std::size_t n_req = uni(1, 16);
  std::vector<std::vector<Token>> families(uni(1, 3));
  for (auto& f : families) {
    f.resize(uni(1, 40));
    for (Token& t : f) t = static_cast<Token>(rnd() % kSchedVocab);
  }
  w.requests.resize(n_req);
  std::size_t longest = 1;
  for (std::size_t i = 0; i < n_req; ++i) {
    batch::Request& r = w.requests[i];
    const auto& f = families[rnd() % families.size()];
    r.prompt.assign(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(uni(0, f.size())));
    for (std::size_t extra = uni(r.prompt.empty() ? 1 : 0, 12); extra > 0; --extra) r.prompt.push_back(static_cast<Token>(rnd() % kSchedVocab));
    if (rnd() % 10 == 0) r.prompt.resize(cfg.max_context + uni(0, 3), 1);  // sometimes too long: rejected
    r.max_tokens = uni(1, 40);
    if (rnd() % 3 == 0) r.stop_tokens = {static_cast<Token>(rnd() % kSchedVocab), static_cast<Token>(rnd() % kSchedVocab)};
    if (rnd() % 2 == 0) r.sampler = sched_temperature_sampler;
    r.seed = rnd();
    r.arrival = uni(0, 30);
    r.priority = static_cast<int>(uni(0, 2));
    if (r.prompt.size() + 1 <= cfg.max_context) longest = std::max(longest, std::min(r.prompt.size() + r.max_tokens, cfg.max_context));
  }
  const std::size_t min_blocks = std::max<std::size_t>(2, (longest - 1 + B - 1) / B);
  w.n_blocks = rnd() % 3 == 0 ? std::max<std::size_t>(1, min_blocks - (rnd() % 4 == 0 ? 1 : 0)) : uni(min_blocks, 4 * min_blocks + 8);
  return w;
}

/// A request's output and why it ended.
struct SchedOutcome {
  std::vector<Token> output;
  batch::FinishReason reason = batch::FinishReason::none;
};

/// The request run alone, on a pool large enough for it (every position of max_context, plus one).
inline SchedOutcome run_alone(const batch::Request& r, std::size_t max_context, std::size_t block_tokens) {
  SchedPool pool(sched_pool_config((max_context + block_tokens - 1) / block_tokens + 1, block_tokens));
  batch::Scheduler<SchedPool> s(pool, {.max_slots = 1, .token_budget = 64, .prefill_chunk = 64, .max_context = max_context});
  batch::SimExecutor<> exec(pool, kSchedVocab, sched_test_cost());
  batch::Request copy = r;
  copy.arrival = 0;
  copy.priority = 0;
  const auto id = s.submit(copy);
  (void)batch::run(s, exec, 100000);
  BARATO_PROPERTY(s.done(), "the request alone did not finish");
  return {std::vector<Token>(s.output(id).begin(), s.output(id).end()), s.finish_reason(id)};
}

/// Checks one plan against the scheduler's rules before it runs.
template <class Sched>
void check_plan(const batch::StepPlan& plan, const Sched& s, const SchedPool& pool) {
  const batch::SchedulerConfig& cfg = s.config();
  BARATO_PROPERTY(plan.tokens() <= cfg.token_budget, "step ", plan.step);
  BARATO_PROPERTY(plan.chunks.size() + plan.padding_slots <= cfg.max_slots, "step ", plan.step);
  bool seen_prefill = false;
  std::set<batch::RequestId> reqs;
  std::set<std::size_t> slots;
  std::size_t rows = 0, dec = 0, pre = 0;
  for (const batch::SeqChunk& c : plan.chunks) {
    BARATO_PROPERTY(reqs.insert(c.request).second, "request ", c.request, " twice in step ", plan.step);
    BARATO_PROPERTY(c.slot < cfg.max_slots, "slot ", c.slot);
    BARATO_PROPERTY(slots.insert(c.slot).second, "slot ", c.slot, " twice");
    BARATO_PROPERTY(!c.tokens.empty(), "empty chunk");
    if (c.decode) {
      BARATO_PROPERTY(!seen_prefill, "a decode after a prefill chunk");
      BARATO_PROPERTY(c.tokens.size() == 1, "a decode of ", c.tokens.size(), " tokens");
      BARATO_PROPERTY(c.wants_logits, "a decode without logits");
      dec += 1;
    } else {
      seen_prefill = true;
      BARATO_PROPERTY(c.tokens.size() <= cfg.prefill_chunk, "chunk of ", c.tokens.size());
      pre += c.tokens.size();
    }
    BARATO_PROPERTY(pool.size(c.seq, 0) == c.pos, "the chunk starts at ", c.pos, ", the cache holds ", pool.size(c.seq, 0));
    BARATO_PROPERTY(c.pos + c.tokens.size() <= cfg.max_context, "past max_context");
    rows += c.wants_logits ? 1 : 0;
    BARATO_PROPERTY(s.status(c.request) == batch::RequestStatus::running, "request ", c.request, " not running");
  }
  BARATO_PROPERTY(rows == plan.logits_rows, "logits rows");
  BARATO_PROPERTY(dec == plan.decode_tokens, "decode tokens");
  BARATO_PROPERTY(pre == plan.prefill_tokens, "prefill tokens");
}

inline std::size_t common_prefix(std::span<const Token> a, std::span<const Token> b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

/// What a set of runs covered.
struct SchedTotals {
  std::size_t runs = 0, preempted_runs = 0, hit_runs = 0, rejected = 0;
};

/// Runs the workload under Policy and checks: every plan (check_plan), Static's held slots, no
/// block leaked, rejected requests exactly those that can never fit, every other request finished
/// with the output and finish reason it has alone, consistent metrics, prefix hits bounded by what
/// other requests put in the cache and summing to the pool's statistics, admission order by
/// priority then arrival. `max_steps` bounds the run (a livelock is a violation).
template <class Policy>
void check_scheduler_property(const SchedulerWorkload& w, SchedTotals& totals, std::size_t max_steps = 20000) {
  const batch::SchedulerConfig& cfg = w.cfg;
  const std::size_t B = w.block_tokens, n_blocks = w.n_blocks, n_req = w.requests.size();
  SchedPool pool(sched_pool_config(n_blocks, B));
  batch::Scheduler<SchedPool, Policy> s(pool, cfg);
  batch::SimExecutor<> exec(pool, kSchedVocab, sched_test_cost(), cfg.token_budget);
  for (const batch::Request& r : w.requests) (void)s.submit(r);

  std::vector<float> logits(cfg.max_slots * kSchedVocab);
  std::size_t steps = 0;
  double clock = 0.0;
  std::vector<std::size_t> last_step(n_req, 0);
  std::size_t hold_batch_admit = static_cast<std::size_t>(-1);  // Static: step of the current batch's admission
  while (!s.done()) {
    BARATO_PROPERTY(steps < max_steps, "no progress after ", steps, " steps");
    const batch::StepPlan plan = s.schedule();
    check_plan(plan, s, pool);
    if constexpr (std::is_same_v<Policy, batch::Static>) {
      // members keep their slots: a request is admitted only at a step where no slot was held before
      for (const batch::SeqChunk& c : plan.chunks)
        if (s.metrics(c.request).admit_step == plan.step && s.metrics(c.request).preemptions == 0) {
          if (hold_batch_admit != plan.step) {
            BARATO_PROPERTY(plan.padding_slots == 0, "Static admitted beside padding");
            hold_batch_admit = plan.step;
          }
        }
      BARATO_PROPERTY(plan.padding_slots + s.running() <= cfg.max_slots, "padding + running > slots");
    }
    const std::span<float> rows(logits.data(), plan.logits_rows * kSchedVocab);
    const double secs = exec.run(plan, rows);
    clock += secs;
    s.complete(rows, secs);
    for (const batch::SeqChunk& c : plan.chunks) last_step[c.request] = plan.step;
    ++steps;
  }
  BARATO_PROPERTY(std::abs(s.clock() - clock) <= 1e-9 * std::max(1.0, clock), "clock ", s.clock(), " vs ", clock);
  BARATO_PROPERTY(pool.used_blocks() == 0, "blocks leaked: ", pool.used_blocks());
  BARATO_PROPERTY(pool.free_blocks() == n_blocks, "free blocks ", pool.free_blocks(), " of ", n_blocks);

  std::size_t hits = 0;
  bool any_preempted = false;
  for (std::size_t i = 0; i < n_req; ++i) {
    const batch::Request& r = w.requests[i];
    const auto& m = s.metrics(i);
    const bool too_long = r.prompt.size() + 1 > cfg.max_context;
    const std::size_t final_len = std::min(r.prompt.size() + r.max_tokens, cfg.max_context);
    const bool too_big = (final_len - 1 + B - 1) / B > n_blocks;
    if (too_long || too_big) {
      BARATO_PROPERTY(s.status(i) == batch::RequestStatus::rejected, "request ", i, " should be rejected");
      BARATO_PROPERTY(s.finish_reason(i) == batch::FinishReason::rejected, "request ", i);
      BARATO_PROPERTY(s.output(i).empty(), "request ", i);
      ++totals.rejected;
      continue;
    }
    BARATO_PROPERTY(s.status(i) == batch::RequestStatus::finished, "request ", i, " not finished");
    const SchedOutcome alone = run_alone(r, cfg.max_context, B);
    BARATO_PROPERTY(std::vector<Token>(s.output(i).begin(), s.output(i).end()) == alone.output, "request ", i,
                    ": output differs from its solo run (preemptions ", m.preemptions, ")");
    BARATO_PROPERTY(s.finish_reason(i) == alone.reason, "request ", i, ": finish reason differs from its solo run");
    BARATO_PROPERTY(m.generated == s.output(i).size(), "request ", i);
    BARATO_PROPERTY(m.arrival_step >= r.arrival, "request ", i);
    BARATO_PROPERTY(m.admit_step >= m.arrival_step, "request ", i);
    BARATO_PROPERTY(m.finish_step == last_step[i] + 1 - m.arrival_step, "request ", i);
    if (m.generated > 0) BARATO_PROPERTY(m.first_token_step <= m.finish_step, "request ", i);
    BARATO_PROPERTY(m.finish_seconds >= m.first_token_seconds, "request ", i);
    hits += m.prefix_hit_tokens;
    any_preempted = any_preempted || m.preemptions > 0;
    // a hit never exceeds what another request (or itself, before a preemption) put in the cache
    if (m.preemptions == 0) {
      std::size_t shared = 0;
      for (std::size_t j = 0; j < n_req; ++j) {
        if (j == i || s.status(j) == batch::RequestStatus::rejected) continue;
        std::vector<Token> other = w.requests[j].prompt;
        other.insert(other.end(), s.output(j).begin(), s.output(j).end());
        shared = std::max(shared, common_prefix(r.prompt, other));
      }
      BARATO_PROPERTY(m.prefix_hit_tokens <= std::min(shared, r.prompt.size() - 1) / B * B, "request ", i, ": hit of ",
                      m.prefix_hit_tokens, " tokens, ", shared, " shared");
    } else {
      BARATO_PROPERTY(m.prefix_hit_tokens <= (m.preemptions + 1) * (r.prompt.size() + m.generated), "request ", i);
    }
    BARATO_PROPERTY(m.prefill_tokens + m.prefix_hit_tokens >= r.prompt.size(), "request ", i);
  }
  BARATO_PROPERTY(hits == pool.prefix_stats().tokens_saved, "hits ", hits, " vs tokens_saved ", pool.prefix_stats().tokens_saved);
  // admission order: FCFS within a priority, higher priority first among those queued together
  for (std::size_t a = 0; a < n_req; ++a)
    for (std::size_t b = 0; b < n_req; ++b) {
      if (a == b || s.status(a) == batch::RequestStatus::rejected || s.status(b) == batch::RequestStatus::rejected) continue;
      const auto &ma = s.metrics(a), &mb = s.metrics(b);
      const bool a_first = ma.arrival_step != mb.arrival_step ? ma.arrival_step < mb.arrival_step : a < b;
      if (w.requests[a].priority == w.requests[b].priority && a_first)
        BARATO_PROPERTY(ma.admit_rank < mb.admit_rank, "requests ", a, " and ", b, ": FCFS order");
      if (w.requests[a].priority > w.requests[b].priority && ma.arrival_step <= mb.admit_step)
        BARATO_PROPERTY(ma.admit_rank < mb.admit_rank, "requests ", a, " and ", b, ": priority order");
    }
  ++totals.runs;
  totals.preempted_runs += any_preempted ? 1 : 0;
  totals.hit_runs += hits > 0 ? 1 : 0;
}

}  // namespace barato::test
