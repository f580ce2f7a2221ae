#pragma once
/// \file
/// `batch::Request`: what a user submits to a scheduler (batch/scheduler.hpp) — a prompt, how many
/// tokens to generate at most, stop tokens, a sampler and its seed, the step it arrives at and its
/// priority — and `batch::draw_rng`, the one place a request's random numbers come from.
///
/// **Batch invariance.** The token drawn at absolute position p of a request uses a fresh
/// `sample::Rng` seeded from (request seed, p) only: never from the batch it ran in, the slot it
/// held, how often it was preempted or which thread sampled it. A request therefore produces the
/// same tokens alone, in any batch, and after any number of preemptions (given logits that depend
/// only on its tokens).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"

namespace barato::batch {

/// A sampling function: the next token from the logits [vocab] of one position, the request's
/// tokens so far (prompt + generated) and an Rng seeded for that position (`draw_rng`). Empty =
/// greedy (`sample::argmax`, consumes no randomness).
using Sampler = std::function<Token(std::span<const float> logits, std::span<const Token> history, sample::Rng& rng)>;

/// One generation request.
struct Request {
  std::vector<Token> prompt{};           ///< ≥ 1 token
  std::size_t max_tokens = 16;           ///< generate at most this many tokens (≥ 1)
  std::vector<Token> stop_tokens{};      ///< sampling one of these ends the request (it is not output)
  Sampler sampler{};                     ///< empty = greedy argmax
  std::uint64_t seed = 0;                ///< the request's random stream (see `draw_rng`)
  std::size_t arrival = 0;               ///< step at which the request enters the queue
  int priority = 0;                      ///< higher is admitted first; first come, first served within one
};

/// Why a request ended.
enum class FinishReason : std::uint8_t {
  none,         ///< not finished yet
  length,       ///< generated max_tokens tokens
  stop,         ///< sampled a stop token
  context,      ///< prompt + generated reached the scheduler's max_context
  rejected,     ///< can never fit (prompt + 1 > max_context, or more blocks than the whole pool)
};

/// The Rng for the draw at absolute position `pos` of a request with seed `seed`: SplitMix64 of the
/// seed, mixed with the position, so that neighbouring seeds and positions give unrelated streams.
/// Depends on nothing else (batch invariance).
[[nodiscard]] constexpr sample::Rng draw_rng(std::uint64_t seed, std::size_t pos) noexcept {
  std::uint64_t s = seed;
  std::uint64_t z = sample::splitmix64(s) ^ (static_cast<std::uint64_t>(pos) * 0xD1B54A32D192ED03ULL);
  return sample::Rng(sample::splitmix64(z));
}

/// The token `sampler` picks (greedy argmax when it is empty) at position `pos` of a request with
/// `seed`, from `logits` [vocab] and the request's `history`.
[[nodiscard]] inline Token sample_token(const Sampler& sampler, std::uint64_t seed, std::size_t pos,
                                        std::span<const float> logits, std::span<const Token> history) {
  if (!sampler) return sample::argmax(logits);
  sample::Rng rng = draw_rng(seed, pos);
  return sampler(logits, history, rng);
}

}  // namespace barato::batch
