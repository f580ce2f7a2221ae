#include "barato/quant/format.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

using namespace barato::quant;

TEST_CASE("4-bit packing: 128-code chunks interleaved by 32-bit word, then a natural-order tail") {
  using P = CodePacking<4>;
  const std::size_t cols = 300;  // two chunks and a 44-code tail
  CHECK(P::row_bytes(cols) == 150);
  // code 16k + j of a chunk: word j, bits 4k..4k+3
  CHECK(P::locate(0, cols).byte == 0);
  CHECK(P::locate(1, cols).byte == 4);
  CHECK(P::locate(16, cols).byte == 0);
  CHECK(P::locate(16, cols).shift == 4);
  CHECK(P::locate(32, cols).byte == 1);
  CHECK(P::locate(16 * 7 + 15, cols).byte == 4 * 15 + 3);
  CHECK(P::locate(16 * 7 + 15, cols).shift == 4);
  CHECK(P::locate(128, cols).byte == 64);
  CHECK(P::locate(256, cols).byte == 128);  // the tail: byte p/2, low nibble first
  CHECK(P::locate(257, cols).shift == 4);
  CHECK(P::locate(299, cols).byte == 149);
  // every (byte, nibble) is used exactly once, and get(set(x)) == x
  std::set<std::pair<std::size_t, unsigned>> seen;
  std::vector<std::uint8_t> row(P::row_bytes(cols), 0);
  for (std::size_t c = 0; c < cols; ++c) {
    const auto s = P::locate(c, cols);
    CHECK(seen.insert({s.byte, s.shift}).second);
    P::set(row.data(), c, cols, static_cast<std::uint8_t>(c % 16));
  }
  for (std::size_t c = 0; c < cols; ++c) CHECK(P::get(row.data(), c, cols) == c % 16);
}

TEST_CASE("8- and 2-bit packing is column order") {
  CHECK(CodePacking<8>::locate(37, 100).byte == 37);
  CHECK(CodePacking<2>::locate(37, 100).byte == 9);
  CHECK(CodePacking<2>::locate(37, 100).shift == 2);
  CHECK(CodePacking<2>::row_bytes(61) == 16);
  std::vector<std::uint8_t> row(16, 0);
  for (std::size_t c = 0; c < 61; ++c) CodePacking<2>::set(row.data(), c, 61, static_cast<std::uint8_t>(c % 4));
  for (std::size_t c = 0; c < 61; ++c) CHECK(CodePacking<2>::get(row.data(), c, 61) == c % 4);
}

TEST_CASE("granularities count their scales") {
  CHECK(PerTensor::scale_count(10, 20) == 1);
  CHECK(PerRow::scale_count(10, 20) == 10);
  CHECK(PerGroup<32>::scale_count(10, 172) == 60);  // 6 groups per row, the last holds 12
  static_assert(Granularity<PerGroup<128>>);
}
