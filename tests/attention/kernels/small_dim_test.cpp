#include "barato/attention/kernels/small_dim.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/kernels/dense.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

/// fp16 / bf16 storage rounds K and V; the reference sees the rounded values, so the fp32 tolerance holds.
constexpr double kKernelRelTol = test::kFp32RelTol;

/// Folds rows [r0, r1) of one KV head (g query heads, head dim d, element T) through `attention::accumulate`
/// in consecutive sub-ranges (split at `cuts`, as prefill tiles and causal limits do), and compares the
/// normalised output with the double reference over the same rows.
template <Element T>
void check_fold(std::size_t g, std::size_t d, std::size_t n, std::size_t r0, std::size_t r1, std::size_t max_piece,
                unsigned seed) {
  CAPTURE(g); CAPTURE(d); CAPTURE(n); CAPTURE(r0); CAPTURE(r1); CAPTURE(max_piece);
  const auto kf = test::random_vector(n * d, seed), vf = test::random_vector(n * d, seed + 1);
  std::vector<T> k(n * d), v(n * d);
  std::vector<float> kr(n * d), vr(n * d);  // the values the kernel sees
  for (std::size_t i = 0; i < n * d; ++i) {
    k[i] = static_cast<T>(kf[i]);
    v[i] = static_cast<T>(vf[i]);
    kr[i] = static_cast<float>(k[i]);
    vr[i] = static_cast<float>(v[i]);
  }
  const kv::DenseBlock<T> blk{k.data(), v.data(), n, d, 0};
  const auto q = test::random_vector(g * d, seed + 2, -3.f, 3.f);
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> o(g * d, 0.0f);
  std::vector<PartialStats> st(g);
  std::mt19937 gen(seed);
  for (std::size_t a = r0; a < r1;) {
    const std::size_t b = std::min(r1, a + 1 + gen() % max_piece);
    attention::accumulate(attention::QueryGroup{q.data(), g, d, scale, o.data(), st.data()}, blk, a, b);
    a = b;
  }
  for (std::size_t h = 0; h < g; ++h) {
    REQUIRE(st[h].l > 0.0f);
    for (std::size_t c = 0; c < d; ++c) o[h * d + c] /= st[h].l;
  }
  // reference: one query (the last of r1 − r0 positions) over rows [r0, r1), one KV head
  const std::vector<float> ks(kr.begin() + static_cast<std::ptrdiff_t>(r0 * d), kr.begin() + static_cast<std::ptrdiff_t>(r1 * d));
  const std::vector<float> vs(vr.begin() + static_cast<std::ptrdiff_t>(r0 * d), vr.begin() + static_cast<std::ptrdiff_t>(r1 * d));
  const auto ref = test::attention_ref(q, ks, vs, g, 1, d, r1 - r0 - 1, double(scale));
  CHECK(test::max_rel_diff(o, ref) <= kKernelRelTol);
}

}  // namespace

TEST_CASE("small-d dispatch: AVX-512 packs rows for d in {1, 2, 4, 8} with packed rows only") {
  constexpr bool avx512 = simd::kFloatLanes<> == 16 && simd::kHasAvx512<simd::DefaultArch>;
  for (const std::size_t d : {1, 2, 4, 8}) {
    CHECK(attention::detail::has_small_dim_kernel<simd::DefaultArch>(d, d) == avx512);
    CHECK_FALSE(attention::detail::has_small_dim_kernel<simd::DefaultArch>(d, d + 1));  // padded rows
  }
  for (const std::size_t d : {3, 12, 16, 24, 64}) CHECK_FALSE(attention::detail::has_small_dim_kernel<simd::DefaultArch>(d, d));
}

TEST_CASE("small-d kernel equals the double reference (d = 1, 2, 4, 8; generic d = 12, 24, 40; n not a multiple of 16)") {
  for (const std::size_t d : {1, 2, 4, 8, 12, 24, 40}) {
    for (const std::size_t n : {1, 7, 15, 16, 17, 33, 127, 128, 129, 300}) {
      check_fold<float>(1, d, n, 0, n, n, 1);           // one range
      check_fold<float>(2, d, n, 0, n, 40, 2);          // consecutive pieces
    }
    check_fold<float>(4, d, 500, 0, 500, 200, 3);       // GQA group of 4, chunks of 128 rows
    check_fold<float>(2, d, 300, 37, 211, 64, 4);       // a sub-range [r0, r1)
    check_fold<float>(8, d, 70, 5, 70, 3, 5);           // tiny pieces (causal limits of a prefill tile)
  }
}

TEST_CASE("small-d kernel with fp16 and bf16 blocks") {
  for (const std::size_t d : {2, 4, 8}) {
    check_fold<f16>(2, d, 200, 0, 200, 77, 11);
    check_fold<bf16>(2, d, 131, 3, 131, 50, 12);
    check_fold<f16>(1, d, 9, 0, 9, 9, 13);
    check_fold<bf16>(4, d, 45, 0, 45, 45, 14);
  }
}

TEST_CASE("small-d kernel: large scores (running max rescale across chunks) stay finite and exact") {
  // keys that grow along the sequence make every chunk raise the running max
  const std::size_t d = 8, n = 400, g = 2;
  std::vector<float> k(n * d), v(n * d);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < d; ++c) {
      k[r * d + c] = 0.05f * static_cast<float>(r) * (c % 2 == 0 ? 1.0f : -0.5f);
      v[r * d + c] = std::sin(0.1f * static_cast<float>(r + c));
    }
  const auto q = test::random_vector(g * d, 31, 0.5f, 2.0f);
  const kv::DenseBlock<float> blk{k.data(), v.data(), n, d, 0};
  std::vector<float> o(g * d, 0.0f);
  std::vector<PartialStats> st(g);
  attention::accumulate(attention::QueryGroup{q.data(), g, d, 1.0f, o.data(), st.data()}, blk, 0, n);
  for (std::size_t h = 0; h < g; ++h)
    for (std::size_t c = 0; c < d; ++c) o[h * d + c] /= st[h].l;
  const auto ref = test::attention_ref(q, k, v, g, 1, d, n - 1, 1.0);
  CHECK(test::max_rel_diff(o, ref) <= kKernelRelTol);
}

TEST_CASE("decode and causal prefill through attend at d = 8 (stories260K shape: 8 query heads over 4 KV heads)") {
  const std::size_t hq = 8, hkv = 4, d = 8, past = 45, P = 150;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  const auto k = test::random_vector((past + P) * hkv * d, 41);
  const auto v = test::random_vector((past + P) * hkv * d, 42);
  const auto q = test::random_vector(P * hq * d, 43, -2.f, 2.f);
  kv::Contiguous<float> cache(hkv, d, past + P);
  cache.append(k, v);
  const auto ref = test::attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
  std::vector<float> out(q.size());
  attention::attend(q, cache, heads, out);  // the P queries after `past` cached positions
  CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);

  const std::vector<float> q1(q.end() - static_cast<std::ptrdiff_t>(hq * d), q.end());
  std::vector<float> out1(hq * d);
  attention::decode(q1, cache, heads, out1);
  const std::vector<float> ref1(ref.end() - static_cast<std::ptrdiff_t>(hq * d), ref.end());
  CHECK(test::max_rel_diff(out1, ref1) <= test::kFp32RelTol);
}

TEST_CASE("small-d kernel: ranges split at multiples of 16 rows give bitwise the same state as one range") {
  // what makes paged blocks of 16 rows and prefill tiles of 64 rows equal to one contiguous block
  for (const std::size_t d : {1, 2, 4, 8}) {
    CAPTURE(d);
    const std::size_t n = 300, g = 2;
    const auto k = test::random_vector(n * d, 51), v = test::random_vector(n * d, 52);
    const auto q = test::random_vector(g * d, 53, -3.f, 3.f);
    const kv::DenseBlock<float> blk{k.data(), v.data(), n, d, 0};
    std::vector<float> o1(g * d, 0.0f), o2(g * d, 0.0f);
    std::vector<PartialStats> s1(g), s2(g);
    attention::accumulate(attention::QueryGroup{q.data(), g, d, 0.3f, o1.data(), s1.data()}, blk, 0, n);
    for (std::size_t a = 0; a < n; a += 16 * (1 + a % 5))
      attention::accumulate(attention::QueryGroup{q.data(), g, d, 0.3f, o2.data(), s2.data()}, blk, a,
                            std::min(n, a + 16 * (1 + a % 5)));
    CHECK(o1 == o2);
    for (std::size_t h = 0; h < g; ++h) {
      CHECK(s1[h].m == s2[h].m);
      CHECK(s1[h].l == s2[h].l);
    }
  }
}
