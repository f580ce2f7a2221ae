#pragma once
// DRAM read-bandwidth probe shared by the model-level benchmarks: the speed at which this machine can
// stream a buffer far larger than the last-level cache (default 1 GiB) through vector loads, on 1 or
// more threads. A decode step that reads W bytes of weights cannot beat W / probe_bandwidth(threads);
// the benchmarks report their bytes/s as a ratio to it. `stream_sum` is also the read probe of any
// size (bench_attention sums a cache-resident buffer of a K/V cache's byte size with it).

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstddef>
#include <map>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/simd/arch.hpp"

namespace barato::bench {

/// Sum of x[0..n) with 8 independent vector accumulators: a pure streaming read of 4·n bytes, any
/// alignment, any n (vector loop, one-vector loop, scalar tail). The one memory-read probe of the
/// benchmarks: over a 1 GiB buffer it measures DRAM, over a small one L1/L2.
inline float stream_sum(const float* x, std::size_t n) noexcept {
  using B = simd::Batch<float>;
  constexpr std::size_t W = B::size;
  B a[8];
  for (auto& b : a) b = B(0.0f);
  std::size_t i = 0;
  for (; i + 8 * W <= n; i += 8 * W)
    for (std::size_t u = 0; u < 8; ++u) a[u] += B::load_unaligned(x + i + u * W);
  for (; i + W <= n; i += W) a[0] += B::load_unaligned(x + i);
  float s = simd::reduce_add<float, simd::DefaultArch>(((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));
  for (; i < n; ++i) s += x[i];
  return s;
}

/// Process CPU seconds (all threads).
inline double process_cpu_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// A read bandwidth in bytes/s two ways: per wall-clock second, and per CPU second of each thread
/// (bytes / (process CPU time / threads)). On a shared, oversubscribed machine the wall figure also
/// measures time spent descheduled; the CPU figure does not.
struct Bandwidth {
  double wall = 0.0, cpu = 0.0;
};

/// Best-of-`passes` read bandwidth over a fresh `bytes`-sized buffer on `threads` threads (each
/// thread streams its contiguous share). Measured anew on every call.
inline Bandwidth measure_dram(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  const int tt = std::max(threads, 1);
  Buffer<float> buf(bytes / sizeof(float));  // zeroed: every page is touched before timing
  std::fill(buf.begin(), buf.end(), 1.0f);
  std::vector<float> partial(static_cast<std::size_t>(tt) * 16, 0.0f);
  Bandwidth best;
  for (int p = 0; p < passes; ++p) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(
        static_cast<std::size_t>(tt), threads,
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t t = lo; t < hi; ++t) {
            const std::size_t n = buf.size(), nt = static_cast<std::size_t>(tt);
            const std::size_t b = n * t / nt, e = n * (t + 1) / nt;
            partial[t * 16] += stream_sum(buf.data() + b, e - b);
          }
        },
        1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double c = (process_cpu_seconds() - c0) / tt;
    best.wall = std::max(best.wall, static_cast<double>(bytes) / s);
    if (c > 0) best.cpu = std::max(best.cpu, static_cast<double>(bytes) / c);
  }
  float check = 0;
  for (float v : partial) check += v;
  if (check < 0) best = {};  // keeps the sums observable
  return best;
}

/// Wall-clock read bandwidth (bytes/s) of `measure_dram`.
inline double measure_dram_bandwidth(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  return measure_dram(threads, bytes, passes).wall;
}

/// `measure_dram_bandwidth`, measured once per (threads, bytes) per process.
inline double dram_bandwidth(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  static std::map<std::pair<int, std::size_t>, double> measured;
  const auto key = std::make_pair(threads, bytes);
  if (auto it = measured.find(key); it != measured.end()) return it->second;
  return measured[key] = measure_dram_bandwidth(threads, bytes, passes);
}

}  // namespace barato::bench
