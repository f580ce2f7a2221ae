#pragma once
/// \file
/// Perplexity of a model over a token stream, with the protocol of barato_perplexity:
///  1. the whole text is encoded as one string the way run.c encodes (dummy prefix, no BOS);
///  2. the token stream is cut into consecutive windows of `window` = seq_len − 1 tokens (the last
///     window may be shorter);
///  3. each window is fed as BOS + window with positions restarting at 0 (the cache is emptied), so
///     every text token is predicted from BOS and the earlier tokens of its window;
///  4. every text token is scored: NLL = log Σ_v exp(logit_v) − logit_target (in double);
///  5. perplexity = exp(mean NLL); bits per byte = Σ NLL / ln 2 / bytes of the text.
/// The last token of a window is never an input (its logits would predict the next window), so a
/// window of w tokens costs one forward pass over w positions: BOS + the first w − 1 tokens.
/// Positions are fed in chunks through `forward` (prefill), logits [chunk, vocab] in caller scratch.
/// Optionally the argmax after every scored position is recorded (`sample::argmax`: the lowest id on
/// ties, the greedy convention), so a given sequence — another engine's output — can be compared teacher-forced.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <numbers>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/sample/sampler.hpp"

namespace barato_examples {

using barato::Token;

struct PerplexityResult {
  std::size_t tokens = 0;      ///< scored tokens (= the text's token count)
  std::size_t windows = 0;
  double total_nll = 0.0;      ///< Σ NLL in nats
  std::size_t text_bytes = 0;  ///< bytes of the text (for bits per byte; 0 if unknown)
  [[nodiscard]] double mean_nll() const noexcept { return tokens == 0 ? 0.0 : total_nll / static_cast<double>(tokens); }
  [[nodiscard]] double perplexity() const noexcept { return std::exp(mean_nll()); }
  [[nodiscard]] double bits_per_byte() const noexcept {
    return text_bytes == 0 ? 0.0 : total_nll / std::numbers::ln2 / static_cast<double>(text_bytes);
  }
};

/// −log softmax(logits)[target], in double.
[[nodiscard]] inline double token_nll(std::span<const float> logits, Token target) noexcept {
  float m = logits[0];
  for (const float x : logits) m = std::max(m, x);
  double s = 0.0;
  for (const float x : logits) s += std::exp(static_cast<double>(x) - m);
  return std::log(s) + m - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

namespace detail {
/// Checks the arguments of the protocol; returns the chunk (rows of logits per forward call).
inline std::size_t check_perplexity_args(std::span<const Token> text, std::size_t window, std::span<const float> scratch,
                                         std::size_t V) {
  barato::require(window > 0, "perplexity: window must be > 0");
  barato::require(scratch.size() >= V && scratch.size() % V == 0, "perplexity: scratch must hold whole rows of vocab = ", V,
                  " floats, got ", scratch.size());
  for (const Token t : text)
    barato::require<barato::value_error>(t >= 0 && static_cast<std::size_t>(t) < V, "perplexity: token id ", t,
                                         " outside [0, ", V, ")");
  return scratch.size() / V;
}
}  // namespace detail

/// The windows of the protocol: `f(w0, input)` for each window, where the window scores
/// text[w0 .. w0 + w) and `input` = BOS + text[w0 .. w0 + w − 1) (w positions; input[i] predicts
/// text[w0 + i]). Returns the number of windows.
template <class F>
std::size_t for_each_window(std::span<const Token> text, std::size_t window, F&& f) {
  barato::require(window > 0, "perplexity: window must be > 0");
  std::vector<Token> input;
  input.reserve(window);
  std::size_t n = 0;
  for (std::size_t w0 = 0; w0 < text.size(); w0 += window, ++n) {
    const std::size_t w = std::min(window, text.size() - w0);
    input.assign(1, Token{1});
    input.insert(input.end(), text.begin() + static_cast<std::ptrdiff_t>(w0),
                 text.begin() + static_cast<std::ptrdiff_t>(w0 + w - 1));
    f(w0, std::span<const Token>(input));
  }
  return n;
}

/// Scores `text` (ids without BOS) with the protocol above. `model` needs reset(), forward(tokens,
/// logits) and vocab_size(); `scratch` holds [chunk, vocab] floats (chunk ≥ 1 rows per forward call).
/// `progress(done_tokens, total_tokens)` is called after each window when set. When `argmax` is set it
/// receives, for every scored token text[i], the model's argmax at the position that predicts it.
template <class Model>
PerplexityResult perplexity(Model& model, std::span<const Token> text, std::size_t window, std::span<float> scratch,
                            std::size_t text_bytes = 0,
                            const std::function<void(std::size_t, std::size_t)>& progress = {},
                            std::vector<Token>* argmax = nullptr) {
  const std::size_t V = model.vocab_size();
  const std::size_t chunk = detail::check_perplexity_args(text, window, scratch, V);
  PerplexityResult r;
  r.text_bytes = text_bytes;
  if (argmax != nullptr) argmax->clear();
  for_each_window(text, window, [&](std::size_t w0, std::span<const Token> input) {
    const std::size_t w = input.size();
    model.reset();
    for (std::size_t c0 = 0; c0 < w; c0 += chunk) {
      const std::size_t m = std::min(chunk, w - c0);
      model.forward(input.subspan(c0, m), scratch.first(m * V));
      for (std::size_t i = 0; i < m; ++i) {
        r.total_nll += token_nll(scratch.subspan(i * V, V), text[w0 + c0 + i]);
        if (argmax != nullptr) argmax->push_back(barato::sample::argmax(scratch.subspan(i * V, V)));
      }
    }
    r.tokens += w;
    ++r.windows;
    if (progress) progress(r.tokens, text.size());
  });
  return r;
}

}  // namespace barato_examples
