#pragma once
/// \file
/// `batch::TokenBatch`: a step's tokens laid out as one matrix (token-level batching). Every chunk of
/// a `StepPlan` becomes a *segment*: a run of consecutive rows of the activation matrix, at consecutive
/// positions of one sequence. The projections of a decoder run once over all rows; attention, RoPE and
/// the cache append run per segment (each sequence over its own cache, each token at its own
/// position); the classifier runs only on the rows listed in `logits_rows()` (the last row of every
/// chunk that wants logits), in plan order.
///
/// Storage is sized at construction for a maximum number of tokens and chunks per step; `assign`
/// allocates nothing and throws `capacity_error` (leaving the batch as it was) when a plan exceeds it.
///
/// ```cpp
/// batch::TokenBatch tb(/*max_tokens=*/256, /*max_chunks=*/64);
/// tb.assign(plan);
/// embed(tb.tokens());                      // [tb.size(), dim]
/// for (const auto& s : tb.segments()) …    // rows [s.row0, s.row0 + s.rows) at positions s.pos …
/// classify(tb.logits_rows());              // rows whose next-token logits the scheduler samples
/// ```

#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/batch/step_plan.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"

namespace barato::batch {

/// One chunk of a step as rows of the step's activation matrix.
struct Segment {
  std::size_t chunk = 0;  ///< index of the chunk in the plan
  std::size_t row0 = 0;   ///< first row of the step's matrix
  std::size_t rows = 0;   ///< number of rows (tokens), ≥ 1
  std::size_t pos = 0;    ///< position of row0 in its sequence
};

/// A step's tokens as one matrix: the flattened tokens, one segment per chunk, the rows to classify.
class TokenBatch {
 public:
  /// Room for `max_tokens` tokens in at most `max_chunks` chunks per step (both ≥ 1), from `mr`.
  TokenBatch(std::size_t max_tokens, std::size_t max_chunks, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : tokens_(checked(max_tokens, "max_tokens"), mr), segs_(checked(max_chunks, "max_chunks"), mr),
        logit_rows_(max_chunks, mr) {}

  [[nodiscard]] std::size_t max_tokens() const noexcept { return tokens_.size(); }
  [[nodiscard]] std::size_t max_chunks() const noexcept { return segs_.size(); }

  /// Lays out `plan`. Throws `capacity_error` when it has more tokens or chunks than the batch holds,
  /// `shape_error` for a chunk without tokens; in both cases the batch is unchanged. O(tokens).
  void assign(const StepPlan& plan) {
    std::size_t total = 0;
    for (const SeqChunk& c : plan.chunks) {
      require(!c.tokens.empty(), "batch::TokenBatch: chunk of request ", c.request, " has no tokens");
      total += c.tokens.size();
    }
    require<capacity_error>(total <= tokens_.size(), "batch::TokenBatch: the step has ", total,
                            " tokens, the batch was built for ", tokens_.size());
    require<capacity_error>(plan.chunks.size() <= segs_.size(), "batch::TokenBatch: the step has ", plan.chunks.size(),
                            " chunks, the batch was built for ", segs_.size());
    std::size_t row = 0, k = 0;
    for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
      const SeqChunk& c = plan.chunks[i];
      segs_[i] = {.chunk = i, .row0 = row, .rows = c.tokens.size(), .pos = c.pos};
      for (const Token t : c.tokens) tokens_[row++] = t;
      if (c.wants_logits) logit_rows_[k++] = row - 1;
    }
    n_tokens_ = total;
    n_segs_ = plan.chunks.size();
    n_logits_ = k;
  }

  /// Tokens in the step (rows of the matrix).
  [[nodiscard]] std::size_t size() const noexcept { return n_tokens_; }
  /// The step's tokens in row order.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return {tokens_.data(), n_tokens_}; }
  /// One segment per chunk, in plan order.
  [[nodiscard]] std::span<const Segment> segments() const noexcept { return {segs_.data(), n_segs_}; }
  /// Rows whose next-token logits are wanted, in plan order (logits row i ↔ logits_rows()[i]).
  [[nodiscard]] std::span<const std::size_t> logits_rows() const noexcept { return {logit_rows_.data(), n_logits_}; }

 private:
  static std::size_t checked(std::size_t v, const char* what) {
    require(v > 0, "batch::TokenBatch: ", what, " must be >= 1, got 0");
    return v;
  }
  Buffer<Token> tokens_;             // [max_tokens]
  Buffer<Segment> segs_;             // [max_chunks]
  Buffer<std::size_t> logit_rows_;   // [max_chunks]
  std::size_t n_tokens_ = 0, n_segs_ = 0, n_logits_ = 0;
};

}  // namespace barato::batch
