// quant/ggml_dot.hpp: ggml's Q8_0 activation rule (x86 build: id = 127 / amax, round half to even,
// fp16 step) against an independent rewrite, and the scalar reference product against the double
// product of the dequantized weights and the dequantized activation (exact integer block sums).
#include "barato/quant/ggml_dot.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "barato/quant/ggml.hpp"
#include "quant/reference.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;

namespace {

/// The rule written from its statement: codes by nearest-even rounding of x · (127 / amax) in fp32.
std::vector<int> oracle_codes(const std::vector<float>& x) {
  float amax = 0;
  for (const float v : x) amax = std::max(amax, std::fabs(v));
  std::vector<int> q(x.size(), 0);
  if (amax == 0) return q;
  const float id = 127.0f / amax;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const float p = x[j] * id;
    const float f = std::floor(p);
    const float frac = p - f;
    int r = static_cast<int>(f) + (frac > 0.5f ? 1 : 0);
    if (frac == 0.5f) r = (static_cast<long>(f) % 2 == 0) ? static_cast<int>(f) : static_cast<int>(f) + 1;
    q[j] = std::max(-127, std::min(127, r));
  }
  return q;
}

}  // namespace

TEST_CASE("ggml_q8_block: codes and fp16 step of ggml's x86 quantize_row_q8_0") {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    auto x = barato::test::random_vector(32, seed, -3.0f, 3.0f);
    if (seed % 3 == 0) x[seed % 32] = -7.5f;  // a negative maximum
    std::int8_t q[32];
    const float D = ggml_q8_block(x.data(), 32, q);
    const auto expect = oracle_codes(x);
    float amax = 0;
    for (const float v : x) amax = std::max(amax, std::fabs(v));
    CHECK(D == to_float(from_float<f16>(amax / 127.0f)));
    for (std::size_t j = 0; j < 32; ++j) REQUIRE(int(q[j]) == expect[j]);
  }
}

TEST_CASE("ggml_q8_block: ties round to even (not away from zero as the weight rule does)") {
  // amax = 127 makes id = 1, so x · id is x exactly
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = -0.5f;
  x[5] = 0.5f;
  x[6] = 1.5f;
  std::int8_t q[32];
  const float D = ggml_q8_block(x.data(), 32, q);
  CHECK(D == 1.0f);
  CHECK(q[0] == 127);
  CHECK(q[1] == 2);
  CHECK(q[2] == 4);
  CHECK(q[3] == -2);
  CHECK(q[4] == 0);
  CHECK(q[5] == 0);
  CHECK(q[6] == 2);
}

TEST_CASE("ggml_q8_block: an all-zero block is zero codes and a zero step; a short block uses its own maximum") {
  std::vector<float> x(32, 0.0f);
  std::int8_t q[32];
  for (auto& c : q) c = 5;
  CHECK(ggml_q8_block(x.data(), 32, q) == 0.0f);
  for (const auto c : q) CHECK(c == 0);
  const std::vector<float> shorter = {0.25f, -1.0f, 0.5f};
  CHECK(ggml_q8_block(shorter.data(), 3, q) == to_float(from_float<f16>(1.0f / 127.0f)));
  CHECK(q[0] == 32);  // 0.25 · 127 = 31.75
  CHECK(q[1] == -127);
  CHECK(q[2] == 64);  // 63.5 → 64 (even)
}

TEST_CASE("ggml_q8_block: a maximum past fp16's range keeps a finite fp32 step") {
  std::vector<float> x(32, 1.0f);
  x[7] = 1.0e7f;  // d = 78740 > 65504: fp16(d) would be infinite
  std::int8_t q[32];
  const float D = ggml_q8_block(x.data(), 32, q);
  CHECK(std::isfinite(D));
  CHECK(D == 1.0e7f / 127.0f);
  CHECK(q[7] == 127);
}

TEST_CASE_TEMPLATE("ggml_dot_reference: exact integer block sums scaled per block", F, GgmlQ8_0, GgmlQ4_0) {
  for (const std::size_t cols : {32u, 64u, 192u, 172u, 1000u}) {
    CAPTURE(cols);
    const std::size_t rows = 7;
    const auto w = barato::test::quant_ref::normal_vector(rows * cols, 11 + unsigned(cols), 0.05f);
    const QuantizedMatrix<F> m(rows, cols, w);
    std::vector<float> w_hat(rows * cols);
    m.dequantize(w_hat);
    const auto x = barato::test::random_vector(cols, 3 + unsigned(cols), -2.0f, 2.0f);
    std::vector<std::int8_t> q(cols);
    std::vector<float> D((cols + 31) / 32);
    ggml_q8_activation(x.data(), cols, q.data(), D.data());
    for (std::size_t r = 0; r < rows; ++r) {
      double expect = 0, mag = 0;  // Ŵ · x̂ in double, x̂ = D · q
      for (std::size_t c = 0; c < cols; ++c) {
        const double t = double(w_hat[r * cols + c]) * double(D[c / 32]) * double(q[c]);
        expect += t;
        mag += std::fabs(t);
      }
      const float got = ggml_dot_reference(m.view(), r, q.data(), D.data());
      REQUIRE(std::fabs(double(got) - expect) <= 1e-5 * mag + 1e-30);
    }
  }
}
