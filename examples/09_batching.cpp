// Tutorial 9 — batching.
//
// Decode is memory-bound: one step streams every weight to produce one token. Run B sequences in the
// same step and the weights, read once, serve all of them — the server's throughput grows almost B-fold
// while each user's step gets only a little slower, until the step turns compute-bound (the knee).
// Continuous batching then removes the idle slots that static batching wastes, and the paged pool is
// what lets sequences come and go.
//
//   Step 1  batched decode on the Qwen2.5-0.5B shape, B = 1 … 64 sequences with a 64-token cache each,
//           fp32 and int8-row weights: step time, throughput, per-request latency, both × B = 1; the
//           knee (first B where doubling gains < 10 % throughput) beside the knee a roofline predicts
//           from the in-binary DRAM probe and the measured peak multiply-add rate
//   Step 2  64 requests with skewed output lengths (seeded), 8 slots: static vs continuous batching in
//           the simulator — the same scheduler code, each step charged from Step 1's measured costs
//   Step 3  the same workload for real on stories260K under both policies: identical outputs per
//           request, and the measured total time beside the simulator's (with stories260K's costs)
//   Step 4  chunked prefill, prefix sharing and preemption on a small pool: a timeline of slots × steps
//           and each request's TTFT and time per token
//   Step 5  cascade attention: 16 sequences sharing a 2,048-token prefix with 64 tokens each of their
//           own — K/V bytes read and time of one decode step's attention, per sequence vs cascade
//
// Run:  tutorial_batching [--model FILE] [--threads N] [--plot FILE.svg] [--no-synthetic]

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/cascade.hpp"
#include "barato/batch/executor.hpp"
#include "barato/batch/policy.hpp"
#include "barato/batch/scheduler.hpp"
#include "barato/batch/simulator.hpp"
#include "barato/batch/workload.hpp"
#include "barato/core/error.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/linear.hpp"
#include "models/cli.hpp"
#include "models/decode_batch.hpp"
#include "models/llama_batch.hpp"
#include "models/llama_weights.hpp"
#include "models/shapes.hpp"
#include "timing.hpp"

namespace {

using namespace barato;
namespace bx = barato_examples;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
void check(bool ok, const std::string& what) {
  if (!ok) throw barato::error("check failed: " + what);
}

struct Args {
  std::string model = (barato_examples::data_dir() / "stories260K/stories260K.bin").string();
  int threads = 1;
  std::string plot;
  bool no_synthetic = false;
};

// ---- machine probes (measured in this run) ----------------------------------------------------

/// Read bandwidth of a 1 GiB buffer (≫ LLC), best of 3: the bytes/s a memory-bound step can reach.
double dram_bytes_per_second(int threads) {
  Buffer<float> buf((std::size_t{1} << 30) / sizeof(float));
  std::fill(buf.begin(), buf.end(), 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<float> part(static_cast<std::size_t>(std::max(threads, 1)) * 16, 0.0f);
    const auto t0 = Clock::now();
    parallel_for(buf.size(), threads, [&](std::size_t lo, std::size_t hi) {
      using B = simd::Batch<float>;
      B a0(0.f), a1(0.f), a2(0.f), a3(0.f);
      std::size_t i = lo;
      for (; i + 4 * B::size <= hi; i += 4 * B::size) {
        a0 += B::load_unaligned(buf.data() + i);
        a1 += B::load_unaligned(buf.data() + i + B::size);
        a2 += B::load_unaligned(buf.data() + i + 2 * B::size);
        a3 += B::load_unaligned(buf.data() + i + 3 * B::size);
      }
      float s = simd::reduce_add<float, simd::DefaultArch>((a0 + a1) + (a2 + a3));
      for (; i < hi; ++i) s += buf[i];
      part[lo * static_cast<std::size_t>(std::max(threads, 1)) / buf.size() * 16] += s;
    }, std::size_t{1} << 20);
    best = std::max(best, static_cast<double>(buf.bytes()) / seconds_since(t0));
    for (float v : part) sink = sink + v;
  }
  return best;
}

/// Multiply-adds per second of a layer's batched product with n = 64 vectors, best of 5 (its weights
/// stay in cache between calls): the compute roof of a step.
template <class Linear>
double peak_macs_per_second(const Linear& w, int threads) {
  const std::size_t n = 64;
  std::vector<float> x(n * w.cols(), 0.5f), y(n * w.rows());
  double best = 1e30;
  for (int s = 0; s < 5; ++s) {
    const auto t0 = Clock::now();
    std::size_t reps = 0;
    do {
      w.apply_batch(x, y, n, threads);
      ++reps;
    } while (seconds_since(t0) < 0.02);
    best = std::min(best, seconds_since(t0) / static_cast<double>(reps));
  }
  return static_cast<double>(n * w.rows() * w.cols()) / best;
}

// ---- Step 1 --------------------------------------------------------------------------------------

struct BatchRow {
  std::size_t B = 0;
  double step = 0;  // seconds per step (= each request's time per token)
};

/// Batched decode steps for each B, best of `samples` steps; checks sequence 0's logits are the same
/// bits at every B (batch invariance: its K/V and token are the same in every batch).
template <class Linear>
std::vector<BatchRow> batch_sweep(const bx::LlamaWeights<Linear>& w, const std::vector<std::size_t>& sizes, int threads,
                                  const char* name) {
  constexpr std::size_t kContext = 64;
  const std::size_t V = w.config.vocab_size;
  std::vector<float> first;  // sequence 0's logits at B = 1
  std::vector<BatchRow> rows;
  for (const std::size_t B : sizes) {
    bx::DecodeBatch<float> batch(w.config, B, kContext);
    bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(
        w, bx::PoolCaches<float>{&batch.pool()}, {.threads = threads, .max_tokens = B, .max_chunks = B, .max_positions = kContext + 1});
    std::vector<float> logits(B * V);
    const auto plan = batch.plan();
    double best = 1e30;
    const int samples = B <= 8 ? 4 : 3;
    for (int s = 0; s < samples; ++s) {
      const auto t0 = Clock::now();
      model.step(plan, logits);
      best = std::min(best, seconds_since(t0));
      batch.rewind();
    }
    if (first.empty()) first.assign(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(V));
    check(std::memcmp(first.data(), logits.data(), V * sizeof(float)) == 0,
          std::string(name) + ": sequence 0's logits at B = " + std::to_string(B) + " differ from B = 1 (batch invariance)");
    rows.push_back({B, best});
  }
  return rows;
}

/// First B whose doubling gains less than 10 % throughput (0 when none does).
std::size_t knee_of(const std::vector<BatchRow>& r) {
  for (std::size_t i = 0; i + 1 < r.size(); ++i) {
    const double t0 = static_cast<double>(r[i].B) / r[i].step, t1 = static_cast<double>(r[i + 1].B) / r[i + 1].step;
    if (t1 < 1.10 * t0) return r[i].B;
  }
  return 0;
}

void print_sweep(const char* name, const std::vector<BatchRow>& r, double weight_bytes, double macs_per_token, double dram,
                 double peak) {
  const double tps1 = 1.0 / r.front().step;
  std::printf("  %s weights: %.2f GB per step\n", name, weight_bytes / 1e9);
  std::printf("  %4s %11s %12s %11s %14s %15s %13s\n", "B", "step", "tokens/s", "× B=1", "latency/token", "latency × B=1",
              "vs roofline");
  for (const auto& x : r) {
    const double tps = static_cast<double>(x.B) / x.step;
    // roofline time of the step: the larger of streaming the weights and doing the multiply-adds
    const double roof = std::max(weight_bytes / dram, static_cast<double>(x.B) * macs_per_token / peak);
    std::printf("  %4zu %9.1f ms %12.1f %10.2f× %11.1f ms %14.2f× %12.2f\n", x.B, x.step * 1e3, tps, tps / tps1, x.step * 1e3,
                x.step / r.front().step, roof / x.step);
  }
  const std::size_t knee = knee_of(r);
  const double predicted = weight_bytes / dram / (macs_per_token / peak);
  if (knee != 0)
    std::printf("  knee: B = %zu (doubling to %zu gains < 10 %% throughput); the roofline predicts the step turns\n"
                "        compute-bound at B ≈ %.0f (weights / DRAM probe = multiply-adds / peak rate)\n\n",
                knee, 2 * knee, predicted);
  else
    std::printf("  knee: not reached by B = %zu (every doubling gained ≥ 10 %%); the roofline predicts B ≈ %.0f\n\n",
                r.back().B, predicted);
}

/// Throughput and latency against B for both formats, as an SVG with log2 B on x.
void write_plot(const std::string& path, const std::vector<std::pair<std::string, std::vector<BatchRow>>>& sets) {
  std::ofstream out(path);
  check(static_cast<bool>(out), "cannot write " + path);
  const double W = 720, H = 300, L = 60, R = 20, T = 30, Bm = 40;
  const char* colors[] = {"#1f77b4", "#d62728"};
  auto panel = [&](double x0, bool throughput) {
    double ymax = 0;
    for (const auto& [n, r] : sets)
      for (const auto& x : r) ymax = std::max(ymax, throughput ? static_cast<double>(x.B) / x.step : x.step * 1e3);
    const double pw = W / 2 - L - R, ph = H - T - Bm;
    out << "<g transform='translate(" << x0 << ",0)'><text x='" << L + pw / 2 << "' y='18' text-anchor='middle' font-size='13'>"
        << (throughput ? "throughput (tokens/s)" : "latency per token (ms)") << "</text>\n";
    out << "<line x1='" << L << "' y1='" << T + ph << "' x2='" << L + pw << "' y2='" << T + ph << "' stroke='black'/>\n";
    out << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << T + ph << "' stroke='black'/>\n";
    out << "<text x='" << L - 6 << "' y='" << T + 4 << "' text-anchor='end' font-size='10'>" << static_cast<int>(ymax) << "</text>\n";
    for (std::size_t ci = 0; ci < sets.size(); ++ci) {
      const auto& r = sets[ci].second;
      const double xmax = std::log2(static_cast<double>(r.back().B));
      out << "<polyline fill='none' stroke='" << colors[ci % 2] << "' stroke-width='2' points='";
      for (const auto& x : r) {
        const double px = L + (xmax > 0 ? std::log2(static_cast<double>(x.B)) / xmax : 0) * pw;
        const double v = throughput ? static_cast<double>(x.B) / x.step : x.step * 1e3;
        out << px << "," << T + ph - v / ymax * ph << " ";
      }
      out << "'/>\n<text x='" << L + 8 << "' y='" << T + 14 + 14 * static_cast<double>(ci) << "' font-size='11' fill='"
          << colors[ci % 2] << "'>" << sets[ci].first << "</text>\n";
      if (ci == 0)
        for (const auto& x : r) {
          const double px = L + (xmax > 0 ? std::log2(static_cast<double>(x.B)) / xmax : 0) * pw;
          out << "<text x='" << px << "' y='" << T + ph + 14 << "' text-anchor='middle' font-size='10'>" << x.B << "</text>\n";
        }
    }
    out << "<text x='" << L + pw / 2 << "' y='" << H - 6 << "' text-anchor='middle' font-size='11'>sequences per step B</text></g>\n";
  };
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "'>\n";
  panel(0, true);
  panel(W / 2, false);
  out << "</svg>\n";
}

/// Seconds of attention per cached position read: the same decode batch (B = 8) at two context
/// lengths, the difference divided by the extra positions.
template <class Linear>
double context_token_seconds(const bx::LlamaWeights<Linear>& w, int threads) {
  constexpr std::size_t B = 8, c0 = 64, c1 = 448;
  auto time_at = [&](std::size_t ctx) {
    bx::DecodeBatch<float> batch(w.config, B, ctx);
    bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&batch.pool()},
                                                          {.threads = threads, .max_tokens = B, .max_chunks = B, .max_positions = ctx + 1});
    std::vector<float> logits(B * w.config.vocab_size);
    double best = 1e30;
    for (int s = 0; s < 5; ++s) {
      const auto t0 = Clock::now();
      model.step(batch.plan(), logits);
      best = std::min(best, seconds_since(t0));
      batch.rewind();
    }
    return best;
  };
  return std::max(0.0, (time_at(c1) - time_at(c0)) / static_cast<double>(B * (c1 - c0)));
}

/// Step 1; returns the cost table of the fp32 model for the simulator of Step 2.
batch::CostTable step1(const Args& a) {
  const bx::LlamaConfig shape = bx::qwen25_05b_shape(4096);
  std::printf("Step 1. Batched decode on the Qwen2.5-0.5B shape (random weights, seed 42), each sequence holding a\n"
              "        64-token cache in one paged pool; one step = one token for each of the B sequences\n\n");
  const double dram = dram_bytes_per_second(a.threads);
  const auto w32 = bx::random_llama_weights(shape, 42);
  const auto w8 = bx::convert_weights(w32, [](const nn::DenseLinear& d) {
    return quant::Linear<quant::Int8PerRow<>>(d.rows(), d.cols(), d.weights());
  });
  // compute roofs: the best multiply-add rate of each format's batched product over a few cache-sized
  // layers with 64 vectors (weights from cache: what a compute-bound step can reach)
  double peak32 = 0, peak8 = 0;
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{512, 512}, {1024, 1024}, {2048, 896}}) {
    std::vector<float> probe_w(rows * cols);
    for (std::size_t i = 0; i < probe_w.size(); ++i) probe_w[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    if (rows * cols * 4 <= (std::size_t{1} << 21)) peak32 = std::max(peak32, peak_macs_per_second(nn::DenseLinear(rows, cols, probe_w), a.threads));
    peak8 = std::max(peak8, peak_macs_per_second(quant::Linear<quant::Int8PerRow<>>(rows, cols, probe_w), a.threads));
  }
  std::printf("  measured here: DRAM read %.1f GB/s; peak multiply-adds %.1f G/s (fp32), %.1f G/s (int8-row)\n\n", dram / 1e9,
              peak32 / 1e9, peak8 / 1e9);
  const std::vector<std::size_t> sizes{1, 2, 4, 8, 16, 32, 64};
  const double macs = static_cast<double>(bx::matrix_bytes(w32)) / 4.0;  // one multiply-add per weight per token
  const auto r32 = batch_sweep(w32, sizes, a.threads, "fp32");
  print_sweep("fp32", r32, static_cast<double>(bx::matrix_bytes(w32)), macs, dram, peak32);
  const auto r8 = batch_sweep(w8, sizes, a.threads, "int8-row");
  print_sweep("int8-row", r8, static_cast<double>(bx::matrix_bytes(w8)), macs, dram, peak8);
  std::printf("  -> one step's cost is the weights it streams: up to the knee, B users cost little more than one, so\n"
              "     throughput grows ~B-fold while each user's time per token grows far less. Past the knee the step\n"
              "     is compute-bound and a bigger batch only makes everyone wait. int8 weights stream 4× fewer bytes,\n"
              "     so they reach their knee at a smaller B. Sequence 0's logits were bitwise equal at every B.\n\n");
  if (!a.plot.empty()) {
    write_plot(a.plot, {{"fp32", r32}, {"int8-row", r8}});
    std::printf("  plot written to %s\n\n", a.plot.c_str());
  }
  batch::CostTable t;
  for (const auto& x : r32) t.decode.emplace_back(x.B, x.step);
  const auto& hi = r32.back();
  const auto& lo = r32[r32.size() - 2];
  // a prefill token costs what one more row of a compute-bound step costs (the last doubling's slope)
  t.prefill_token_seconds = std::max(0.0, (hi.step - lo.step) / static_cast<double>(hi.B - lo.B));
  t.context_token_seconds = context_token_seconds(w32, a.threads);
  t.charge_padding = false;  // BatchedLlama runs no row for a finished member
  return t;
}


// ---- Steps 2 and 3: static vs continuous ------------------------------------------------------------

/// The 64-request workload of Steps 2 and 3 (tokens below `vocab`).
std::vector<batch::Request> workload(std::size_t vocab, double arrival_gap = 0.0) {
  return batch::skewed_workload({.requests = 64, .median_output = 18.0, .sigma = 1.05, .prompt_min = 16, .prompt_max = 64,
                                 .arrival_gap = arrival_gap, .vocab = std::min<std::size_t>(vocab, 256), .seed = 7});
}

void print_distribution(const std::vector<batch::Request>& reqs) {
  std::vector<std::size_t> len;
  std::size_t total = 0;
  for (const auto& r : reqs) {
    len.push_back(r.max_tokens);
    total += r.max_tokens;
  }
  std::sort(len.begin(), len.end());
  auto q = [&](double p) { return len[std::min(len.size() - 1, static_cast<std::size_t>(p * static_cast<double>(len.size())))]; };
  std::printf("  %zu requests, output tokens: min %zu, p25 %zu, median %zu, p75 %zu, p90 %zu, max %zu, total %zu\n", reqs.size(),
              len.front(), q(0.25), q(0.5), q(0.75), q(0.9), len.back(), total);
  std::printf("  (skewed like chat traffic: most answers short, a few very long)\n");
}

/// One policy's run of a workload: the scheduler's summary and every request's output.
struct PolicyRun {
  batch::Summary s;
  std::vector<std::vector<Token>> outputs;
};

template <class Sched>
PolicyRun collect(const Sched& sched) {
  PolicyRun r{sched.summary(), {}};
  for (batch::RequestId i = 0; i < sched.requests(); ++i) r.outputs.emplace_back(sched.output(i).begin(), sched.output(i).end());
  return r;
}

constexpr std::size_t kSlots = 8;
constexpr batch::SchedulerConfig kServe{.max_slots = kSlots, .token_budget = 256, .prefill_chunk = 64, .max_context = 1024};

/// The workload under `policy` in the simulator, charged by `cost`.
template <class Policy>
PolicyRun simulate(const std::vector<batch::Request>& reqs, const batch::CostTable& cost, Policy policy, std::size_t vocab) {
  kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = 1, .head_dim = 3, .block_tokens = 16, .n_blocks = kSlots * 64});
  batch::Scheduler<kv::PagedPool<float>, Policy> sched(pool, kServe, policy);
  for (const auto& r : reqs) sched.submit(r);
  batch::SimExecutor<> exec(pool, vocab, batch::TableCost(cost), kServe.token_budget);
  batch::run(sched, exec);
  return collect(sched);
}

/// The workload under `policy` for real: the example Llama decoder over one paged pool.
template <class Policy, class Linear>
PolicyRun serve_real(const std::vector<batch::Request>& reqs, const bx::LlamaWeights<Linear>& w, Policy policy, int threads) {
  const auto& c = w.config;
  kv::PagedPool<float> pool({.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = 16,
                             .n_blocks = kSlots * 64});
  batch::Scheduler<kv::PagedPool<float>, Policy> sched(pool, kServe, policy);
  for (const auto& r : reqs) sched.submit(r);
  bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&pool},
                                                        {.threads = threads, .max_tokens = kServe.token_budget, .max_chunks = kSlots});
  batch::run(sched, model);
  return collect(sched);
}

void print_policies(const PolicyRun& st, const PolicyRun& co, const char* clock) {
  std::printf("  %-11s %7s %13s %12s %13s %13s %13s %12s\n", "policy", "steps", "tokens/s", "tokens/step", "latency mean",
              "latency p50", "latency p99", "TTFT mean");
  for (const auto* r : {&st, &co})
    std::printf("  %-11s %7zu %13.1f %12.2f %10.1f ms %10.1f ms %10.1f ms %9.1f ms\n", r == &st ? "static" : "continuous", r->s.steps,
                r->s.tokens_per_second, r->s.tokens_per_step, r->s.latency_seconds.mean * 1e3, r->s.latency_seconds.p50 * 1e3,
                r->s.latency_seconds.p99 * 1e3, r->s.ttft_seconds.mean * 1e3);
  std::printf("  continuous / static: %.2f× throughput, %.2f× lower mean latency, %.2f× lower p99, %.2f× fewer steps (%s)\n",
              co.s.tokens_per_second / st.s.tokens_per_second, st.s.latency_seconds.mean / co.s.latency_seconds.mean,
              st.s.latency_seconds.p99 / co.s.latency_seconds.p99, static_cast<double>(st.s.steps) / static_cast<double>(co.s.steps),
              clock);
}

void step2(const batch::CostTable& cost) {
  std::printf("Step 2. Static vs continuous batching, 8 slots, token budget 256, prefill chunks of 64, in the simulator:\n"
              "        the scheduler of barato/batch drives a simulated executor that charges each step from Step 1's\n"
              "        fp32 measurements (decode step by batch rows, %.2f ms per prefill token, %.3f us per context token)\n\n",
              cost.prefill_token_seconds * 1e3, cost.context_token_seconds * 1e6);
  print_distribution(workload(64));
  for (const double gap : {0.0, 4.0}) {
    const auto reqs = workload(64, gap);
    if (gap == 0.0) std::printf("\n  a) every request queued at step 0 (a backlog)\n");
    else std::printf("\n  b) the same requests arriving as a Poisson process, one per %.0f steps on average\n", gap);
    const auto t0 = Clock::now();
    const PolicyRun st = simulate(reqs, cost, batch::Static{}, 64), co = simulate(reqs, cost, batch::Continuous{}, 64);
    const double sim_s = seconds_since(t0);
    print_policies(st, co, "simulated seconds");
    check(st.outputs == co.outputs, "the simulator's outputs differ between the policies");
    std::printf("  (both runs simulated in %.1f ms of real time; identical outputs under both policies)\n", sim_s * 1e3);
  }
  // c) the load sweep: the latency gap depends on the offered load (arrivals per step), so show it
  //    across loads instead of at one chosen point
  std::printf("\n  c) offered load: the same requests arriving as Poisson processes of decreasing mean gap\n");
  std::printf("  %10s %12s %12s %13s %13s %13s %11s %11s\n", "mean gap", "static tok/s", "cont. tok/s", "throughput",
              "static mean", "cont. mean", "mean lat.", "p99 lat.");
  double best_ratio = 0.0, best_gap = 0.0;
  for (const double gap : {16.0, 12.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0}) {
    const auto reqs = workload(64, gap);
    const PolicyRun st = simulate(reqs, cost, batch::Static{}, 64), co = simulate(reqs, cost, batch::Continuous{}, 64);
    check(st.outputs == co.outputs, "the simulator's outputs differ between the policies");
    const double lat = st.s.latency_seconds.mean / co.s.latency_seconds.mean;
    if (lat > best_ratio) best_ratio = lat, best_gap = gap;
    std::printf("  %5.0f steps %12.1f %12.1f %12.2f× %10.1f ms %10.1f ms %10.2f× %10.2f×\n", gap, st.s.tokens_per_second,
                co.s.tokens_per_second, co.s.tokens_per_second / st.s.tokens_per_second, st.s.latency_seconds.mean * 1e3,
                co.s.latency_seconds.mean * 1e3, lat, st.s.latency_seconds.p99 / co.s.latency_seconds.p99);
  }
  std::printf("  (tokens/s over the whole run: with sparse arrivals both policies idle between requests and finish\n"
              "   with the last arrival, so the throughput gap is the backlog's (a); the latency gap peaks at %.2f×\n"
              "   at a mean gap of %.0f steps, where requests arrive faster than static batching serves them but not\n"
              "   faster than continuous batching does, and static's queue grows while continuous keeps up)\n",
              best_ratio, best_gap);
  std::printf("\n  -> static batching holds every slot until the longest member finishes: a batch whose outputs are\n"
              "     18 tokens but one is 200 runs 200 steps with one row doing work, and the queue waits behind it.\n"
              "     Continuous batching refills a slot at the very next step, so the same memory-bound steps carry\n"
              "     more tokens. With a backlog (a) everyone still waits for the throughput; when requests arrive\n"
              "     over time (b) a newcomer starts at once instead of waiting for the batch to drain, so the\n"
              "     latency gap widens.\n\n");
}

/// stories260K's cost table, measured here: decode steps at B = 1 … 8, a 64-token prefill, context.
template <class Linear>
batch::CostTable measured_costs(const bx::LlamaWeights<Linear>& w, int threads) {
  batch::CostTable t;
  for (const std::size_t B : {1, 2, 4, 8}) {
    bx::DecodeBatch<float> batch(w.config, B, 40);
    bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&batch.pool()},
                                                          {.threads = threads, .max_tokens = B, .max_chunks = B});
    std::vector<float> logits(B * w.config.vocab_size);
    std::vector<double> ts;
    for (int s = 0; s < 31; ++s) {
      const auto t0 = Clock::now();
      model.step(batch.plan(), logits);
      ts.push_back(seconds_since(t0));
      batch.rewind();
    }
    std::nth_element(ts.begin(), ts.begin() + 15, ts.end());
    t.decode.emplace_back(B, ts[15]);  // median: what a serving run sees, not the best case
  }
  kv::PagedPool<float> pool({.n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads, .head_dim = w.config.head_dim,
                             .block_tokens = 16, .n_blocks = 4});
  const kv::SeqId s = pool.add_sequence();
  bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&pool}, {.threads = threads, .max_tokens = 64, .max_chunks = 1});
  std::vector<Token> tokens(64);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>(3 + i % 200);
  const batch::SeqChunk chunk{.seq = s, .pos = 0, .tokens = tokens, .wants_logits = true};
  std::vector<float> logits(w.config.vocab_size);
  std::vector<double> ts;
  for (int r = 0; r < 31; ++r) {
    const auto t0 = Clock::now();
    model.step({.chunks = {&chunk, 1}, .prefill_tokens = 64, .logits_rows = 1}, logits);
    ts.push_back(seconds_since(t0));
    pool.truncate(s, 0);
  }
  std::nth_element(ts.begin(), ts.begin() + 15, ts.end());
  t.prefill_token_seconds = std::max(0.0, (ts[15] - t.decode.front().second) / 63.0);
  t.context_token_seconds = context_token_seconds(w, threads);
  t.charge_padding = false;  // BatchedLlama runs no row for a finished member
  return t;
}

template <class Linear>
void step3(const bx::LlamaWeights<Linear>& w, int threads) {
  std::printf("Step 3. The same 64 requests for real on stories260K (greedy, no stop tokens: each output is exactly its\n"
              "        length), static vs continuous, and the simulator charged with stories260K's costs measured here\n\n");
  const batch::CostTable cost = measured_costs(w, threads);
  std::printf("  measured: decode step %.3f / %.3f / %.3f / %.3f ms at B = 1 / 2 / 4 / 8, %.2f us per prefill token\n",
              cost.decode[0].second * 1e3, cost.decode[1].second * 1e3, cost.decode[2].second * 1e3, cost.decode[3].second * 1e3,
              cost.prefill_token_seconds * 1e6);
  const auto reqs = workload(w.config.vocab_size);
  const PolicyRun st = serve_real(reqs, w, batch::Static{}, threads), co = serve_real(reqs, w, batch::Continuous{}, threads);
  print_policies(st, co, "measured step seconds");
  check(st.outputs == co.outputs, "a request's output differs between static and continuous batching");
  std::size_t same_alone = 0;
  {  // every request alone (one slot, a pool of its own): the batch did not change a single token
    kv::PagedPool<float> pool({.n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads, .head_dim = w.config.head_dim,
                               .block_tokens = 16, .n_blocks = 64});
    batch::Scheduler<kv::PagedPool<float>, batch::Continuous> sched(pool, {.max_slots = 1, .token_budget = 64, .prefill_chunk = 64,
                                                                          .max_context = 1024});
    for (const auto& r : reqs) sched.submit(r);
    bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&pool}, {.threads = threads, .max_tokens = 64, .max_chunks = 1});
    batch::run(sched, model);
    for (batch::RequestId i = 0; i < reqs.size(); ++i)
      same_alone += std::equal(sched.output(i).begin(), sched.output(i).end(), co.outputs[i].begin(), co.outputs[i].end());
  }
  check(same_alone == reqs.size(), "a request's batched output differs from its output alone");
  const PolicyRun sst = simulate(reqs, cost, batch::Static{}, w.config.vocab_size),
                  sco = simulate(reqs, cost, batch::Continuous{}, w.config.vocab_size);
  check(sst.s.steps == st.s.steps && sco.s.steps == co.s.steps, "the simulator planned different steps than the real run");
  std::printf("  identical outputs under both policies and alone (%zu of %zu requests); the simulator ran the same %zu / %zu steps\n",
              same_alone, reqs.size(), sst.s.steps, sco.s.steps);
  std::printf("  %-11s %14s %14s %8s\n", "policy", "measured", "simulated", "ratio");
  for (const auto& [name, real, sim] : {std::tuple{"static", &st, &sst}, std::tuple{"continuous", &co, &sco}})
    std::printf("  %-11s %11.2f ms %11.2f ms %7.2f\n", name, real->s.seconds * 1e3, sim->s.seconds * 1e3, real->s.seconds / sim->s.seconds);
  std::printf("  -> the simulator is the real scheduler with a price list: once the price list is measured, a\n"
              "     64-request experiment takes milliseconds and predicts the real run's time. stories260K is so small\n"
              "     that a step's cost grows with almost every row (its weights sit in cache: it is never memory-\n"
              "     bound), so what continuous batching saves here is the fixed cost of the steps it does not run.\n\n");
}

// ---- Step 4: chunked prefill, prefix sharing, preemption ---------------------------------------------

template <class Linear>
void step4(const bx::LlamaWeights<Linear>& w, int threads) {
  std::printf("Step 4. Chunked prefill, prefix sharing and preemption on a small pool: 4 slots, a pool of 12 blocks of 16\n"
              "        tokens (192 positions for everyone), token budget 24, prefill chunks of 16; five requests share a\n"
              "        48-token prefix (a system prompt) and arrive at steps 0, 0, 2, 6, 12\n\n");
  const auto& c = w.config;
  std::vector<Token> system(48);
  for (std::size_t i = 0; i < system.size(); ++i) system[i] = static_cast<Token>(20 + (i * 37) % 400);
  std::vector<batch::Request> reqs;
  const std::size_t arrival[] = {0, 0, 2, 6, 12}, out[] = {40, 12, 60, 24, 30}, own[] = {5, 9, 3, 14, 7};
  for (std::size_t i = 0; i < 5; ++i) {
    batch::Request r;
    r.prompt = system;
    for (std::size_t j = 0; j < own[i]; ++j) r.prompt.push_back(static_cast<Token>(100 + 17 * i + j));
    r.max_tokens = out[i];
    r.arrival = arrival[i];
    reqs.push_back(r);
  }
  kv::PagedPool<float> pool({.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = 16, .n_blocks = 12});
  batch::Scheduler<kv::PagedPool<float>, batch::Continuous> sched(pool, {.max_slots = 4, .token_budget = 24, .prefill_chunk = 16,
                                                                        .max_context = 512});
  for (const auto& r : reqs) sched.submit(r);
  bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&pool}, {.threads = threads, .max_tokens = 24, .max_chunks = 4});
  // timeline: one row per slot; a letter per step: request id in lower case while it prefills
  // (upper case for the chunk that yields its first token), '-' while it decodes, '.' idle,
  // '!' in the slot a request was preempted from
  std::vector<std::string> rows(4);
  std::vector<std::size_t> pre(reqs.size(), 0), last_slot(reqs.size(), 0);
  std::vector<float> logits(4 * c.vocab_size);
  while (!sched.done()) {
    const batch::StepPlan plan = sched.schedule();
    std::vector<char> col(4, '.');
    for (batch::RequestId i = 0; i < reqs.size(); ++i)
      if (sched.metrics(i).preemptions != pre[i]) {
        pre[i] = sched.metrics(i).preemptions;
        col[last_slot[i]] = '!';
      }
    for (const auto& ch : plan.chunks) {
      last_slot[ch.request] = ch.slot;
      const char id = static_cast<char>('a' + ch.request);
      col[ch.slot] = ch.decode ? '-' : (ch.wants_logits ? static_cast<char>(id - 'a' + 'A') : id);
    }
    for (std::size_t s = 0; s < 4; ++s) rows[s] += col[s];
    const std::span<float> l(logits.data(), plan.logits_rows * c.vocab_size);
    sched.complete(l, model.run(plan, l));
  }
  const std::size_t n = rows[0].size();
  for (std::size_t b = 0; b < n; b += 90) {
    std::printf("  step %-4zu", b);
    for (std::size_t k = b; k < std::min(n, b + 90); k += 10) std::printf("%-10zu", k);
    std::printf("\n");
    for (std::size_t s = 0; s < 4; ++s) std::printf("  slot %zu    %s\n", s, rows[s].substr(b, 90).c_str());
    std::printf("\n");
  }
  std::printf("  (a…e: prefill chunk of request a…e, A…E: the chunk that yields its first token, '-': decode, '!': preempted)\n\n");
  std::printf("  %-4s %7s %9s %11s %12s %10s %12s %14s\n", "req", "prompt", "arrives", "hit tokens", "preemptions", "TTFT", "TTFT",
              "time per token");
  for (batch::RequestId i = 0; i < reqs.size(); ++i) {
    const auto& m = sched.metrics(i);
    std::printf("  %-4c %7zu %9zu %11zu %12zu %4zu steps %9.2f ms %11.3f ms\n", static_cast<char>('a' + i), reqs[i].prompt.size(),
                reqs[i].arrival, m.prefix_hit_tokens, m.preemptions, m.first_token_step, m.first_token_seconds * 1e3,
                m.tpot_seconds() * 1e3);
  }
  // the same requests alone: outputs unchanged by chunking, sharing and preemption
  std::size_t same = 0;
  for (batch::RequestId i = 0; i < reqs.size(); ++i) {
    kv::PagedPool<float> solo({.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = 16, .n_blocks = 16});
    batch::Scheduler<kv::PagedPool<float>, batch::Continuous> one(solo, {.max_slots = 1, .token_budget = 128, .prefill_chunk = 128,
                                                                        .max_context = 512});
    batch::Request r = reqs[i];
    r.arrival = 0;
    one.submit(r);
    bx::BatchedLlama<bx::PoolCaches<float>, Linear> m(w, bx::PoolCaches<float>{&solo}, {.threads = threads, .max_tokens = 128, .max_chunks = 1});
    batch::run(one, m);
    same += std::equal(one.output(0).begin(), one.output(0).end(), sched.output(i).begin(), sched.output(i).end());
  }
  check(same == reqs.size(), "chunked / shared / preempted output differs from the request alone");
  const batch::Summary s = sched.summary();
  std::printf("\n  %zu preemptions, %zu prefix-hit tokens; every output equals the request run alone (%zu of %zu)\n", s.preemptions,
              s.prefix_hit_tokens, same, reqs.size());
  std::printf("  -> the shared system prompt is prefilled once and then hit from the prefix cache; a long prompt\n"
              "     goes in chunks between other requests' decodes; when the pool runs dry the youngest request is\n"
              "     preempted, re-admitted later (hitting the cache for what it had) and still produces the same tokens.\n\n");
}

// ---- Step 5: cascade attention ---------------------------------------------------------------------

/// One decode step's attention for S sequences forked from a `prefix`-position root, each with `own`
/// positions of its own: per sequence (S decode calls) vs one decode_cascade; checks the tolerance.
template <class T>
void cascade_row(const char* pages, const attention::Heads& h, std::size_t S, std::size_t prefix, std::size_t own) {
  constexpr std::size_t B = 16;
  kv::PagedPool<T> pool({.n_layers = 1, .n_kv_heads = h.n_kv, .head_dim = h.head_dim, .block_tokens = B,
                         .n_blocks = prefix / B + S * ((own + B - 1) / B + 1) + 8, .prefix_caching = false});
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](kv::SeqId s, std::size_t n) {
    std::vector<float> k(n * h.kv_dim()), v(n * h.kv_dim());
    for (auto& x : k) x = u(gen);
    for (auto& x : v) x = u(gen);
    pool.append(s, 0, k, v);
  };
  std::vector<kv::SeqId> seqs{pool.add_sequence()};
  fill(seqs[0], prefix);
  for (std::size_t s = 1; s < S; ++s) seqs.push_back(pool.fork(seqs[0]));
  for (const auto s : seqs) fill(s, own);
  std::vector<float> q(S * h.q_dim()), a(q.size()), b(q.size());
  for (auto& x : q) x = u(gen);
  attention::CascadeWorkspace ws(h, S);
  auto per_seq = [&] {
    for (std::size_t s = 0; s < S; ++s)
      attention::decode(std::span<const float>(q).subspan(s * h.q_dim(), h.q_dim()), pool.view(seqs[s], 0), h,
                        std::span<float>(a).subspan(s * h.q_dim(), h.q_dim()));
  };
  std::size_t shared = 0;
  auto cascade = [&] { shared = attention::decode_cascade(q, pool, seqs, 0, h, b, ws); };
  const auto [t_cas, t_seq] = bx::paired_medians(cascade, per_seq);
  per_seq();
  cascade();
  double err = 0;
  for (std::size_t i = 0; i < a.size(); ++i) err = std::max(err, static_cast<double>(std::abs(a[i] - b[i])));
  check(err <= attention::kCascadeRelTol, "cascade attention outside its tolerance (" + std::to_string(err) + ")");
  const double row = static_cast<double>(pool.block_bytes()) / B;  // K + V bytes of one position
  const double bytes_seq = static_cast<double>(S * (prefix + own)) * row, bytes_cas = static_cast<double>(prefix + S * own) * row;
  std::printf("  %5zu/%-3zu %-5s %9.1f MB %9.1f MB %11.3f ms %11.3f ms %8.2f× %10.1e\n", h.n_q, h.n_kv, pages, bytes_seq / 1e6,
              bytes_cas / 1e6, t_seq * 1e3, t_cas * 1e3, t_cas / t_seq, err);
  (void)shared;
}

void step5() {
  std::printf("Step 5. Cascade attention: 16 sequences forked from one 2,048-token prefix (a shared document or\n"
              "        system prompt), 64 positions each of their own; one decode step's attention over one layer,\n"
              "        head dim 64, pages of 16; median thread-CPU time of alternating batches\n\n");
  std::printf("  %9s %-5s %12s %12s %14s %14s %9s %10s\n", "heads", "pages", "K/V per-seq", "K/V cascade", "per-sequence",
              "cascade", "ratio", "max |Δ|");
  const attention::Heads qwen{.n_q = 14, .n_kv = 2, .head_dim = 64}, mha{.n_q = 8, .n_kv = 4, .head_dim = 64};
  for (const auto& h : {qwen, mha}) {
    cascade_row<float>("fp32", h, 16, 2048, 64);
    cascade_row<f16>("fp16", h, 16, 2048, 64);
  }
  std::printf("  -> per-sequence decode streams the shared pages once per sequence; the cascade streams them once\n"
              "     for all 16 query sets (one pass with every sequence's heads stacked), then each suffix, and\n"
              "     merges the two online-softmax states: ~11× fewer bytes. With 14 query heads over 2 KV heads\n"
              "     each K/V row already serves 7 heads, so both are bound by multiply-adds more than by bytes and\n"
              "     the time saved is smaller than the bytes saved. Results agree to fp32 rounding (max |Δ| column;\n"
              "     not bitwise, which is why the cascade is opt-in).\n\n");
}

int run(const Args& a) {
  std::printf("Tutorial 9 — batching (threads = %d)\n\n", a.threads);
  if (!a.no_synthetic) step2(step1(a));
  const auto w = bx::load_llama2c(a.model);
  step3(w, a.threads);
  step4(w, a.threads);
  step5();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bx::Cli::run_tool("tutorial_batching", [&] {
    Args a;
    bx::Cli cli("tutorial_batching", "Tutorial 9: batched decode, static vs continuous batching, cascade attention.");
    cli.option("--threads", a.threads, "N", "threads for matrix products and attention")
        .option("--model", a.model, "FILE", "llama2.c checkpoint for Steps 3 and 4 (stories260K)")
        .option("--plot", a.plot, "FILE.svg", "draw throughput and latency against B")
        .flag("--no-synthetic", a.no_synthetic, "skip Step 1 (the ~2.5 GB Qwen2.5-0.5B-shaped model)");
    if (!cli.parse(argc, argv)) return 0;
    // --plot's file is created now: an unwritable path fails before the minutes of measurements
    if (!a.plot.empty()) check(static_cast<bool>(std::ofstream(a.plot)), "cannot write " + a.plot);
    return run(a);
  });
}
