// core/parallel.hpp: parallel_for's chunking contract (contiguous, disjoint chunks covering [0, n)
// exactly once, aligned to the grain, serial for one thread), resolve_threads and threads_for.
#include "barato/core/parallel.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

using namespace barato;

namespace {
/// The chunks parallel_for hands out, sorted by start, and how often each index was visited.
struct Chunks {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  std::vector<int> visits;
};

Chunks run(std::size_t n, int threads, std::size_t grain) {
  Chunks c;
  c.visits.assign(n, 0);
  std::mutex mu;
  parallel_for(
      n, threads,
      [&](std::size_t lo, std::size_t hi) {
        const std::lock_guard<std::mutex> lock(mu);
        c.ranges.emplace_back(lo, hi);
        for (std::size_t i = lo; i < hi; ++i) ++c.visits[i];
      },
      grain);
  std::sort(c.ranges.begin(), c.ranges.end());
  return c;
}
}  // namespace

TEST_CASE("parallel_for: contiguous, disjoint, grain-aligned chunks cover [0, n) exactly once") {
  for (const std::size_t n : {1, 2, 15, 16, 17, 100, 1000, 4099})
    for (const int threads : {2, 3, 4, 8})
      for (const std::size_t grain : {1, 4, 16, 64}) {
        CAPTURE(n);
        CAPTURE(threads);
        CAPTURE(grain);
        const Chunks c = run(n, threads, grain);
        CHECK(std::all_of(c.visits.begin(), c.visits.end(), [](int v) { return v == 1; }));
        REQUIRE_FALSE(c.ranges.empty());
        CHECK(c.ranges.front().first == 0);
        CHECK(c.ranges.back().second == n);
        for (std::size_t i = 0; i < c.ranges.size(); ++i) {
          CHECK(c.ranges[i].first < c.ranges[i].second);                                  // no empty calls
          CHECK(c.ranges[i].first % grain == 0);                                          // aligned starts
          if (i + 1 < c.ranges.size()) CHECK(c.ranges[i].second == c.ranges[i + 1].first);  // contiguous
        }
        // at most `threads` chunks, and no more chunks than grains
        CHECK(c.ranges.size() <= static_cast<std::size_t>(threads));
        CHECK(c.ranges.size() <= (n + grain - 1) / grain);
        if (n >= static_cast<std::size_t>(threads) * grain) CHECK(c.ranges.size() == static_cast<std::size_t>(threads));
      }
}

TEST_CASE("parallel_for: one thread, or n within one grain, is a single call on the calling thread; n = 0 makes no call") {
  for (const int threads : {-1, 0, 1}) {
    const auto caller = std::this_thread::get_id();
    int calls = 0;
    bool same_thread = true;
    parallel_for(100, threads, [&](std::size_t lo, std::size_t hi) {
      ++calls;
      same_thread = same_thread && std::this_thread::get_id() == caller;
      CHECK(lo == 0);
      CHECK(hi == 100);
    });
    CHECK(calls == 1);
    CHECK(same_thread);
  }
  const Chunks small = run(10, 4, 16);  // n ≤ grain
  REQUIRE(small.ranges.size() == 1);
  CHECK(small.ranges[0] == std::pair<std::size_t, std::size_t>{0, 10});
  std::atomic<int> calls{0};
  parallel_for(0, 4, [&](std::size_t, std::size_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("resolve_threads: a positive request is kept, 0 means all available (at least one)") {
  CHECK(resolve_threads(1) == 1);
  CHECK(resolve_threads(3) == 3);
  CHECK(resolve_threads(0) >= 1);
}

TEST_CASE("is_passive_wait_policy: 'passive' in any case with blanks around it; anything else, or unset, is not") {
  CHECK(barato::is_passive_wait_policy("passive"));
  CHECK(barato::is_passive_wait_policy("PASSIVE"));
  CHECK(barato::is_passive_wait_policy("Passive"));
  CHECK(barato::is_passive_wait_policy("  passive\t"));
  CHECK_FALSE(barato::is_passive_wait_policy(nullptr));
  CHECK_FALSE(barato::is_passive_wait_policy(""));
  CHECK_FALSE(barato::is_passive_wait_policy("active"));
  CHECK_FALSE(barato::is_passive_wait_policy("passiv"));
  CHECK_FALSE(barato::is_passive_wait_policy("passive1"));
  CHECK_FALSE(barato::is_passive_wait_policy("pass ive"));
  static_assert(barato::is_passive_wait_policy("passive"));
}

TEST_CASE("threads_for: one thread per whole minimum of work, rounded down, between 1 and the ceiling") {
  static_assert(barato::threads_for(0, 100, 4) == 1);      // no work: still one thread
  CHECK(barato::threads_for(199, 100, 4) == 1);            // just under two minimums: one, not a sliver for a second
  CHECK(barato::threads_for(200, 100, 4) == 2);
  CHECK(barato::threads_for(399, 100, 4) == 3);
  CHECK(barato::threads_for(10'000, 100, 4) == 4);         // capped by the ceiling
  CHECK(barato::threads_for(10'000, 100, 0) == 1);         // a ceiling below 1 means one thread
  CHECK(barato::threads_for(10'000, 0, 2) == 2);           // a zero minimum counts as 1
}
