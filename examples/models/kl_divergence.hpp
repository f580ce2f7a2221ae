#pragma once
/// \file
/// Evaluation math for comparing a model variant (quantized weights, a quantized cache, …) with a
/// reference model on the same positions: the KL divergence between two logit vectors, the running
/// statistics of per-position values (mean ± standard error, quantiles, max, top-1 agreement) and the
/// Wilson score interval of a binomial share. Evaluation code of the example model, not library code.
///
///  - `kl_divergence(ref, test)` = KL(P ‖ Q) in nats with P = softmax(ref), Q = softmax(test):
///    Σ_v P_v (log P_v − log Q_v), log-softmax by log-sum-exp in double. A −∞ reference logit has
///    P_v = 0 and contributes nothing; a −∞ test logit where P_v > 0 makes the result +∞. Identical
///    inputs give exactly 0 (every term is x − x); rounding can make a tiny true value come out
///    negative, so the result is clamped at 0 (KL ≥ 0). NaN or +∞ logits, or a vector that is −∞
///    everywhere, throw `value_error`.
///  - `KldStats` keeps every per-position value as a float (O(positions) memory, nothing O(vocab)).
///    Mean and variance are Welford's running updates in double; quantiles use linear interpolation
///    between order statistics (sorted x at rank q·(n − 1), "type 7").
///  - `wilson_interval(k, n, z)` is the Wilson score interval of the share k / n.
///  - `compare_models(ref, test, text, window, …)` runs both models over `text` with the perplexity
///    protocol of models/perplexity.hpp (same windows, same positions) and feeds every scored position
///    to a `KldStats`; logits live only in the two [chunk, vocab] scratch buffers.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/sample/sampler.hpp"
#include "models/perplexity.hpp"

namespace barato_examples {

/// z of a two-sided 95 % normal interval.
inline constexpr double kZ95 = 1.959963984540054;

/// log Σ_v exp(x_v) in double; −∞ entries contribute 0. Throws `value_error` on NaN / +∞ entries or
/// when every entry is −∞.
[[nodiscard]] inline double log_sum_exp(std::span<const float> x) {
  barato::require<barato::value_error>(!x.empty(), "log_sum_exp: empty vector");
  double m = -std::numeric_limits<double>::infinity();
  for (const float v : x) {
    barato::require<barato::value_error>(!std::isnan(v) && v != std::numeric_limits<float>::infinity(),
                                         "log_sum_exp: NaN or +inf logit");
    m = std::max(m, static_cast<double>(v));
  }
  barato::require<barato::value_error>(std::isfinite(m), "log_sum_exp: every logit is -inf");
  double s = 0.0;
  for (const float v : x) s += std::exp(static_cast<double>(v) - m);  // exp(−∞) = 0
  return m + std::log(s);
}

/// KL(softmax(ref) ‖ softmax(test)) in nats (conventions in the file comment). O(vocab), no allocation.
[[nodiscard]] inline double kl_divergence(std::span<const float> ref, std::span<const float> test) {
  barato::require<barato::shape_error>(ref.size() == test.size(), "kl_divergence: ", ref.size(), " reference logits vs ",
                                       test.size(), " test logits");
  const double lse_r = log_sum_exp(ref), lse_t = log_sum_exp(test);
  double kl = 0.0;
  for (std::size_t v = 0; v < ref.size(); ++v) {
    if (ref[v] == -std::numeric_limits<float>::infinity()) continue;  // P_v = 0
    const double lp = static_cast<double>(ref[v]) - lse_r;
    const double lq = static_cast<double>(test[v]) - lse_t;  // −∞ if test[v] is: the result is +∞
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(kl, 0.0);
}

/// Wilson score interval {lo, hi} of the share k / n (z = 1.96 for 95 %). {0, 1} when n = 0.
[[nodiscard]] inline std::pair<double, double> wilson_interval(std::size_t k, std::size_t n, double z = kZ95) {
  barato::require<barato::value_error>(k <= n, "wilson_interval: k = ", k, " > n = ", n);
  if (n == 0) return {0.0, 1.0};
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double c = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double h = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
  return {k == 0 ? 0.0 : std::max(0.0, c - h), k == n ? 1.0 : std::min(1.0, c + h)};  // exact at the ends
}

/// Summary of a `KldStats` (one sort).
struct KldSummary {
  std::size_t count = 0;
  double mean = 0.0;     ///< nats; +∞ if any value is +∞
  double std_error = 0.0;  ///< standard error of the mean: sample standard deviation / √n (0 for n < 2)
  double median = 0.0;
  double p90 = 0.0, p99 = 0.0, max = 0.0;
  std::size_t same_top1 = 0;                ///< positions where both argmaxes agree
  double same_top1_share = 0.0;             ///< same_top1 / count
  double same_top1_lo = 0.0, same_top1_hi = 1.0;  ///< 95 % Wilson interval of the share
};

/// Running statistics of per-position KL values and top-1 agreement.
class KldStats {
 public:
  void add(double kld, bool same_top1) {
    barato::require<barato::value_error>(!std::isnan(kld) && kld >= 0.0, "KldStats: KL value ", kld, " is not >= 0");
    values_.push_back(static_cast<float>(kld));
    same_ += same_top1 ? 1 : 0;
    if (std::isinf(kld)) {
      ++infinite_;
      return;
    }
    ++finite_;
    const double d = kld - mean_;
    mean_ += d / static_cast<double>(finite_);
    m2_ += d * (kld - mean_);
  }
  [[nodiscard]] std::size_t count() const noexcept { return values_.size(); }
  [[nodiscard]] std::size_t same_top1() const noexcept { return same_; }
  [[nodiscard]] std::span<const float> values() const noexcept { return values_; }
  [[nodiscard]] double mean() const noexcept {
    return infinite_ > 0 ? std::numeric_limits<double>::infinity() : mean_;
  }
  /// Sample standard deviation / √n.
  [[nodiscard]] double standard_error() const noexcept {
    if (infinite_ > 0) return std::numeric_limits<double>::infinity();
    if (finite_ < 2) return 0.0;
    const double n = static_cast<double>(finite_);
    return std::sqrt(m2_ / (n - 1) / n);
  }
  /// Linear interpolation between order statistics of `sorted` at rank q·(n − 1).
  [[nodiscard]] static double quantile(std::span<const float> sorted, double q) {
    barato::require<barato::value_error>(q >= 0.0 && q <= 1.0, "quantile: q = ", q, " outside [0, 1]");
    if (sorted.empty()) return 0.0;
    const double r = q * static_cast<double>(sorted.size() - 1);
    const auto i = static_cast<std::size_t>(std::floor(r));
    if (i + 1 >= sorted.size()) return sorted.back();
    const double a = sorted[i], b = sorted[i + 1];
    return a == b ? a : a + (r - static_cast<double>(i)) * (b - a);
  }
  [[nodiscard]] KldSummary summary() const {
    KldSummary s;
    s.count = count();
    s.mean = mean();
    s.std_error = standard_error();
    s.same_top1 = same_;
    if (s.count == 0) return s;
    std::vector<float> sorted = values_;
    std::sort(sorted.begin(), sorted.end());
    s.median = quantile(sorted, 0.5);
    s.p90 = quantile(sorted, 0.9);
    s.p99 = quantile(sorted, 0.99);
    s.max = sorted.back();
    s.same_top1_share = static_cast<double>(same_) / static_cast<double>(s.count);
    std::tie(s.same_top1_lo, s.same_top1_hi) = wilson_interval(same_, s.count);
    return s;
  }

 private:
  std::vector<float> values_;
  std::size_t same_ = 0, finite_ = 0, infinite_ = 0;
  double mean_ = 0.0, m2_ = 0.0;
};

/// Both models' perplexities and the per-position comparison over one text.
struct ModelComparison {
  PerplexityResult reference;  ///< e.g. the fp32 model
  PerplexityResult test;       ///< the variant
  KldStats kld;                ///< KL(reference ‖ test) and same-top-1 per scored position
  [[nodiscard]] double delta_perplexity() const noexcept { return test.perplexity() - reference.perplexity(); }
};

/// Runs `ref` and `test` over `text` with the perplexity protocol (models/perplexity.hpp) and compares
/// their logits at every scored position. Each scratch holds [chunk, vocab] floats (the same chunk for
/// both). `progress(done_tokens, total_tokens)` is called after each window when set; `test_argmax`,
/// when set, receives the test model's argmax at every scored position (as `perplexity` does).
template <class RefModel, class TestModel>
ModelComparison compare_models(RefModel& ref, TestModel& test, std::span<const Token> text, std::size_t window,
                               std::span<float> ref_scratch, std::span<float> test_scratch, std::size_t text_bytes = 0,
                               const std::function<void(std::size_t, std::size_t)>& progress = {},
                               std::vector<Token>* test_argmax = nullptr) {
  const std::size_t V = ref.vocab_size();
  barato::require<barato::shape_error>(test.vocab_size() == V, "compare_models: vocab ", V, " vs ", test.vocab_size());
  barato::require(ref_scratch.size() == test_scratch.size(), "compare_models: scratch sizes differ");
  const std::size_t chunk = detail::check_perplexity_args(text, window, ref_scratch, V);
  ModelComparison c;
  c.reference.text_bytes = c.test.text_bytes = text_bytes;
  if (test_argmax != nullptr) test_argmax->clear();
  for_each_window(text, window, [&](std::size_t w0, std::span<const Token> input) {
    ref.reset();
    test.reset();
    const std::size_t w = input.size();
    for (std::size_t c0 = 0; c0 < w; c0 += chunk) {
      const std::size_t m = std::min(chunk, w - c0);
      ref.forward(input.subspan(c0, m), ref_scratch.first(m * V));
      test.forward(input.subspan(c0, m), test_scratch.first(m * V));
      for (std::size_t i = 0; i < m; ++i) {
        const auto lr = std::span<const float>(ref_scratch.subspan(i * V, V));
        const auto lt = std::span<const float>(test_scratch.subspan(i * V, V));
        const Token target = text[w0 + c0 + i];
        c.reference.total_nll += token_nll(lr, target);
        c.test.total_nll += token_nll(lt, target);
        const Token top_t = barato::sample::argmax(lt);
        c.kld.add(kl_divergence(lr, lt), barato::sample::argmax(lr) == top_t);
        if (test_argmax != nullptr) test_argmax->push_back(top_t);
      }
    }
    for (PerplexityResult* r : {&c.reference, &c.test}) {
      r->tokens += w;
      ++r->windows;
    }
    if (progress) progress(c.test.tokens, text.size());
  });
  return c;
}

}  // namespace barato_examples
