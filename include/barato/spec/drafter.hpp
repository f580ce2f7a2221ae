#pragma once
/// \file
/// The drafter concept: whatever proposes the γ tokens a speculative decoder verifies — another (cheaper)
/// model (`spec::ModelDrafter`), an n-gram lookup in the context (`spec::NgramDrafter`), or anything else.
///
/// Rules a `requires` clause cannot express:
///  - `propose(context, out, q, rng)` is given the committed sequence (prompt + accepted tokens, at
///    least one token) and returns k ≤ out.size() proposed continuation tokens in out[0, k). k may be
///    0 (nothing to propose: the pass degenerates to one plain decode step).
///  - When `q` is non-empty it has out.size() · vocab_size() floats and the drafter writes rows [k, vocab]:
///    row i is the exact distribution out[i] was drawn from given context + out[0, i). A deterministic
///    drafter writes one-hot rows. Stochastic verification is exact only if these rows are true.
///    When `q` is empty the verifier does not need them (greedy verification) and the drafter may skip them.
///  - A drafter may keep state (a model's KV cache) but must give correct proposals for any `context`:
///    consecutive calls usually share a long prefix (the previous context plus accepted tokens), and a
///    stateful drafter rolls itself back to the common prefix (`truncate`) before catching up.
///  - `propose` allocates nothing.

#include <concepts>
#include <cstddef>
#include <span>

#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"

namespace barato::spec {

template <class D>
concept Drafter = requires(D& d, const D& cd, std::span<const Token> context, std::span<Token> out, std::span<float> q,
                           sample::Rng& rng) {
  { cd.vocab_size() } -> std::convertible_to<std::size_t>;
  { d.propose(context, out, q, rng) } -> std::convertible_to<std::size_t>;
};

/// Minimal archetype: proposes nothing (every pass is a plain decode step).
struct NullDrafter {
  std::size_t vocab = 1;
  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab; }
  [[nodiscard]] std::size_t propose(std::span<const Token>, std::span<Token>, std::span<float>, sample::Rng&) noexcept {
    return 0;
  }
};
static_assert(Drafter<NullDrafter>);

}  // namespace barato::spec
