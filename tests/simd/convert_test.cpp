#include "barato/simd/convert.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

/// Values that stress a conversion: signed zeros, subnormals of both formats, the largest finite
/// values, overflow to infinity, infinities, NaN, ties for round-to-nearest-even, ordinary numbers.
std::vector<float> special_values() {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 70000.0f, -1e30f, 3.0e38f,
                          5.96e-8f, 2.98e-8f, 6.1e-5f, 1e-40f, -1e-39f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                          1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 0.1f, 1.0f / 3.0f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  const auto r = test::random_vector(203, 1, -1000.f, 1000.f);
  x.insert(x.end(), r.begin(), r.end());
  return x;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  std::uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

template <Element T>
bool same_bits(T a, T b) {
  if (Eigen::numext::isnan(a) && Eigen::numext::isnan(b)) return true;
  std::uint16_t ua, ub;
  std::memcpy(&ua, &a, 2);
  std::memcpy(&ub, &b, 2);
  return ua == ub;
}

}  // namespace

TEST_CASE_TEMPLATE("to_float and load_as_float are bit-exact against Eigen's scalar conversion on every arch", T, float, f16, bf16) {
  auto values = special_values();
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<T> src(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) src[i] = static_cast<T>(values[i]);  // the reference rounding
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                                std::size_t{33}, values.size()}) {
      CAPTURE(n);
      std::vector<float> dst(n + 1, 123.0f);
      simd::to_float<T, Arch>(src.data(), dst.data(), n);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(same_bits(dst[i], static_cast<float>(src[i])));
      CHECK(dst[n] == 123.0f);  // nothing written past n
    }
    constexpr std::size_t W = simd::kFloatLanes<Arch>;
    for (std::size_t off = 0; off + W <= src.size(); off += W - 1) {  // unaligned starts too
      alignas(64) float got[W];
      simd::load_as_float<Arch>(src.data() + off).store_aligned(got);
      for (std::size_t i = 0; i < W; ++i) REQUIRE(same_bits(got[i], static_cast<float>(src[off + i])));
    }
  });
}

TEST_CASE_TEMPLATE("from_float rounds to nearest even exactly as Eigen does (tails, specials) on every arch", T, float, f16, bf16) {
  const auto values = special_values();
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{16}, std::size_t{31}, values.size()}) {
      CAPTURE(n);
      std::vector<T> dst(n + 1, static_cast<T>(7.0f));
      simd::from_float<T, Arch>(values.data(), dst.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(values[i]);
        REQUIRE(same_bits(dst[i], static_cast<T>(values[i])));
      }
      CHECK(static_cast<float>(dst[n]) == 7.0f);
    }
    // NaN stays NaN
    const std::vector<float> nan(3, std::numeric_limits<float>::quiet_NaN());
    std::vector<T> out(3);
    simd::from_float<T, Arch>(nan.data(), out.data(), nan.size());
    for (const T o : out) CHECK(std::isnan(static_cast<float>(o)));
  });
}

TEST_CASE("round trip fp32 -> fp16 / bf16 -> fp32 loses at most half an ulp of the format") {
  constexpr std::size_t n = 4099;
  const auto x = test::random_vector(n, 2, -4.f, 4.f);
  std::vector<f16> h(n);
  std::vector<bf16> b(n);
  std::vector<float> xh(n), xb(n);
  simd::from_float<f16>(x.data(), h.data(), n);
  simd::from_float<bf16>(x.data(), b.data(), n);
  simd::to_float<f16>(h.data(), xh.data(), n);
  simd::to_float<bf16>(b.data(), xb.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::abs(x[i]) < 6.2e-5f) continue;  // fp16 subnormal range: absolute, not relative, precision
    REQUIRE(std::abs(xh[i] - x[i]) <= std::abs(x[i]) / 2048);
    REQUIRE(std::abs(xb[i] - x[i]) <= std::abs(x[i]) / 256);
  }
}
