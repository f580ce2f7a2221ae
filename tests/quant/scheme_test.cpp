#include "barato/quant/scheme.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "barato/nn/any_linear.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "quant/reference.hpp"

using namespace barato;
using namespace barato::quant;

TEST_CASE("scheme names round-trip and unknown names are value_errors listing the valid ones") {
  for (Scheme s : kSchemes) CHECK(parse_scheme(scheme_name(s)) == s);
  CHECK_THROWS_WITH_AS((void)parse_scheme("int3"), doctest::Contains("int4-g128"), value_error);
}

TEST_CASE("visit_scheme hands over the format type: bits per weight of each scheme") {
  const auto w = barato::test::quant_ref::normal_vector(16 * 256, 1);
  const auto bpw = [&](Scheme s) {
    return visit_scheme(s, [&](auto f) {
      const nn::AnyLinear lin(Linear<decltype(f)>(16, 256, w));
      return 8.0 * double(lin.bytes()) / (16.0 * 256.0);
    });
  };
  CHECK(bpw(Scheme::int8_tensor) == doctest::Approx(8.0 + 16.0 / 4096));
  CHECK(bpw(Scheme::int8_row) == doctest::Approx(8.0 + 16.0 / 256));
  CHECK(bpw(Scheme::int4_tensor) == doctest::Approx(4.0 + 16.0 / 4096));
  CHECK(bpw(Scheme::int4_row) == doctest::Approx(4.0 + 16.0 / 256));
  CHECK(bpw(Scheme::int4_g128) == 4.125);
  CHECK(bpw(Scheme::nf4) == 4.25);
  CHECK(bpw(Scheme::q8_0) == 8.5);
  CHECK(bpw(Scheme::q4_0) == 4.5);
  CHECK(parse_scheme("q4_0") == Scheme::q4_0);
  CHECK(parse_scheme("q8_0") == Scheme::q8_0);
}

namespace {
/// An all-zero (or all −0) matrix, and all-zero rows / groups of an otherwise random matrix, quantize
/// to the zero code with a zero scale and dequantize to exact zeros: never NaN, whatever the format.
template <class F>
void check_zero_groups() {
  constexpr std::size_t R = 4, C = 256;
  for (const float z : {0.0f, -0.0f}) {
    const std::vector<float> w(R * C, z);
    const QuantizedMatrix<F> m(R, C, w);
    for (const auto sc : m.scales()) CHECK(to_float(sc) == 0.0f);
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = 0; c < C; ++c) CHECK(m.code(r, c) == F::kZeroCode);
    std::vector<float> out(R * C, 1.0f);
    m.dequantize(out);
    for (const float v : out) CHECK(v == 0.0f);
  }
  if constexpr (!std::is_same_v<typename F::granularity, PerTensor>) {
    auto w = barato::test::quant_ref::normal_vector(R * C, 3);
    std::fill(w.begin() + C, w.begin() + 2 * C, 0.0f);  // row 1: every group zero
    const std::size_t g = F::granularity::kGroup == 0 ? C : F::granularity::kGroup;
    std::fill(w.begin() + 2 * C, w.begin() + 2 * C + static_cast<std::ptrdiff_t>(g), 0.0f);  // row 2: its first group
    const QuantizedMatrix<F> m(R, C, w);
    std::vector<float> out(R * C);
    m.dequantize(out);
    for (std::size_t c = 0; c < C; ++c) CHECK(out[C + c] == 0.0f);
    for (std::size_t c = 0; c < g; ++c) CHECK(out[2 * C + c] == 0.0f);
    for (const float v : out) CHECK(std::isfinite(v));
    const std::size_t spr = F::granularity::scales_per_row(C);
    for (std::size_t j = 0; j < spr; ++j) CHECK(to_float(m.scales()[spr + j]) == 0.0f);
    CHECK(to_float(m.scales()[2 * spr]) == 0.0f);
  }
}
}  // namespace

TEST_CASE("every scheme: an all-zero matrix, row or group gives zero codes, a zero scale and exact zeros (no NaN)") {
  for (const Scheme s : kSchemes) {
    CAPTURE(std::string(scheme_name(s)));
    visit_scheme(s, [](auto f) {
      check_zero_groups<decltype(f)>();
      return 0;
    });
  }
}

TEST_CASE_TEMPLATE("absmax and nf4 formats beyond the named schemes: zero groups quantize to zeros", F, Int8Group<32>,
                   Int8PerTensor<float>, Int4Group<64, float>, AbsMax<2, PerRow>, AbsMax<3, PerGroup<32>>, Nf4<32>, Nf4<64, float>,
                   Nf4<128>) {
  check_zero_groups<F>();
}
