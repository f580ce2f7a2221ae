#pragma once
/// \file
/// The one place barato parallelises loops. With OpenMP enabled (`-fopenmp`) `parallel_for` uses
/// OpenMP's persistent thread team; without it the loop runs serially with identical results.

#include <cstddef>

namespace barato {

/// Number of threads `parallel_for` may use when asked for `requested` (0 = all available).
[[nodiscard]] int resolve_threads(int requested) noexcept;

/// Calls `f(begin, end)` on `threads` contiguous, disjoint chunks covering [0, n). Chunks are
/// aligned to `grain` elements (except the last). `threads <= 1` runs `f(0, n)` on the caller.
template <class F>
void parallel_for(std::size_t n, int threads, F&& f, std::size_t grain = 1) {
  if (n == 0) return;
  if (threads <= 1 || n <= grain) {
    f(std::size_t{0}, n);
    return;
  }
  const std::size_t chunks = (n + grain - 1) / grain;
  const auto t = static_cast<std::size_t>(threads) < chunks ? static_cast<std::size_t>(threads) : chunks;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(t)) schedule(static)
#endif
  for (std::size_t i = 0; i < t; ++i) {
    const std::size_t lo = (chunks * i / t) * grain;
    std::size_t hi = (chunks * (i + 1) / t) * grain;
    if (hi > n) hi = n;
    if (lo < hi) f(lo, hi);
  }
}

/// Starts the thread team `parallel_for` uses for `threads` threads (an empty parallel region), so
/// the first real loop is not charged the team's start-up (1–16 ms measured on a 2-core machine; a
/// model calls it when it is built, so the first request's time to first token does not pay it).
/// No effect with `threads <= 1` or without OpenMP.
inline void warm_threads(int threads) noexcept {
#if defined(_OPENMP)
  if (threads > 1) {
    int sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += 1;
    (void)sink;
  }
#else
  (void)threads;
#endif
}

}  // namespace barato

#if defined(_OPENMP)
#include <omp.h>
inline int barato::resolve_threads(int requested) noexcept { return requested > 0 ? requested : omp_get_max_threads(); }
#else
#include <thread>
inline int barato::resolve_threads(int requested) noexcept {
  return requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
}
#endif
