#pragma once
/// \file
/// `batch::Executor`: what runs a `StepPlan` (batch/step_plan.hpp) — a model over a paged pool, or the
/// simulator (batch/simulator.hpp) — and `batch::run`, the loop that drives a scheduler with one.
///
/// Rules a `requires` clause cannot express:
///  - `run(plan, logits)` appends the K/V of every chunk's tokens at positions pos … pos + n − 1 of
///    its pool sequence (every layer), writes logits [plan.logits_rows, vocab_size()] into `logits`
///    (exactly that many values; row i for the i-th chunk with wants_logits) and returns the seconds
///    the step took (measured) or is charged (a cost model). An empty plan may cost 0.
///  - It must not keep the plan's spans beyond the call.

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

#include "barato/batch/step_plan.hpp"
#include "barato/core/error.hpp"

namespace barato::batch {

/// An executor of step plans (see the file comment).
template <class E>
concept Executor = requires(E& e, const E& ce, const StepPlan& plan, std::span<float> logits) {
  { e.run(plan, logits) } -> std::convertible_to<double>;
  { ce.vocab_size() } -> std::convertible_to<std::size_t>;
};

/// Drives `sched` with `exec` until every request is done (or `max_steps` more steps ran): schedule,
/// run, complete. The logits buffer [max_slots, vocab] is allocated once, here. Returns the steps run.
template <class Sched, Executor Exec>
std::size_t run(Sched& sched, Exec& exec, std::size_t max_steps = static_cast<std::size_t>(-1)) {
  const std::size_t vocab = exec.vocab_size();
  require(vocab > 0, "batch::run: the executor's vocab_size() is 0");
  std::vector<float> logits(sched.config().max_slots * vocab);  // [max_slots, vocab]
  std::size_t steps = 0;
  for (; steps < max_steps && !sched.done(); ++steps) {
    const StepPlan plan = sched.schedule();
    const std::span<float> rows(logits.data(), plan.logits_rows * vocab);
    const double seconds = exec.run(plan, rows);
    sched.complete(rows, seconds);
  }
  return steps;
}

}  // namespace barato::batch
