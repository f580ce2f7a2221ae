#include "barato/quant/scheme.hpp"

#include <doctest/doctest.h>

#include <string>

#include "barato/nn/any_linear.hpp"
#include "barato/quant/linear.hpp"
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
