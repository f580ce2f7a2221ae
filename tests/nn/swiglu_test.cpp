#include "barato/nn/swiglu.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "support/nn_reference.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("swiglu matches the double reference at odd sizes, including aliasing") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{172}, std::size_t{4864}}) {
    CAPTURE(n);
    const auto g = test::random_vector(n, 31, -8.0f, 8.0f);
    const auto u = test::random_vector(n, 32, -2.0f, 2.0f);
    const auto ref = test::swiglu_ref(g, u);
    std::vector<float> h(n);
    nn::swiglu(g, u, h);
    CHECK(test::max_rel_diff(h, ref) < test::kSwigluRelTol);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(h[i] == doctest::Approx(ref[i]).epsilon(test::kSwigluRelTol).scale(1.0));
    auto g2 = g;
    nn::swiglu(g2, u);  // h aliases g
    CHECK(g2 == h);
    auto u2 = u;
    nn::swiglu(g, u2, u2);  // h aliases u
    CHECK(u2 == h);
  }
}

TEST_CASE("swiglu at the extremes: silu(0) = 0, silu(large) = large, silu(very negative) -> 0, no NaN") {
  const std::vector<float> g{0.0f, 50.0f, -50.0f, -100.0f, 100.0f, 1.0f, -1.0f, 3.0f,
                             0.0f, 50.0f, -50.0f, -100.0f, 100.0f, 1.0f, -1.0f, 3.0f, 88.0f};
  const std::vector<float> u(g.size(), 1.0f);
  std::vector<float> h(g.size());
  nn::swiglu(g, u, h);
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::isfinite(h[i]));
    CHECK(h[i] == doctest::Approx(nn::silu(g[i])).epsilon(test::kSwigluRelTol));
  }
  CHECK(h[0] == 0.0f);
  CHECK(h[1] == doctest::Approx(50.0f));
  CHECK(std::abs(h[3]) < 1e-30f);
}

TEST_CASE("swiglu rejects mismatched sizes") {
  std::vector<float> g(4), u(5), h(4), u4(4), h3(3);
  CHECK_THROWS_AS(nn::swiglu(g, u, h), shape_error);
  CHECK_THROWS_AS(nn::swiglu(g, u4, h3), shape_error);
  CHECK_THROWS_AS(nn::swiglu(g, u), shape_error);
}

TEST_CASE("swiglu is batch-invariant: h[i] depends on g[i], u[i] only, not on i or the length") {
  // a row of a block of rows must get the bits it gets alone, wherever the SIMD tail falls
  std::vector<float> g(173), u(173);
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = std::sin(0.37f * static_cast<float>(i)) * 6.0f;
    u[i] = std::cos(0.11f * static_cast<float>(i));
  }
  std::vector<float> all(g.size());
  nn::swiglu(g, u, all);
  for (std::size_t off : {0u, 1u, 5u, 16u, 17u, 100u})
    for (std::size_t len : {1u, 3u, 15u, 16u, 33u, 72u}) {
      if (off + len > g.size()) continue;
      std::vector<float> h(len);
      nn::swiglu(std::span<const float>(g).subspan(off, len), std::span<const float>(u).subspan(off, len), h);
      for (std::size_t i = 0; i < len; ++i) {
        CAPTURE(off);
        CAPTURE(len);
        CAPTURE(i);
        CHECK(h[i] == all[off + i]);  // exact
      }
    }
}
