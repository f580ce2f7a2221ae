#pragma once
/// \file
/// `spec::NgramDrafter`: prompt-lookup decoding (Saxena 2023, "Prompt Lookup Decoding"; the n-gram
/// drafter of llama.cpp's `lookup`). No model: the last n tokens of the context are searched for in the
/// earlier context, and the tokens that followed their latest earlier occurrence are proposed. It
/// pays off when the output copies from the input (summaries, code edits, repetitive text) and costs
/// almost nothing when it does not (no match → no proposal → a plain decode step).

#include <algorithm>
#include <cstddef>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/rng.hpp"
#include "barato/spec/drafter.hpp"

namespace barato::spec {

/// Match lengths tried, longest first.
struct NgramOptions {
  std::size_t max_n = 3;  ///< longest suffix searched for
  std::size_t min_n = 1;  ///< shortest suffix accepted as a match
};

/// Prompt-lookup drafter: proposes the tokens that followed the latest earlier match of the context's suffix.
class NgramDrafter {
 public:
  /// A drafter over `vocab` tokens (needed only to write one-hot q rows). Throws `value_error` unless
  /// 1 ≤ min_n ≤ max_n.
  explicit NgramDrafter(std::size_t vocab, NgramOptions opt = {}) : vocab_(vocab), opt_(opt) {
    require<value_error>(opt.min_n >= 1 && opt.min_n <= opt.max_n, "spec::NgramDrafter: expected 1 <= min_n <= max_n, got min_n ",
                         opt.min_n, ", max_n ", opt.max_n);
    require(vocab > 0, "spec::NgramDrafter: expected vocab >= 1, got 0");
  }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }
  [[nodiscard]] const NgramOptions& options() const noexcept { return opt_; }

  /// For n = max_n … min_n: finds the latest j < len − n with context[j, j+n) == the last n tokens and
  /// proposes context[j+n, j+n+out.size()) clipped to the context's end; the first n that matches wins.
  /// q rows are one-hot (a deterministic proposal). O(len · max_n) worst case per call; no allocation.
  [[nodiscard]] std::size_t propose(std::span<const Token> context, std::span<Token> out, std::span<float> q,
                                    sample::Rng&) const {
    require(q.empty() || q.size() >= out.size() * vocab_, "spec::NgramDrafter: q has ", q.size(),
            " floats, expected at least ", out.size() * vocab_);
    const std::size_t len = context.size();
    if (out.empty() || len < 2) return 0;
    for (std::size_t n = std::min(opt_.max_n, len - 1); n >= opt_.min_n; --n) {
      const auto key = context.last(n);
      for (std::size_t j = len - n; j-- > 0;) {
        if (!std::equal(key.begin(), key.end(), context.begin() + static_cast<std::ptrdiff_t>(j))) continue;
        const std::size_t start = j + n;
        const std::size_t k = std::min(out.size(), len - start);
        for (std::size_t i = 0; i < k; ++i) {
          out[i] = context[start + i];
          if (!q.empty()) one_hot(q.subspan(i * vocab_, vocab_), out[i]);
        }
        return k;
      }
      if (n == 1) break;
    }
    return 0;
  }

 private:
  void one_hot(std::span<float> row, Token t) const {
    require<value_error>(t >= 0 && static_cast<std::size_t>(t) < vocab_, "spec::NgramDrafter: context token ", t,
                         " is outside the vocabulary [0, ", vocab_, ")");
    std::fill(row.begin(), row.end(), 0.0f);
    row[static_cast<std::size_t>(t)] = 1.0f;
  }

  std::size_t vocab_;
  NgramOptions opt_;
};

static_assert(Drafter<NgramDrafter>);

}  // namespace barato::spec
