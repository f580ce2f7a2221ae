#pragma once
// DRAM read-bandwidth probe shared by the model-level benchmarks: the speed at which this machine can
// stream a buffer far larger than the last-level cache (default 1 GiB) through vector loads, on 1 or
// more threads. A decode step that reads W bytes of weights cannot beat W / probe_bandwidth(threads);
// the benchmarks report their bytes/s as a ratio to it.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/simd/arch.hpp"

namespace barato::bench {

/// Sum of x[0..n) with 8 independent vector accumulators: a pure streaming read.
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

/// Best-of-`passes` read bandwidth in bytes/s over a fresh `bytes`-sized buffer on `threads` threads
/// (each thread streams its contiguous share). Measured anew on every call.
inline double measure_dram_bandwidth(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  Buffer<float> buf(bytes / sizeof(float));  // zeroed: every page is touched before timing
  std::fill(buf.begin(), buf.end(), 1.0f);
  std::vector<float> partial(static_cast<std::size_t>(std::max(threads, 1)) * 16, 0.0f);
  double best = 0.0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(
        static_cast<std::size_t>(std::max(threads, 1)), threads,
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t t = lo; t < hi; ++t) {
            const std::size_t n = buf.size(), tt = static_cast<std::size_t>(std::max(threads, 1));
            const std::size_t b = n * t / tt, e = n * (t + 1) / tt;
            partial[t * 16] += stream_sum(buf.data() + b, e - b);
          }
        },
        1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s);
  }
  float check = 0;
  for (float v : partial) check += v;
  if (check < 0) best = 0;  // keeps the sums observable
  return best;
}

/// `measure_dram_bandwidth`, measured once per (threads, bytes) per process.
inline double dram_bandwidth(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  static std::map<std::pair<int, std::size_t>, double> measured;
  const auto key = std::make_pair(threads, bytes);
  if (auto it = measured.find(key); it != measured.end()) return it->second;
  return measured[key] = measure_dram_bandwidth(threads, bytes, passes);
}

}  // namespace barato::bench
