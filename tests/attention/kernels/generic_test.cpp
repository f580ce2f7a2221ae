#include "barato/attention/kernels/generic.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "barato/attention/kernels/rows.hpp"
#include "barato/attention/partial.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

/// fp16 storage rounds K and V; the reference sees the rounded values, so the fp32 tolerance holds.
constexpr double kKernelRelTol = test::kFp32RelTol;

/// Folds rows [0, n) of one KV head (g query heads, head dim d, row stride `stride`, element T)
/// through the generic tile routine on `Arch`, in consecutive random pieces of ≤ `max_piece` rows,
/// and compares the normalised output with the double reference over the same rows.
template <class Arch, Element T>
void check_generic(std::size_t g, std::size_t d, std::size_t stride, std::size_t n, std::size_t max_piece, unsigned seed) {
  CAPTURE(g); CAPTURE(d); CAPTURE(stride); CAPTURE(n); CAPTURE(max_piece);
  const auto kf = test::random_vector(n * stride, seed), vf = test::random_vector(n * stride, seed + 1);
  std::vector<T> k(n * stride), v(n * stride);
  std::vector<float> kr(n * d), vr(n * d);  // the values the kernel sees, packed
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < stride; ++c) {
      k[r * stride + c] = static_cast<T>(kf[r * stride + c]);
      v[r * stride + c] = static_cast<T>(vf[r * stride + c]);
      if (c < d) {
        kr[r * d + c] = static_cast<float>(k[r * stride + c]);
        vr[r * d + c] = static_cast<float>(v[r * stride + c]);
      }
    }
  const attention::detail::ContiguousRows<T> rows{k.data(), v.data(), stride};
  const auto q = test::random_vector(g * d, seed + 2, -3.f, 3.f);
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> o(g * d, 0.0f);
  std::vector<PartialStats> st(g);
  const attention::QueryGroup qg{.q = q.data(), .g = g, .d = d, .scale = scale, .o = o.data(), .st = st.data()};
  std::mt19937 gen(seed);
  for (std::size_t a = 0; a < n;) {
    const std::size_t b = std::min(n, a + 1 + gen() % max_piece);
    attention::detail::accumulate_rows<Arch>(qg, rows, a, b);
    a = b;
  }
  for (std::size_t h = 0; h < g; ++h) {
    REQUIRE(st[h].l > 0.0f);
    for (std::size_t c = 0; c < d; ++c) o[h * d + c] /= st[h].l;
  }
  // reference: the last of n positions attends to all n rows
  const auto ref = test::attention_ref(q, kr, vr, g, 1, d, n - 1, double(scale));
  CHECK(test::max_rel_diff(o, ref) <= kKernelRelTol);
}

template <class Arch>
void check_generic_shapes() {
  for (const std::size_t d : {1, 3, 8, 24, 40, 64, 67})
    for (const std::size_t g : {1, 3}) {
      check_generic<Arch, float>(g, d, d, 150, 150, 11);
      check_generic<Arch, float>(g, d, d + 5, 77, 20, 12);  // padded rows, short pieces
    }
  check_generic<Arch, f16>(2, 40, 40, 100, 33, 13);
  check_generic<Arch, bf16>(2, 24, 24, 100, 33, 14);
}

}  // namespace

TEST_CASE("generic tile routine equals the reference fold (any d, strides, pieces, fp32/fp16/bf16), on the default arch") {
  check_generic_shapes<simd::DefaultArch>();
}

#if XSIMD_WITH_SSE2
TEST_CASE("generic tile routine equals the reference fold on SSE2 (W = 4)") { check_generic_shapes<xsimd::sse2>(); }
#endif

TEST_CASE("generic tile routine: ranges split at multiples of W rows give bitwise the same state as one range") {
  // all arithmetic is local to a tile of W rows, so splits at tile boundaries change nothing
  constexpr std::size_t W = simd::kFloatLanes<>;
  for (const std::size_t d : {3, 24, 67}) {
    CAPTURE(d);
    const std::size_t n = 13 * W + 5, g = 2;
    const auto k = test::random_vector(n * d, 21), v = test::random_vector(n * d, 22);
    const auto q = test::random_vector(g * d, 23, -3.f, 3.f);
    const attention::detail::ContiguousRows<float> rows{k.data(), v.data(), d};
    std::vector<float> o1(g * d, 0.0f), o2(g * d, 0.0f);
    std::vector<PartialStats> s1(g), s2(g);
    const attention::QueryGroup q1{.q = q.data(), .g = g, .d = d, .scale = 0.2f, .o = o1.data(), .st = s1.data()};
    const attention::QueryGroup q2{.q = q.data(), .g = g, .d = d, .scale = 0.2f, .o = o2.data(), .st = s2.data()};
    attention::detail::accumulate_rows<simd::DefaultArch>(q1, rows, 0, n);
    for (std::size_t a = 0; a < n; a += W * (1 + a % 3))
      attention::detail::accumulate_rows<simd::DefaultArch>(q2, rows, a, std::min(n, a + W * (1 + a % 3)));
    CHECK(o1 == o2);
    for (std::size_t h = 0; h < g; ++h) {
      CHECK(s1[h].m == s2[h].m);
      CHECK(s1[h].l == s2[h].l);
    }
  }
}

TEST_CASE("generic tile routine: an empty range leaves the state unchanged") {
  const std::size_t d = 5;
  const auto k = test::random_vector(4 * d, 31), v = test::random_vector(4 * d, 32), q = test::random_vector(d, 33);
  std::vector<float> o(d, 0.5f);
  std::vector<PartialStats> st(1);
  st[0] = PartialStats{.m = 1.0f, .l = 2.0f};
  attention::detail::accumulate_rows<simd::DefaultArch>(
      attention::QueryGroup{.q = q.data(), .g = 1, .d = d, .scale = 1.0f, .o = o.data(), .st = st.data()},
      attention::detail::ContiguousRows<float>{k.data(), v.data(), d}, 2, 2);
  CHECK(o == std::vector<float>(d, 0.5f));
  CHECK(st[0].m == 1.0f);
  CHECK(st[0].l == 2.0f);
}
