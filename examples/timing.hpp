#pragma once
/// \file
/// Thread-CPU-time measurement shared by the tutorials and the benchmarks (both get -I examples).
/// These machines' cores are shared, so comparisons are made in the same process, in interleaved
/// batches, on the calling thread's CPU time (not inflated while other processes run), and a
/// median of batches is kept (robust to the odd disturbed batch).

#include <time.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace barato_examples {

/// CPU seconds of the calling thread.
inline double thread_seconds() noexcept {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// Calls per batch so that one batch of f() takes ≥ 2 ms of thread CPU time (at most 2^24 calls).
template <class F>
std::size_t batch_reps(F&& f) {
  std::size_t reps = 1;
  for (;;) {
    const double t0 = thread_seconds();
    for (std::size_t r = 0; r < reps; ++r) f();
    if (thread_seconds() - t0 >= 2e-3 || reps >= (std::size_t{1} << 24)) return reps;
    reps *= 2;
  }
}

/// Thread CPU seconds per call over one batch of `reps` calls of f().
template <class F>
double batch_seconds(F&& f, std::size_t reps) {
  const double t0 = thread_seconds();
  for (std::size_t r = 0; r < reps; ++r) f();
  return (thread_seconds() - t0) / static_cast<double>(reps);
}

/// Median of `t` (t non-empty; reorders it).
inline double median(std::vector<double> t) {
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

/// Median thread CPU seconds per call of f() and of g(), measured in `batches` alternating batches
/// of each, so that both see the same machine state and their ratio is robust to other processes.
template <class F, class G>
std::pair<double, double> paired_medians(F&& f, G&& g, int batches = 9) {
  const std::size_t rf = batch_reps(f), rg = batch_reps(g);
  std::vector<double> tf, tg;
  for (int i = 0; i < batches; ++i) {
    tf.push_back(batch_seconds(f, rf));
    tg.push_back(batch_seconds(g, rg));
  }
  return {median(tf), median(tg)};
}

}  // namespace barato_examples
