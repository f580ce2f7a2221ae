#include "barato/attention/kernels/dense.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "barato/attention/kernels/generic.hpp"
#include "barato/attention/partial.hpp"
#include "barato/kv/block.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

/// The normalised output of `accumulate` over rows [0, n) of a dense block (head dim d, row stride
/// `stride`), g query heads.
std::vector<float> fold_dense(std::size_t g, std::size_t d, std::size_t stride, std::size_t n, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& q) {
  const kv::DenseBlock<float> blk{k.data(), v.data(), n, stride, 0};
  std::vector<float> o(g * d, 0.0f);
  std::vector<PartialStats> st(g);
  attention::accumulate(attention::QueryGroup{.q = q.data(), .g = g, .d = d, .scale = 0.3f, .o = o.data(), .st = st.data()},
                        blk, 0, n);
  for (std::size_t h = 0; h < g; ++h)
    for (std::size_t c = 0; c < d; ++c) o[h * d + c] /= st[h].l;
  return o;
}

}  // namespace

TEST_CASE("dense accumulate: every dispatch branch equals the reference (fixed-dim, small-d, 8-lane, generic)") {
  // d = 32, 48, 64, 96, 128: fixed-dim (multiples of the lanes up to 128); d = 8 packed: small-d on
  // AVX-512; d = 8 padded, 24, 40: 8 lanes on AVX-512; 67, 144: generic
  for (const std::size_t d : {64, 128, 32, 48, 96, 8, 24, 40, 67, 144})
    for (const std::size_t pad : {0, 3}) {
      CAPTURE(d);
      CAPTURE(pad);
      const std::size_t g = 3, n = 190, stride = d + pad;
      const auto kf = test::random_vector(n * stride, 1), vf = test::random_vector(n * stride, 2);
      const auto q = test::random_vector(g * d, 3, -2.f, 2.f);
      std::vector<float> kp(n * d), vp(n * d);
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t c = 0; c < d; ++c) {
          kp[r * d + c] = kf[r * stride + c];
          vp[r * d + c] = vf[r * stride + c];
        }
      const auto got = fold_dense(g, d, stride, n, kf, vf, q);
      const auto ref = test::attention_ref(q, kp, vp, g, 1, d, n - 1, 0.3);
      CHECK(test::max_rel_diff(got, ref) <= test::kFp32RelTol);
    }
}

TEST_CASE("dense accumulate at d = 40 on AVX-512 is the generic routine on the 8-lane arch, bit for bit") {
  using Half = simd::HalfWidthArch<simd::DefaultArch>;
  if constexpr (!std::is_void_v<Half>) {
    const std::size_t g = 2, d = 40, n = 100;
    const auto k = test::random_vector(n * d, 4), v = test::random_vector(n * d, 5), q = test::random_vector(g * d, 6);
    std::vector<float> o1(g * d, 0.0f), o2(g * d, 0.0f);
    std::vector<PartialStats> s1(g), s2(g);
    attention::accumulate(attention::QueryGroup{.q = q.data(), .g = g, .d = d, .scale = 0.3f, .o = o1.data(), .st = s1.data()},
                          kv::DenseBlock<float>{k.data(), v.data(), n, d, 0}, 0, n);
    attention::detail::accumulate_rows<Half>(
        attention::QueryGroup{.q = q.data(), .g = g, .d = d, .scale = 0.3f, .o = o2.data(), .st = s2.data()},
        attention::detail::ContiguousRows<float>{k.data(), v.data(), d}, 0, n);
    CHECK(o1 == o2);
  } else {
    MESSAGE("no 8-lane fallback arch for this build (not AVX-512)");
  }
}
