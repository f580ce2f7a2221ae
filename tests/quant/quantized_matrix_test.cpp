#include "barato/quant/quantized_matrix.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

namespace {

template <class F>
constexpr std::size_t ref_granularity() {
  using G = typename F::granularity;
  if constexpr (G::kGroup != 0) return G::kGroup;
  else if constexpr (std::is_same_v<G, PerRow>) return ref::kRow;
  else return ref::kTensor;
}

template <class F>
ref::Quantized reference(const std::vector<float>& w, std::size_t rows, std::size_t cols) {
  if constexpr (F::kName == std::string_view("nf4"))
    return ref::nf4<typename F::scale_type>(w, rows, cols, F::granularity::kGroup, kNf4Levels);
  else
    return ref::absmax<typename F::scale_type>(w, rows, cols, int(F::kBits), ref_granularity<F>());
}

template <class F>
int code_value(std::uint8_t code) {
  if constexpr (F::kName == std::string_view("nf4")) return code;
  else return F::integer(code);
}

/// Codes, scales and the dequantized matrix equal the independent reference exactly.
template <class F>
void check_against_reference(std::size_t rows, std::size_t cols, unsigned seed) {
  auto w = ref::normal_vector(rows * cols, seed, 0.02f);
  w[(rows * cols) / 3] = 0.5f;  // an outlier
  const QuantizedMatrix<F> m(rows, cols, w);
  const auto rq = reference<F>(w, rows, cols);
  std::vector<float> got(rows * cols);
  m.dequantize(got);
  std::size_t code_mismatch = 0, scale_mismatch = 0, value_mismatch = 0;
  const auto v = m.view();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t i = r * cols + c;
      code_mismatch += code_value<F>(m.code(r, c)) != rq.q[i];
      scale_mismatch += v.scale(r, c) != rq.scale[i];
      value_mismatch += got[i] != rq.w_hat[i];
    }
  CHECK(code_mismatch == 0);
  CHECK(scale_mismatch == 0);
  CHECK(value_mismatch == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("quantization equals the scalar reference for every format, divisible and ragged shapes", F,
                   AbsMax<8, PerTensor>, AbsMax<8, PerRow>, AbsMax<8, PerGroup<32>, float>, AbsMax<8, PerGroup<128>>,
                   AbsMax<6, PerRow>, AbsMax<5, PerGroup<64>>, AbsMax<4, PerTensor>, AbsMax<4, PerRow>,
                   AbsMax<4, PerGroup<32>>, AbsMax<4, PerGroup<64>>, AbsMax<4, PerGroup<128>, float>,
                   AbsMax<3, PerGroup<64>>, AbsMax<2, PerRow>, AbsMax<2, PerGroup<32>>, Nf4<64>, Nf4<64, float>,
                   Nf4<32>) {
  check_against_reference<F>(8, 256, 1);   // divisible by every group, two 4-bit chunks per row
  check_against_reference<F>(5, 172, 2);   // ragged: 172 % 32, % 64, % 128 != 0 and a 4-bit tail
  check_against_reference<F>(3, 61, 3);    // odd columns: a half-used last byte
  check_against_reference<F>(1, 1000, 4);  // a flattened tensor
}

TEST_CASE("bytes() and bits_per_weight() are exact, scales included") {
  const std::size_t R = 64, C = 4096;
  const auto w = ref::normal_vector(R * C, 5);
  CountingResource mr;
  {
    const QuantizedMatrix<Int4Group<128>> m(R, C, w, &mr);
    CHECK(m.bytes() == R * C / 2 + R * (C / 128) * 2);
    CHECK(m.bits_per_weight() == 4.125);
    CHECK(mr.current() == m.bytes());  // everything it owns is codes + scales
  }
  CHECK(QuantizedMatrix<Nf4<64>>(R, C, w).bits_per_weight() == 4.25);
  CHECK(QuantizedMatrix<AbsMax<8, PerGroup<32>, float>>(R, C, w).bits_per_weight() == 9.0);
  CHECK(QuantizedMatrix<Int8PerRow<>>(R, C, w).bytes() == R * C + R * 2);
  CHECK(QuantizedMatrix<Int8PerTensor<float>>(R, C, w).bytes() == R * C + 4);
  CHECK(QuantizedMatrix<AbsMax<2, PerRow>>(R, C, w).bytes() == R * C / 4 + R * 2);
  // ragged: 3 x 61 int4 groups of 32 -> 31 bytes per row, 2 scales per row
  const auto w2 = ref::normal_vector(3 * 61, 6);
  CHECK(QuantizedMatrix<Int4Group<32>>(3, 61, w2).bytes() == 3 * 31 + 3 * 2 * 2);
}

TEST_CASE_TEMPLATE("all-zero tensor, row and group give scale 0 and exact zeros, never NaN", F, Int8PerTensor<>,
                   Int8PerRow<>, Int4Group<32>, Nf4<64>, AbsMax<2, PerGroup<32>>) {
  const std::size_t R = 4, C = 128;
  std::vector<float> w(R * C, 0.0f);
  {
    const QuantizedMatrix<F> m(R, C, w);
    std::vector<float> out(R * C, 1.0f);
    m.dequantize(out);
    for (float v : out) REQUIRE(v == 0.0f);
    for (auto s : m.scales()) CHECK(static_cast<float>(s) == 0.0f);
  }
  auto w2 = ref::normal_vector(R * C, 7);
  for (std::size_t c = 0; c < C; ++c) w2[1 * C + c] = 0.0f;  // row 1 all zero
  for (std::size_t c = 32; c < 64; ++c) w2[2 * C + c] = 0.0f;  // one group of row 2 all zero
  const QuantizedMatrix<F> m(R, C, w2);
  std::vector<float> out(R * C);
  m.dequantize(out);
  for (float v : out) REQUIRE(std::isfinite(v));
  if constexpr (!std::is_same_v<typename F::granularity, PerTensor>) {
    for (std::size_t c = 0; c < C; ++c) CHECK(out[1 * C + c] == 0.0f);
  }
  if constexpr (F::granularity::kGroup == 32) {
    for (std::size_t c = 32; c < 64; ++c) CHECK(out[2 * C + c] == 0.0f);
  }
}

TEST_CASE("tiny groups whose fp16 scale underflows quantize to zeros; a scale overflowing fp16 is a value_error") {
  std::vector<float> w(64, 1e-9f);  // 1e-9 / 7 is below fp16's smallest subnormal
  const QuantizedMatrix<Int4PerRow<>> m(1, 64, w);
  std::vector<float> out(64);
  m.dequantize(out);
  for (float v : out) CHECK(v == 0.0f);
  std::vector<float> big(64, 1e9f);
  CHECK_THROWS_AS(QuantizedMatrix<Int8PerRow<>>(1, 64, big), value_error);
  CHECK_NOTHROW(QuantizedMatrix<Int8PerRow<float>>(1, 64, big));
}

TEST_CASE("NaN or Inf input is a value_error naming the element; wrong sizes are shape_errors") {
  auto w = ref::normal_vector(4 * 32, 8);
  w[37] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(QuantizedMatrix<Int8PerRow<>>(4, 32, w), value_error);
  CHECK_THROWS_WITH_AS(QuantizedMatrix<Int4Group<32>>(4, 32, w), doctest::Contains("(1, 5)"), value_error);
  w[37] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(QuantizedMatrix<Nf4<>>(4, 32, w), value_error);
  CHECK_THROWS_AS(QuantizedMatrix<Int8PerRow<>>(4, 31, w), shape_error);
  CHECK_THROWS_AS(QuantizedMatrix<Int8PerRow<>>(0, 0, std::vector<float>{}), shape_error);
  const QuantizedMatrix<Int8PerRow<>> ok(2, 2, std::vector<float>{1, 2, 3, 4});
  std::vector<float> out(3);
  CHECK_THROWS_AS(ok.dequantize(out), shape_error);
}

TEST_CASE("copy() is deep and equal; moved-from is empty") {
  const auto w = ref::normal_vector(16 * 64, 9);
  QuantizedMatrix<Int4Group<32>> a(16, 64, w);
  const auto b = a.copy();
  REQUIRE(b.codes().size() == a.codes().size());
  CHECK(b.codes().data() != a.codes().data());
  for (std::size_t i = 0; i < a.codes().size(); ++i) REQUIRE(a.codes()[i] == b.codes()[i]);
  const auto c = std::move(a);
  CHECK(c.bytes() == b.bytes());
}
