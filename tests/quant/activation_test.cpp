#include "barato/quant/activation.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "barato/core/memory.hpp"
#include "quant/reference.hpp"
#include "support/alloc_counter.hpp"
#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

namespace {
/// Relative tolerance of y = s_r · s_x · D (exact int32 D; two fp32 multiplies).
constexpr double kScaleProductTol = 1e-6;

std::int64_t dot_ref(const QuantizedMatrix<Int8PerRow<>>& m, std::size_t r, const std::vector<std::int8_t>& x) {
  std::int64_t s = 0;
  for (std::size_t c = 0; c < m.cols(); ++c) s += std::int64_t{Int8PerRow<>::integer(m.code(r, c))} * x[c];
  return s;
}
}  // namespace

TEST_CASE("per-token activation quantization: absmax / 127, round half to even, zeros stay zeros") {
  std::vector<float> x{0.5f, -1.27f, 0.005f, 0.015f};
  std::vector<std::int8_t> q(4);
  const float s = quantize_activation(x, q);
  CHECK(s == 1.27f / 127.0f);
  CHECK(q[1] == -127);
  CHECK(q[0] == static_cast<std::int8_t>(std::nearbyint(0.5f / s)));
  std::vector<float> z(5, 0.f);
  std::vector<std::int8_t> qz(5, 3);
  CHECK(quantize_activation(z, qz) == 0.f);
  for (auto v : qz) CHECK(v == 0);
  x[2] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS((void)quantize_activation(x, q), value_error);
  CHECK_THROWS_AS((void)quantize_activation(x, std::span<std::int8_t>(qz)), shape_error);
}

TEST_CASE("per-token activation quantization: the vectorized loops give the scalar rule's codes and name the first non-finite x") {
  for (const std::size_t n : {1, 15, 16, 17, 70, 300, 4864}) {
    CAPTURE(n);
    auto x = barato::test::random_vector(n, 40 + unsigned(n), -3.f, 3.f);
    // halves of the step exercise round-half-to-even
    for (std::size_t i = 1; i < n; i += 7) x[i] = (static_cast<float>(i % 50) + 0.5f) * (3.f / 127.f);
    std::vector<std::int8_t> q(n);
    const float s = quantize_activation(x, q);
    float m = 0.f;
    for (const float v : x) m = std::fabs(v) > m ? std::fabs(v) : m;
    REQUIRE(s == m / 127.0f);
    for (std::size_t i = 0; i < n; ++i) {
      float v = std::nearbyint(x[i] / s);
      v = v > 127.f ? 127.f : (v < -127.f ? -127.f : v);
      if (q[i] != static_cast<std::int8_t>(v)) REQUIRE(int(q[i]) == int(v));
    }
  }
  auto x = barato::test::random_vector(300, 49, -3.f, 3.f);
  std::vector<std::int8_t> q(300);
  x[37] = std::numeric_limits<float>::quiet_NaN();
  x[200] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS((void)quantize_activation(x, q), doctest::Contains("x[37]"), value_error);
  x[37] = 1.f;
  CHECK_THROWS_WITH_AS((void)quantize_activation(x, q), doctest::Contains("x[200]"), value_error);
}

TEST_CASE("int8 x int8 gemv: exact int32 products, every arch's Int8Dot agrees with the scalar reference") {
  for (std::size_t cols : {std::size_t{64}, std::size_t{896}, std::size_t{1000}, std::size_t{37}}) {
    CAPTURE(cols);
    const std::size_t rows = 70;
    const auto w = ref::normal_vector(rows * cols, 2, 0.1f);
    const QuantizedMatrix<Int8PerRow<>> m(rows, cols, w);
    const auto x = barato::test::random_vector(cols, 3, -3.f, 3.f);
    std::vector<std::int8_t> xq(cols);
    const float sx = quantize_activation(x, xq);
    std::int32_t sum_x = 0;
    for (auto v : xq) sum_x += v;
    std::vector<float> y(rows), y2(rows);
    gemv_w8a8(m.view(), std::span<const std::int8_t>(xq), sx, y, 1);
    gemv_w8a8(m.view(), std::span<const std::int8_t>(xq), sx, y2, 2);
    for (std::size_t r = 0; r < rows; ++r) {
      const auto d = dot_ref(m, r, xq);
      CHECK(Int8Dot<simd::DefaultArch>::dot(reinterpret_cast<const std::int8_t*>(m.view().row(r)), xq.data(), cols, sum_x) == d);
      const double expect = double(static_cast<float>(m.scales()[r])) * double(sx) * double(d);
      CHECK(std::fabs(y[r] - expect) <= kScaleProductTol * std::fabs(expect) + barato::test::kTiny);
      CHECK(y2[r] == y[r]);
    }
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
TEST_CASE("VNNI Int8Dot::dot_rows: one or two rows against 1…4 vectors give the exact int32 products, the same as dot_n") {
  using D = Int8Dot<xsimd::avx512bw>;
  for (std::size_t cols : {std::size_t{37}, std::size_t{128}, std::size_t{896}, std::size_t{1000}}) {
    CAPTURE(cols);
    const std::size_t rows = 5;
    const QuantizedMatrix<Int8PerRow<>> m(rows, cols, ref::normal_vector(rows * cols, 4, 0.1f));
    std::vector<std::vector<std::int8_t>> xq(4, std::vector<std::int8_t>(cols));
    Int8Activation acts[4];
    for (std::size_t j = 0; j < 4; ++j) {
      const auto x = barato::test::random_vector(cols, 5 + unsigned(j), -3.f, 3.f);
      acts[j].sx = quantize_activation(x, xq[j]);
      acts[j].q = xq[j].data();
      for (auto v : xq[j]) acts[j].sum += v;
    }
    const auto* stop = reinterpret_cast<const std::int8_t*>(m.view().codes + rows * m.view().row_bytes);
    for (std::size_t r = 0; r + 1 < rows; ++r) {
      CAPTURE(r);
      const std::int8_t* w[2] = {reinterpret_cast<const std::int8_t*>(m.view().row(r)),
                                 reinterpret_cast<const std::int8_t*>(m.view().row(r + 1))};
      std::int32_t two[8], one[4];
      D::dot_rows<2, 4>(w, acts, cols, two, stop);
      D::dot_rows<1, 3>(w, acts, cols, one, nullptr);
      for (std::size_t j = 0; j < 4; ++j) {
        CHECK(two[j] == dot_ref(m, r, xq[j]));
        CHECK(two[4 + j] == dot_ref(m, r + 1, xq[j]));
        if (j < 3) CHECK(one[j] == two[j]);
      }
    }
  }
}
#endif

TEST_CASE("W8A8Linear is a LinearLayer close to fp32 on well-behaved activations, and allocates nothing per apply") {
  const std::size_t R = 128, C = 256;
  const auto w = ref::normal_vector(R * C, 4, 0.05f);
  CountingResource mr;
  const W8A8Linear<> lin(R, C, w, &mr);
  const auto x = barato::test::random_vector(2 * C, 5);
  std::vector<float> y(2 * R);
  const auto before = mr.allocations();
  lin.apply_batch(x, y, 2, 1);
  CHECK(mr.allocations() == before);
  const auto exact = ref::matvec(w, R, C, x.data());
  double num = 0, den = 0;
  for (std::size_t r = 0; r < R; ++r) {
    num += (y[r] - exact[r]) * (y[r] - exact[r]);
    den += exact[r] * exact[r];
  }
  CHECK(std::sqrt(num / den) < 0.02);  // two 8-bit roundings: about 1 % relative error
}

TEST_CASE("W8A8Linear::apply_batch rows equal apply bitwise for n = 1 … 70 and 1 or 2 threads, and allocate nothing after reserve") {
  const auto check = [&]<class Arch>(Arch) {
    const std::size_t R = 272, C = 300;  // two full 128-column chunks and a 44-column masked tail; rows and
                                         // work for two threads from n ≈ 12 (quant/gemv.hpp useful_threads)
    const auto w = ref::normal_vector(R * C, 6, 0.05f);
    const W8A8Linear<f16, Arch> lin(R, C, w);
    constexpr std::size_t kMaxN = 70;
    // The two-thread calls must split at the largest n (C is at most the row's bytes, and more bytes
    // only add work), so a change of the threshold cannot quietly leave the split untested.
    REQUIRE(quant::detail::useful_threads(R, C, kMaxN, C, 2) == 2);
    const auto x = barato::test::random_vector(kMaxN * C, 7, -3.f, 3.f);
    std::vector<float> single(kMaxN * R), yb(kMaxN * R);
    for (std::size_t t = 0; t < kMaxN; ++t)
      lin.apply(std::span<const float>(x).subspan(t * C, C), std::span<float>(single).subspan(t * R, R), 1);
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      for (std::size_t n = 1; n <= kMaxN; ++n) {
        CAPTURE(n);
        std::fill(yb.begin(), yb.end(), -1.f);
        lin.apply_batch(std::span<const float>(x).first(n * C), std::span<float>(yb).first(n * R), n, threads);
        for (std::size_t i = 0; i < n * R; ++i)
          if (yb[i] != single[i]) REQUIRE(yb[i] == single[i]);
      }
    }
    lin.reserve(kMaxN);
    barato::test::CountAllocations count;
    lin.apply_batch(x, yb, kMaxN, 1);
    lin.apply(std::span<const float>(x).first(C), std::span<float>(yb).first(R), 1);
    CHECK(count.count() == 0);
  };
  check(simd::DefaultArch{});
  check(barato::test::PortableArch{});
}
