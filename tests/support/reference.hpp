#pragma once
// Readable scalar references (the oracles of the tests and the baselines of the benchmarks).
// Written for clarity, in double precision where that helps, never for speed.

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "support/tolerances.hpp"

namespace barato::test {

/// A head configuration and sequence length for attention tests: query heads, KV heads, head dim, positions.
struct AttentionCase {
  std::size_t hq, hkv, d, n;
};

/// Windowed causal multi-head attention in double (StreamingLLM mask): the query at position p sees
/// the positions j ≤ p with j < sinks or p − j < window. q [n_q_tok, Hq, d] at positions p0..,
/// k/v [n_kv_tok, Hkv, d] for positions 0...
inline std::vector<float> windowed_attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                                 const std::vector<float>& v, std::size_t hq, std::size_t hkv,
                                                 std::size_t d, std::size_t p0, double scale, std::size_t sinks,
                                                 std::size_t window) {
  const std::size_t nq = q.size() / (hq * d);
  const std::size_t g = hq / hkv;
  std::vector<float> out(q.size(), 0.0f);
  for (std::size_t t = 0; t < nq; ++t) {
    const std::size_t pos = p0 + t;
    for (std::size_t h = 0; h < hq; ++h) {
      const std::size_t kh = h / g;
      std::vector<double> s(pos + 1);
      double m = -INFINITY;
      for (std::size_t j = 0; j <= pos; ++j) {
        if (!(j < sinks || pos - j < window)) {  // masked: weight exp(−inf) = 0
          s[j] = -INFINITY;
          continue;
        }
        double acc = 0;
        for (std::size_t c = 0; c < d; ++c) acc += double(q[(t * hq + h) * d + c]) * double(k[(j * hkv + kh) * d + c]);
        s[j] = acc * scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      for (auto& x : s) { x = std::exp(x - m); l += x; }
      for (std::size_t c = 0; c < d; ++c) {
        double acc = 0;
        for (std::size_t j = 0; j <= pos; ++j) acc += s[j] * double(v[(j * hkv + kh) * d + c]);
        out[(t * hq + h) * d + c] = static_cast<float>(acc / l);
      }
    }
  }
  return out;
}

/// Causal multi-head attention in double: q [n_q_tok, Hq, d] at positions p0.., k/v [n_kv_tok, Hkv, d].
inline std::vector<float> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, std::size_t hq, std::size_t hkv, std::size_t d,
                                        std::size_t p0, double scale) {
  return windowed_attention_ref(q, k, v, hq, hkv, d, p0, scale, 0, static_cast<std::size_t>(-1));
}

/// n values uniform in [lo, hi) from a seeded generator.
inline std::vector<float> random_vector(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(n);
  for (auto& e : x) e = dist(gen);
  return x;
}

/// max |a − b| / max(max |b|, tiny).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = kTiny;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

}  // namespace barato::test
