// bench_attention: one decode step of a single attention head, three ways, plus a memory-read probe.
//
//   recompute  attention::recompute      — the cache-less decoder: n×n causal scores, all n rows
//   cached     attention::decode         — our fused one-pass kernel over kv::Contiguous<float>
//   eigen      attention::decode_eigen   — the straightforward Eigen expression of the cached step
//   probe      Σ over a buffer of the K/V size (2·n·d·4 bytes) — what reading that memory costs
//
// d ∈ {64, 128}, n ∈ {16, 64, 256, 1024, 4096, 16384}; one thread (Eigen too).
// Counters: score_bytes and MACs per step (from attention/cost.hpp), MAC/s, bytes_per_second = K/V
// bytes read per second; on the cached rows also kv_GBps, probe_GBps (the probe measured in this
// process for the same byte size), kv_bw_vs_probe = their ratio, and vs_eigen = eigen time / cached
// time. JSON: --benchmark_format=json or --benchmark_out=FILE --benchmark_out_format=json.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/cost.hpp"
#include "barato/attention/eigen_baseline.hpp"
#include "barato/attention/recompute.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/simd/arch.hpp"
#include "support/reference.hpp"

namespace {

using namespace barato;

/// Seconds of CPU time of the calling thread: like Google Benchmark's default (CPU) time, it is not
/// inflated when other processes share the cores.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

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

/// Sum of a float buffer with 8 independent vector accumulators: a pure streaming read.
float probe_sum(const float* x, std::size_t n) {
  using B = simd::Batch<float>;
  constexpr std::size_t W = B::size;
  B a[8];
  for (auto& b : a) b = B(0.0f);
  std::size_t i = 0;
  for (; i + 8 * W <= n; i += 8 * W)
    for (std::size_t u = 0; u < 8; ++u) a[u] += B::load_aligned(x + i + u * W);
  for (; i + W <= n; i += W) a[0] += B::load_aligned(x + i);
  float s = simd::reduce_add<float, simd::DefaultArch>(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
  for (; i < n; ++i) s += x[i];
  return s;
}

/// Median seconds of `f()` over batches of repeated calls (each batch ≥ ~2 ms, 9 batches).
template <class F>
double median_seconds(F&& f) {
  std::size_t reps = 1;
  for (;;) {  // grow the batch until it takes ≥ 2 ms
    const double t0 = thread_seconds();
    for (std::size_t r = 0; r < reps; ++r) f();
    if (thread_seconds() - t0 >= 2e-3 || reps >= (1u << 24)) break;
    reps *= 2;
  }
  std::vector<double> t(9);
  for (auto& x : t) {
    const double t0 = thread_seconds();
    for (std::size_t r = 0; r < reps; ++r) f();
    x = (thread_seconds() - t0) / static_cast<double>(reps);
  }
  std::nth_element(t.begin(), t.begin() + 4, t.end());
  return t[4];
}

/// Read bandwidth (bytes/s) of the probe over a buffer of `bytes`, measured once per size.
double probe_bandwidth(std::size_t bytes) {
  static std::map<std::size_t, double> memo;
  if (auto it = memo.find(bytes); it != memo.end()) return it->second;
  Buffer<float> buf(bytes / sizeof(float));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 7);
  const double s = median_seconds([&] { benchmark::DoNotOptimize(probe_sum(buf.data(), buf.size())); });
  return memo[bytes] = static_cast<double>(bytes) / s;
}

/// Median seconds of one Eigen-expression step, measured once per shape (for `vs_eigen`).
double eigen_step_seconds(std::size_t n, std::size_t d);

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
  const double t0 = thread_seconds();
  for (auto _ : state) {
    attention::decode(hd.last_query(), hd.cache, heads, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double secs = (thread_seconds() - t0) / static_cast<double>(state.iterations());
  const std::uint64_t kv_bytes = attention::cached_kv_bytes_read(n, d, DType::f32);
  set_cost_counters(state, attention::cached_step_cost(n, d), kv_bytes);
  const double bw = static_cast<double>(kv_bytes) / secs;
  const double probe = probe_bandwidth(kv_bytes);
  state.counters["kv_GBps"] = bw / 1e9;
  state.counters["probe_GBps"] = probe / 1e9;
  state.counters["kv_bw_vs_probe"] = bw / probe;
  state.counters["vs_eigen"] = eigen_step_seconds(n, d) / secs;
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

double eigen_step_seconds(std::size_t n, std::size_t d) {
  static std::map<std::pair<std::size_t, std::size_t>, double> memo;
  if (auto it = memo.find({n, d}); it != memo.end()) return it->second;
  const Head hd(n, d);
  std::vector<float> scores(n), out(d);
  const double s = median_seconds([&] {
    eigen_step(hd, scores, out);
    benchmark::DoNotOptimize(out.data());
  });
  return memo[{n, d}] = s;
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
  for (auto _ : state) benchmark::DoNotOptimize(probe_sum(buf.data(), buf.size()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

}  // namespace

BENCHMARK(BM_recompute)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cached)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_eigen)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_probe)->ArgsProduct({kDims, kContexts})->ArgNames({"d", "n"})->MinTime(kMinTime)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);  // one core for every variant (Eigen's GEMM would otherwise use OpenMP)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
