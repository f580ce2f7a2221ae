// The batch scheduler (batch/scheduler.hpp), measured with the simulator (batch/simulator.hpp):
//  - Scheduler/slots: the scheduler's own time per step (schedule() + complete(), sampling a small
//    vocabulary included; its argmax share is reported separately) at 8 and 64 slots, over a stream
//    of skewed requests that keeps every slot busy;
//  - StaticVsContinuous/gap: the 64-request skewed workload (batch/workload.hpp: median output 18,
//    longest 228, 1,959 tokens) at 8 slots, static vs continuous batching, all arriving at step 0
//    (gap 0) or as a Poisson stream (mean gap in steps): steps, throughput, mean / p50 / p99 latency
//    and their ratios. Seconds come from a TableCost whose numbers are ASSUMED (a memory-bound
//    0.5B-class decoder on one core: the weight stream dominates, a batch of 8 costs 10 % more than
//    1); the step counts do not depend on them. Replace kAssumedCost with bench_model's measured
//    batched step when the model executor lands.
//
//   ./bench_batching --benchmark_filter=Scheduler

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "barato/batch/batch.hpp"
#include "barato/kv/paged.hpp"

namespace {

using namespace barato;
using Pool = kv::PagedPool<float>;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kVocab = 32;

batch::CostTable assumed_cost() {
  return {.decode = {{1, 20e-3}, {8, 22e-3}, {64, 40e-3}}, .prefill_token_seconds = 0.4e-3, .context_token_seconds = 2e-7};
}

kv::PagedConfig sim_pool(std::size_t n_blocks) {
  return {.n_layers = 1, .n_kv_heads = 1, .head_dim = 4, .block_tokens = 16, .n_blocks = n_blocks};
}

// ---- scheduler time per step ------------------------------------------------------------------
void Scheduler_step(benchmark::State& state) {
  const auto slots = static_cast<std::size_t>(state.range(0));
  const auto reqs = batch::skewed_workload({.requests = 8 * slots, .max_output = 256, .vocab = kVocab, .seed = 7});
  const batch::SchedulerConfig cfg{.max_slots = slots, .token_budget = 256, .prefill_chunk = 64, .max_context = 1024};
  double sched_s = 0.0, exec_s = 0.0, argmax_s = 0.0;
  std::size_t steps = 0, tokens = 0;
  std::vector<float> logits(slots * kVocab);
  for (auto _ : state) {
    Pool pool(sim_pool(slots * 24 + 64));
    batch::Scheduler<Pool> s(pool, cfg);
    batch::SimExecutor<> exec(pool, kVocab, batch::TableCost(assumed_cost()), cfg.token_budget);
    for (const auto& r : reqs) (void)s.submit(r);
    double iter = 0.0;
    while (!s.done()) {
      const auto t0 = Clock::now();
      const batch::StepPlan plan = s.schedule();
      const auto t1 = Clock::now();
      const std::span<float> rows(logits.data(), plan.logits_rows * kVocab);
      const double secs = exec.run(plan, rows);
      const auto t2 = Clock::now();
      s.complete(rows, secs);
      const auto t3 = Clock::now();
      Token sink = 0;  // what the greedy samples cost alone (part of complete())
      for (std::size_t r = 0; r < plan.logits_rows; ++r) sink += sample::argmax(std::span<const float>(rows).subspan(r * kVocab, kVocab));
      benchmark::DoNotOptimize(sink);
      const auto t4 = Clock::now();
      iter += std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count();
      exec_s += std::chrono::duration<double>(t2 - t1).count();
      argmax_s += std::chrono::duration<double>(t4 - t3).count();
      ++steps;
    }
    tokens += s.summary().tokens;
    sched_s += iter;
    state.SetIterationTime(iter);
  }
  const double n = static_cast<double>(steps);
  state.counters["sched_us_per_step"] = 1e6 * sched_s / n;
  state.counters["argmax_us_per_step"] = 1e6 * argmax_s / n;
  state.counters["sched_minus_argmax_us"] = 1e6 * (sched_s - argmax_s) / n;
  state.counters["sim_exec_us_per_step"] = 1e6 * exec_s / n;
  state.counters["tokens_per_step"] = static_cast<double>(tokens) / n;
  state.counters["steps"] = n / static_cast<double>(state.iterations());
}
BENCHMARK(Scheduler_step)->Arg(8)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- static vs continuous ---------------------------------------------------------------------
template <class Policy>
batch::Summary simulate(const std::vector<batch::Request>& reqs, double* wall_seconds) {
  const auto t0 = Clock::now();
  Pool pool(sim_pool(1024));
  batch::Scheduler<Pool, Policy> s(pool, {.max_slots = 8, .token_budget = 256, .prefill_chunk = 64, .max_context = 1024});
  batch::SimExecutor<> exec(pool, kVocab, batch::TableCost(assumed_cost()), 256);
  for (const auto& r : reqs) (void)s.submit(r);
  (void)batch::run(s, exec);
  *wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return s.summary();
}

void Scheduler_StaticVsContinuous(benchmark::State& state) {
  const double gap = static_cast<double>(state.range(0)) / 10.0;
  const auto reqs = batch::skewed_workload({.requests = 64, .arrival_gap = gap, .vocab = kVocab, .seed = 1});
  batch::Summary st, co;
  double wall_st = 0.0, wall_co = 0.0;
  for (auto _ : state) {
    st = simulate<batch::Static>(reqs, &wall_st);
    co = simulate<batch::Continuous>(reqs, &wall_co);
    state.SetIterationTime(wall_st + wall_co);
  }
  std::vector<std::size_t> out;
  std::size_t total = 0, longest = 0;
  for (const auto& r : reqs) {
    out.push_back(r.max_tokens);
    total += r.max_tokens;
    longest = std::max(longest, r.max_tokens);
  }
  std::sort(out.begin(), out.end());
  state.counters["w_median_out"] = static_cast<double>(out[out.size() / 2]);
  state.counters["w_longest_out"] = static_cast<double>(longest);
  state.counters["w_total_out"] = static_cast<double>(total);
  state.counters["st_steps"] = static_cast<double>(st.steps);
  state.counters["co_steps"] = static_cast<double>(co.steps);
  state.counters["st_tok_s"] = st.tokens_per_second;
  state.counters["co_tok_s"] = co.tokens_per_second;
  state.counters["st_tok_step"] = st.tokens_per_step;
  state.counters["co_tok_step"] = co.tokens_per_step;
  state.counters["st_lat_mean_s"] = st.latency_seconds.mean;
  state.counters["co_lat_mean_s"] = co.latency_seconds.mean;
  state.counters["st_lat_p50_s"] = st.latency_seconds.p50;
  state.counters["co_lat_p50_s"] = co.latency_seconds.p50;
  state.counters["st_lat_p99_s"] = st.latency_seconds.p99;
  state.counters["co_lat_p99_s"] = co.latency_seconds.p99;
  state.counters["x_throughput"] = co.tokens_per_second / st.tokens_per_second;
  state.counters["x_lat_mean"] = st.latency_seconds.mean / co.latency_seconds.mean;
  state.counters["x_lat_p50"] = st.latency_seconds.p50 / co.latency_seconds.p50;
  state.counters["x_lat_p99"] = st.latency_seconds.p99 / co.latency_seconds.p99;
  state.counters["x_lat_mean_steps"] = st.latency_steps.mean / co.latency_steps.mean;
  state.counters["sim_ms_per_run"] = 1e3 * wall_co;
}
BENCHMARK(Scheduler_StaticVsContinuous)->Arg(0)->Arg(20)->Arg(30)->Arg(40)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
