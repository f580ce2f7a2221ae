// bench_attention: one decode step of a single attention head, three ways, plus a memory-read probe.
//
//   recompute  attention::recompute      — the cache-less decoder: n×n causal scores, all n rows
//   cached     attention::decode         — our fused one-pass kernel over kv::Contiguous<float>
//   eigen      attention::decode_eigen   — the straightforward Eigen expression of the cached step
//   probe      Σ over a buffer of the K/V size (2·n·d·4 bytes) — what reading that memory costs
//
// d ∈ {64, 128}, n ∈ {16, 64, 256, 1024, 4096, 16384}; one thread (Eigen too).
//   head_dim   attention::decode at other head sizes (d = 16 … 256, G = 1 / 4 query heads per KV head,
//              n = 4096) against the generic tile routine on the same cache: vs_generic, fixed_dim
// Counters: score_bytes and MACs per step (from attention/cost.hpp), MAC/s, bytes_per_second = K/V
// bytes read per second (Google Benchmark: CPU time, binary prefixes); on the cached rows also
// kv_GBps and probe_GBps (decimal GB/s; the cached step and the probe over a buffer of the same
// byte size measured in alternating batches in this process), kv_bw_vs_probe = their ratio, and
// vs_eigen = Eigen-expression time / cached time. JSON: --benchmark_format=json or --benchmark_out=FILE --benchmark_out_format=json.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/cost.hpp"
#include "barato/attention/eigen_baseline.hpp"
#include "barato/attention/kernels/generic.hpp"
#include "barato/attention/partial.hpp"
#include "barato/attention/recompute.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/simd/arch.hpp"
#include "dram_probe.hpp"
#include "support/reference.hpp"
#include "timing.hpp"

namespace {

using namespace barato;
using barato_examples::paired_medians;

const std::vector<std::int64_t> kDims = {64, 128};
const std::vector<std::int64_t> kContexts = {16, 64, 256, 1024, 4096, 16384};
constexpr double kMinTime = 0.05;  // seconds per benchmark row (keeps the whole binary well under a minute)

/// One head's sequence: q, k, v [n, d] and the same k, v appended to a contiguous cache.
struct Head {
  std::size_t n, d;
  std::vector<float> q, k, v;
  kv::Contiguous<float> cache;
  Head(std::size_t n_, std::size_t d_)
      : n(n_), d(d_), q(test::random_vector(n_ * d_, 11, -2.f, 2.f)), k(test::random_vector(n_ * d_, 12)),
        v(test::random_vector(n_ * d_, 13)), cache(1, d_, n_) {
    cache.append(k, v);
  }
  [[nodiscard]] std::span<const float> last_query() const { return {q.data() + (n - 1) * d, d}; }
};

void eigen_step(const Head& hd, std::span<float> scores, std::span<float> out);

void set_cost_counters(benchmark::State& state, const attention::StepCost& c, std::uint64_t kv_bytes) {
  state.counters["score_bytes"] = static_cast<double>(c.score_bytes);
  state.counters["MACs"] = static_cast<double>(c.macs);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(c.macs), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kv_bytes));
}

void BM_recompute(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const Head hd(n, d);
  Buffer<float> scores(n * n);  // [n, n]
  attention::RowMatrixXf out(n, d);
  const Eigen::Map<const attention::RowMatrixXf> q(hd.q.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(d));
  const Eigen::Map<const attention::RowMatrixXf> k(hd.k.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(d));
  const Eigen::Map<const attention::RowMatrixXf> v(hd.v.data(), static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(d));
  for (auto _ : state) {
    attention::recompute(q, k, v, scores.span(), out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_cost_counters(state, attention::recompute_step_cost(n, d), attention::cached_kv_bytes_read(n, d, DType::f32));
}

void BM_cached(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const Head hd(n, d);
  const attention::Heads heads{.n_q = 1, .n_kv = 1, .head_dim = d};
  std::vector<float> out(d);
  for (auto _ : state) {
    attention::decode(hd.last_query(), hd.cache, heads, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const std::uint64_t kv_bytes = attention::cached_kv_bytes_read(n, d, DType::f32);
  set_cost_counters(state, attention::cached_step_cost(n, d), kv_bytes);
  // The probe reads a buffer of the same size; cached step and probe alternate (paired_medians).
  Buffer<float> probe_buf(kv_bytes / sizeof(float));  // [2·n·d]
  for (std::size_t i = 0; i < probe_buf.size(); ++i) probe_buf[i] = static_cast<float>(i % 7);
  const auto [t_cached, t_probe] = paired_medians(
      [&] {
        attention::decode(hd.last_query(), hd.cache, heads, out);
        benchmark::DoNotOptimize(out.data());
      },
      [&] { benchmark::DoNotOptimize(bench::stream_sum(probe_buf.data(), probe_buf.size())); });
  state.counters["kv_GBps"] = static_cast<double>(kv_bytes) / t_cached / 1e9;
  state.counters["probe_GBps"] = static_cast<double>(kv_bytes) / t_probe / 1e9;
  state.counters["kv_bw_vs_probe"] = t_probe / t_cached;
  // The Eigen expression of the same step, paired with the cached step the same way.
  std::vector<float> scores(n), eigen_out(d);  // [n], [d]
  const auto [t_cached2, t_eigen] = paired_medians(
      [&] {
        attention::decode(hd.last_query(), hd.cache, heads, out);
        benchmark::DoNotOptimize(out.data());
      },
      [&] {
        eigen_step(hd, scores, eigen_out);
        benchmark::DoNotOptimize(eigen_out.data());
      });
  state.counters["vs_eigen"] = t_eigen / t_cached2;
}

void eigen_step(const Head& hd, std::span<float> scores, std::span<float> out) {
  hd.cache.for_each_block(0, [&](const kv::DenseBlock<float>& blk) {
    const Eigen::Map<const attention::RowMatrixXf, Eigen::Unaligned, Eigen::OuterStride<>> k(
        blk.k, static_cast<Eigen::Index>(blk.n), static_cast<Eigen::Index>(hd.d),
        Eigen::OuterStride<>(static_cast<Eigen::Index>(blk.stride)));
    const Eigen::Map<const attention::RowMatrixXf, Eigen::Unaligned, Eigen::OuterStride<>> v(
        blk.v, static_cast<Eigen::Index>(blk.n), static_cast<Eigen::Index>(hd.d),
        Eigen::OuterStride<>(static_cast<Eigen::Index>(blk.stride)));
    attention::decode_eigen(k, v, hd.last_query(), scores, out);
  });
}

void BM_eigen(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const Head hd(n, d);
  std::vector<float> scores(n), out(d);  // [n], [d]
  for (auto _ : state) {
    eigen_step(hd, scores, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_cost_counters(state, attention::cached_step_cost(n, d), attention::cached_kv_bytes_read(n, d, DType::f32));
}

void BM_probe(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const std::uint64_t bytes = attention::cached_kv_bytes_read(n, d, DType::f32);
  Buffer<float> buf(bytes / sizeof(float));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 7);
  for (auto _ : state) benchmark::DoNotOptimize(bench::stream_sum(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

/// One decode step of G query heads over one KV head of head dimension d (n = 4096 cached rows):
/// `attention::decode` (the dispatched kernel) against the generic tile routine
/// (attention/kernels/generic.hpp) on the same cache, paired in this process. Counters: kv_GBps,
/// fixed_dim (1 when d has the fixed-dimension kernel), vs_generic = generic time / decode time.
void BM_head_dim(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0)), g = static_cast<std::size_t>(state.range(1));
  constexpr std::size_t n = 4096;
  const Head hd(n, d);
  const auto q = test::random_vector(g * d, 14, -2.f, 2.f);
  const attention::Heads heads{.n_q = g, .n_kv = 1, .head_dim = d};
  std::vector<float> out(g * d), ref(g * d);
  std::vector<attention::PartialStats> st(g);
  auto step = [&] {
    attention::decode(q, hd.cache, heads, out);
    benchmark::DoNotOptimize(out.data());
  };
  auto generic = [&] {  // the same step through the generic routine
    std::fill(ref.begin(), ref.end(), 0.0f);
    std::fill(st.begin(), st.end(), attention::PartialStats{});
    hd.cache.for_each_block(0, [&](const kv::DenseBlock<float>& blk) {
      attention::detail::accumulate_rows<simd::DefaultArch>(
          attention::QueryGroup{.q = q.data(), .g = g, .d = d, .scale = heads.default_scale(), .o = ref.data(), .st = st.data()},
          attention::detail::ContiguousRows<float>{blk.k, blk.v, blk.stride}, 0, blk.n);
    });
    for (std::size_t h = 0; h < g; ++h) attention::finalize(ref.data() + h * d, st[h], d);
    benchmark::DoNotOptimize(ref.data());
  };
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  const std::uint64_t kv_bytes = attention::cached_kv_bytes_read(n, d, DType::f32);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(kv_bytes));
  const auto [t_step, t_generic] = paired_medians(step, generic);
  state.counters["kv_GBps"] = static_cast<double>(kv_bytes) / t_step / 1e9;
  state.counters["fixed_dim"] = attention::detail::has_fixed_dim_kernel<simd::DefaultArch>(d) ? 1.0 : 0.0;
  state.counters["vs_generic"] = t_generic / t_step;
}

}  // namespace

BENCHMARK(BM_recompute)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cached)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_eigen)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_head_dim)
    ->ArgsProduct({{16, 32, 48, 64, 80, 96, 128, 144, 256}, {1, 4}})
    ->ArgNames({"d", "G"})
    ->MinTime(kMinTime)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_probe)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);  // one core for every variant (Eigen's GEMM would otherwise use OpenMP)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
