// quant/avx512_tails.hpp: the masked 16-column tail loops of the AVX-512 kernels, against plain loops.
#include "barato/quant/avx512_tails.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "support/reference.hpp"

#if defined(__AVX512BW__) && defined(__AVX512VL__)

using namespace barato;

namespace {
/// Σ over [c0, n) in double.
template <class Term>
double scalar_sum(std::size_t c0, std::size_t n, Term&& term) {
  double s = 0;
  for (std::size_t c = c0; c < n; ++c) s += term(c);
  return s;
}
}  // namespace

TEST_CASE("tail8: masked int8 dot of columns [c0, n) equals the scalar loop and reads nothing past n") {
  const std::size_t cols = 200;
  std::vector<std::int8_t> w(cols);
  for (std::size_t c = 0; c < cols; ++c) w[c] = static_cast<std::int8_t>(static_cast<int>((c * 37) % 255) - 127);
  const auto x = test::random_vector(cols, 1, -2.f, 2.f);
  for (const std::size_t c0 : {0, 16, 128}) {
    for (std::size_t n = c0; n <= cols; ++n) {
      CAPTURE(c0);
      CAPTURE(n);
      // copies ending at n: a read past n would leave the allocation (ASan) or pick up the poison value
      std::vector<std::int8_t> wn(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(n));
      std::vector<float> xn(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      const double want = scalar_sum(c0, n, [&](std::size_t c) { return double(wn[c]) * double(xn[c]); });
      const double mag = scalar_sum(c0, n, [&](std::size_t c) { return std::abs(double(wn[c]) * double(xn[c])); });
      REQUIRE(std::abs(quant::avx512::tail8(wn.data(), c0, n, xn.data()) - want) <= test::kFp32RelTol * (mag + test::kTiny));
    }
  }
}

TEST_CASE("reduce16 sums lanes 8, 4, 2, 1 apart; reduce16_rows gives each of 16 vectors its reduce16 bit for bit") {
  // the tree, on values where the order shows: lanes 4 and 12 (8 apart) meet before either meets lane
  // 0, so their 2^-23 survives; added to 1 one at a time, each 2^-24 would round away (ties to even)
  alignas(64) float v[16] = {};
  v[0] = 1.0f;
  v[4] = v[12] = 0x1p-24f;
  CHECK(quant::avx512::reduce16(_mm512_load_ps(v)) == 1.0f + 0x1p-23f);
  std::vector<float> data = test::random_vector(16 * 16 * 50, 5, -1.f, 1.f);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] *= static_cast<float>(1 << (i * 7 % 20));  // mixed magnitudes
  for (std::size_t t = 0; t < 50; ++t) {
    __m512 rows[16];
    for (std::size_t i = 0; i < 16; ++i) rows[i] = _mm512_loadu_ps(data.data() + (t * 16 + i) * 16);
    alignas(64) float out[16];
    _mm512_store_ps(out, quant::avx512::reduce16_rows(rows));
    for (std::size_t i = 0; i < 16; ++i) {
      CAPTURE(i);
      const float one = quant::avx512::reduce16(rows[i]);
      REQUIRE(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(one));
      const double want = scalar_sum(0, 16, [&](std::size_t k) { return double(data[(t * 16 + i) * 16 + k]); });
      const double mag = scalar_sum(0, 16, [&](std::size_t k) { return std::abs(double(data[(t * 16 + i) * 16 + k])); });
      REQUIRE(std::abs(one - want) <= test::kFp32RelTol * (mag + test::kTiny));
    }
  }
}

TEST_CASE("reduce16_rows_epi32: lane i is the int32 sum of vector i's 16 lanes") {
  std::vector<std::int32_t> data(16 * 16 * 20);
  std::uint32_t state = 12345;
  for (auto& d : data) {  // wide values: sums reach past 2^27
    state = state * 1664525u + 1013904223u;
    d = static_cast<std::int32_t>(state >> 5) - (1 << 26);  // |sum| < 2^30: no wrap-around
  }
  for (std::size_t t = 0; t < 20; ++t) {
    __m512i rows[16];
    for (std::size_t i = 0; i < 16; ++i) rows[i] = _mm512_loadu_si512(data.data() + (t * 16 + i) * 16);
    alignas(64) std::int32_t out[16];
    _mm512_store_si512(out, quant::avx512::reduce16_rows_epi32(rows));
    for (std::size_t i = 0; i < 16; ++i) {
      CAPTURE(i);
      std::int64_t want = 0;
      for (std::size_t k = 0; k < 16; ++k) want += data[(t * 16 + i) * 16 + k];
      REQUIRE(static_cast<std::int64_t>(out[i]) == want);
    }
  }
}

TEST_CASE("tail8_rows16: lane i is tail8 of row i bit for bit, and reads nothing past the last row's n") {
  const std::size_t cols = 200, stride = 211;
  for (const std::size_t c0 : {0, 128}) {
    for (std::size_t n = c0 + 1; n <= cols; n += (n < c0 + 40 ? 1 : 13)) {
      CAPTURE(c0);
      CAPTURE(n);
      std::vector<std::int8_t> w(15 * stride + n);  // ends at the last row's column n
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(static_cast<int>((i * 37 + i / 7) % 255) - 127);
      const auto x = test::random_vector(n, 3 + n, -2.f, 2.f);
      alignas(64) float out[16];
      _mm512_store_ps(out, quant::avx512::tail8_rows16(w.data(), stride, c0, n, x.data()));
      for (std::size_t i = 0; i < 16; ++i) {
        const float one = quant::avx512::tail8(w.data() + i * stride, c0, n, x.data());
        REQUIRE(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(one));
      }
    }
  }
}

TEST_CASE("tail4: natural-order 4-bit tail with a table of levels and a scale per group of `span` columns equals the scalar loop") {
  const std::size_t cols = 128 + 75;
  alignas(64) float lev[16];
  for (int k = 0; k < 16; ++k) lev[k] = 0.25f * static_cast<float>(k - 8) + (k == 3 ? 0.1f : 0.0f);  // not integers
  const __m512 base = _mm512_load_ps(lev);
  std::vector<std::uint8_t> codes(cols);
  for (std::size_t c = 0; c < cols; ++c) codes[c] = static_cast<std::uint8_t>((c * 7 + c / 5) % 16);
  const auto x = test::random_vector(cols, 2, -2.f, 2.f);
  // span 0: one scale for the whole tail (asked once, at its first column)
  for (const std::size_t span : {16u, 32u, 48u, 64u, 0u}) {
    CAPTURE(span);
    const auto scale_of = [span](std::size_t c) {
      return span == 0 ? 0.75f : 0.5f + 0.125f * static_cast<float>(c / span % 5);
    };
    for (std::size_t n = 128; n <= cols; ++n) {
      CAPTURE(n);
      std::vector<std::uint8_t> row((n + 1) / 2, 0);  // natural order: byte c/2 holds columns c (low) and c+1 (high)
      for (std::size_t c = 0; c < n; ++c) row[c / 2] |= static_cast<std::uint8_t>(codes[c] << (4 * (c % 2)));
      std::vector<float> xn(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
      const double want = scalar_sum(128, n, [&](std::size_t c) { return double(lev[codes[c]]) * scale_of(c) * double(xn[c]); });
      const double mag = scalar_sum(128, n, [&](std::size_t c) { return std::abs(double(lev[codes[c]]) * scale_of(c) * double(xn[c])); });
      std::size_t asked = 0;  // scale_at is asked once per group the tail touches, at its first column there
      const auto scale_at = [&](std::size_t c) {
        ++asked;
        REQUIRE((c == 128 || (span != 0 && c % span == 0)));
        return scale_of(c);
      };
      REQUIRE(std::abs(quant::avx512::tail4(row.data(), 128, n, xn.data(), base, scale_at, span) - want) <=
              test::kFp32RelTol * (mag + test::kTiny));
      const std::size_t groups = span == 0 ? 1 : (n - 1) / span - 128 / span + 1;
      CHECK(asked == (n > 128 ? groups : 0));
    }
  }
}

#else
TEST_CASE("quant/avx512_tails.hpp: not compiled (the translation unit does not enable AVX-512 BW and VL)") {
  MESSAGE("AVX-512 BW/VL not enabled: the tail helpers are not built, nothing to test");
}
#endif
