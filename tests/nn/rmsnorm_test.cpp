#include "barato/nn/rmsnorm.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

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
  // eps = 1e-12 against mean(x²) = 1e-8 moves the RMS by a factor sqrt(1 + 1e-4) ≈ 1 + 5e-5, far inside
  // this bound; an eps that mattered (1e-5, the next check) changes the output by a factor of ~30.
  constexpr double kNegligibleEpsRelTol = 1e-3;
  CHECK(b[0] == doctest::Approx(1.0).epsilon(kNegligibleEpsRelTol));  // eps negligible: unit RMS
  CHECK(a[0] < 0.1f);                                 // eps dominates mean(x²) = 1e-8
  const std::vector<float> zero(8, 0.0f);
  std::vector<float> z(8, 7.0f);
  nn::rms_norm(zero, w, z);
  CHECK(z == zero);
}

TEST_CASE("rms_norm normalises each row of a block exactly as it normalises that row alone") {
  const std::size_t d = 17, n = 5;
  const auto w = test::random_vector(d, 7, 0.5f, 1.5f);
  const auto x = test::random_vector(n * d, 8);
  std::vector<float> y(n * d);
  nn::rms_norm(x, w, y, 1e-5f);
  for (std::size_t t = 0; t < n; ++t) {
    CAPTURE(t);
    const std::vector<float> xt(x.begin() + static_cast<std::ptrdiff_t>(t * d),
                                x.begin() + static_cast<std::ptrdiff_t>((t + 1) * d));
    const std::vector<float> yt(y.begin() + static_cast<std::ptrdiff_t>(t * d),
                                y.begin() + static_cast<std::ptrdiff_t>((t + 1) * d));
    CHECK(test::max_rel_diff(yt, test::rms_norm_ref(xt, w, 1e-5)) < test::kRmsNormRelTol);
    std::vector<float> single(d);
    nn::rms_norm(xt, w, single, 1e-5f);
    CHECK(single == yt);
  }
  auto inplace = x;
  nn::rms_norm(inplace, w, 1e-5f);
  CHECK(inplace == y);
}

TEST_CASE("rms_norm rejects bad shapes and eps") {
  std::vector<float> x(4), w(4), w3(3), y5(5), y(4);
  CHECK_THROWS_AS(nn::rms_norm(x, w3, y), shape_error);  // 4 is not a whole number of rows of 3
  CHECK_THROWS_AS(nn::rms_norm(x, w, y5), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(std::span<const float>{}, std::span<const float>{}, std::span<float>{}), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(x, std::span<const float>{}, y), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(x, w, y, 0.0f), value_error);
  CHECK_THROWS_AS(nn::rms_norm(x, w, y, -1.0f), value_error);
  // Sizes of at least one SIMD register: GCC 12's -Warray-bounds misfires on smaller constant-size buffers.
  const std::vector<float> w16(16, 1.0f);
  std::vector<float> x32(32), y48(48);
  CHECK_THROWS_AS(nn::rms_norm(x32, w16, y48), shape_error);
  CHECK_THROWS_AS(nn::rms_norm(y48, w16, x32), shape_error);
  CHECK_NOTHROW(nn::rms_norm(y48, w16, y48));  // three rows of 16
}
