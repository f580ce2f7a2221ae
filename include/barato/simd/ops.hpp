#pragma once
/// \file
/// Vector primitives over float spans, vectorised with xsimd: dot, axpy, scale, sum, max, and a
/// softmax. Each has a scalar tail; results match the scalar loop up to summation order.

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "barato/simd/arch.hpp"
#include "barato/simd/convert.hpp"

namespace barato::simd {

/// Σ a[i]·b[i] over n elements; `b` may be fp32, fp16 or bf16.
template <Element T = float, class Arch = DefaultArch>
[[nodiscard]] inline float dot(const float* a, const T* b, std::size_t n) noexcept {
  using B = Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  B acc0(0.f), acc1(0.f), acc2(0.f), acc3(0.f);
  std::size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    acc0 = simd::fma(B::load_unaligned(a + i), load_as_float<Arch>(b + i), acc0);
    acc1 = simd::fma(B::load_unaligned(a + i + W), load_as_float<Arch>(b + i + W), acc1);
    acc2 = simd::fma(B::load_unaligned(a + i + 2 * W), load_as_float<Arch>(b + i + 2 * W), acc2);
    acc3 = simd::fma(B::load_unaligned(a + i + 3 * W), load_as_float<Arch>(b + i + 3 * W), acc3);
  }
  for (; i + W <= n; i += W) acc0 = simd::fma(B::load_unaligned(a + i), load_as_float<Arch>(b + i), acc0);
  float s = reduce_add<float, Arch>((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) s += a[i] * static_cast<float>(b[i]);
  return s;
}

/// y[i] += alpha·x[i].
template <Element T = float, class Arch = DefaultArch>
inline void axpy(float alpha, const T* x, float* y, std::size_t n) noexcept {
  using B = Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const B a(alpha);
  std::size_t i = 0;
  for (; i + W <= n; i += W) simd::fma(a, load_as_float<Arch>(x + i), B::load_unaligned(y + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] += alpha * static_cast<float>(x[i]);
}

/// y[i] *= alpha.
template <class Arch = DefaultArch>
inline void scale(float alpha, float* y, std::size_t n) noexcept {
  using B = Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  const B a(alpha);
  const std::size_t nv = n / W * W;  // (this form: GCC 12 warned of an overflowing tail loop for `i + W <= n` once inlined)
  std::size_t i = 0;
  for (; i < nv; i += W) (a * B::load_unaligned(y + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] *= alpha;
}

/// max_i x[i] (−∞ for n = 0).
template <class Arch = DefaultArch>
[[nodiscard]] inline float max(const float* x, std::size_t n) noexcept {
  using B = Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  float m = -std::numeric_limits<float>::infinity();
  std::size_t i = 0;
  if (n >= W) {
    B acc = B::load_unaligned(x);
    for (i = W; i + W <= n; i += W) acc = xsimd::max(acc, B::load_unaligned(x + i));
    m = reduce_max<float, Arch>(acc);
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

/// In-place numerically stable softmax over x[0..n); returns the normaliser Σ exp(x − max).
/// Edge cases (no per-element checks; callers that need a distribution check the returned value,
/// as sample::softmax_into does): n = 0 writes nothing and returns 0; −∞ entries get exactly 0 when
/// some entry is finite; all entries equal give exactly 1/n each (rounded once); a NaN anywhere, a
/// +∞, or every entry −∞ makes every output and the returned normaliser NaN (NaN in → NaN out).
/// Subnormal and huge finite inputs are exact to fp32 rounding (the max is subtracted first).
template <class Arch = DefaultArch>
inline float softmax(float* x, std::size_t n) noexcept {
  using B = Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  if (n == 0) return 0.f;
  const float m = max<Arch>(x, n);
  B accb(0.f);
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    const B e = xsimd::exp(B::load_unaligned(x + i) - B(m));
    e.store_unaligned(x + i);
    accb += e;
  }
  float s = reduce_add<float, Arch>(accb);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  scale<Arch>(1.f / s, x, n);
  return s;
}

}  // namespace barato::simd
