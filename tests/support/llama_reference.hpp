#pragma once
// Scalar reference of the Llama forward pass (the oracle for barato_examples::Llama): one token at a
// time, exactly the loop of llama2.c run.c's forward(), with plain loops, double accumulators and its
// own std::vector KV cache. Reads fp32 weights from LlamaWeights<DenseLinear>.

#include <cmath>
#include <cstddef>
#include <vector>

#include "models/llama.hpp"

namespace barato::test {

class LlamaReference {
 public:
  /// Full causal attention, or with `sinks`/`window` set, the StreamingLLM window: the query at p sees
  /// positions t ≤ p with t < sinks or p − t < window.
  explicit LlamaReference(const barato_examples::LlamaWeights<barato::nn::DenseLinear>& w, std::size_t sinks = 0,
                          std::size_t window = static_cast<std::size_t>(-1))
      : w_(w), c_(w.config), sinks_(sinks), window_(window) {
    kc_.resize(c_.n_layers);
    vc_.resize(c_.n_layers);
  }

  void reset() {
    for (auto& k : kc_) k.clear();
    for (auto& v : vc_) v.clear();
    pos_ = 0;
  }
  [[nodiscard]] std::size_t size() const { return pos_; }

  /// Logits [vocab] after `token` at the next position.
  std::vector<float> step(int token) {
    const std::size_t d = c_.dim, hd = c_.head_dim, qd = c_.q_dim(), kd = c_.kv_dim();
    std::vector<float> x(w_.token_embedding.data() + static_cast<std::size_t>(token) * d,
                         w_.token_embedding.data() + static_cast<std::size_t>(token + 1) * d);
    for (std::size_t l = 0; l < c_.n_layers; ++l) {
      const auto& L = w_.layers[l];
      const auto xn = rmsnorm(x, L.rms_att.data());
      auto q = matvec(L.wq, xn), k = matvec(L.wk, xn), v = matvec(L.wv, xn);
      rope(q, c_.n_heads);
      rope(k, c_.n_kv_heads);
      kc_[l].insert(kc_[l].end(), k.begin(), k.end());
      vc_[l].insert(vc_[l].end(), v.begin(), v.end());
      std::vector<float> att(qd, 0.0f);
      const std::size_t g = c_.n_heads / c_.n_kv_heads;
      for (std::size_t h = 0; h < c_.n_heads; ++h) {
        const std::size_t kh = h / g;
        std::vector<double> s(pos_ + 1);
        double m = -INFINITY;
        for (std::size_t t = 0; t <= pos_; ++t) {
          if (!(t < sinks_ || pos_ - t < window_)) {  // outside the window: weight exp(−inf) = 0
            s[t] = -INFINITY;
            continue;
          }
          double a = 0;
          for (std::size_t i = 0; i < hd; ++i) a += double(q[h * hd + i]) * double(kc_[l][t * kd + kh * hd + i]);
          s[t] = a / std::sqrt(double(hd));
          m = std::max(m, s[t]);
        }
        double sum = 0;
        for (auto& e : s) { e = std::exp(e - m); sum += e; }
        for (std::size_t i = 0; i < hd; ++i) {
          double a = 0;
          for (std::size_t t = 0; t <= pos_; ++t) a += s[t] * double(vc_[l][t * kd + kh * hd + i]);
          att[h * hd + i] = static_cast<float>(a / sum);
        }
      }
      const auto o = matvec(L.wo, att);
      for (std::size_t i = 0; i < d; ++i) x[i] += o[i];
      const auto xn2 = rmsnorm(x, L.rms_ffn.data());
      auto h1 = matvec(L.w1, xn2);
      const auto h3 = matvec(L.w3, xn2);
      for (std::size_t i = 0; i < h1.size(); ++i) h1[i] = static_cast<float>(double(h1[i]) / (1.0 + std::exp(-double(h1[i]))) * h3[i]);
      const auto o2 = matvec(L.w2, h1);
      for (std::size_t i = 0; i < d; ++i) x[i] += o2[i];
    }
    const auto xf = rmsnorm(x, w_.rms_final.data());
    ++pos_;
    return matvec(w_.classifier, xf);
  }

 private:
  std::vector<float> rmsnorm(const std::vector<float>& x, const float* g) const {
    double ss = 0;
    for (const float e : x) ss += double(e) * e;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + double(c_.norm_eps));
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(double(x[i]) * inv * g[i]);
    return y;
  }
  static std::vector<float> matvec(const barato::nn::DenseLinear& w, const std::vector<float>& x) {
    std::vector<float> y(w.rows());
    const auto W = w.weights();
    for (std::size_t r = 0; r < w.rows(); ++r) {
      double a = 0;
      for (std::size_t c = 0; c < w.cols(); ++c) a += double(W[r * w.cols() + c]) * x[c];
      y[r] = static_cast<float>(a);
    }
    return y;
  }
  /// RoPE at position pos_: pair i of each head rotated by pos · base^(−2i/head_dim).
  void rope(std::vector<float>& v, std::size_t heads) const {
    const std::size_t hd = c_.head_dim, half = hd / 2;
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < half; ++i) {
        const double freq = std::pow(double(c_.rope_base), -double(2 * i) / double(hd));
        const double a = double(pos_) * freq;
        const bool adj = c_.rope_style == barato::attention::RopeStyle::adjacent;
        const std::size_t i0 = h * hd + (adj ? 2 * i : i), i1 = h * hd + (adj ? 2 * i + 1 : i + half);
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a));
        v[i1] = static_cast<float>(x0 * std::sin(a) + x1 * std::cos(a));
      }
  }

  const barato_examples::LlamaWeights<barato::nn::DenseLinear>& w_;
  barato_examples::LlamaConfig c_;
  std::size_t sinks_, window_;               // attention mask (window_ = max: full causal)
  std::vector<std::vector<float>> kc_, vc_;  // per layer: [pos, kv_dim]
  std::size_t pos_ = 0;
};

}  // namespace barato::test
