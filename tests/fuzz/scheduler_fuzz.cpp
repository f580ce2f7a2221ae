// Fuzz harness: batch::Scheduler over a paged pool with batch::SimExecutor
// (include/barato/batch/scheduler.hpp). The fuzz input is the source of numbers of the property
// test's workload generator (tests/support/scheduler_property.hpp): slots, token budget, prefill
// chunk, context, block size, pool size, requests (arrivals, prompt families, lengths, stop tokens,
// samplers, priorities). Every invariant of the property test is checked after every step and at
// the end (outputs equal each request run alone); the first input byte picks the policy.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.hpp"
#include "support/scheduler_property.hpp"

namespace {

/// The fuzz input as a WorkloadSource.
struct InputSource {
  barato::fuzz::Input& in;
  std::size_t uni(std::size_t lo, std::size_t hi) { return in.in(lo, hi); }
  std::uint64_t bits() { return static_cast<std::uint64_t>(in.u32()) << 32 | in.u32(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  barato::fuzz::Input in(data, size);
  const bool static_policy = in.flag();
  InputSource src{in};
  const barato::test::SchedulerWorkload w = barato::test::make_workload(src);
  barato::test::SchedTotals totals;
  try {
    if (static_policy) barato::test::check_scheduler_property<barato::batch::Static>(w, totals);
    else barato::test::check_scheduler_property<barato::batch::Continuous>(w, totals);
  } catch (const barato::test::PropertyViolation& e) {
    BARATO_FUZZ_CHECK(false, e.what());
  }
  return 0;
}
