#include "barato/simd/ops.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

constexpr double kOpsRelTol = 1e-5;  // fp32 vector op vs double scalar loop (summation order)

// Lengths around every vector boundary of Arch: empty, below one batch, 1..4 batches ± 1, long.
template <class Arch>
std::vector<std::size_t> lengths() {
  constexpr std::size_t W = simd::kFloatLanes<Arch>;
  return {0, 1, 2, W - 1, W, W + 1, 2 * W + 3, 4 * W - 1, 4 * W, 4 * W + 1, 5 * W + 7, 1000, 4099};
}

template <Element T>
std::vector<T> as(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<T>(x[i]);
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("dot equals the scalar reference for fp32 / fp16 / bf16 operands, with tails, on every arch", T, float, f16, bf16) {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : lengths<Arch>()) {
      CAPTURE(n);
      const auto a = test::random_vector(n, 1);
      const auto b = as<T>(test::random_vector(n, 2));
      double ref = 0, mag = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ref += double(a[i]) * double(static_cast<float>(b[i]));
        mag += std::abs(double(a[i]) * double(static_cast<float>(b[i])));
      }
      CHECK(std::abs(double(simd::dot<T, Arch>(a.data(), b.data(), n)) - ref) <= kOpsRelTol * (mag + test::kTiny));
    }
  });
}

TEST_CASE_TEMPLATE("axpy equals the scalar reference, and leaves elements past n alone, on every arch", T, float, f16, bf16) {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : lengths<Arch>()) {
      CAPTURE(n);
      const auto x = as<T>(test::random_vector(n, 3));
      auto y = test::random_vector(n + 3, 4);
      const auto y0 = y;
      simd::axpy<T, Arch>(0.75f, x.data(), y.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(y[i] == doctest::Approx(y0[i] + 0.75 * double(static_cast<float>(x[i]))).epsilon(kOpsRelTol));
      for (std::size_t i = n; i < n + 3; ++i) REQUIRE(y[i] == y0[i]);
    }
  });
}

TEST_CASE("scale and max equal the scalar loop, with tails, on every arch") {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : lengths<Arch>()) {
      CAPTURE(n);
      auto y = test::random_vector(n + 2, 5, -50.f, 50.f);
      const auto y0 = y;
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t i = 0; i < n; ++i) m = std::max(m, y[i]);
      CHECK(simd::max<Arch>(y.data(), n) == m);  // exact: max does not round
      simd::scale<Arch>(-0.5f, y.data(), n);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == -0.5f * y0[i]);
      CHECK(y[n] == y0[n]);
    }
    std::vector<float> one = {-3.0f};
    CHECK(simd::max<Arch>(one.data(), 1) == -3.0f);
    CHECK(simd::max<Arch>(one.data(), 0) == -std::numeric_limits<float>::infinity());
  });
}

TEST_CASE("softmax equals the double reference, sums to one, returns the normaliser, survives large inputs, on every arch") {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : lengths<Arch>()) {
      if (n == 0) continue;
      CAPTURE(n);
      auto x = test::random_vector(n, 6, -30.f, 30.f);
      x[n / 2] = 80.0f;  // exp(80) overflows fp32: the max subtraction must handle it
      const auto x0 = x;
      const float l = simd::softmax<Arch>(x.data(), n);
      double m = -INFINITY, sum = 0;
      for (float v : x0) m = std::max(m, double(v));
      for (float v : x0) sum += std::exp(double(v) - m);
      CHECK(l == doctest::Approx(sum).epsilon(kOpsRelTol));
      double total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(x[i] == doctest::Approx(std::exp(double(x0[i]) - m) / sum).epsilon(kOpsRelTol));
        total += x[i];
      }
      CHECK(total == doctest::Approx(1.0).epsilon(kOpsRelTol));
    }
    CHECK(simd::softmax<Arch>(nullptr, 0) == 0.0f);
  });
}

TEST_CASE("softmax edge cases: equal inputs, -inf entries, NaN / +inf / all -inf propagate NaN, subnormals, on every arch") {
  constexpr float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : lengths<Arch>()) {
      if (n == 0) continue;
      CAPTURE(n);
      std::vector<float> eq(n, 3.5f);
      CHECK(simd::softmax<Arch>(eq.data(), n) == static_cast<float>(n));
      for (const float v : eq) CHECK(v == 1.0f / static_cast<float>(n));
      std::vector<float> masked(n, -kInf);
      masked[n - 1] = 0.25f;  // the one finite entry, in the scalar tail or the last vector
      CHECK(simd::softmax<Arch>(masked.data(), n) == 1.0f);
      for (std::size_t i = 0; i + 1 < n; ++i) CHECK(masked[i] == 0.0f);
      CHECK(masked[n - 1] == 1.0f);
      std::vector<float> sub(n, std::numeric_limits<float>::denorm_min());
      sub[0] = 0.0f;
      CHECK(std::isfinite(simd::softmax<Arch>(sub.data(), n)));
      for (const float v : sub) CHECK(std::abs(v - 1.0f / static_cast<float>(n)) <= 1e-6f);
      for (const float bad : {kNaN, kInf}) {
        for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {  // vector body and scalar tail
          auto x = test::random_vector(n, 8, -3.f, 3.f);
          x[at] = bad;
          CHECK(std::isnan(simd::softmax<Arch>(x.data(), n)));
          for (const float v : x) CHECK(std::isnan(v));
        }
      }
      std::vector<float> none(n, -kInf);
      CHECK(std::isnan(simd::softmax<Arch>(none.data(), n)));
      for (const float v : none) CHECK(std::isnan(v));
    }
  });
}
