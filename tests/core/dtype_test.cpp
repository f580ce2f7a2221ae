// core/dtype.hpp: the element types (fp32, fp16, bf16), the Element concept, the runtime DType tag
// and the scalar conversions (round to nearest even).
#include "barato/core/dtype.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

using namespace barato;

namespace {
template <Element T>
std::uint16_t bits(T x) {
  std::uint16_t u;
  std::memcpy(&u, &x, 2);
  return u;
}
}  // namespace

TEST_CASE("Element admits exactly fp32, fp16 and bf16") {
  static_assert(Element<float> && Element<f16> && Element<bf16>);
  static_assert(!Element<double> && !Element<int> && !Element<std::uint16_t> && !Element<const float>);
  CHECK(true);
}

TEST_CASE("dtype_of, dtype_size and dtype_name agree with the types") {
  static_assert(dtype_of<float> == DType::f32 && dtype_of<f16> == DType::f16 && dtype_of<bf16> == DType::bf16);
  CHECK(dtype_size(dtype_of<float>) == sizeof(float));
  CHECK(dtype_size(dtype_of<f16>) == sizeof(f16));
  CHECK(dtype_size(dtype_of<bf16>) == sizeof(bf16));
  CHECK(dtype_name(DType::f32) == "fp32");
  CHECK(dtype_name(DType::f16) == "fp16");
  CHECK(dtype_name(DType::bf16) == "bf16");
}

TEST_CASE("from_float rounds to nearest even; to_float is exact; the bit layouts are IEEE binary16 and bfloat16") {
  // fp16 has 10 fraction bits: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 → 1 (even); 1 + 3·2^-11 → 1 + 2^-9
  CHECK(to_float(from_float<f16>(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(to_float(from_float<f16>(1.0f + 3 * 0x1p-11f)) == 1.0f + 0x1p-9f);
  CHECK(bits(from_float<f16>(1.0f)) == 0x3C00);
  CHECK(bits(from_float<f16>(-2.0f)) == 0xC000);
  CHECK(to_float(from_float<f16>(65504.0f)) == 65504.0f);                           // largest finite
  CHECK(std::isinf(to_float(from_float<f16>(65520.0f))));                           // rounds up to inf
  // bf16 keeps fp32's exponent and 7 fraction bits: 1 + 2^-8 ties to 1, 1 + 3·2^-8 → 1 + 2^-6
  CHECK(to_float(from_float<bf16>(1.0f + 0x1p-8f)) == 1.0f);
  CHECK(to_float(from_float<bf16>(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  CHECK(bits(from_float<bf16>(1.0f)) == 0x3F80);
  CHECK(to_float(from_float<bf16>(3.0e38f)) == doctest::Approx(3.0e38).epsilon(0x1p-8));  // fp32 range, within bf16 half-ulp rounding (2^-8 relative)
  // values representable in the format survive a round trip exactly
  for (const float x : {0.0f, -0.5f, 0.375f, 1024.0f, -0x1p-14f})
    CHECK(to_float(from_float<f16>(x)) == x);
  for (const float x : {0.0f, -0.5f, 0.375f, 0x1p100f, -0x1p-100f}) CHECK(to_float(from_float<bf16>(x)) == x);
  CHECK(std::isnan(to_float(from_float<f16>(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(to_float(from_float<float>(0.1f)) == 0.1f);
}

TEST_CASE("to_float(f16) decodes every binary16 bit pattern exactly (the F16C path where the build has it)") {
  // An independent decoding from the bit fields: (-1)^s · 2^(e - 15) · (1 + m / 1024), subnormals
  // 2^-14 · m / 1024, e = 31 infinities and NaNs. Eigen's own conversion must agree too.
  int mismatches = 0;
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const auto h = std::bit_cast<f16>(static_cast<std::uint16_t>(u));
    const bool neg = (u >> 15) != 0;
    const int e = static_cast<int>((u >> 10) & 0x1F);
    const int m = static_cast<int>(u & 0x3FF);
    const float got = to_float(h);
    if (e == 31 && m != 0) {
      mismatches += !std::isnan(got) + !std::isnan(static_cast<float>(h));
      continue;
    }
    float want = e == 31 ? std::numeric_limits<float>::infinity()
                         : (e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1024.0f + m, e - 25));
    if (neg) want = -want;
    mismatches += std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want);
    mismatches += std::bit_cast<std::uint32_t>(static_cast<float>(h)) != std::bit_cast<std::uint32_t>(want);
  }
  CHECK(mismatches == 0);
}
