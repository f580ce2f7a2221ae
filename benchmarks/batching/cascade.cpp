// bench_batching / Cascade: one decode step's attention for S sequences that share a prefix — per
// sequence (S `attention::decode` calls) vs `attention::decode_cascade` (the shared pages read once
// for all S sequences' query heads).
//
// The step: a root sequence of `prefix` positions is forked S − 1 times, then each of the S sequences
// appends `own` positions of its own (distinct K/V), in a kv::PagedPool (B = 16, d = 64) of `layers`
// layers; every sequence has one query (its newest position). Heads: 14 query over 2 KV heads
// (Qwen2.5-0.5B) or 8 over 4. Element pages: fp32 or fp16. One thread.
// Each iteration attends one layer, cycling through the pool's layers: with layers = 1 the step's
// pages stay in the core's caches between iterations (as a benchmark of one layer repeated sees
// them); with layers = 24 (Qwen2.5-0.5B's depth) each layer's pages were last read 23 layers ago, as
// in a model's decode step.
//
// Rows: BM_cascade_per_sequence and BM_cascade (Google Benchmark CPU time per step). Counters:
// kv_bytes = K/V bytes the step reads (positions read × bytes per position and layer; shared
// positions once for the cascade), kv_GBps; on the BM_cascade rows vs_per_seq = cascade time /
// per-sequence time, both measured in alternating batches in this process (paired_medians, thread
// CPU time), and bytes_ratio = cascade kv_bytes / per-sequence kv_bytes. The target:
// vs_per_seq ≤ 0.3 at S = 16, prefix = 2048, own = 64.
// Both paths perform the same fp32 multiply-adds (2·d per query head and cached position: q·k and
// p·v; the cascade reads the shared rows once but still scores them for every head), so the
// BM_cascade rows also report the arithmetic floor: macs = those multiply-adds, fma_GMACs = the
// in-binary fp32 FMA probe (benchmarks/fma_probe.hpp, thread CPU time), mac_util = floor time /
// cascade time (how close the cascade is to the core's FMA rate), and floor_vs_per_seq = floor time /
// per-sequence time: the lowest vs_per_seq an fp32 kernel could reach on this core. Where
// floor_vs_per_seq > 0.3 (14 query heads over 2 KV heads: per-sequence decode already reuses each K/V
// row for 7 heads and is itself FMA-bound), the target cannot be met by reading fewer bytes.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/cascade.hpp"
#include "barato/core/dtype.hpp"
#include "barato/kv/paged.hpp"
#include "fma_probe.hpp"
#include "support/reference.hpp"
#include "timing.hpp"

namespace {

using namespace barato;
using barato_examples::paired_medians;

constexpr std::size_t kHeadDim = 64;
constexpr std::size_t kBlockTokens = 16;
constexpr double kMinTime = 0.1;

/// Head shapes by index: 0 = Qwen2.5-0.5B (14 query heads over 2 KV heads), 1 = 8 over 4.
attention::Heads heads_of(std::int64_t i) {
  return i == 0 ? attention::Heads{.n_q = 14, .n_kv = 2, .head_dim = kHeadDim}
                : attention::Heads{.n_q = 8, .n_kv = 4, .head_dim = kHeadDim};
}

/// S sequences sharing `prefix` positions with `own` positions each, in every one of `layers` layers.
template <class T>
struct SharedStep {
  attention::Heads heads;
  std::size_t layers, prefix, own;
  kv::PagedPool<T> pool;
  std::vector<kv::SeqId> seqs;
  std::vector<float> q;    // [S, H_q, d]
  std::vector<float> out;  // [S, H_q, d]
  attention::CascadeWorkspace ws;
  std::size_t layer = 0;  // the layer the next step attends

  SharedStep(const attention::Heads& h, std::size_t S, std::size_t prefix_, std::size_t own_, std::size_t layers_)
      : heads(h), layers(layers_), prefix(prefix_), own(own_),
        pool({.n_layers = layers_, .n_kv_heads = h.n_kv, .head_dim = h.head_dim, .block_tokens = kBlockTokens,
              .n_blocks = prefix_ / kBlockTokens + S * ((own_ + kBlockTokens - 1) / kBlockTokens + 1) + 8,
              .prefix_caching = false}),
        q(test::random_vector(S * h.q_dim(), 3, -2.0f, 2.0f)), out(S * h.q_dim()), ws(h, S) {
    seqs.push_back(pool.add_sequence());
    fill(seqs[0], prefix, 10);
    for (std::size_t s = 1; s < S; ++s) seqs.push_back(pool.fork(seqs[0]));
    for (std::size_t s = 0; s < S; ++s) fill(seqs[s], own, 100 + static_cast<unsigned>(s));
  }
  void fill(kv::SeqId s, std::size_t n, unsigned seed) {
    const auto k = test::random_vector(n * heads.kv_dim(), seed), v = test::random_vector(n * heads.kv_dim(), seed + 1);
    for (std::size_t l = 0; l < layers; ++l) pool.append(s, l, k, v);
  }
  /// Bytes of K and V per position of one layer (all KV heads).
  [[nodiscard]] std::size_t position_bytes() const { return pool.block_bytes() / (layers * kBlockTokens); }
  [[nodiscard]] std::uint64_t per_sequence_bytes() const {
    return static_cast<std::uint64_t>(seqs.size() * (prefix + own) * position_bytes());
  }
  /// fp32 multiply-adds of the step, the same for both paths: 2·d per query head and cached position.
  [[nodiscard]] double macs() const {
    return 2.0 * static_cast<double>(heads.head_dim * heads.n_q * seqs.size() * (prefix + own));
  }
  [[nodiscard]] std::uint64_t cascade_bytes() const {
    return static_cast<std::uint64_t>((prefix + seqs.size() * own) * position_bytes());
  }
  void per_sequence() {
    const std::size_t row = heads.q_dim();
    for (std::size_t s = 0; s < seqs.size(); ++s)
      attention::decode(std::span<const float>(q).subspan(s * row, row), pool.view(seqs[s], layer), heads,
                        std::span<float>(out).subspan(s * row, row));
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
  void cascade() {
    benchmark::DoNotOptimize(attention::decode_cascade(q, pool, seqs, layer, heads, out, ws));
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % layers;
  }
};

template <class T>
SharedStep<T> make_step(const benchmark::State& state) {
  return SharedStep<T>(heads_of(state.range(0)), static_cast<std::size_t>(state.range(1)),
                       static_cast<std::size_t>(state.range(2)), static_cast<std::size_t>(state.range(3)),
                       static_cast<std::size_t>(state.range(4)));
}

void set_bytes(benchmark::State& state, std::uint64_t bytes) {
  state.counters["kv_bytes"] = static_cast<double>(bytes);
  state.counters["kv_GBps"] = benchmark::Counter(static_cast<double>(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
void BM_cascade_per_sequence(benchmark::State& state) {
  auto st = make_step<T>(state);
  for (auto _ : state) st.per_sequence();
  set_bytes(state, st.per_sequence_bytes());
}

template <class T>
void BM_cascade(benchmark::State& state) {
  auto st = make_step<T>(state);
  for (auto _ : state) st.cascade();
  set_bytes(state, st.cascade_bytes());
  const auto [t_cascade, t_per_seq] = paired_medians([&] { st.cascade(); }, [&] { st.per_sequence(); });
  state.counters["vs_per_seq"] = t_cascade / t_per_seq;
  state.counters["bytes_ratio"] = static_cast<double>(st.cascade_bytes()) / static_cast<double>(st.per_sequence_bytes());
  const double floor = st.macs() / bench::fma_rate();  // seconds at the core's FMA rate
  state.counters["macs"] = st.macs();
  state.counters["fma_GMACs"] = bench::fma_rate() / 1e9;
  state.counters["mac_util"] = floor / t_cascade;
  state.counters["floor_vs_per_seq"] = floor / t_per_seq;
}

// {heads, S, prefix, own, layers}: the case (16 × (2048 + 64)) for both head shapes, warm
// (1 layer) and model-like (24 layers); then smaller groups and prefixes, to see where it pays.
void cascade_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"heads", "S", "prefix", "own", "layers"});
  for (const std::int64_t h : {0, 1})
    for (const std::int64_t layers : {1, 24}) b->Args({h, 16, 2048, 64, layers});
  for (const std::int64_t S : {2, 4})
    for (const std::int64_t prefix : {256, 2048}) b->Args({0, S, prefix, 64, 24});
  b->Args({0, 16, 256, 64, 24});
  b->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BM_cascade_per_sequence, float)->Apply(cascade_args);
BENCHMARK_TEMPLATE(BM_cascade, float)->Apply(cascade_args);
BENCHMARK_TEMPLATE(BM_cascade_per_sequence, f16)->Apply(cascade_args);
BENCHMARK_TEMPLATE(BM_cascade, f16)->Apply(cascade_args);

}  // namespace
