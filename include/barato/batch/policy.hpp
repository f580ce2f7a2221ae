#pragma once
/// \file
/// `batch::SchedulePolicy`: the part of batch scheduling that differs between static and continuous
/// batching — when queued requests may take free slots, and whether a finished request gives its slot
/// back at once. Everything else (decodes before prefill chunks, the token budget, chunked prefill,
/// admission against the pool, preemption by recompute) is the scheduler's and the same for every
/// policy (batch/scheduler.hpp).
///
/// Rules a `requires` clause cannot express:
///  - `admissions(state)` is an upper bound on the requests admitted at this step; the scheduler
///    admits fewer when slots, the token budget or the pool run out, and always in queue order
///    (priority, then first come, first served) — a policy limits, it never reorders.
///  - `keeps_finished_slots()`: true = a finished request keeps its slot as padding (counted in
///    `StepPlan::padding_slots`) until no unfinished request holds a slot; then every slot is freed
///    at once. False = its slot is free for the next step.
///  - Both are pure functions of their arguments (the scheduler may call them any number of times).
///
/// Archetype: `struct P { std::size_t admissions(const BatchState&) const; bool keeps_finished_slots() const; };`

#include <concepts>
#include <cstddef>

namespace barato::batch {

/// What a policy sees when the scheduler asks it, at the start of a step's admissions.
struct BatchState {
  std::size_t step = 0;       ///< the step being planned
  std::size_t max_slots = 0;  ///< slots in the batch
  std::size_t occupied = 0;   ///< slots held (running requests + padding of finished ones)
  std::size_t running = 0;    ///< slots held by unfinished requests
  std::size_t queued = 0;     ///< requests waiting for a slot
  /// Slots nobody holds.
  [[nodiscard]] constexpr std::size_t free_slots() const noexcept { return max_slots - occupied; }
};

/// A batching policy: how many queued requests may be admitted now, and whether finished requests
/// keep their slots (see the file comment for the rules).
template <class P>
concept SchedulePolicy = requires(const P& p, const BatchState& s) {
  { p.admissions(s) } -> std::convertible_to<std::size_t>;
  { p.keeps_finished_slots() } -> std::convertible_to<bool>;
};

/// Static batching: fill the slots when the batch is empty, then run until every member has
/// finished; finished members pad their slot (a static-shape executor still runs a row for them).
struct Static {
  /// Every free slot when no slot is held, none otherwise.
  [[nodiscard]] constexpr std::size_t admissions(const BatchState& s) const noexcept {
    return s.occupied == 0 ? s.max_slots : 0;
  }
  /// Finished members hold their slot until the batch drains.
  [[nodiscard]] constexpr bool keeps_finished_slots() const noexcept { return true; }
};

/// Continuous (iteration-level) batching, as in Orca (Yu et al., OSDI 2022) and vLLM: a slot freed at
/// one step admits the next queued request at the very next step; with the scheduler's chunked
/// prefill (Sarathi, Agrawal et al. 2023) a long prompt is spread over steps instead of stalling decodes.
struct Continuous {
  /// Every free slot, at every step.
  [[nodiscard]] constexpr std::size_t admissions(const BatchState& s) const noexcept { return s.free_slots(); }
  /// A finished request's slot is free at once.
  [[nodiscard]] constexpr bool keeps_finished_slots() const noexcept { return false; }
};

static_assert(SchedulePolicy<Static>);
static_assert(SchedulePolicy<Continuous>);

}  // namespace barato::batch
