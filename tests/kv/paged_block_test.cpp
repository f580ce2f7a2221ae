#include "barato/kv/paged_block.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace barato;

// The view's layout facts over a hand-made page table: pages of B = 4 rows of stride 3 (head_dim ≤ 3),
// physical pages one page (12 elements) apart; logical pages 0-1 are physical 5-6 (consecutive),
// page 2 is physical 2 and page 3 physical 3.
TEST_CASE("paged block view: offset, offsets, consecutive, pages and page(i) follow the page table") {
  constexpr std::size_t B = 4, stride = 3, n = 14;
  const std::vector<std::uint32_t> table = {5, 6, 2, 3};
  std::vector<float> k(8 * B * stride), v(8 * B * stride);
  const kv::PagedBlock<float> blk{.k = k.data(), .v = v.data(), .table = table.data(), .page_rows = B,
                                  .page_stride = B * stride, .n = n, .stride = stride, .pos0 = 100};
  CHECK(blk.pages() == 4);
  for (std::size_t r = 0; r < n; ++r) CHECK(blk.offset(r) == table[r / B] * B * stride + (r % B) * stride);
  for (std::size_t r = 0; r < n; ++r)  // offsets(r, m) is offset() of each row, from any start to the end
    for (std::size_t m = 0; r + m <= n; ++m) {
      std::vector<std::size_t> offs(m + 1, 999);
      blk.offsets(r, m, offs.data());
      for (std::size_t j = 0; j < m; ++j) CHECK(offs[j] == blk.offset(r + j));
      CHECK(offs[m] == 999);  // writes n entries, no more
    }
  CHECK(blk.consecutive(0, 8));        // pages 0, 1 = physical 5, 6
  CHECK(blk.consecutive(5, 3));        // inside the run
  CHECK_FALSE(blk.consecutive(6, 3));  // rows 6-8: page 1 → page 2 jumps back
  CHECK(blk.consecutive(8, 6));        // pages 2, 3 = physical 2, 3
  CHECK(blk.consecutive(9, 1));        // one row is always at one stride
  const kv::DenseBlock<float> last = blk.page(3);
  CHECK(last.k == k.data() + 3 * B * stride);
  CHECK(last.v == v.data() + 3 * B * stride);
  CHECK(last.n == n - 3 * B);
  CHECK(last.stride == stride);
  CHECK(last.pos0 == 100 + 3 * B);

  // pages padded apart (page stride larger than one page): consecutive() answers for stored-back-to-back
  // pages only, so it is false everywhere (the kernel then reads through the page table)
  kv::PagedBlock<float> padded = blk;
  padded.page_stride = B * stride + 1;
  CHECK_FALSE(padded.consecutive(0, 8));
  CHECK_FALSE(padded.consecutive(0, 4));
  CHECK(padded.offset(5) == 6 * (B * stride + 1) + stride);
  std::size_t offs[3];
  padded.offsets(3, 3, offs);
  CHECK(offs[0] == 5 * (B * stride + 1) + 3 * stride);
  CHECK(offs[1] == 6 * (B * stride + 1));
  CHECK(offs[2] == 6 * (B * stride + 1) + stride);
}

TEST_CASE("pages_follow: each page in (p0, p1] is the physical page after the one before") {
  const std::vector<std::uint32_t> table = {7, 8, 9, 3, 4, 4};
  CHECK(kv::detail::pages_follow(table.data(), 0, 2));
  CHECK(kv::detail::pages_follow(table.data(), 1, 1));
  CHECK_FALSE(kv::detail::pages_follow(table.data(), 2, 3));
  CHECK(kv::detail::pages_follow(table.data(), 3, 4));
  CHECK_FALSE(kv::detail::pages_follow(table.data(), 3, 5));
}
