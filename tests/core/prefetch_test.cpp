#include "barato/core/prefetch.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <numeric>
#include <vector>

TEST_CASE("prefetch_l2 reads nothing into the program: buffers are unchanged, any length and alignment") {
  std::vector<unsigned char> buf(3 * barato::kCacheLineBytes + 5);
  std::iota(buf.begin(), buf.end(), static_cast<unsigned char>(1));
  const std::vector<unsigned char> before = buf;
  for (std::size_t off = 0; off < 7; ++off)
    for (std::size_t len = 0; off + len <= buf.size(); len += 13) barato::prefetch_l2(buf.data() + off, len);
  barato::prefetch_l2(buf.data(), 0);
  CHECK(buf == before);
}
