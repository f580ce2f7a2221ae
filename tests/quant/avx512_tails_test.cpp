// quant/avx512_tails.hpp: the masked 16-column tail loops of the AVX-512 kernels, against plain loops.
#include "barato/quant/avx512_tails.hpp"

#include <doctest/doctest.h>

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

TEST_CASE("tail4: natural-order 4-bit tail with a table of levels and a scale per 16 columns equals the scalar loop") {
  const std::size_t cols = 128 + 75;
  alignas(64) float lev[16];
  for (int k = 0; k < 16; ++k) lev[k] = 0.25f * static_cast<float>(k - 8) + (k == 3 ? 0.1f : 0.0f);  // not integers
  const __m512 base = _mm512_load_ps(lev);
  std::vector<std::uint8_t> codes(cols);
  for (std::size_t c = 0; c < cols; ++c) codes[c] = static_cast<std::uint8_t>((c * 7 + c / 5) % 16);
  const auto x = test::random_vector(cols, 2, -2.f, 2.f);
  auto scale_at = [](std::size_t c) { return 0.5f + 0.125f * static_cast<float>(c / 16 % 5); };
  for (std::size_t n = 128; n <= cols; ++n) {
    CAPTURE(n);
    std::vector<std::uint8_t> row((n + 1) / 2, 0);  // natural order: byte c/2 holds columns c (low) and c+1 (high)
    for (std::size_t c = 0; c < n; ++c) row[c / 2] |= static_cast<std::uint8_t>(codes[c] << (4 * (c % 2)));
    std::vector<float> xn(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    const double want = scalar_sum(128, n, [&](std::size_t c) { return double(lev[codes[c]]) * scale_at(c) * double(xn[c]); });
    const double mag = scalar_sum(128, n, [&](std::size_t c) { return std::abs(double(lev[codes[c]]) * scale_at(c) * double(xn[c])); });
    REQUIRE(std::abs(quant::avx512::tail4(row.data(), 128, n, xn.data(), base, scale_at) - want) <=
            test::kFp32RelTol * (mag + test::kTiny));
  }
}

#else
TEST_CASE("quant/avx512_tails.hpp: not compiled (the translation unit does not enable AVX-512 BW and VL)") {
  MESSAGE("AVX-512 BW/VL not enabled: the tail helpers are not built, nothing to test");
}
#endif
