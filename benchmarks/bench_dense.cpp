// bench_dense: nn::Dense GEMV (one decode-step projection) and batched GEMM (prefill) on model shapes,
// fp32 and fp16/bf16 storage, 1 and 2 threads, against a scalar baseline and the DRAM read probe.
//
// Counters: bytes_per_second = weight bytes read per second; GBps; vs_dram = that bandwidth / the
// DRAM probe on the same thread count (meaningful for matrices ≫ LLC: the classifier of a
// Qwen2.5-0.5B-shaped model is 151936 × 896 = 545 MB in fp32); for the batched rows, tokens_per_second
// and GFLOPs. JSON: --benchmark_format=json.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <span>
#include <vector>

#include "barato/nn/dense.hpp"
#include "dram_probe.hpp"
#include "support/nn_reference.hpp"
#include "support/reference.hpp"

namespace {

using namespace barato;

/// Model shapes (rows, cols): stories260K (dim 64, FFN 172), Qwen2.5-0.5B-shaped (hidden 896, KV 128,
/// FFN 4864, vocab 151936).
const std::vector<std::vector<std::int64_t>> kShapes = {
    {64, 64}, {172, 64}, {64, 172}, {512, 64}, {896, 896}, {128, 896}, {4864, 896}, {896, 4864}, {151936, 896}};

template <class T>
void BM_gemv(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  nn::Dense<T> w(rows, cols);
  {
    const auto init = test::random_vector(cols, 1);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) w.weights()[r * cols + c] = static_cast<T>(init[(c + r) % cols]);
  }
  const auto x = test::random_vector(cols, 2);
  std::vector<float> y(rows);
  for (auto _ : state) {
    w.apply(x, y, threads);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(w.bytes()) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  if (w.bytes() > (std::size_t{64} << 20)) {
    state.counters["dram_GBps"] = bench::dram_bandwidth(threads) / 1e9;
  }
}

void BM_gemv_scalar_baseline(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  const auto w = test::random_vector(rows * cols, 1);
  const auto x = test::random_vector(cols, 2);
  for (auto _ : state) {
    auto y = test::dense_ref(w, rows, cols, x, 1);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(rows * cols * sizeof(float)) * state.iterations());
}

void BM_gemm(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  const auto n = static_cast<std::size_t>(state.range(2));
  const int threads = static_cast<int>(state.range(3));
  const nn::Dense<float> w(rows, cols, test::random_vector(rows * cols, 1));
  const auto x = test::random_vector(n * cols, 2);
  std::vector<float> y(n * rows);
  for (auto _ : state) {
    w.apply_batch(x, y, n, threads);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["tokens_per_second"] = benchmark::Counter(static_cast<double>(n) * it, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * cols * n) * it / 1e9, benchmark::Counter::kIsRate);
}

void gemv_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes)
    for (int t : {1, 2}) b->Args({s[0], s[1], t});
}

}  // namespace

BENCHMARK(BM_gemv<float>)->Apply(gemv_args)->MinTime(0.05)->UseRealTime();
BENCHMARK(BM_gemv<barato::f16>)->Args({4864, 896, 1})->Args({151936, 896, 1})->Args({151936, 896, 2})->MinTime(0.05)->UseRealTime();
BENCHMARK(BM_gemv<barato::bf16>)->Args({4864, 896, 1})->Args({151936, 896, 1})->MinTime(0.05)->UseRealTime();
BENCHMARK(BM_gemv_scalar_baseline)->Args({64, 64})->Args({896, 896})->MinTime(0.05);
BENCHMARK(BM_gemm)->Args({4864, 896, 128, 1})->Args({4864, 896, 128, 2})->Args({896, 4864, 128, 1})->Args({172, 64, 64, 1})->MinTime(0.05)->UseRealTime();

BENCHMARK_MAIN();
