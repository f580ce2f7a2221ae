#pragma once
/// \file
/// The step-model concept used by speculative decoding and batching: a model bound to one sequence
/// and its own KV cache.
///
/// Rules a `requires` clause cannot express:
///  - `forward(tokens, logits)` runs tokens at positions size() … size()+n−1 (n = tokens.size() ≥ 1),
///    appends their K/V to the model's cache and writes logits [n, vocab_size()] row-major (row i is
///    the next-token distribution after tokens[i]). Positions past the model's capacity throw
///    `barato::capacity_error` and leave the model unchanged.
///  - `truncate(n)` (n ≤ size()) rolls the cache back to the first n positions; afterwards the model
///    behaves exactly as if only those n tokens had been forwarded.
///  - `reset()` empties the cache.

#include <concepts>
#include <cstddef>
#include <span>

#include "barato/core/token.hpp"

namespace barato::spec {

template <class M>
concept StepModel = requires(M& m, const M& cm, std::span<const Token> tokens, std::span<float> logits, std::size_t n) {
  { cm.vocab_size() } -> std::convertible_to<std::size_t>;
  { cm.size() } -> std::convertible_to<std::size_t>;
  { cm.capacity() } -> std::convertible_to<std::size_t>;
  m.forward(tokens, logits);
  m.truncate(n);
  m.reset();
};

}  // namespace barato::spec
