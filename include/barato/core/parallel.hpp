#pragma once
/// \file
/// The one place barato parallelises loops. With OpenMP enabled (`-fopenmp`) `parallel_for` uses
/// OpenMP's persistent thread team; without it the loop runs serially with identical results.

#include <cstddef>
#include <cstdlib>

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

/// Threads worth using (at least 1, at most `threads`) for `work` units when each thread must get at
/// least `min_per_thread` of them to repay what it costs: a fork and join, and moving its inputs and
/// outputs between cores (callers size `min_per_thread` from both). Rounded down: a matrix just over
/// one thread's minimum stays on one thread instead of giving a second a sliver of rows.
/// Work a thread must do per input or output value it moves between the cores, in the units of
/// `threads_for` (multiply-adds plus weight bytes): a product's per-thread minimum adds this for each
/// value of n · (rows + cols) its thread would pull from or push to the other core (nn/dense.hpp,
/// quant/gemv.hpp; measured on the 2-core Zen 5 host, 2026-12-05).
inline constexpr std::size_t kMovedValueWork = 32;

[[nodiscard]] constexpr int threads_for(std::size_t work, std::size_t min_per_thread, int threads) noexcept {
  const std::size_t by_work = work / (min_per_thread > 0 ? min_per_thread : 1);
  const std::size_t t = static_cast<std::size_t>(threads < 1 ? 1 : threads);
  return static_cast<int>(by_work < 1 ? 1 : (by_work < t ? by_work : t));
}

/// True for an OMP_WAIT_POLICY value naming the passive policy ("passive" in any case, blanks around
/// it allowed, as libgomp reads it); false for anything else and for nullptr (unset).
[[nodiscard]] constexpr bool is_passive_wait_policy(const char* value) noexcept {
  if (value == nullptr) return false;
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (blank(*value)) ++value;
  for (const char* w = "passive"; *w != '\0'; ++w, ++value)
    if (*value != *w && *value != *w - ('a' - 'A')) return false;
  while (blank(*value)) ++value;
  return *value == '\0';
}

/// Whether `parallel_for`'s threads sleep between loops (OpenMP with OMP_WAIT_POLICY=passive, read
/// once): each fork then wakes them, 20–60 µs on the 2-core Zen 5 host against ≈ 3.5 µs with the
/// default spinning waits (2026-12-06), so a split must repay more. False without OpenMP.
[[nodiscard]] inline bool passive_waits() noexcept {
#if defined(_OPENMP)
  static const bool passive = is_passive_wait_policy(std::getenv("OMP_WAIT_POLICY"));
  return passive;
#else
  return false;
#endif
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
