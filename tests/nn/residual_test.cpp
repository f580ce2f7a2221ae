#include "barato/nn/residual.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "support/reference.hpp"

using namespace barato;

namespace {
// Each element is one fp32 addition, so every arch must give exactly the scalar sum.
template <class Arch>
void check_exact_sum() {
  for (const std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{64}, std::size_t{261}}) {
    CAPTURE(n);
    const auto x0 = test::random_vector(n, 51, -4.0f, 4.0f);
    const auto y = test::random_vector(n, 52, -1e-3f, 1e-3f);
    std::vector<float> x = x0;
    nn::add_inplace<Arch>(x, y);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(x[i] == x0[i] + y[i]);
  }
}
}  // namespace

TEST_CASE("add_inplace is the elementwise fp32 sum, on the default and explicit arches") {
  check_exact_sum<simd::DefaultArch>();
  check_exact_sum<xsimd::sse2>();
}

TEST_CASE("add_inplace adds a span onto itself and rejects mismatched sizes") {
  std::vector<float> x{1.0f, -2.0f, 3.5f};
  nn::add_inplace(x, std::span<const float>(x));
  CHECK(x == std::vector<float>{2.0f, -4.0f, 7.0f});
  std::vector<float> y(4, 1.0f);
  CHECK_THROWS_AS(nn::add_inplace(x, y), shape_error);
  std::vector<float> empty;
  CHECK_NOTHROW(nn::add_inplace(empty, std::span<const float>(empty)));
}
