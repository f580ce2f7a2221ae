// quant/ggml.hpp: ggml's Q8_0 and Q4_0 against an oracle written here from the rules (quant/ggml.hpp's
// file comment), independently of the library: fp16 rounding from the bits, products in double
// rounded once to fp32, roundf and the int8 conversion spelled out. Byte-exactness of whole blocks
// (including ties, negative halves, zero blocks, both signs of the largest magnitude, subnormals and
// Q4_0's clamp at 15), through QuantizedMatrix and through quantize_ggml_blocks.
#include "barato/quant/ggml.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "barato/quant/ggml_blocks.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "quant/reference.hpp"

using namespace barato;
using namespace barato::quant;

namespace {

// ---- the oracle ---------------------------------------------------------------------------------

/// IEEE binary16 bits of f, round to nearest, ties to even (finite f; overflow gives ±inf).
std::uint16_t oracle_fp16(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return sign | 0x7C00;  // at or past the midpoint of 65504 and 2^16
  if (a == 0.0) return sign;
  int e = 0;
  (void)std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1): the leading bit is 2^(e−1)
  const int lead = e - 1;
  const double quantum = lead >= -14 ? std::ldexp(1.0, lead - 10) : std::ldexp(1.0, -24);
  const double r = std::nearbyint(a / quantum) * quantum;  // a / quantum is exact; nearbyint ties to even
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<std::uint16_t>(r / std::ldexp(1.0, -24));  // subnormal
  (void)std::frexp(r, &e);
  const int exp = e - 1;  // after rounding (it may have carried into the next binade)
  const auto mant = static_cast<std::uint16_t>(r / std::ldexp(1.0, exp - 10) - 1024.0);
  return sign | static_cast<std::uint16_t>((exp + 15) << 10) | mant;
}

/// Value of binary16 bits (finite).
double oracle_fp16_value(std::uint16_t h) {
  const int exp = (h >> 10) & 31, mant = h & 1023;
  const double v = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(double(1024 + mant), exp - 25);
  return (h & 0x8000) ? -v : v;
}

/// fp32 product x · id, correctly rounded once (the double product of two floats is exact). The
/// volatile result keeps the compiler from turning this back into a float multiply and fusing it into
/// a following add (GCC's -ffp-contract=fast).
float oracle_mul(float x, float id) {
  volatile float p = static_cast<float>(double(x) * double(id));
  return p;
}

/// The x86 float → int8 conversion as ggml's build does it: truncate toward zero; a NaN or infinite
/// value gives 0 (the low byte of 0x80000000).
int oracle_int8(float v) {
  if (std::isnan(v) || std::isinf(v)) return 0;
  const double t = std::trunc(double(v));
  REQUIRE(std::fabs(t) < 128.0);  // the formats never convert a larger finite value
  return static_cast<int>(t);
}

/// roundf: half away from zero.
float oracle_roundf(float v) {
  if (std::isnan(v) || std::isinf(v)) return v;
  const double a = std::floor(std::fabs(double(v)) + 0.5);  // exact in double for |v| < 2^52
  return static_cast<float>(v < 0 ? -a : a);
}

/// One Q8_0 block of 32 weights in ggml's bytes (34).
std::vector<std::uint8_t> oracle_q8_0(const float* x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  std::vector<std::uint8_t> out(34);
  const std::uint16_t h = oracle_fp16(d);
  out[0] = static_cast<std::uint8_t>(h & 0xFF);
  out[1] = static_cast<std::uint8_t>(h >> 8);
  for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<std::uint8_t>(oracle_int8(oracle_roundf(oracle_mul(x[j], id))) & 0xFF);
  return out;
}

/// One Q4_0 block of 32 weights in ggml's bytes (18).
std::vector<std::uint8_t> oracle_q4_0(const float* x) {
  float amax = 0, m = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      m = x[j];
    }
  const float d = m / -8.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  int u[32];
  for (int j = 0; j < 32; ++j) u[j] = std::min(15, oracle_int8(oracle_mul(x[j], id) + 8.5f));
  std::vector<std::uint8_t> out(18);
  const std::uint16_t h = oracle_fp16(d);
  out[0] = static_cast<std::uint8_t>(h & 0xFF);
  out[1] = static_cast<std::uint8_t>(h >> 8);
  for (int j = 0; j < 16; ++j) out[2 + j] = static_cast<std::uint8_t>(u[j] | (u[j + 16] << 4));
  return out;
}

template <class F>
std::vector<std::uint8_t> oracle_blocks(const std::vector<float>& w) {
  std::vector<std::uint8_t> out;
  for (std::size_t b = 0; b < w.size() / 32; ++b) {
    const auto blk = std::is_same_v<F, GgmlQ8_0> ? oracle_q8_0(w.data() + 32 * b) : oracle_q4_0(w.data() + 32 * b);
    out.insert(out.end(), blk.begin(), blk.end());
  }
  return out;
}

// ---- the test blocks ------------------------------------------------------------------------------

/// Blocks of 32 weights that reach every rule; each entry is one block.
std::vector<std::vector<float>> special_blocks() {
  std::vector<std::vector<float>> blocks;
  std::vector<float> b(32, 0.0f);
  blocks.push_back(b);  // all zero: d = 0, id = 0 (Q4_0 codes 8)
  // Q8_0 ties: amax = 127 → d = 1, id = 1 exactly, so x · id = k + 0.5 exactly; negative halves too
  for (int j = 0; j < 32; ++j) b[j] = float(j % 2 == 0 ? 1 : -1) * (float(j) + 0.5f);
  b[31] = 127.0f;
  blocks.push_back(b);
  // Q4_0 with m = −8 → d = 1, id = 1: x + 8.5 lands exactly on integers (truncation boundaries)
  for (int j = 0; j < 32; ++j) b[j] = -7.5f + 0.5f * float(j % 31);
  b[0] = -8.0f;
  blocks.push_back(b);
  // the largest magnitude with both signs, positive first (Q4_0: m = +8, d = −1; −8 clamps 16 → 15)
  for (int j = 0; j < 32; ++j) b[j] = 0.25f * float(j) - 4.0f;
  b[3] = 8.0f;
  b[9] = -8.0f;
  blocks.push_back(b);
  std::swap(b[3], b[9]);  // negative first (m = −8, d = 1; +8 gives 16.5 → 16 → 15)
  blocks.push_back(b);
  // subnormal weights only: id = 1/d overflows to infinity, x · id is ±inf or NaN, codes 0
  for (int j = 0; j < 32; ++j) b[j] = std::ldexp(float(j % 7) - 3.0f, -140);
  blocks.push_back(b);
  // the smallest subnormal as the maximum: Q4_0's d = m / −8 underflows to −0 (id = 0)
  std::fill(b.begin(), b.end(), 0.0f);
  b[5] = std::numeric_limits<float>::denorm_min();
  blocks.push_back(b);
  // a normal maximum with subnormal neighbours (tiny codes), and one so small that fp16(d) = 0
  for (int j = 0; j < 32; ++j) b[j] = std::ldexp(float(j) - 16.0f, -135);
  b[0] = 1e-3f;
  blocks.push_back(b);
  for (int j = 0; j < 32; ++j) b[j] = 1e-9f * (float(j) - 10.0f);
  blocks.push_back(b);
  // largest magnitudes whose scale still fits fp16 (65504 · 8 for Q4_0 and · 127 for Q8_0)
  for (int j = 0; j < 32; ++j) b[j] = 1000.0f * (float(j) - 15.5f);
  b[7] = -524000.0f;
  blocks.push_back(b);
  // a scale on an fp16 rounding tie region and values at one ulp around halves
  for (int j = 0; j < 32; ++j) b[j] = std::nextafter(float(j) - 15.5f, j % 2 == 0 ? 100.0f : -100.0f);
  b[12] = 16.0f;
  blocks.push_back(b);
  return blocks;
}

template <class F>
std::vector<float> test_weights(std::size_t rows, std::size_t cols, unsigned seed) {
  auto w = barato::test::quant_ref::normal_vector(rows * cols, seed, 0.05f);
  const auto special = special_blocks();
  for (std::size_t i = 0; i < special.size() && 32 * (i + 1) <= w.size(); ++i)
    std::copy(special[i].begin(), special[i].end(), w.begin() + static_cast<std::ptrdiff_t>(32 * i));
  return w;
}

}  // namespace

TEST_CASE("the fp16 oracle agrees with known values") {
  CHECK(oracle_fp16(1.0f) == 0x3C00);
  CHECK(oracle_fp16(65504.0f) == 0x7BFF);
  CHECK(oracle_fp16(65519.0f) == 0x7BFF);
  CHECK(oracle_fp16(65520.0f) == 0x7C00);
  CHECK(oracle_fp16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(oracle_fp16(std::ldexp(1.0f, -25)) == 0x0000);                 // tie to even (0)
  CHECK(oracle_fp16(std::ldexp(3.0f, -25)) == 0x0002);                 // 1.5 quanta: tie to even (2)
  CHECK(oracle_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);          // tie to even
  CHECK(oracle_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);      // tie to even (up)
  CHECK(oracle_fp16(-2.0f) == 0xC000);
  CHECK(oracle_fp16(std::ldexp(1023.5f, -24)) == 0x0400);              // rounds up into the normals
  for (const float v : {0.1f, -3.75f, 1e-5f, 6.1e-5f, 12345.0f})
    CHECK(oracle_fp16_value(oracle_fp16(v)) == doctest::Approx(v).epsilon(1e-3));
}

TEST_CASE("ggml formats carry their facts") {
  CHECK(GgmlQ8_0::kBytesPerBlock == 34);
  CHECK(GgmlQ4_0::kBytesPerBlock == 18);
  CHECK(GgmlQ8_0::kBitsPerWeight == 8.5);
  CHECK(GgmlQ4_0::kBitsPerWeight == 4.5);
  for (int c = 0; c < 256; ++c) CHECK(GgmlQ8_0::encode(GgmlQ8_0::level(std::uint8_t(c))) == c);
  for (int c = 0; c < 16; ++c) CHECK(GgmlQ4_0::encode(GgmlQ4_0::level(std::uint8_t(c))) == c);
  CHECK(GgmlQ8_0::encode(2.5f) == 3);
  CHECK(GgmlQ8_0::encode(-2.5f) == std::uint8_t(-3));
  CHECK(GgmlQ4_0::encode(8.0f) == 15);  // 16.5 → 16, clamped
  CHECK(ggml_int8(std::numeric_limits<float>::infinity()) == 0);
  CHECK(ggml_int8(std::nanf("")) == 0);
  CHECK(ggml_int8(-0.75f) == 0);
  CHECK(ggml_int8(-1.75f) == -1);
}

TEST_CASE("split-nibble packing: byte j of a 32-code block holds codes j (low) and j + 16 (high); a partial block is natural order") {
  using P = SplitNibblePacking<32>;
  CHECK(P::row_bytes(64) == 32);
  CHECK(P::row_bytes(45) == 23);
  CHECK(P::locate(0, 64).byte == 0);
  CHECK(P::locate(15, 64).byte == 15);
  CHECK(P::locate(16, 64).byte == 0);
  CHECK(P::locate(16, 64).shift == 4);
  CHECK(P::locate(33, 64).byte == 17);
  CHECK(P::locate(49, 64).byte == 17);
  CHECK(P::locate(49, 64).shift == 4);
  CHECK(P::locate(33, 45).byte == 16);  // partial block of 13 codes: code 32 + p in byte 16 + p/2
  CHECK(P::locate(33, 45).shift == 4);
  std::vector<std::uint8_t> row(P::row_bytes(45), 0);
  for (std::size_t c = 0; c < 45; ++c) P::set(row.data(), c, 45, static_cast<std::uint8_t>((c * 7) % 16));
  for (std::size_t c = 0; c < 45; ++c) CHECK(P::get(row.data(), c, 45) == (c * 7) % 16);
}

TEST_CASE_TEMPLATE("quantize_ggml_blocks and QuantizedMatrix equal the oracle byte for byte", F, GgmlQ8_0, GgmlQ4_0) {
  const std::size_t rows = 7, cols = 96;
  const auto w = test_weights<F>(rows, cols, 3);
  const auto expect = oracle_blocks<F>(w);
  REQUIRE(expect.size() == ggml_bytes<F>(rows, cols));
  std::vector<std::uint8_t> got(ggml_bytes<F>(rows, cols), 0xAA);
  quantize_ggml_blocks<F>(rows, cols, w, got);
  const QuantizedMatrix<F> m(rows, cols, w);
  std::vector<std::uint8_t> via_matrix(ggml_bytes<F>(rows, cols), 0x55);
  to_ggml_blocks(m.view(), std::span<std::uint8_t>(via_matrix));
  for (std::size_t i = 0; i < expect.size(); ++i) {
    CAPTURE(i);
    const std::size_t block = i / F::kGgmlBlockBytes;
    CAPTURE(block);
    REQUIRE(int(got[i]) == int(expect[i]));
    REQUIRE(int(via_matrix[i]) == int(expect[i]));
  }
  // dequantized weights: float(fp16(d)) · q, from the oracle's bytes
  std::vector<float> w_hat(rows * cols);
  m.dequantize(w_hat);
  for (std::size_t b = 0; b < rows * cols / 32; ++b) {
    const std::uint8_t* blk = expect.data() + b * F::kGgmlBlockBytes;
    const double d = oracle_fp16_value(static_cast<std::uint16_t>(blk[0] | (blk[1] << 8)));
    for (std::size_t j = 0; j < 32; ++j) {
      const int q = std::is_same_v<F, GgmlQ8_0> ? int(static_cast<std::int8_t>(blk[2 + j]))
                                               : int(j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8;
      REQUIRE(double(w_hat[32 * b + j]) == static_cast<double>(static_cast<float>(d) * float(q)));
    }
  }
}

TEST_CASE_TEMPLATE("ggml formats: the error of a stored weight is within the stated bound", F, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  const std::size_t rows = 16, cols = 256;
  const auto w = barato::test::quant_ref::normal_vector(rows * cols, 9, 0.05f);
  const QuantizedMatrix<F> m(rows, cols, w);
  std::vector<float> w_hat(rows * cols);
  m.dequantize(w_hat);
  // |x − x̂| ≤ |d| · step + fp16's relative rounding of d (2⁻¹¹) times |q| · |d|
  const double step = std::is_same_v<F, GgmlQ8_0> ? 0.5 : 1.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    double amax = 0;
    for (std::size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(double(w[j])));
    const double d = amax / F::kScaleDivisor;
    const double qmax = F::kScaleDivisor;
    REQUIRE(std::fabs(double(w[i]) - double(w_hat[i])) <= d * step + qmax * d * std::ldexp(1.0, -11) + 1e-12);
  }
}

TEST_CASE_TEMPLATE("a width that is not a multiple of 32 ends in a shorter block with the same rule", F, GgmlQ8_0, GgmlQ4_0) {
  const std::size_t rows = 3, cols = 45;  // one block of 32 + 13 weights per row
  auto w = barato::test::quant_ref::normal_vector(rows * cols, 5, 0.05f);
  const QuantizedMatrix<F> m(rows, cols, w);
  std::vector<float> w_hat(rows * cols);
  m.dequantize(w_hat);
  for (std::size_t r = 0; r < rows; ++r) {
    // the oracle on the 13-weight tail padded with zeros (zeros change neither the maximum nor the codes of the rest)
    std::vector<float> tail(32, 0.0f);
    std::copy(w.begin() + static_cast<std::ptrdiff_t>(r * cols + 32), w.begin() + static_cast<std::ptrdiff_t>((r + 1) * cols), tail.begin());
    const auto blk = std::is_same_v<F, GgmlQ8_0> ? oracle_q8_0(tail.data()) : oracle_q4_0(tail.data());
    const double d = oracle_fp16_value(static_cast<std::uint16_t>(blk[0] | (blk[1] << 8)));
    CHECK(std::bit_cast<std::uint16_t>(m.view().row_scales(r)[1]) == (blk[0] | (blk[1] << 8)));
    for (std::size_t j = 0; j < 13; ++j) {
      const int q = std::is_same_v<F, GgmlQ8_0> ? int(static_cast<std::int8_t>(blk[2 + j])) : int(blk[2 + j] & 15) - 8;
      CHECK(double(w_hat[r * cols + 32 + j]) == static_cast<double>(static_cast<float>(d) * float(q)));
    }
  }
}

TEST_CASE_TEMPLATE("ggml formats: non-finite weights and scales past fp16 are value_errors", F, GgmlQ8_0, GgmlQ4_0) {
  std::vector<float> w(64, 0.5f);
  w[40] = std::numeric_limits<float>::infinity();
  std::vector<std::uint8_t> out(ggml_bytes<F>(1, 64));
  CHECK_THROWS_AS(quantize_ggml_blocks<F>(1, 64, w, out), value_error);
  CHECK_THROWS_AS(QuantizedMatrix<F>(1, 64, w), value_error);
  w[40] = 1e7f;  // d = 1e7 / 127 (or / 8) > 65504
  CHECK_THROWS_WITH_AS(quantize_ggml_blocks<F>(1, 64, w, out), doctest::Contains("block 1"), value_error);
  CHECK_THROWS_AS(QuantizedMatrix<F>(1, 64, w), value_error);
}

TEST_CASE("Q4_0F32: Q4_0's codes and rule with the scale d = m / −8 kept in fp32") {
  for (const std::size_t cols : {std::size_t{256}, std::size_t{45}}) {
    CAPTURE(cols);
    const std::size_t rows = 9;
    const auto w = barato::test::quant_ref::normal_vector(rows * cols, 17 + static_cast<unsigned>(cols), 0.05f);
    const QuantizedMatrix<Q4_0F32> f(rows, cols, w);
    const QuantizedMatrix<GgmlQ4_0> h(rows, cols, w);
    CHECK(f.view().row_bytes == h.view().row_bytes);
    CHECK(std::equal(f.view().codes, f.view().codes + rows * f.view().row_bytes, h.view().codes));  // the same codes
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t b = 0; b < (cols + 31) / 32; ++b) {
        float m = 0.0f;  // the signed weight of largest magnitude, the first on ties
        for (std::size_t j = 32 * b; j < std::min(cols, 32 * b + 32); ++j)
          if (std::fabs(w[r * cols + j]) > std::fabs(m)) m = w[r * cols + j];
        CHECK(f.view().row_scales(r)[b] == m / -8.0f);
        CHECK(std::bit_cast<std::uint16_t>(from_float<f16>(f.view().row_scales(r)[b])) ==
              std::bit_cast<std::uint16_t>(h.view().row_scales(r)[b]));
      }
  }
  // a scale past fp16's range is held (GgmlQ4_0 refuses it)
  std::vector<float> big(32, 1.0f);
  big[3] = -1e7f;
  const QuantizedMatrix<Q4_0F32> f(1, 32, big);
  CHECK(f.view().row_scales(0)[0] == 1e7f / 8.0f);
  std::vector<float> back(32);
  f.dequantize(back);
  CHECK(back[3] == -1e7f);
  CHECK_THROWS_AS(QuantizedMatrix<GgmlQ4_0>(1, 32, big), value_error);
}

TEST_CASE("Q4_0 rounds x · id to fp32 before adding 8.5 (a fused multiply-add would truncate differently)") {
  // m = −8.8 → d = 1.1, id = 1/1.1 (inexact): weights just around (k − 8.5) · 1.1 whose product rounds onto
  // k − 8.5 exactly, where the fused x · id + 8.5 lands just below the integer k.
  std::vector<float> block(32, 0.0f);
  block[0] = -8.8f;
  const float d = block[0] / -8.0f, id = 1.0f / d;
  std::size_t found = 1;
  for (int k = 1; k <= 15 && found < 32; ++k) {
    const float center = (float(k) - 8.5f) * d;
    for (const float toward : {-100.0f, 100.0f}) {  // 64 ulps below, then above the center
      float x = center;
      for (int step = 0; step < 64 && found < 32; ++step, x = std::nextafter(x, toward)) {
        const float two_roundings = oracle_mul(x, id) + 8.5f;
        const float fused = std::fma(x, id, 8.5f);
        if (std::trunc(two_roundings) != std::trunc(fused) && std::fabs(x) < 8.8f) block[found++] = x;
      }
    }
  }
  const std::string note = std::to_string(found - 1) + " weights where a fused multiply-add would give another code";
  MESSAGE(note);
  REQUIRE(found > 1);
  std::vector<std::uint8_t> got(18);
  quantize_ggml_blocks<GgmlQ4_0>(1, 32, block, got);
  const auto expect = oracle_q4_0(block.data());
  for (std::size_t i = 0; i < 18; ++i) REQUIRE(int(got[i]) == int(expect[i]));
}
