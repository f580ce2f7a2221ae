// bench_batching / Products: batched matrix products Y = X Wᵀ (`apply_batch`) for n vectors, per
// weight format, on the two Qwen2.5-0.5B FFN shapes (gate/up 4864×896, down 896×4864), one thread.
//
// Each benchmark cycles through copies of one matrix whose total size exceeds the last-level cache
// (kSetBytes), so every call reads its weights from DRAM, as a decode step does. Counters:
//   weight_bytes  weight bytes one call reads (codes + scales; once per call for any n ≤ 64)
//   weight_GBps   weight_bytes per second of wall time
//   of_probe      weight_GBps / the DRAM read probe (bench::dram_bandwidth, same binary, 1 thread)
//   x_vs_n1       time(n) / time(1) for the same format and shape, measured in this run, on the
//                 thread's CPU time (robust to being descheduled on a shared machine; memory stalls
//                 still count): throughput at n is n / x_vs_n1 times that at n = 1
//   x_vs_n1_wall  the same on wall-clock time; us_per_call (wall), us_per_call_cpu
//
//   ./bench_batching --benchmark_filter=Products

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "barato/nn/dense.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/activation.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/nf4.hpp"
#include "dram_probe.hpp"
#include "models/shapes.hpp"
#include "timing.hpp"

namespace {

using namespace barato;

/// Total weight bytes a benchmark cycles through: larger than this machine's 260 MiB LLC.
constexpr std::size_t kSetBytes = std::size_t{320} << 20;

/// Cheap deterministic "normal-ish" weights (sum of 4 uniforms), scaled like trained weights.
std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale) {
  std::vector<float> w(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
  for (auto& v : w) {
    float acc = 0;
    for (int k = 0; k < 4; ++k) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      acc += static_cast<float>(s >> 40) / static_cast<float>(1u << 24) - 0.5f;
    }
    v = scale * acc;
  }
  return w;
}

/// Copies of one layer type L of shape rows × cols, at least kSetBytes in all; one set alive at a time.
template <class L>
struct LayerSet {
  std::vector<std::unique_ptr<L>> layers;
};
std::shared_ptr<void> g_set;
std::string g_key;

template <class L>
LayerSet<L>& layer_set(const std::string& key, std::size_t rows, std::size_t cols) {
  if (g_key != key) {
    g_set.reset();
    auto set = std::make_shared<LayerSet<L>>();
    const auto w = random_values(rows * cols, 7, 0.02f);
    set->layers.push_back(std::make_unique<L>(rows, cols, std::span<const float>(w)));
    const std::size_t copies = std::max<std::size_t>(1, (kSetBytes + set->layers[0]->bytes() - 1) / set->layers[0]->bytes());
    for (std::size_t i = 1; i < copies; ++i) {
      if constexpr (requires(const L& l) { l.copy(); }) set->layers.push_back(std::make_unique<L>(set->layers[0]->copy()));
      else set->layers.push_back(std::make_unique<L>(rows, cols, std::span<const float>(w)));
    }
    g_set = set;
    g_key = key;
  }
  return *static_cast<LayerSet<L>*>(g_set.get());
}

std::map<std::string, std::pair<double, double>> g_seconds_n1;  // [format/shape] (wall, cpu) seconds per call at n = 1

template <class L>
void BM_Products(benchmark::State& state, std::string name, std::size_t rows, std::size_t cols) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::string key = name + "/" + std::to_string(rows) + "x" + std::to_string(cols);
  auto& set = layer_set<L>(key, rows, cols);
  const double probe = bench::dram_bandwidth(1);
  const auto x = random_values(n * cols, 11, 1.0f);
  std::vector<float> y(n * rows);
  if constexpr (requires(const L& l) { l.reserve(n); }) set.layers[0]->reserve(n);  // the scratch, once
  std::size_t next = 0;
  // The thread's CPU time is read around the whole loop, not around each call: each read is a system
  // call (1.3 µs on a 2026-12 VM) that the call's wall time then included.
  double seconds = 0;
  const double c_loop = barato_examples::thread_seconds();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    set.layers[next]->apply_batch(x, y, n, 1);
    benchmark::DoNotOptimize(y.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    next = next + 1 == set.layers.size() ? 0 : next + 1;
  }
  const double cpu_seconds = barato_examples::thread_seconds() - c_loop;
  const double per_call = seconds / static_cast<double>(state.iterations());
  const double per_call_cpu = cpu_seconds / static_cast<double>(state.iterations());
  if (n == 1) g_seconds_n1[key] = {per_call, per_call_cpu};
  const double bytes = static_cast<double>(set.layers[0]->bytes());
  state.counters["weight_bytes"] = bytes;
  state.counters["weight_GBps"] = bytes / per_call / 1e9;
  state.counters["of_probe"] = bytes / per_call / probe;
  state.counters["probe_GBps"] = probe / 1e9;
  if (auto it = g_seconds_n1.find(key); it != g_seconds_n1.end()) {
    state.counters["x_vs_n1"] = per_call_cpu / it->second.second;
    state.counters["x_vs_n1_wall"] = per_call / it->second.first;
  }
  state.counters["us_per_call"] = 1e6 * per_call;
  state.counters["us_per_call_cpu"] = 1e6 * per_call_cpu;
}

template <class L>
void register_format(const char* name) {
  const auto cfg = barato_examples::qwen25_05b_shape();
  for (const auto& [rows, cols] : {std::pair{cfg.hidden_dim, cfg.dim}, std::pair{cfg.dim, cfg.hidden_dim}}) {
    const std::string label = std::string("Products/") + name + "/" + std::to_string(rows) + "x" + std::to_string(cols);
    benchmark::RegisterBenchmark(label.c_str(), BM_Products<L>, std::string(name), rows, cols)
        ->Arg(1)->Arg(4)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
  }
}

const bool g_registered = [] {
  register_format<nn::Dense<float>>("fp32");
  register_format<quant::Linear<quant::Int8PerRow<>>>("int8_row");
  register_format<quant::Linear<quant::Int4Group<128>>>("int4_g128");
  register_format<quant::Linear<quant::Nf4<64>>>("nf4_64");
  register_format<quant::Linear<quant::Int8Group<32>>>("int8_g32");
  register_format<quant::Linear<quant::GgmlQ8_0>>("q8_0");
  register_format<quant::Linear<quant::GgmlQ4_0>>("q4_0");
  register_format<quant::W8A8Linear<>>("w8a8");
  return true;
}();

}  // namespace
