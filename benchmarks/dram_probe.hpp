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

/// A `bytes`-sized buffer (allocated and written once) that `pass()` streams on `threads` threads,
/// each thread its contiguous share. One pass is one probe measurement: `measure_dram` takes the best
/// of several; a benchmark can also alternate passes with its own work (`PairedProbe`).
class DramProbe {
 public:
  explicit DramProbe(int threads, std::size_t bytes = std::size_t{1} << 30)
      : threads_(threads), tt_(static_cast<std::size_t>(std::max(threads, 1))), buf_(bytes / sizeof(float)),
        partial_(tt_ * 16, 0.0f) {
    std::fill(buf_.begin(), buf_.end(), 1.0f);  // every page touched before timing
  }
  /// One streaming pass: its read bandwidth per wall-clock second and per CPU second of each thread.
  Bandwidth pass() {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(
        tt_, threads_,
        [&](std::size_t lo, std::size_t hi) {
          for (std::size_t t = lo; t < hi; ++t) {
            const std::size_t n = buf_.size();
            const std::size_t b = n * t / tt_, e = n * (t + 1) / tt_;
            partial_[t * 16] += stream_sum(buf_.data() + b, e - b);
          }
        },
        1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double c = (process_cpu_seconds() - c0) / static_cast<double>(tt_);
    const double bytes = static_cast<double>(buf_.size() * sizeof(float));
    float check = 0;
    for (float v : partial_) check += v;
    if (check < 0) return {};  // keeps the sums observable
    return {bytes / s, c > 0 ? bytes / c : 0.0};
  }

 private:
  int threads_;
  std::size_t tt_;
  Buffer<float> buf_;
  std::vector<float> partial_;
};

/// Best-of-`passes` read bandwidth over a fresh `bytes`-sized buffer on `threads` threads (each
/// thread streams its contiguous share). Measured anew on every call.
inline Bandwidth measure_dram(int threads, std::size_t bytes = std::size_t{1} << 30, int passes = 5) {
  DramProbe probe(threads, bytes);
  Bandwidth best;
  for (int p = 0; p < passes; ++p) {
    const Bandwidth b = probe.pass();
    best.wall = std::max(best.wall, b.wall);
    best.cpu = std::max(best.cpu, b.cpu);
  }
  return best;
}

/// Ratios of a measured pass's bandwidth to a probe pass run just before it, collected over a
/// benchmark's iterations: on a shared host the DRAM bandwidth a core gets drifts from second to
/// second (±15–30 % here), and a ratio against a probe measured once, earlier, carries that drift;
/// adjacent passes see the same conditions. `median()` is the figure to report.
class PairedProbe {
 public:
  /// 256 MiB, one pass ≈ 10–20 ms: 8× the Zen hosts' 32 MiB L3. The Intel host's L3 is 480 MiB but
  /// shared; one thread read 28–29 GB/s over 64 MiB there and 14–15 GB/s (its DRAM speed) over 128 MiB
  /// and more, 256 MiB included (2026-12-05).
  explicit PairedProbe(int threads, std::size_t bytes = std::size_t{1} << 28) : probe_(threads, bytes) {}
  /// Streams one probe pass; call right before the measured pass.
  void probe() {
    last_ = probe_.pass().wall;
    probes_.push_back(last_);
  }
  /// Records the measured pass's bytes per wall-clock second against the last probe pass.
  void record(double bytes_per_second) {
    if (last_ > 0) ratios_.push_back(bytes_per_second / last_);
  }
  /// Median of the recorded ratios (0 when none).
  [[nodiscard]] double median() const { return median_of(ratios_); }
  /// Median bandwidth (bytes/s) of the probe passes.
  [[nodiscard]] double probe_median() const { return median_of(probes_); }

 private:
  static double median_of(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  DramProbe probe_;
  double last_ = 0.0;
  std::vector<double> ratios_, probes_;
};

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
