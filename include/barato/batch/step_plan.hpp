#pragma once
/// \file
/// `batch::StepPlan`: what one batched step runs — the contract between a scheduler (which decides)
/// and an executor (the example model, or a simulator, which runs it). A plan is a list of chunks,
/// one per sequence in the step: a decoding sequence brings its one newest token, a prefilling one a
/// chunk of its prompt. Decodes come first, then prefill chunks, each sequence at most once.
///
/// The executor runs every chunk's tokens at positions `pos … pos + tokens.size() − 1` of that
/// sequence's cache (appending their K/V), and returns next-token logits for the chunks that ask for
/// them (`wants_logits`: the chunk ends at the last token the sequence knows, so its next token is
/// sampled), in plan order: logits row i belongs to the i-th chunk with `wants_logits`.
/// A chunk's tokens are a view into the scheduler's request state, valid until the scheduler's next
/// mutation (the next `schedule()` or `complete()`).

#include <cstddef>
#include <cstdint>
#include <span>

#include "barato/core/token.hpp"
#include "barato/kv/sequence_table.hpp"

namespace barato::batch {

/// Index of a request in submission order (0, 1, 2, …).
using RequestId = std::size_t;

/// One sequence's share of a step: the tokens it runs and where.
struct SeqChunk {
  RequestId request = 0;            ///< whose tokens these are
  std::size_t slot = 0;             ///< the slot the request holds (0 … max_slots − 1)
  kv::SeqId seq = 0;                ///< its sequence in the paged pool (meaningless for slot-indexed caches)
  std::size_t pos = 0;              ///< position of tokens[0] = the sequence's cache length before the step
  std::span<const Token> tokens;    ///< ≥ 1 token: the newest one (decode) or a prompt chunk (prefill)
  bool wants_logits = false;        ///< true when the executor must return the logits after tokens.back()
  bool decode = false;              ///< true for a decode (one generated token), false for a prefill chunk
};

/// The work of one step, as an executor sees it.
struct StepPlan {
  std::size_t step = 0;                  ///< step number (0, 1, 2, …)
  std::span<const SeqChunk> chunks;      ///< decodes first, then prefill chunks
  std::size_t decode_tokens = 0;         ///< Σ tokens of the decode chunks
  std::size_t prefill_tokens = 0;        ///< Σ tokens of the prefill chunks
  std::size_t context_tokens = 0;        ///< Σ over chunks of pos + tokens.size() (what attention reads)
  std::size_t logits_rows = 0;           ///< chunks with wants_logits (rows of the executor's logits)
  std::size_t padding_slots = 0;         ///< slots held by finished requests (static batching): no chunk, but
                                         ///< a static-shape executor runs a row for each; cost models charge them

  /// Total tokens in the step (decode + prefill): what goes through the projections as one product.
  [[nodiscard]] std::size_t tokens() const noexcept { return decode_tokens + prefill_tokens; }
  [[nodiscard]] bool empty() const noexcept { return chunks.empty(); }
};

}  // namespace barato::batch
