#pragma once
/// \file
/// `spec::decode_plain`: ordinary autoregressive decoding of a step model — one forward per token. It is
/// the baseline speculative decoding is measured against and the oracle its exactness is tested against.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/sample/sampler.hpp"
#include "barato/spec/step_model.hpp"

namespace barato::spec {

/// Resets `model`, prefills `prompt` in chunks of `chunk` tokens, then samples up to `max_new` tokens
/// with `sampler` (history = prompt + generated), forwarding each sampled token except the last.
/// Stops after `stop_token` (kept). Returns the generated tokens. Throws `value_error` for an empty
/// prompt and `capacity_error` when prompt.size() + max_new > capacity + 1. Buffers are allocated once
/// up front; the decode loop allocates nothing.
template <StepModel M, sample::Sampler S>
[[nodiscard]] std::vector<Token> decode_plain(M& model, S& sampler, std::span<const Token> prompt, std::size_t max_new,
                                              sample::Rng& rng, std::optional<Token> stop_token = std::nullopt,
                                              std::size_t chunk = 16) {
  require<value_error>(!prompt.empty(), "spec::decode_plain: empty prompt");
  require<capacity_error>(prompt.size() + max_new <= model.capacity() + 1, "spec::decode_plain: ", prompt.size(),
                          " prompt + ", max_new, " new tokens exceed the capacity ", model.capacity(), " + 1");
  require(chunk >= 1, "spec::decode_plain: chunk must be >= 1");
  const std::size_t V = model.vocab_size();
  std::vector<float> logits(chunk * V);                   // [chunk, vocab]
  std::vector<Token> seq(prompt.begin(), prompt.end());   // prompt + generated
  seq.reserve(prompt.size() + max_new);
  model.reset();
  std::size_t rows = 0;
  for (std::size_t pos = 0; pos < prompt.size(); pos += rows) {
    rows = std::min(chunk, prompt.size() - pos);
    model.forward(prompt.subspan(pos, rows), std::span<float>(logits).first(rows * V));
  }
  for (std::size_t i = 0; i < max_new; ++i) {
    const auto row = std::span<const float>(logits).subspan((rows - 1) * V, V);
    const Token t = sampler.sample(row, seq, rng).token;
    seq.push_back(t);
    if (stop_token && t == *stop_token) break;
    if (i + 1 < max_new) {
      model.forward(std::span<const Token>(&seq.back(), 1), std::span<float>(logits).first(V));
      rows = 1;
    }
  }
  return {seq.begin() + static_cast<std::ptrdiff_t>(prompt.size()), seq.end()};
}

}  // namespace barato::spec
