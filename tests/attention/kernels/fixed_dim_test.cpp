#include "barato/attention/kernels/fixed_dim.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "barato/attention/partial.hpp"
#include "barato/kv/block.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

constexpr double kKernelRelTol = 1e-5;  // fp32 kernel vs double reference fold

/// Reference: fold rows [r0, r1) of a dense block into (o, st) by the definition, in double.
/// Both the kernel's and this state are normalised before comparing, and m is compared directly.
template <Element T>
void fold_ref(const float* q, std::size_t g, std::size_t d, float scale, const kv::DenseBlock<T>& blk, std::size_t r0,
              std::size_t r1, std::vector<double>& o, std::vector<double>& m, std::vector<double>& l) {
  for (std::size_t h = 0; h < g; ++h) {
    std::vector<double> s;
    for (std::size_t r = r0; r < r1; ++r) {
      double acc = 0;
      for (std::size_t c = 0; c < d; ++c) acc += double(q[h * d + c]) * double(static_cast<float>(blk.k[r * blk.stride + c]));
      s.push_back(acc * scale);
    }
    double mn = m[h];
    for (double x : s) mn = std::max(mn, x);
    const double a = std::isinf(m[h]) ? 0.0 : std::exp(m[h] - mn);
    l[h] *= a;
    for (std::size_t c = 0; c < d; ++c) o[h * d + c] *= a;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const double e = std::exp(s[i] - mn);
      l[h] += e;
      for (std::size_t c = 0; c < d; ++c) o[h * d + c] += e * double(static_cast<float>(blk.v[(r0 + i) * blk.stride + c]));
    }
    m[h] = mn;
  }
}

/// The fixed-dimension kernel over the rows of a dense block (what the dense `accumulate` runs for d = D).
template <std::size_t D, Element T>
void fold_fixed(const float* q, std::size_t g, float scale, const kv::DenseBlock<T>& blk, std::size_t r0, std::size_t r1,
                float* o, PartialStats* st) {
  attention::detail::accumulate_fixed_dim<D, simd::DefaultArch>(attention::QueryGroup{q, g, D, scale, o, st},
                                                                attention::detail::ContiguousRows<T>{blk.k, blk.v, blk.stride},
                                                                r0, r1);
}

template <std::size_t D, Element T>
void check_fixed(std::size_t g, std::size_t n, std::size_t stride, unsigned seed) {
  CAPTURE(D); CAPTURE(g); CAPTURE(n); CAPTURE(stride);
  std::vector<T> k(n * stride), v(n * stride);
  const auto kf = test::random_vector(n * stride, seed), vf = test::random_vector(n * stride, seed + 1);
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<T>(kf[i]);
    v[i] = static_cast<T>(vf[i]);
  }
  const kv::DenseBlock<T> blk{k.data(), v.data(), n, stride, 0};
  const auto q = test::random_vector(g * D, seed + 2, -3.f, 3.f);
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> o(g * D, 0.0f);
  std::vector<PartialStats> st(g);
  std::vector<double> ro(g * D, 0.0), rm(g, -INFINITY), rl(g, 0.0);
  // several consecutive ranges, as attend / split-K / a paged walk call it
  std::mt19937 gen(seed);
  std::size_t r0 = 0;
  while (r0 < n) {
    const std::size_t r1 = std::min(n, r0 + 1 + gen() % 150);
    fold_fixed<D>(q.data(), g, scale, blk, r0, r1, o.data(), st.data());
    fold_ref(q.data(), g, D, scale, blk, r0, r1, ro, rm, rl);
    r0 = r1;
  }
  std::vector<float> got(g * D), want(g * D);
  for (std::size_t h = 0; h < g; ++h) {
    CHECK(st[h].m == doctest::Approx(rm[h]).epsilon(kKernelRelTol));
    for (std::size_t c = 0; c < D; ++c) {
      got[h * D + c] = o[h * D + c] / st[h].l;
      want[h * D + c] = static_cast<float>(ro[h * D + c] / rl[h]);
    }
  }
  CHECK(test::max_rel_diff(got, want) <= kKernelRelTol);
}

}  // namespace

TEST_CASE("fixed-dimension kernel equals the reference fold (d = 64, 128; fp32/fp16/bf16; GQA groups; strides)") {
  for (const std::size_t n : {1, 15, 16, 17, 63, 64, 65, 500}) {
    check_fixed<64, float>(1, n, 64, 1);
    check_fixed<128, float>(1, n, 128, 2);
  }
  check_fixed<64, float>(4, 300, 96, 3);  // a padded row stride
  check_fixed<128, float>(3, 257, 128, 4);
  check_fixed<64, f16>(2, 200, 64, 5);
  check_fixed<128, bf16>(2, 130, 128, 6);
}

TEST_CASE("fixed-dimension kernel at every head dimension it serves: multiples of 16 up to 128") {
  constexpr std::size_t W = simd::kFloatLanes<>;
  // chunks of 64 rows (d ≤ 64), 32 (d = 80 … 128): ranges across several chunks, GQA groups, a padded stride
  auto each = [&]<std::size_t D>() {
    if constexpr (D % W == 0) {
      check_fixed<D, float>(2, 150, D, 30 + D);
      check_fixed<D, float>(1, 67, D + 8, 31 + D);
      check_fixed<D, f16>(3, 100, D, 32 + D);
      CHECK(attention::detail::has_fixed_dim_kernel<simd::DefaultArch>(D));
    }
  };
  each.template operator()<16>();
  each.template operator()<32>();
  each.template operator()<48>();
  each.template operator()<80>();
  each.template operator()<96>();
  each.template operator()<112>();
  // and no other: the dispatch takes each d ≤ 128 that W divides, and nothing else
  std::size_t served = 0;
  for (std::size_t d = 0; d <= 300; ++d) {
    const bool has = attention::detail::has_fixed_dim_kernel<simd::DefaultArch>(d);
    CHECK(has == (d > 0 && d % 16 == 0 && d % W == 0 && d <= 128));
    std::size_t seen = 0;
    const bool ran = attention::detail::with_fixed_dim<simd::DefaultArch>(d, [&]<std::size_t D>() { seen = D; });
    CHECK(ran == has);
    CHECK(seen == (has ? d : 0));
    served += has;
  }
  CHECK(served == (W <= 16 ? 8 : 128 / W));
}

TEST_CASE("chunk rows of the fixed-dimension kernel: powers of two within [W, 64] and the L1 budget") {
  constexpr std::size_t W = simd::kFloatLanes<>;
  using attention::detail::kFixedChunkRowsFor;
  static_assert(kFixedChunkRowsFor<64, float, W> == 64 && kFixedChunkRowsFor<128, float, W> == 32);
  static_assert(kFixedChunkRowsFor<96, float, W> == 32 && kFixedChunkRowsFor<48, float, W> == 64);
  static_assert(kFixedChunkRowsFor<128, f16, W> == 64 && kFixedChunkRowsFor<112, bf16, W> == 64);
  auto check = [&]<std::size_t D, class T>() {
    constexpr std::size_t R = kFixedChunkRowsFor<D, T, W>;
    CHECK(std::has_single_bit(R));
    CHECK(R >= W);
    CHECK(R <= attention::detail::kFixedChunkRows);
    CHECK(R * 2 * D * sizeof(T) <= attention::detail::kFixedChunkBytes);
    CHECK((R == attention::detail::kFixedChunkRows || 2 * R * 2 * D * sizeof(T) > attention::detail::kFixedChunkBytes));
  };
  check.template operator()<16, float>();
  check.template operator()<80, float>();
  check.template operator()<112, float>();
  check.template operator()<128, float>();
  check.template operator()<96, f16>();
}

TEST_CASE("ranges split at multiples of the chunk size give bitwise the same state as one range") {
  constexpr std::size_t D = 128, W = simd::kFloatLanes<>;
  constexpr std::size_t R = attention::detail::kFixedChunkRowsFor<D, float, W>;
  static_assert(R % W == 0 && R >= W && R <= attention::detail::kFixedChunkRows);
  const std::size_t n = 5 * R + 7, g = 2;
  const auto k = test::random_vector(n * D, 21), v = test::random_vector(n * D, 22);
  const auto q = test::random_vector(g * D, 23, -3.f, 3.f);
  const kv::DenseBlock<float> blk{k.data(), v.data(), n, D, 0};
  std::vector<float> o1(g * D, 0.0f), o2(g * D, 0.0f);
  std::vector<PartialStats> s1(g), s2(g);
  fold_fixed<D>(q.data(), g, 0.1f, blk, 0, n, o1.data(), s1.data());
  fold_fixed<D>(q.data(), g, 0.1f, blk, 0, 2 * R, o2.data(), s2.data());
  fold_fixed<D>(q.data(), g, 0.1f, blk, 2 * R, 3 * R, o2.data(), s2.data());
  fold_fixed<D>(q.data(), g, 0.1f, blk, 3 * R, n, o2.data(), s2.data());
  CHECK(o1 == o2);
  for (std::size_t h = 0; h < g; ++h) {
    CHECK(s1[h].m == s2[h].m);
    CHECK(s1[h].l == s2[h].l);
  }
}
