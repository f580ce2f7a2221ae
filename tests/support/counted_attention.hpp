#pragma once
// Instrumented scalar references for the attention cost model (barato/attention/cost.hpp): plain
// causal-attention loops that count every multiply-add they perform and allocate their score
// buffer from a CountingResource, so the formulas are checked against operations actually done.
// They also return their outputs, which tests compare with the real kernels — so what is counted
// is attention, not a loop shaped like the formula.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <utility>
#include <vector>

#include "barato/core/memory.hpp"

namespace barato::test {

/// What one instrumented run did.
struct CountedRun {
  std::uint64_t macs = 0;             // multiply-adds of QKᵀ and PV
  std::size_t peak_score_bytes = 0;   // peak bytes of the score buffer(s), measured
  std::vector<float> out;             // attention outputs
};

namespace detail {
/// Softmax of s[0..n) in place (exponentials are not multiply-adds and are not counted).
inline void softmax_in_place(float* s, std::size_t n) {
  float m = s[0];
  for (std::size_t j = 1; j < n; ++j) m = std::max(m, s[j]);
  double l = 0;
  for (std::size_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    l += s[j];
  }
  for (std::size_t j = 0; j < n; ++j) s[j] = static_cast<float>(s[j] / l);
}
}  // namespace detail

/// Cache-less step at context n: causal attention for all n rows of q, k, v ([≥n, d] row-major)
/// with an n×n score matrix. out: [n, d].
inline CountedRun counted_recompute(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, std::size_t n, std::size_t d) {
  CountedRun run;
  CountingResource mr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  run.out.assign(n * d, 0.0f);
  {
    std::pmr::vector<float> s(n * n, 0.0f, &mr);  // [n, n]
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j <= i; ++j) {
        float acc = 0;
        for (std::size_t c = 0; c < d; ++c) {
          acc += q[i * d + c] * k[j * d + c];
          ++run.macs;
        }
        s[i * n + j] = acc * scale;
      }
      detail::softmax_in_place(s.data() + i * n, i + 1);
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d; ++c) {
        float acc = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          acc += s[i * n + j] * v[j * d + c];
          ++run.macs;
        }
        run.out[i * d + c] = acc;
      }
  }
  run.peak_score_bytes = mr.peak();
  return run;
}

/// Cached step at context n: query row n−1 against keys/values 0 … n−1 with a 1×n score row. out: [d].
inline CountedRun counted_cached_step(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, std::size_t n, std::size_t d) {
  CountedRun run;
  CountingResource mr;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* qn = q.data() + (n - 1) * d;
  run.out.assign(d, 0.0f);
  {
    std::pmr::vector<float> s(n, 0.0f, &mr);  // [n]
    for (std::size_t j = 0; j < n; ++j) {
      float acc = 0;
      for (std::size_t c = 0; c < d; ++c) {
        acc += qn[c] * k[j * d + c];
        ++run.macs;
      }
      s[j] = acc * scale;
    }
    detail::softmax_in_place(s.data(), n);
    for (std::size_t c = 0; c < d; ++c) {
      float acc = 0;
      for (std::size_t j = 0; j < n; ++j) {
        acc += s[j] * v[j * d + c];
        ++run.macs;
      }
      run.out[c] = acc;
    }
  }
  run.peak_score_bytes = mr.peak();
  return run;
}

/// Generation of T tokens from a cold start with `step` (counted_recompute or counted_cached_step):
/// steps at context 1 … T. Sums the MACs, keeps the largest score buffer; out = the last step's.
template <class Step>
CountedRun counted_generation(Step step, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, std::size_t t, std::size_t d) {
  CountedRun total;
  for (std::size_t n = 1; n <= t; ++n) {
    CountedRun r = step(q, k, v, n, d);
    total.macs += r.macs;
    total.peak_score_bytes = std::max(total.peak_score_bytes, r.peak_score_bytes);
    total.out = std::move(r.out);
  }
  return total;
}

}  // namespace barato::test
