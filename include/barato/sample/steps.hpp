#pragma once
/// \file
/// Logits steps: the composable transforms a `sample::Chain` applies, in the order given, to a copy of
/// the logits before the final softmax and draw. Each step edits the logits in place; "removing" a token
/// sets its logit to −∞ (probability exactly 0 after the softmax).
///
/// Rules a `requires` clause cannot express:
///  - `apply(logits, history, ws)` allocates nothing; `ws` spans are [vocab] each and `ws.mark` is all
///    zero on entry and must be all zero again on exit.
///  - A step never removes every token: at least the most likely one survives.
///  - Ties are broken by token id (lower id wins), so results never depend on sort stability.
///
/// The common order (llama.cpp's default) is penalties → top-k → top-p → min-p → temperature; a
/// chain applies exactly the order you write.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/sampler.hpp"
#include "barato/simd/ops.hpp"

namespace barato::sample {

/// Scratch a step may use, sized [vocab] by the chain that owns it.
struct Workspace {
  std::span<Token> index;         // [vocab] token ids (sort / selection order)
  std::span<float> values;        // [vocab] probabilities or copies of logits
  std::span<std::uint8_t> mark;   // [vocab] all zero between calls
};

template <class S>
concept LogitsStep = requires(const S& s, std::span<float> logits, std::span<const Token> history, const Workspace& ws) {
  s.apply(logits, history, ws);
};

namespace detail {
inline constexpr float kMasked = -std::numeric_limits<float>::infinity();

/// True when token a ranks before token b: larger value first, then lower id.
struct RankDesc {
  std::span<const float> v;
  bool operator()(Token a, Token b) const noexcept {
    const float x = v[static_cast<std::size_t>(a)], y = v[static_cast<std::size_t>(b)];
    return x > y || (x == y && a < b);
  }
};
}  // namespace detail

/// logits ← logits / t. t < 1 sharpens, t > 1 flattens. Use `Greedy` for t → 0.
/// Throws `value_error` unless t is finite and > 0. O(vocab).
struct Temperature {
  float t;
  explicit Temperature(float temperature) : t(temperature) {
    require<value_error>(std::isfinite(temperature) && temperature > 0.0f,
                         "sample::Temperature: expected a finite temperature > 0 (use Greedy for 0), got ", temperature);
  }
  void apply(std::span<float> logits, std::span<const Token>, const Workspace&) const noexcept {
    simd::scale(1.0f / t, logits.data(), logits.size());
  }
};

/// Keeps the k largest logits (ties at the boundary: lower ids kept, so exactly k survive); k ≥ vocab
/// keeps all. Fan et al. 2018, "Hierarchical Neural Story Generation". Throws `value_error` for k = 0.
/// O(vocab) (selection, not a sort).
struct TopK {
  std::size_t k;
  explicit TopK(std::size_t keep) : k(keep) { require<value_error>(keep > 0, "sample::TopK: expected k >= 1, got 0"); }
  void apply(std::span<float> logits, std::span<const Token>, const Workspace& ws) const {
    const std::size_t n = logits.size();
    if (k >= n) return;
    auto idx = ws.index.first(n);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<Token>(i);
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), detail::RankDesc{logits});
    for (std::size_t i = k; i < n; ++i) logits[static_cast<std::size_t>(idx[i])] = detail::kMasked;
  }
};

/// Nucleus sampling (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"): keeps the
/// smallest set of most likely tokens whose probability sums to ≥ p (ranked by probability, ties → lower
/// id; the top token always survives); p ≥ 1 keeps all. Throws `value_error` unless p > 0.
/// O(vocab log vocab).
struct TopP {
  float p;
  explicit TopP(float mass) : p(mass) {
    require<value_error>(mass > 0.0f && !std::isnan(mass), "sample::TopP: expected p > 0, got ", mass);
  }
  void apply(std::span<float> logits, std::span<const Token>, const Workspace& ws) const {
    if (p >= 1.0f) return;
    const std::size_t n = logits.size();
    auto probs = ws.values.first(n);
    auto idx = ws.index.first(n);
    softmax_into(logits, probs);
    for (std::size_t i = 0; i < n; ++i) idx[i] = static_cast<Token>(i);
    std::sort(idx.begin(), idx.end(), detail::RankDesc{probs});
    double cum = 0.0;
    std::size_t keep = 0;
    while (keep < n && cum < static_cast<double>(p)) cum += static_cast<double>(probs[static_cast<std::size_t>(idx[keep++])]);
    for (std::size_t i = keep; i < n; ++i) logits[static_cast<std::size_t>(idx[i])] = detail::kMasked;
  }
};

/// Min-p (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling"): removes tokens whose probability
/// is below p · (probability of the most likely token). Computed on logits: keep l ≥ max(l) + ln p, so no
/// softmax is needed. p = 0 keeps all, p = 1 keeps the maximum (and its ties). Throws `value_error`
/// unless 0 ≤ p ≤ 1. O(vocab).
struct MinP {
  float p;
  explicit MinP(float ratio) : p(ratio) {
    require<value_error>(ratio >= 0.0f && ratio <= 1.0f, "sample::MinP: expected 0 <= p <= 1, got ", ratio);
  }
  void apply(std::span<float> logits, std::span<const Token>, const Workspace&) const noexcept {
    if (p == 0.0f) return;
    const float cut = simd::max(logits.data(), logits.size()) + std::log(p);
    for (float& l : logits)
      if (l < cut) l = detail::kMasked;
  }
};

/// Repetition penalty (Keskar et al. 2019, CTRL): every distinct token among the last `window` history
/// tokens (0 = the whole history) has its logit divided by `penalty` when positive and multiplied by it
/// when negative, once, however often it occurred — the rule of the common implementations (CTRL,
/// llama.cpp, Hugging Face). penalty > 1 discourages repeats, 1 is a no-op. Throws `value_error` unless
/// penalty is finite and > 0; history tokens outside [0, vocab) throw `value_error`. O(window).
struct RepetitionPenalty {
  float penalty;
  std::size_t window = 0;
  explicit RepetitionPenalty(float factor, std::size_t last_n = 0) : penalty(factor), window(last_n) {
    require<value_error>(std::isfinite(factor) && factor > 0.0f,
                         "sample::RepetitionPenalty: expected a finite penalty > 0, got ", factor);
  }
  void apply(std::span<float> logits, std::span<const Token> history, const Workspace& ws) const {
    const auto recent = (window == 0 || window >= history.size()) ? history : history.last(window);
    for (const Token t : recent)
      require<value_error>(t >= 0 && static_cast<std::size_t>(t) < logits.size(), "sample::RepetitionPenalty: token ",
                           t, " in the history is outside the vocabulary [0, ", logits.size(), ")");
    for (const Token t : recent) {
      const auto i = static_cast<std::size_t>(t);
      if (ws.mark[i] != 0) continue;
      ws.mark[i] = 1;
      logits[i] = logits[i] > 0.0f ? logits[i] / penalty : logits[i] * penalty;
    }
    for (const Token t : recent) ws.mark[static_cast<std::size_t>(t)] = 0;
  }
};

static_assert(LogitsStep<Temperature> && LogitsStep<TopK> && LogitsStep<TopP> && LogitsStep<MinP> &&
              LogitsStep<RepetitionPenalty>);

}  // namespace barato::sample
