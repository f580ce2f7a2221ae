#include "barato/nn/rmsnorm.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "barato/core/memory.hpp"
#include "support/nn_reference.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("rms_norm matches the double reference at odd sizes, in and out of place") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{64}, std::size_t{172}, std::size_t{4864}}) {
    for (const float eps : {nn::kRmsNormEps, 1e-6f, 0.5f}) {
      CAPTURE(n);
      CAPTURE(eps);
      const auto x = test::random_vector(n, 5, -3.0f, 3.0f);
      const auto w = test::random_vector(n, 6, 0.5f, 1.5f);
      const auto ref = test::rms_norm_ref(x, w, eps);
      std::vector<float> y(n);
      nn::rms_norm(x, w, y, eps);
      CHECK(test::max_rel_diff(y, ref) < test::kRmsNormRelTol);
      auto inplace = x;
      nn::rms_norm(inplace, w, eps);
      CHECK(inplace == y);
    }
  }
}

TEST_CASE("rms_norm: eps matters for tiny inputs; zero input gives zero output") {
  const std::vector<float> x(8, 1e-4f), w(8, 1.0f);
  std::vector<float> a(8), b(8);
  nn::rms_norm(x, w, a, 1e-5f);
  nn::rms_norm(x, w, b, 1e-12f);
  CHECK(test::max_rel_diff(a, test::rms_norm_ref(x, w, 1e-5)) < test::kRmsNormRelTol);
  CHECK(b[0] == doctest::Approx(1.0).epsilon(1e-3));  // eps negligible: unit RMS
  CHECK(a[0] < 0.1f);                                 // eps dominates mean(x²) = 1e-8
  const std::vector<float> zero(8, 0.0f);
  std::vector<float> z(8, 7.0f);
  nn::rms_norm(zero, w, z);
  CHECK(z == zero);
}

TEST_CASE("RmsNorm owns its gain, applies to batches, and allocates through the resource") {
  CountingResource mr;
  {
    const std::size_t d = 17, n = 5;
    const auto w = test::random_vector(d, 7, 0.5f, 1.5f);
    const nn::RmsNorm norm(w, 1e-5f, &mr);
    CHECK(norm.dim() == d);
    CHECK(norm.bytes() == d * sizeof(float));
    CHECK(mr.current() == d * sizeof(float));
    const auto x = test::random_vector(n * d, 8);
    std::vector<float> y(n * d);
    norm.apply_batch(x, y, n);
    for (std::size_t t = 0; t < n; ++t) {
      const std::vector<float> xt(x.begin() + static_cast<std::ptrdiff_t>(t * d),
                                  x.begin() + static_cast<std::ptrdiff_t>((t + 1) * d));
      const std::vector<float> yt(y.begin() + static_cast<std::ptrdiff_t>(t * d),
                                  y.begin() + static_cast<std::ptrdiff_t>((t + 1) * d));
      CHECK(test::max_rel_diff(yt, test::rms_norm_ref(xt, w, 1e-5)) < test::kRmsNormRelTol);
      std::vector<float> single(d);
      norm.apply(xt, single);
      CHECK(single == yt);
    }
    auto inplace = x;
    norm.apply_batch(inplace, inplace, n);
    CHECK(inplace == y);
  }
  CHECK(mr.current() == 0);
}

TEST_CASE("rms_norm / RmsNorm reject bad shapes and eps") {
  std::vector<float> x(4), w(4), w3(3), y5(5), y(4);
  CHECK_THROWS_AS(nn::rms_norm(x, w3, y), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(x, w, y5), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(std::span<const float>{}, std::span<const float>{}, std::span<float>{}), shape_error);
  CHECK_THROWS_AS(nn::RmsNorm(std::span<const float>{}), shape_error);
  CHECK_THROWS_AS(nn::RmsNorm(w, 0.0f), value_error);
  CHECK_THROWS_AS(nn::RmsNorm(w, -1.0f), value_error);
  // Sizes of at least one SIMD register: GCC 12's -Warray-bounds misfires on smaller constant-size buffers.
  const std::vector<float> w16(16, 1.0f);
  const nn::RmsNorm norm(w16);
  std::vector<float> x32(32), y48(48);
  CHECK_THROWS_AS(norm.apply_batch(x32, y48, 2), shape_error);
  CHECK_THROWS_AS(norm.apply_batch(y48, x32, 2), shape_error);
  CHECK_THROWS_AS(norm.apply(x32, y48), shape_error);
}
