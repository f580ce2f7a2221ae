#pragma once
/// \file
/// The online-softmax partial state. Attention of one query over a set S of keys is summarised by
///   m = max_{j∈S} s_j,   l = Σ_{j∈S} exp(s_j − m),   o = Σ_{j∈S} exp(s_j − m)·v_j   (un-normalised),
/// and the states of two disjoint sets merge associatively and commutatively:
///   m = max(m_a, m_b),  l = l_a·e^{m_a−m} + l_b·e^{m_b−m},  o = o_a·e^{m_a−m} + o_b·e^{m_b−m}.
/// The final output is o / l. This one piece of algebra (Milakov & Gimelshein 2018; FlashAttention,
/// Dao et al. 2022) gives the fused decode kernel, split-K decode, tiled prefill, the paged walk and
/// shared-prefix (cascade) attention.

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "barato/core/error.hpp"
#include "barato/simd/ops.hpp"

namespace barato::attention {

/// (m, l) of a partial state; the un-normalised output o lives in a caller buffer of d floats.
struct PartialStats {
  float m = -std::numeric_limits<float>::infinity();  ///< running max of the scores
  float l = 0.0f;                                     ///< Σ exp(s − m)
  /// True when no key has been folded in yet.
  [[nodiscard]] bool empty() const noexcept { return l == 0.0f; }
  /// The online-softmax rescale, written once for every kernel and for `merge`: when `m_new` exceeds
  /// the running max, the state moves to it — l and the caller's un-normalised output o (through
  /// `scale_o(alpha)`: o lives in a caller buffer or in registers) are multiplied by
  /// alpha = e^{m − m_new}, skipped while the state is empty (l = 0, o = 0) — and m becomes m_new.
  /// Otherwise nothing changes. Always inlined: it sits inside the kernels' per-tile loops, whose
  /// code GCC 12 otherwise lays out differently.
  template <class ScaleO>
  [[gnu::always_inline]] void raise_max(float m_new, ScaleO&& scale_o) noexcept {
    if (m_new > m) {
      if (l != 0.0f) {
        const float alpha = std::exp(m - m_new);
        l *= alpha;
        scale_o(alpha);
      }
      m = m_new;
    }
  }
};

/// Folds state b into state a (o vectors of `d` floats). Either side may be empty.
inline void merge(float* o_a, PartialStats& a, const float* o_b, const PartialStats& b, std::size_t d) noexcept {
  if (b.empty()) return;
  if (a.empty()) {
    for (std::size_t i = 0; i < d; ++i) o_a[i] = o_b[i];
    a = b;
    return;
  }
  a.raise_max(b.m, [&](float alpha) { simd::scale(alpha, o_a, d); });  // a.m = max(a.m, b.m)
  const float wb = std::exp(b.m - a.m);
  simd::axpy(wb, o_b, o_a, d);
  a.l += b.l * wb;
}

/// Span version of `merge`; throws `shape_error` when the spans differ in size.
inline void merge(std::span<float> o_a, PartialStats& a, std::span<const float> o_b, const PartialStats& b) {
  require(o_a.size() == o_b.size(), "attention::merge: o sizes differ: ", o_a.size(), " vs ", o_b.size());
  merge(o_a.data(), a, o_b.data(), b, o_a.size());
}

/// o ← o / l, the normalised attention output. An empty state (no keys) yields zeros. A NaN / ±∞
/// score or value folded into the state makes l or o non-finite, and the output with it (NaN in →
/// NaN out: the kernels do not check elements).
inline void finalize(float* o, const PartialStats& s, std::size_t d) noexcept {
  if (s.empty()) {
    for (std::size_t i = 0; i < d; ++i) o[i] = 0.0f;
    return;
  }
  simd::scale(1.0f / s.l, o, d);
}

}  // namespace barato::attention
