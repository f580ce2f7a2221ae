#pragma once
/// \file
/// `batch::Scheduler<Pool, Policy>`: a model-independent batch scheduler over a paged KV pool. Each
/// step it decides which sequences run which tokens (`schedule()` → `StepPlan`, batch/step_plan.hpp);
/// an executor (a model, or batch/simulator.hpp) runs the plan and hands back the logits, from which
/// `complete()` samples the next tokens. The scheduler never touches K/V: the executor appends them
/// through `pool.view(seq, layer)`; the scheduler admits, declares tokens and releases sequences.
///
/// One step, in order:
///  1. requests whose arrival step has come enter the queue (priority first, then first come, first
///     served; a preempted request keeps its place, so it is at the front of its priority);
///  2. **decodes**: every running request that has its logits gets one token; when the pool cannot
///     give a decode its next block, the most recently admitted request is **preempted by
///     recompute** (its sequence released, back to the queue with its generated tokens; re-admitted,
///     it prefills prompt + generated again — usually hitting the prefix cache — and continues);
///  3. **prefill chunks** of ≤ prefill_chunk tokens fill the rest of `token_budget`: first requests
///     already prefilling (admission order), then queued requests admitted in queue order, as many
///     as the policy (batch/policy.hpp), the free slots and the pool allow. A request is admitted
///     only when the pool holds its first chunk (its prefix-cache hit skips the cached blocks); the
///     queue's head that does not fit blocks the queue (no overtaking).
/// `complete(logits, seconds)` samples a token for every chunk that asked for logits, with an Rng
/// seeded from (request seed, position) only (batch/request.hpp), so outputs do not depend on the
/// batch, and advances the clock. A request ends at max_tokens, at a stop token (not output) or at
/// max_context tokens; its sequence is released and its slot freed (or kept as padding, per policy).
/// A request that can never fit — prompt + 1 > max_context, or more blocks than the whole pool for
/// min(prompt + max_tokens, max_context) − 1 cached positions — is rejected at submission.
///
/// Steady state allocates nothing in the scheduler (buffers reserved at construction and submission;
/// the pool's own tables grow amortised). Cost per step: O(running · n_layers) plus O(queue) per
/// admission and per preemption.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "barato/batch/metrics.hpp"
#include "barato/batch/policy.hpp"
#include "barato/batch/request.hpp"
#include "barato/batch/step_plan.hpp"
#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/sequence_table.hpp"

namespace barato::batch {

/// What the scheduler needs of a KV pool: `kv::PagedPool<T>` models it.
template <class P>
concept SchedulerPool = requires(P& p, const P& cp, std::span<const Token> tokens, kv::SeqId s, std::size_t n) {
  { p.admit(tokens, n).seq } -> std::convertible_to<kv::SeqId>;
  { p.admit(tokens, n).match.cached_tokens } -> std::convertible_to<std::size_t>;
  { cp.blocks_to_admit(tokens).blocks } -> std::convertible_to<std::size_t>;
  { cp.blocks_to_admit(tokens).match.cached_tokens } -> std::convertible_to<std::size_t>;
  { cp.blocks_to_admit(tokens).match.blocks_hit } -> std::convertible_to<std::size_t>;
  { cp.blocks_to_grow(s, n) } -> std::convertible_to<std::size_t>;
  { cp.free_blocks() } -> std::convertible_to<std::size_t>;
  { cp.n_blocks() } -> std::convertible_to<std::size_t>;
  { cp.block_tokens() } -> std::convertible_to<std::size_t>;
  p.declare_tokens(s, tokens);
  p.release(s);
};

/// Construction parameters of a `Scheduler` (designated initialisers).
struct SchedulerConfig {
  std::size_t max_slots = 8;       ///< sequences in a batch at once
  std::size_t token_budget = 256;  ///< tokens per step (decodes + prefill chunks), ≥ max_slots
  std::size_t prefill_chunk = 128; ///< tokens of one prefill chunk at most
  std::size_t max_context = 2048;  ///< positions per request (prompt + generated) at most

  /// This config, or `value_error` naming the bad field.
  [[nodiscard]] const SchedulerConfig& checked() const {
    require<value_error>(max_slots > 0 && prefill_chunk > 0, "batch::SchedulerConfig: max_slots and prefill_chunk must be > 0, got ",
                         max_slots, " and ", prefill_chunk);
    require<value_error>(token_budget >= max_slots, "batch::SchedulerConfig: token_budget must be >= max_slots (every slot may decode), got ",
                         token_budget, " < ", max_slots);
    require<value_error>(max_context >= 2, "batch::SchedulerConfig: max_context must be >= 2, got ", max_context);
    return *this;
  }
};

/// Where a request is in its life.
enum class RequestStatus : std::uint8_t {
  pending,   ///< submitted, its arrival step has not come
  queued,    ///< waiting for a slot (also after a preemption)
  running,   ///< holds a slot and a pool sequence
  finished,  ///< done (see `FinishReason`)
  rejected,  ///< can never fit; never scheduled
};

/// The batch scheduler (see the file comment): requests in, step plans out, tokens back in.
template <SchedulerPool Pool, SchedulePolicy Policy = Continuous>
class Scheduler {
 public:
  static constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

  /// A scheduler over `pool` (which must outlive it). Throws `value_error` for a bad config.
  Scheduler(Pool& pool, const SchedulerConfig& cfg, Policy policy = {})
      : pool_(pool), cfg_(cfg.checked()), policy_(std::move(policy)) {
    slot_owner_.assign(cfg_.max_slots, kNone);
    free_slots_.reserve(cfg_.max_slots);
    for (std::size_t s = cfg_.max_slots; s-- > 0;) free_slots_.push_back(s);
    running_.reserve(cfg_.max_slots);
    chunks_.reserve(cfg_.max_slots);
    sampled_.reserve(cfg_.max_slots);
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Adds a request; its id is its index in submission order. Throws `value_error` for an empty
  /// prompt, a negative token or max_tokens = 0 (nothing changes). A request that can never fit is
  /// accepted with status `rejected` (finish reason `rejected`); the others proceed.
  RequestId submit(Request r) {
    require<value_error>(!r.prompt.empty(), "batch::Scheduler::submit: the prompt is empty");
    require<value_error>(r.max_tokens > 0, "batch::Scheduler::submit: max_tokens must be > 0");
    for (const Token t : r.prompt) require<value_error>(t >= 0, "batch::Scheduler::submit: negative token ", t, " in the prompt");
    const RequestId id = states_.size();
    State st;
    st.req = std::move(r);
    const std::size_t L = st.req.prompt.size();
    const std::size_t final_len = std::min(L + st.req.max_tokens, cfg_.max_context);
    const std::size_t B = pool_.block_tokens();
    if (L + 1 > cfg_.max_context || (final_len - 1 + B - 1) / B > pool_.n_blocks()) {
      st.status = RequestStatus::rejected;
      st.reason = FinishReason::rejected;
    } else {
      st.tokens.reserve(final_len);
      st.tokens = st.req.prompt;
    }
    // Reserve everything the request can occupy before the first change (strong guarantee, tested
    // by fault injection).
    grow(states_, id + 1);
    grow(pending_, id + 1);
    grow(queue_, id + 1);
    const bool rejected = st.status == RequestStatus::rejected;
    const std::size_t arrival = st.req.arrival;
    states_.push_back(std::move(st));
    if (rejected) {
      ++closed_;
      return id;
    }
    // pending_: latest arrival first (back = next to arrive; ties: lower id at the back).
    const auto pos = std::upper_bound(pending_.begin(), pending_.end(), id, [&](RequestId a, RequestId b) {
      return states_[a].req.arrival > states_[b].req.arrival ||
             (states_[a].req.arrival == states_[b].req.arrival && a > b);
    });
    (void)arrival;
    pending_.insert(pos, id);
    return id;
  }

  /// Plans the next step (see the file comment). The plan's spans are valid until the next
  /// `schedule()`, `complete()` or `submit()`. Throws `error` when the previous plan has not been
  /// completed. Basic guarantee: if the pool throws while admitting (an allocation failure), the
  /// scheduler and the pool stay consistent — the arrivals and preemptions this call made stand, no
  /// plan is in flight — and calling `schedule()` again plans the step (admission itself is strong,
  /// kv::PagedPool::admit; what came before it in the step is not undone).
  [[nodiscard]] StepPlan schedule() {
    require<error>(!in_flight_, "batch::Scheduler::schedule: the plan of step ", step_, " was not completed");
    // 1. arrivals
    while (!pending_.empty() && states_[pending_.back()].req.arrival <= step_) {
      const RequestId id = pending_.back();
      pending_.pop_back();
      State& r = states_[id];
      r.ticket = next_ticket_++;
      r.m.arrival_step = step_;
      r.m.arrival_seconds = clock_;
      enqueue(id);
    }
    plan_step();
    // No running request could run a token (pool exhausted by prefills): free the youngest, retry.
    while (chunks_.empty() && !running_.empty()) {
      preempt(running_.back());
      plan_step();
    }
    in_flight_ = true;
    StepPlan p;
    p.step = step_;
    p.chunks = chunks_;
    p.padding_slots = padding_;
    for (const SeqChunk& c : chunks_) {
      (c.decode ? p.decode_tokens : p.prefill_tokens) += c.tokens.size();
      p.context_tokens += c.pos + c.tokens.size();
      p.logits_rows += c.wants_logits ? 1 : 0;
    }
    plan_ = p;
    return p;
  }

  /// Completes the planned step: `logits` is [plan.logits_rows, vocab] (row i for the i-th chunk
  /// with wants_logits), `step_seconds` what the step took (advances the clock). Samples, appends and
  /// declares the new tokens, finishes requests, frees their sequences and slots. Throws
  /// `shape_error` when logits.size() is not a positive multiple of logits_rows, `value_error` for a
  /// negative or non-finite step_seconds or a sampled token outside [0, vocab), `error` without a
  /// plan; nothing changes then (a throwing sampler also leaves everything as it was). Strong
  /// guarantee against allocation failures too: only the sampling phase may allocate (the tokens
  /// declared to the pool fit in the room reserved at admission).
  void complete(std::span<const float> logits, double step_seconds) {
    require<error>(in_flight_, "batch::Scheduler::complete: no step was scheduled");
    require<value_error>(step_seconds >= 0.0 && std::isfinite(step_seconds),
                         "batch::Scheduler::complete: step_seconds must be finite and >= 0, got ", step_seconds);
    const std::size_t rows = plan_.logits_rows;
    std::size_t vocab = 0;
    if (rows > 0) {
      require(!logits.empty() && logits.size() % rows == 0, "batch::Scheduler::complete: expected logits of ", rows,
              " rows x vocab, got ", logits.size(), " values");
      vocab = logits.size() / rows;
    }
    // Phase 1: sample every row (changes nothing).
    sampled_.clear();
    for (const SeqChunk& c : chunks_) {
      if (!c.wants_logits) continue;
      const State& r = states_[c.request];
      const std::size_t row = sampled_.size();
      const Token t = sample_token(r.req.sampler, r.req.seed, r.tokens.size(), logits.subspan(row * vocab, vocab), r.tokens);
      require<value_error>(t >= 0 && static_cast<std::size_t>(t) < vocab, "batch::Scheduler::complete: request ", c.request,
                           " sampled token ", t, " outside the vocabulary [0, ", vocab, ")");
      sampled_.push_back(t);
    }
    // Phase 2: apply.
    in_flight_ = false;
    clock_ += step_seconds;
    std::size_t row = 0;
    for (const SeqChunk& c : chunks_) {
      State& r = states_[c.request];
      r.computed += c.tokens.size();
      if (!c.decode) r.m.prefill_tokens += c.tokens.size();
      if (c.wants_logits) {
        r.has_logits = true;
        accept(c.request, sampled_[row++]);
      }
    }
    if (policy_.keeps_finished_slots() && running_.empty() && padding_ > 0) {  // the batch drained
      for (std::size_t s = 0; s < cfg_.max_slots; ++s)
        if (slot_owner_[s] != kNone) {
          slot_owner_[s] = kNone;
          free_slots_.push_back(s);
        }
      padding_ = 0;
    }
    chunks_.clear();
    ++step_;
  }

  /// True when every submitted request has finished or was rejected (no plan in flight).
  [[nodiscard]] bool done() const noexcept { return closed_ == states_.size() && !in_flight_; }

  // ---- results and introspection ----------------------------------------------------------------
  [[nodiscard]] std::size_t requests() const noexcept { return states_.size(); }
  [[nodiscard]] RequestStatus status(RequestId id) const { return at(id).status; }
  [[nodiscard]] FinishReason finish_reason(RequestId id) const { return at(id).reason; }
  /// The tokens generated so far (stop token excluded).
  [[nodiscard]] std::span<const Token> output(RequestId id) const {
    const State& r = at(id);
    return std::span<const Token>(r.tokens).subspan(std::min(r.tokens.size(), r.req.prompt.size()));
  }
  [[nodiscard]] const RequestMetrics& metrics(RequestId id) const { return at(id).m; }
  /// The stop token that ended the request (finish reason `stop`; not part of `output`), else −1.
  [[nodiscard]] Token stop_token(RequestId id) const { return at(id).stop_token; }
  [[nodiscard]] const Request& request(RequestId id) const { return at(id).req; }
  /// Steps completed (= the number of the next step).
  [[nodiscard]] std::size_t steps() const noexcept { return step_; }
  /// Seconds on the clock (Σ step_seconds).
  [[nodiscard]] double clock() const noexcept { return clock_; }
  [[nodiscard]] std::size_t running() const noexcept { return running_.size(); }
  [[nodiscard]] std::size_t queued() const noexcept { return queue_.size(); }
  [[nodiscard]] std::size_t padding_slots() const noexcept { return padding_; }
  [[nodiscard]] std::size_t free_slots() const noexcept { return free_slots_.size(); }
  [[nodiscard]] const SchedulerConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] const Pool& pool() const noexcept { return pool_; }
  /// The aggregates over every request so far (allocates; call after a run).
  [[nodiscard]] Summary summary() const {
    std::vector<RequestMetrics> m;
    std::vector<FinishReason> f;
    m.reserve(states_.size());
    f.reserve(states_.size());
    for (const State& s : states_) {
      m.push_back(s.m);
      f.push_back(s.reason);
    }
    return summarize(m, f, step_, clock_);
  }

 private:
  static constexpr RequestId kNone = std::numeric_limits<RequestId>::max();

  /// A request and everything the scheduler keeps about it.
  struct State {
    Request req;
    std::vector<Token> tokens;    // [prompt + generated], reserved for the longest possible output
    RequestStatus status = RequestStatus::pending;
    FinishReason reason = FinishReason::none;
    Token stop_token = -1;        // the stop token sampled (finish reason stop), else -1
    kv::SeqId seq = 0;            // pool sequence while running
    std::size_t slot = kNoSlot;
    std::size_t computed = 0;     // positions whose K/V are in the pool
    bool has_logits = false;      // a chunk with logits completed since the last admission: it decodes
    bool admitted_once = false;
    std::size_t ticket = 0;       // queue order within a priority (kept across preemptions)
    RequestMetrics m;
  };

  /// Reserves room for n elements, doubling (an exact reserve per submission would be quadratic).
  template <class V>
  static void grow(V& v, std::size_t n) {
    if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
  }
  [[nodiscard]] const State& at(RequestId id) const {
    require(id < states_.size(), "batch::Scheduler: request ", id, " out of range (", states_.size(), " requests)");
    return states_[id];
  }
  /// True when a is after b in the queue (lower priority, or same priority and later ticket).
  [[nodiscard]] bool queued_after(RequestId a, RequestId b) const noexcept {
    const State &x = states_[a], &y = states_[b];
    return x.req.priority != y.req.priority ? x.req.priority < y.req.priority : x.ticket > y.ticket;
  }
  /// queue_: last in line first (back = head). Capacity was reserved at submission.
  void enqueue(RequestId id) {
    states_[id].status = RequestStatus::queued;
    const auto pos = std::upper_bound(queue_.begin(), queue_.end(), id,
                                      [&](RequestId a, RequestId b) { return queued_after(a, b); });
    queue_.insert(pos, id);
  }
  [[nodiscard]] std::size_t available() const noexcept {
    const std::size_t f = pool_.free_blocks();
    return f > reserved_ ? f - reserved_ : 0;
  }
  /// Tokens of a chunk starting at `computed` that fit in `avail` free blocks (room in the last page too).
  [[nodiscard]] std::size_t fit_tokens(std::size_t computed, std::size_t avail) const noexcept {
    const std::size_t B = pool_.block_tokens();
    return (computed % B == 0 ? 0 : B - computed % B) + avail * B;
  }
  void push_chunk(RequestId id, std::size_t n, bool decode) {
    State& r = states_[id];
    SeqChunk c;
    c.request = id;
    c.slot = r.slot;
    c.seq = r.seq;
    c.pos = r.computed;
    c.tokens = std::span<const Token>(r.tokens).subspan(r.computed, n);
    c.wants_logits = r.computed + n == r.tokens.size();
    c.decode = decode;
    chunks_.push_back(c);
  }

  /// Steps 2 and 3 of the file comment into chunks_.
  void plan_step() {
    chunks_.clear();
    reserved_ = 0;
    std::size_t budget = cfg_.token_budget;
    // 2. decodes, oldest admission first; preempt the youngest when a block is missing
    for (std::size_t i = 0; i < running_.size(); ++i) {
      const RequestId id = running_[i];
      if (!states_[id].has_logits) continue;
      std::size_t need = pool_.blocks_to_grow(states_[id].seq, 1);
      bool self = false;
      while (need > available()) {
        const RequestId victim = running_.back();
        preempt(victim);
        if (victim == id) { self = true; break; }
      }
      if (self) break;  // it was the youngest: nothing younger is left
      reserved_ += need;
      push_chunk(id, 1, true);
      --budget;
    }
    // 3a. prefill chunks of requests already prefilling
    for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
      State& r = states_[running_[i]];
      if (r.has_logits) continue;
      std::size_t n = std::min({cfg_.prefill_chunk, r.tokens.size() - r.computed, budget});
      n = std::min(n, fit_tokens(r.computed, available()));
      if (n == 0) continue;
      const std::size_t need = pool_.blocks_to_grow(r.seq, n);
      if (need > available()) continue;
      reserved_ += need;
      push_chunk(running_[i], n, false);
      budget -= n;
    }
    // 3b. admissions in queue order
    BatchState bs{.step = step_, .max_slots = cfg_.max_slots, .occupied = cfg_.max_slots - free_slots_.size(),
                  .running = running_.size(), .queued = queue_.size()};
    std::size_t allowed = std::min<std::size_t>(policy_.admissions(bs), free_slots_.size());
    const std::size_t B = pool_.block_tokens();
    while (allowed > 0 && budget > 0 && !queue_.empty()) {
      const RequestId id = queue_.back();
      State& r = states_[id];
      const auto cost = pool_.blocks_to_admit(r.tokens);
      const std::size_t L = r.tokens.size();
      const std::size_t c = cost.match.cached_tokens;
      const std::size_t reclaimed = cost.blocks - ((L + B - 1) / B - cost.match.blocks_hit);
      const std::size_t avail = available();
      if (reclaimed >= avail) break;
      std::size_t n = std::min({cfg_.prefill_chunk, L - c, budget, fit_tokens(c, avail - reclaimed)});
      if (n == 0) break;  // the head does not fit: it waits, nobody overtakes it
      // Room for every token the request can declare: complete() then allocates nothing.
      const auto a = pool_.admit(r.tokens, std::min(r.req.prompt.size() + r.req.max_tokens, cfg_.max_context));
      queue_.pop_back();
      r.seq = a.seq;
      r.computed = a.match.cached_tokens;
      r.has_logits = false;
      r.status = RequestStatus::running;
      r.m.prefix_hit_tokens += a.match.cached_tokens;
      if (!r.admitted_once) {
        r.admitted_once = true;
        r.m.admit_step = step_;
        r.m.admit_seconds = clock_;
        r.m.admit_rank = admissions_++;
      }
      n = std::min(n, L - r.computed);
      r.slot = free_slots_.back();
      free_slots_.pop_back();
      slot_owner_[r.slot] = id;
      running_.push_back(id);
      const std::size_t need = pool_.blocks_to_grow(r.seq, n);
      reserved_ += need;
      push_chunk(id, n, false);
      budget -= n;
      --allowed;
    }
  }

  /// Releases a running request's sequence and slot and puts it back in the queue (its place kept).
  void preempt(RequestId id) {
    State& r = states_[id];
    // a chunk of it planned this step is dropped (only possible for the youngest, planned last)
    std::erase_if(chunks_, [&](const SeqChunk& c) { return c.request == id; });
    pool_.release(r.seq);
    r.computed = 0;
    r.has_logits = false;
    ++r.m.preemptions;
    drop_running(id, /*keep_slot=*/false);
    enqueue(id);
  }
  void drop_running(RequestId id, bool keep_slot) {
    State& r = states_[id];
    running_.erase(std::find(running_.begin(), running_.end(), id));
    if (keep_slot) {
      ++padding_;
    } else {
      slot_owner_[r.slot] = kNone;
      free_slots_.push_back(r.slot);
    }
    r.slot = keep_slot ? r.slot : kNoSlot;
  }
  /// The token sampled after a request's known tokens: output it or finish.
  void accept(RequestId id, Token t) {
    State& r = states_[id];
    const bool stop = std::find(r.req.stop_tokens.begin(), r.req.stop_tokens.end(), t) != r.req.stop_tokens.end();
    if (!stop) {
      r.tokens.push_back(t);  // within the capacity reserved at submission
      ++r.m.generated;
      if (r.m.generated == 1) {
        r.m.first_token_step = step_ + 1 - r.m.arrival_step;
        r.m.first_token_seconds = clock_ - r.m.arrival_seconds;
      }
    }
    FinishReason why = FinishReason::none;
    if (stop) {
      why = FinishReason::stop;
      r.stop_token = t;
    }
    else if (r.m.generated >= r.req.max_tokens) why = FinishReason::length;
    else if (r.tokens.size() >= cfg_.max_context) why = FinishReason::context;
    if (why == FinishReason::none) {
      pool_.declare_tokens(r.seq, std::span<const Token>(&r.tokens.back(), 1));
      return;
    }
    pool_.release(r.seq);
    r.status = RequestStatus::finished;
    r.reason = why;
    r.m.finish_step = step_ + 1 - r.m.arrival_step;
    r.m.finish_seconds = clock_ - r.m.arrival_seconds;
    ++closed_;
    drop_running(id, policy_.keeps_finished_slots());
  }

  Pool& pool_;
  SchedulerConfig cfg_;
  Policy policy_;
  std::vector<State> states_;           // [requests] by id
  std::vector<RequestId> pending_;      // not yet arrived, latest arrival first
  std::vector<RequestId> queue_;        // waiting, last in line first (back = head)
  std::vector<RequestId> running_;      // [≤ max_slots] holding a slot, unfinished, oldest admission first
  std::vector<RequestId> slot_owner_;   // [max_slots] request holding the slot (running or padding) or kNone
  std::vector<std::size_t> free_slots_; // [≤ max_slots] free slot ids (back taken first)
  std::vector<SeqChunk> chunks_;        // [≤ max_slots] the current plan
  std::vector<Token> sampled_;          // [≤ max_slots] tokens sampled in complete()
  StepPlan plan_;
  std::size_t padding_ = 0;             // slots held by finished requests
  std::size_t reserved_ = 0;            // free blocks promised to this step's chunks
  std::size_t step_ = 0;
  std::size_t next_ticket_ = 0;
  std::size_t admissions_ = 0;
  std::size_t closed_ = 0;              // finished + rejected
  double clock_ = 0.0;
  bool in_flight_ = false;
};

}  // namespace barato::batch
