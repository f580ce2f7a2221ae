// batch::Scheduler: a property test over random workloads (arrivals, prompt and output lengths,
// budgets, slot counts, pool sizes down to ones that force preemption, prefix-sharing prompts)
// against each request run alone (support/scheduler_property.hpp, shared with the fuzz harness
// tests/fuzz/scheduler_fuzz.cpp), plus the policies, rejections, errors and the no-allocation rule.
// The fake model (batch/simulator.hpp) keeps its state in the pool's K rows, so any mix-up of
// sequences, blocks, prefix hits or recomputation changes the output.

#include "support/alloc_counter.hpp"
#include "support/fault_injection.hpp"
#include "support/scheduler_property.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <memory_resource>
#include <set>
#include <vector>

#include "barato/batch/batch.hpp"
#include "barato/kv/paged.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"

namespace {

using namespace barato;
using batch::FinishReason;
using batch::Request;
using batch::RequestStatus;
using batch::SchedulerConfig;
using Pool = kv::PagedPool<float>;

constexpr std::size_t kVocab = test::kSchedVocab;
using Outcome = test::SchedOutcome;
using test::run_alone;

kv::PagedConfig pool_config(std::size_t n_blocks, std::size_t block_tokens, std::size_t layers = 2) {
  return test::sched_pool_config(n_blocks, block_tokens, layers);
}
batch::TableCost test_cost() { return test::sched_test_cost(); }
constexpr auto temperature_sampler = test::sched_temperature_sampler;

/// The property (support/scheduler_property.hpp) on the workload drawn from `seed`.
template <class Policy>
void property_run(std::uint64_t seed, test::SchedTotals& totals) {
  test::RngSource src{sample::Rng(seed)};
  const test::SchedulerWorkload w = test::make_workload(src);
  try {
    test::check_scheduler_property<Policy>(w, totals);
  } catch (const test::PropertyViolation& e) {
    FAIL("seed " << seed << ": " << e.what());
  }
}

}  // namespace

TEST_CASE("Scheduler (continuous): every request finishes once with its solo output, on any workload and pool") {
  test::SchedTotals t;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) property_run<batch::Continuous>(seed, t);
  MESSAGE("runs ", t.runs, ", with preemption ", t.preempted_runs, ", with prefix hits ", t.hit_runs, ", rejected requests ", t.rejected);
  CHECK(t.preempted_runs >= 5);  // the tiny pools do force preemption
  CHECK(t.hit_runs >= 20);       // the shared prefixes do hit
  CHECK(t.rejected >= 5);
}

TEST_CASE("Scheduler (static): the same outputs, and slots are held until the whole batch finishes") {
  test::SchedTotals t;
  for (std::uint64_t seed = 1001; seed <= 1200; ++seed) property_run<batch::Static>(seed, t);
  CHECK(t.preempted_runs >= 2);
}

TEST_CASE("Static holds finished members as padding; Continuous refills the slot at the next step") {
  const auto make = [] {
    std::vector<Request> r(3);
    r[0].prompt = {1, 2, 3};
    r[0].max_tokens = 2;
    r[1].prompt = {4, 5};
    r[1].max_tokens = 10;
    r[2].prompt = {6, 7, 8};
    r[2].max_tokens = 3;
    return r;
  };
  const SchedulerConfig cfg{.max_slots = 2, .token_budget = 16, .prefill_chunk = 16, .max_context = 64};
  {
    Pool pool(pool_config(64, 4));
    batch::Scheduler<Pool, batch::Static> s(pool, cfg);
    batch::SimExecutor<> exec(pool, kVocab, test_cost());
    for (auto& r : make()) (void)s.submit(r);
    std::vector<float> logits(2 * kVocab);
    std::size_t padded_steps = 0;
    while (!s.done()) {
      const auto plan = s.schedule();
      padded_steps += plan.padding_slots;
      if (plan.padding_slots > 0) CHECK(s.status(2) == RequestStatus::queued);
      const std::span<float> rows(logits.data(), plan.logits_rows * kVocab);
      s.complete(rows, exec.run(plan, rows));
    }
    // request 0 finishes after step 1 (prefill + 1 decode), request 1 after step 9: 8 padded steps
    CHECK(padded_steps == 8);
    CHECK(s.metrics(2).admit_step == 10);
    CHECK(s.metrics(2).queue_steps() == 10);
  }
  {
    Pool pool(pool_config(64, 4));
    batch::Scheduler<Pool, batch::Continuous> s(pool, cfg);
    batch::SimExecutor<> exec(pool, kVocab, test_cost());
    for (auto& r : make()) (void)s.submit(r);
    (void)batch::run(s, exec);
    CHECK(s.metrics(2).admit_step == 2);  // request 0's slot, freed at the end of step 1
    CHECK(s.metrics(0).finish_step == 2);
    const auto sum = s.summary();
    CHECK(sum.requests == 3);
    CHECK(sum.tokens == 15);
    CHECK(sum.steps == s.steps());
    CHECK(sum.tokens_per_step == doctest::Approx(15.0 / static_cast<double>(s.steps())));
  }
}

namespace {
/// A user policy: at most two requests running at once, finished slots freed at once.
struct AtMostTwo {
  [[nodiscard]] std::size_t admissions(const batch::BatchState& s) const { return s.running < 2 ? std::min(2 - s.running, s.free_slots()) : 0; }
  [[nodiscard]] bool keeps_finished_slots() const { return false; }
};
static_assert(batch::SchedulePolicy<AtMostTwo>);
}  // namespace

TEST_CASE("A user-written SchedulePolicy compiles and is obeyed") {
  Pool pool(pool_config(256, 4));
  batch::Scheduler<Pool, AtMostTwo> s(pool, {.max_slots = 6, .token_budget = 32, .prefill_chunk = 8, .max_context = 64});
  batch::SimExecutor<> exec(pool, kVocab, test_cost());
  std::vector<Request> reqs(7);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = {static_cast<Token>(i), 3, 4, 5, 6};
    reqs[i].max_tokens = 3 + i;
    reqs[i].sampler = temperature_sampler;
    reqs[i].seed = i;
    (void)s.submit(reqs[i]);
  }
  std::vector<float> logits(6 * kVocab);
  std::size_t max_running = 0;
  while (!s.done()) {
    const auto plan = s.schedule();
    max_running = std::max(max_running, s.running());
    const std::span<float> rows(logits.data(), plan.logits_rows * kVocab);
    s.complete(rows, exec.run(plan, rows));
  }
  CHECK(max_running == 2);
  for (std::size_t i = 0; i < reqs.size(); ++i) CHECK(std::vector<Token>(s.output(i).begin(), s.output(i).end()) == run_alone(reqs[i], 64, 4).output);
}

TEST_CASE("Requests that can never fit are rejected; the others proceed") {
  Pool pool(pool_config(4, 4));  // 16 positions in all
  batch::Scheduler<Pool> s(pool, {.max_slots = 2, .token_budget = 8, .prefill_chunk = 8, .max_context = 12});
  batch::SimExecutor<> exec(pool, kVocab, test_cost());
  Request too_long{.prompt = std::vector<Token>(12, 1), .max_tokens = 1};   // prompt + 1 > max_context
  Request ok{.prompt = {1, 2, 3}, .max_tokens = 5};
  const auto a = s.submit(too_long);
  const auto b = s.submit(ok);
  Pool small(pool_config(2, 4));  // 8 positions: a request needing 11 cached positions cannot fit
  batch::Scheduler<Pool> s2(small, {.max_slots = 2, .token_budget = 8, .prefill_chunk = 8, .max_context = 64});
  const auto c = s2.submit({.prompt = {1, 2, 3, 4, 5, 6}, .max_tokens = 6});
  const auto d = s2.submit({.prompt = {1, 2, 3, 4, 5, 6}, .max_tokens = 3});  // 8 cached positions: fits
  CHECK(s.status(a) == RequestStatus::rejected);
  CHECK(s2.status(c) == RequestStatus::rejected);
  CHECK(s2.status(d) == RequestStatus::pending);
  (void)batch::run(s, exec);
  CHECK(s.status(b) == RequestStatus::finished);
  CHECK(s.output(b).size() == 5);
  batch::SimExecutor<> exec2(small, kVocab, test_cost());
  (void)batch::run(s2, exec2);
  CHECK(s2.output(d).size() == 3);
  CHECK(s.summary().rejected == 1);
}

TEST_CASE("Stop tokens end a request without being output; max_context ends it too") {
  Request probe{.prompt = {5, 6, 7}, .max_tokens = 10};
  const Outcome free_run = run_alone(probe, 64, 4);
  REQUIRE(free_run.output.size() == 10);
  Request stopped = probe;
  stopped.stop_tokens = {free_run.output[3]};
  const auto first = static_cast<std::size_t>(std::find(free_run.output.begin(), free_run.output.end(), free_run.output[3]) - free_run.output.begin());
  const Outcome o = run_alone(stopped, 64, 4);
  CHECK(o.reason == FinishReason::stop);
  CHECK(o.output == std::vector<Token>(free_run.output.begin(), free_run.output.begin() + static_cast<std::ptrdiff_t>(first)));
  const Outcome ctx = run_alone(probe, 8, 4);
  CHECK(ctx.reason == FinishReason::context);
  CHECK(ctx.output.size() == 5);  // 3 + 5 = 8 positions
  CHECK(ctx.output == std::vector<Token>(free_run.output.begin(), free_run.output.begin() + 5));
}

TEST_CASE("Bad input throws a typed error and leaves the scheduler as it was") {
  Pool pool(pool_config(64, 4));
  CHECK_THROWS_AS(batch::Scheduler<Pool>(pool, {.max_slots = 4, .token_budget = 3}), value_error);
  CHECK_THROWS_AS(batch::Scheduler<Pool>(pool, {.max_slots = 0}), value_error);
  batch::Scheduler<Pool> s(pool, {.max_slots = 2, .token_budget = 8, .prefill_chunk = 4, .max_context = 32});
  CHECK_THROWS_AS((void)s.submit({.prompt = {}, .max_tokens = 3}), value_error);
  CHECK_THROWS_AS((void)s.submit({.prompt = {1, -2}, .max_tokens = 3}), value_error);
  CHECK_THROWS_AS((void)s.submit({.prompt = {1}, .max_tokens = 0}), value_error);
  CHECK(s.requests() == 0);
  CHECK_THROWS_AS(s.complete({}, 0.0), error);
  const Request r{.prompt = {1, 2, 3}, .max_tokens = 4};
  (void)s.submit(r);
  batch::SimExecutor<> exec(pool, kVocab, test_cost());
  const auto plan = s.schedule();
  CHECK_THROWS_AS((void)s.schedule(), error);
  std::vector<float> logits(plan.logits_rows * kVocab);
  (void)exec.run(plan, logits);
  CHECK_THROWS_AS(s.complete({}, 0.0), shape_error);  // 1 row expected
  CHECK_THROWS_AS(s.complete(logits, -1.0), value_error);
  CHECK(s.steps() == 0);
  CHECK(s.output(0).empty());
  s.complete(logits, 0.5);  // the failed calls changed nothing: the step completes normally
  CHECK(s.steps() == 1);
  CHECK(s.clock() == 0.5);
  (void)batch::run(s, exec);
  CHECK(std::vector<Token>(s.output(0).begin(), s.output(0).end()) == run_alone(r, 32, 4).output);
  CHECK_THROWS_AS((void)s.status(7), shape_error);
}

TEST_CASE("A throwing sampler leaves the step uncompleted; out-of-vocabulary tokens are refused") {
  Pool pool(pool_config(64, 4));
  batch::Scheduler<Pool> s(pool, {.max_slots = 2, .token_budget = 8, .prefill_chunk = 8, .max_context = 32});
  batch::SimExecutor<> exec(pool, kVocab, test_cost());
  bool fail = true;
  (void)s.submit({.prompt = {1, 2}, .max_tokens = 2, .sampler = [&](std::span<const float> l, std::span<const Token>, sample::Rng&) -> Token {
                    if (fail) throw value_error("boom");
                    return sample::argmax(l);
                  }});
  (void)s.submit({.prompt = {3, 4}, .max_tokens = 2, .sampler = [](std::span<const float>, std::span<const Token>, sample::Rng&) -> Token {
                    return static_cast<Token>(kVocab);
                  }});
  const auto plan = s.schedule();
  std::vector<float> logits(plan.logits_rows * kVocab);
  (void)exec.run(plan, logits);
  CHECK_THROWS_AS(s.complete(logits, 0.0), value_error);
  fail = false;
  CHECK_THROWS_AS(s.complete(logits, 0.0), value_error);  // request 1's token is out of range
  CHECK(s.output(0).empty());
  CHECK(s.steps() == 0);
}

TEST_CASE("draw_rng depends on (seed, position) only") {
  auto a = batch::draw_rng(7, 3), b = batch::draw_rng(7, 3), c = batch::draw_rng(7, 4), d = batch::draw_rng(8, 3);
  const auto x = a();
  CHECK(x == b());
  CHECK(x != c());
  CHECK(x != d());
}

TEST_CASE("Steady-state steps allocate nothing in the scheduler and the simulator") {
  // the pool's tables grow from its own buffer, so global operator new sees only scheduler/executor allocations
  std::vector<std::byte> arena(std::size_t{8} << 20);
  std::pmr::monotonic_buffer_resource mr(arena.data(), arena.size(), std::pmr::null_memory_resource());
  Pool pool(pool_config(512, 16), &mr);
  batch::Scheduler<Pool> s(pool, {.max_slots = 8, .token_budget = 64, .prefill_chunk = 64, .max_context = 512});
  batch::SimExecutor<> exec(pool, kVocab, test_cost(), 64);
  for (Token i = 0; i < 8; ++i) (void)s.submit({.prompt = {i, 1, 2, 3, 4}, .max_tokens = 200});
  std::vector<float> logits(8 * kVocab);
  const auto step = [&] {
    const auto plan = s.schedule();
    const std::span<float> rows(logits.data(), plan.logits_rows * kVocab);
    s.complete(rows, exec.run(plan, rows));
    return plan.prefill_tokens;
  };
  while (step() > 0) {}
  barato::test::CountAllocations count;
  for (int i = 0; i < 100; ++i) (void)step();
  CHECK(count.count() == 0);
}

namespace {
/// A user executor: the simulator's work, charged a flat 0.5 s per step.
struct HalfSecond {
  batch::SimExecutor<>& sim;
  [[nodiscard]] std::size_t vocab_size() const { return sim.vocab_size(); }
  double run(const batch::StepPlan& plan, std::span<float> logits) {
    (void)sim.run(plan, logits);
    return 0.5;
  }
};
static_assert(batch::Executor<HalfSecond>);
}  // namespace

TEST_CASE("Metrics in steps and seconds follow the clock of complete()") {
  Pool pool(pool_config(64, 4));
  batch::Scheduler<Pool> s(pool, {.max_slots = 2, .token_budget = 16, .prefill_chunk = 16, .max_context = 64});
  batch::SimExecutor<> sim(pool, kVocab, test_cost());
  HalfSecond exec{sim};
  (void)s.submit({.prompt = {1, 2, 3}, .max_tokens = 2});
  (void)s.submit({.prompt = {4, 5}, .max_tokens = 10});
  (void)s.submit({.prompt = {6, 7, 8}, .max_tokens = 3});
  (void)s.submit({.prompt = {9}, .max_tokens = 1, .arrival = 20});
  (void)batch::run(s, exec);
  const auto& m = s.metrics(2);  // admitted at step 2 into request 0's slot; tokens at the ends of steps 2, 3, 4
  CHECK(m.queue_steps() == 2);
  CHECK(m.queue_seconds() == doctest::Approx(1.0));
  CHECK(m.first_token_step == 3);
  CHECK(m.first_token_seconds == doctest::Approx(1.5));
  CHECK(m.finish_step == 5);
  CHECK(m.finish_seconds == doctest::Approx(2.5));
  CHECK(m.tpot_seconds() == doctest::Approx(0.5));
  CHECK(m.tpot_steps() == doctest::Approx(1.0));
  const auto& late = s.metrics(3);  // arrives at the start of step 20, idle steps before it cost 0.5 s each
  CHECK(late.arrival_step == 20);
  CHECK(late.arrival_seconds == doctest::Approx(10.0));
  CHECK(late.finish_step == 1);
  CHECK(late.finish_seconds == doctest::Approx(0.5));
  const auto sum = s.summary();
  CHECK(sum.steps == 21);
  CHECK(sum.seconds == doctest::Approx(10.5));
  CHECK(sum.tokens == 16);
  CHECK(sum.tokens_per_second == doctest::Approx(16.0 / 10.5));
  CHECK(sum.latency_steps.p99 == 10.0);  // request 1: 10 tokens, steps 0 … 9
}

TEST_CASE("latency_stats: mean and nearest-rank percentiles") {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const auto s = batch::latency_stats(v);
  CHECK(s.mean == doctest::Approx(50.5));
  CHECK(s.p50 == 50.0);
  CHECK(s.p99 == 99.0);
  std::vector<double> empty;
  CHECK(batch::latency_stats(empty).mean == 0.0);
}

TEST_CASE("TableCost interpolates the measured decode steps and adds the per-token terms") {
  const batch::TableCost c({.decode = {{1, 10.0}, {8, 17.0}, {16, 25.0}}, .prefill_token_seconds = 0.5, .context_token_seconds = 0.01});
  CHECK(c.decode_seconds(0) == 0.0);
  CHECK(c.decode_seconds(1) == 10.0);
  CHECK(c.decode_seconds(4) == doctest::Approx(13.0));
  CHECK(c.decode_seconds(12) == doctest::Approx(21.0));
  CHECK(c.decode_seconds(24) == doctest::Approx(33.0));  // the last slope, extrapolated
  batch::StepPlan p;
  p.decode_tokens = 3;
  p.padding_slots = 1;
  p.prefill_tokens = 10;
  p.context_tokens = 100;
  CHECK(c.seconds(p) == doctest::Approx(13.0 + 5.0 + 1.0));
  batch::StepPlan prefill_only;
  prefill_only.prefill_tokens = 2;
  CHECK(c.seconds(prefill_only) == doctest::Approx(10.0 + 1.0));
  CHECK(c.seconds(batch::StepPlan{}) == 0.0);
  CHECK_THROWS_AS(batch::TableCost({.decode = {}}), value_error);
  CHECK_THROWS_AS(batch::TableCost({.decode = {{4, 1.0}, {2, 2.0}}}), value_error);
  CHECK_THROWS_AS(batch::TableCost({.decode = {{1, -1.0}}}), value_error);
}

TEST_CASE("skewed_workload: the documented shape, reproducible from its seed") {
  const auto a = batch::skewed_workload({});
  const auto b = batch::skewed_workload({});
  std::vector<std::size_t> out;
  std::size_t total = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].prompt == b[i].prompt);
    out.push_back(a[i].max_tokens);
    total += a[i].max_tokens;
  }
  std::sort(out.begin(), out.end());
  CHECK(a.size() == 64);
  CHECK(out[31] == 18);
  CHECK(out.back() == 228);
  CHECK(total == 1959);
  const auto c = batch::skewed_workload({.shared_prefix = 8, .arrival_gap = 2.0, .seed = 5});
  for (const auto& r : c) CHECK(std::equal(r.prompt.begin(), r.prompt.begin() + 8, c[0].prompt.begin()));
  CHECK(c.back().arrival > 0);
  CHECK_THROWS_AS((void)batch::skewed_workload({.prompt_min = 0}), value_error);
}

namespace {
/// Everything observable about a scheduler and its pool (pool sequences with ids < 64).
template <class Sched>
std::string scheduler_snapshot(const Sched& s, const Pool& pool) {
  test::Snapshot snap;
  snap("steps", s.steps())("clock", s.clock())("running", s.running())("queued", s.queued());
  snap("padding", s.padding_slots())("free_slots", s.free_slots())("done", s.done());
  for (batch::RequestId id = 0; id < s.requests(); ++id) {
    const auto& m = s.metrics(id);
    snap("status", static_cast<int>(s.status(id)))("reason", static_cast<int>(s.finish_reason(id))).range("out", s.output(id));
    snap("gen", m.generated)("pre", m.prefill_tokens)("preempt", m.preemptions)("hit", m.prefix_hit_tokens)("stop", s.stop_token(id));
  }
  for (kv::SeqId q = 0; q < 64; ++q) {
    if (!pool.is_live(q)) continue;
    snap("seq", q).range("table", pool.block_table(q)).range("tokens", pool.tokens(q));
    for (std::size_t l = 0; l < pool.n_layers(); ++l) snap("len", pool.size(q, l));
  }
  for (std::uint32_t b = 0; b < pool.n_blocks(); ++b) snap("ref", pool.refcount(b))("cached", pool.is_cached(b));
  snap.range("free", pool.free_list())("lookups", pool.prefix_stats().lookups)("saved", pool.prefix_stats().tokens_saved);
  return snap.str();
}

/// A workload with shared prefixes on a pool small enough to preempt.
std::vector<Request> fault_workload() {
  std::vector<Request> rs;
  for (Token i = 0; i < 6; ++i) {
    Request r;
    r.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, i};
    r.max_tokens = 12 + static_cast<std::size_t>(i);
    r.seed = 10u + static_cast<std::uint64_t>(i);
    r.arrival = static_cast<std::size_t>(i / 2);
    r.sampler = temperature_sampler;
    rs.push_back(r);
  }
  return rs;
}
}  // namespace

TEST_CASE("Scheduler under fault injection: submit and complete are strong for every k; schedule is basic and retries") {
  std::vector<std::vector<Token>> control;
  std::size_t control_preemptions = 0;
  {
    Pool pool(pool_config(9, 4));
    batch::Scheduler<Pool> s(pool, {.max_slots = 4, .token_budget = 16, .prefill_chunk = 8, .max_context = 64});
    batch::SimExecutor<> exec(pool, kVocab, test_cost());
    for (const Request& r : fault_workload()) (void)s.submit(r);
    (void)batch::run(s, exec, 10000);
    REQUIRE(s.done());
    for (batch::RequestId id = 0; id < s.requests(); ++id) {
      control.emplace_back(s.output(id).begin(), s.output(id).end());
      control_preemptions += s.metrics(id).preemptions;
    }
  }
  CHECK(control_preemptions > 0);  // the pool is small enough that admissions and decodes compete

  Pool pool(pool_config(9, 4));
  batch::Scheduler<Pool> s(pool, {.max_slots = 4, .token_budget = 16, .prefill_chunk = 8, .max_context = 64});
  batch::SimExecutor<> exec(pool, kVocab, test_cost());
  std::size_t submit_faults = 0, complete_faults = 0, schedule_faults = 0;
  for (const Request& r : fault_workload()) {
    for (std::size_t k = 1;; ++k) {  // submit: strong
      const std::string before = scheduler_snapshot(s, pool);
      bool threw = false;
      {
        test::FailAllocation fault(k);
        try {
          (void)s.submit(r);
        } catch (const std::bad_alloc&) {
          threw = true;
        }
      }
      if (!threw) break;
      ++submit_faults;
      REQUIRE(scheduler_snapshot(s, pool) == before);
    }
  }
  std::vector<float> logits(4 * kVocab);
  while (!s.done()) {
    batch::StepPlan plan;
    for (std::size_t k = 1;; ++k) {  // schedule: basic guarantee, a retry plans the step
      bool threw = false;
      {
        test::FailAllocation fault(k);
        try {
          plan = s.schedule();
        } catch (const std::bad_alloc&) {
          threw = true;
        }
      }
      if (!threw) break;
      ++schedule_faults;
    }
    const std::span<float> rows(logits.data(), plan.logits_rows * kVocab);
    const double seconds = exec.run(plan, rows);
    const std::string before = scheduler_snapshot(s, pool);
    for (std::size_t k = 1;; ++k) {  // complete: strong
      bool threw = false;
      {
        test::FailAllocation fault(k);
        try {
          s.complete(rows, seconds);
        } catch (const std::bad_alloc&) {
          threw = true;
        }
      }
      if (!threw) break;
      ++complete_faults;
      CAPTURE(k);
      REQUIRE(scheduler_snapshot(s, pool) == before);
    }
    REQUIRE(s.steps() < 10000);
  }
  CHECK(submit_faults > 0);
  CHECK(schedule_faults > 0);
  CHECK(complete_faults > 0);  // the temperature sampler allocates
  for (batch::RequestId id = 0; id < s.requests(); ++id) {
    CAPTURE(id);
    CHECK(std::vector<Token>(s.output(id).begin(), s.output(id).end()) == control[id]);
  }
}
