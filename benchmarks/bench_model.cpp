// bench_model: whole-model prefill and decode throughput of the example Llama decoder
// (examples/models/llama.hpp) on two models, fp32 weights, 1 and 2 threads:
//
//   stories260K   the real checkpoint in ../shared/data (dim 64, 5 layers, vocab 512; ~1 MB of weights)
//   qwen05b       a synthetic model with Qwen2.5-0.5B's shape (random weights, fixed seed; 1.98 GB of
//                 fp32 matrices)
//
// Rows
//   BM_prefill/<model>/P/threads   one forward pass over P prompt tokens from an empty cache;
//                                  counter tokens_per_second = P / time
//   BM_decode/<model>/C/threads    decode steps, one token each: stories260K generates 128 tokens from
//                                  a 1-token context (llama-bench's "tg128"; C = 128 is the last cache
//                                  length); qwen05b times steps against a cache of C positions filled
//                                  with random K/V (each step is rolled back)
// Decode counters
//   tokens_per_second       1 / mean step time
//   weight_bytes            bytes of all matrices streamed per step (the classifier included)
//   weight_GBps             weight_bytes / step time
//   dram_GBps               the DRAM read probe (1 GiB buffer ≫ LLC, vectorised sum, same thread count),
//                           measured in this process right before the row
//   vs_bandwidth_bound      weight_GBps / dram_GBps = (weight_bytes / dram bandwidth) / step time:
//                           1.0 means the step runs at the memory-bandwidth bound (meaningful when the
//                           weights do not fit in the caches: qwen05b)
//   cpu_tokens_per_second,  the same two figures with process CPU time per thread instead of wall time
//   cpu_vs_bandwidth_bound  (probe included): on a machine shared with other jobs, wall time also counts
//                           time spent descheduled (with threads > 1, spinning at barriers counts as CPU)
//
// Targets (issue 3): stories260K decode ≥ 30,000 tokens/s on one thread; qwen05b decode
// vs_bandwidth_bound ≥ 0.85. JSON: --benchmark_format=json. Data: $BARATO_DATA_DIR or
// BARATO_DEFAULT_DATA_DIR (stories rows are skipped with a message when the file is missing).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "dram_probe.hpp"
#include "models/llama.hpp"
#include "models/shapes.hpp"

namespace {

using namespace barato;
namespace bx = barato_examples;
using Clock = std::chrono::steady_clock;
using Weights = bx::LlamaWeights<nn::DenseLinear>;
using Model = bx::Llama<kv::Contiguous<float>>;

std::filesystem::path stories_path() {
  std::filesystem::path dir = BARATO_DEFAULT_DATA_DIR;
  if (const char* env = std::getenv("BARATO_DATA_DIR"); env != nullptr && *env != '\0') dir = env;
  return dir / "stories260K" / "stories260K.bin";
}

/// Weights loaded / built once per process (the 0.5B model takes a few seconds to initialise).
const Weights* stories() {
  static std::unique_ptr<Weights> w = [] {
    const auto p = stories_path();
    return std::filesystem::exists(p) ? std::make_unique<Weights>(bx::load_llama2c(p)) : nullptr;
  }();
  return w.get();
}
const Weights* qwen05b() {
  static std::unique_ptr<Weights> w =
      std::make_unique<Weights>(bx::random_llama_weights(bx::qwen25_05b_shape(4096), /*seed=*/2024, std::pmr::get_default_resource(), 2));
  return w.get();
}
const Weights* weights_of(std::int64_t model) { return model == 0 ? stories() : qwen05b(); }

/// P + 1 token ids (a fixed pseudo-random sequence; timing does not depend on the ids).
std::vector<Token> token_ids(std::size_t n, std::size_t vocab) {
  std::mt19937 gen(7);
  std::vector<Token> t(n);
  t[0] = 1;  // BOS
  for (std::size_t i = 1; i < n; ++i) t[i] = static_cast<Token>(2 + gen() % (vocab - 2));
  return t;
}

void BM_prefill(benchmark::State& state) {
  const Weights* w = weights_of(state.range(0));
  if (w == nullptr) {
    state.SkipWithError(("missing " + stories_path().string()).c_str());
    return;
  }
  const auto p = static_cast<std::size_t>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  Model m(*w, bx::make_contiguous_caches(w->config, p), {.threads = threads, .max_chunk = p, .max_positions = p});
  std::vector<float> logits(m.vocab_size());
  const auto tokens = token_ids(p, m.vocab_size());
  for (auto _ : state) {
    m.reset();
    m.forward_last(tokens, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens_per_second"] =
      benchmark::Counter(static_cast<double>(p) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_decode(benchmark::State& state) {
  const Weights* w = weights_of(state.range(0));
  if (w == nullptr) {
    state.SkipWithError(("missing " + stories_path().string()).c_str());
    return;
  }
  const bool synthetic = state.range(0) != 0;
  const auto c = static_cast<std::size_t>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const bx::LlamaConfig& cfg = w->config;
  Model m(*w, bx::make_contiguous_caches(cfg, c + 1), {.threads = threads, .max_chunk = 1, .max_positions = c + 1});
  std::vector<float> logits(m.vocab_size());
  const auto tokens = token_ids(c + 1, m.vocab_size());
  const bench::Bandwidth probe = bench::measure_dram(threads);
  const double dram = probe.wall;

  std::size_t steps_done = 0;
  double timed = 0.0, timed_cpu = 0.0;  // wall / process-CPU seconds inside the timed regions
  double c0 = 0.0;
  const auto start = [&] {
    c0 = bench::process_cpu_seconds();
    return Clock::now();
  };
  const auto record = [&](Clock::time_point t0) {
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(el);
    timed += el;
    timed_cpu += bench::process_cpu_seconds() - c0;
  };
  if (!synthetic) {
    // tg-style: after an untimed 1-token (BOS) prefill, C decode steps; the cache ends at C + 1.
    for (auto _ : state) {
      m.reset();
      m.forward_last(std::span<const Token>(tokens).first(1), logits);
      const auto t0 = start();
      for (std::size_t i = 1; i <= c; ++i) m.forward_last(std::span<const Token>(&tokens[i], 1), logits);
      record(t0);
      steps_done += c;
    }
  } else {
    // Cache of C positions filled with random K/V rows; each timed step appends one token, then rolls back.
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k(c * cfg.kv_dim()), v(c * cfg.kv_dim());
    for (auto& x : k) x = u(gen);
    for (auto& x : v) x = u(gen);
    for (auto& cache : m.caches()) cache.append(k, v);
    for (auto _ : state) {
      const auto t0 = start();
      m.forward_last(std::span<const Token>(&tokens[c], 1), logits);
      record(t0);
      m.truncate(c);
      ++steps_done;
    }
  }
  const double steps = static_cast<double>(steps_done);
  const double wbytes = static_cast<double>(bx::matrix_bytes(*w));
  state.counters["tokens_per_second"] = benchmark::Counter(steps, benchmark::Counter::kIsRate);
  state.counters["weight_bytes"] = wbytes;
  state.counters["weight_GBps"] = benchmark::Counter(steps * wbytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["dram_GBps"] = dram / 1e9;
  state.counters["vs_bandwidth_bound"] = timed > 0.0 ? (steps * wbytes / dram) / timed : 0.0;
  // The same two figures per CPU second (for a machine shared with other jobs; see dram_probe.hpp).
  const double cpu_per_thread = timed_cpu / threads;
  state.counters["cpu_tokens_per_second"] = cpu_per_thread > 0.0 ? steps / cpu_per_thread : 0.0;
  state.counters["cpu_vs_bandwidth_bound"] = cpu_per_thread > 0.0 ? (steps * wbytes / probe.cpu) / cpu_per_thread : 0.0;
}

}  // namespace

// model 0 = stories260K, 1 = qwen05b
BENCHMARK(BM_prefill)->ArgNames({"model", "P", "threads"})
    ->Args({0, 128, 1})->Args({0, 128, 2})->Args({0, 512, 1})
    ->Args({1, 64, 1})->Args({1, 64, 2})
    ->Unit(benchmark::kMillisecond)->MinTime(0.2)->UseRealTime();
BENCHMARK(BM_decode)->ArgNames({"model", "C", "threads"})
    ->Args({0, 128, 1})->Args({0, 128, 2})
    ->Args({1, 16, 1})->Args({1, 16, 2})->Args({1, 1024, 1})
    ->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseManualTime();

BENCHMARK_MAIN();
