// bench_batching: batched inference, measured in one binary (issue 12). The benchmarks live in
// benchmarks/batching/*.cpp, one file per topic (batched products per format, the batched model step,
// cascade attention, the scheduler); this file is the shared main.
//
//   ./bench_batching --benchmark_filter=Products   etc.

#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
