#include "barato/kv/quant_block.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace barato;

TEST_CASE("paged quantized block view: row(), the row interface and page(i) follow the page table") {
  for (const std::size_t B : {4, 6}) {  // a power of two (shift) and not (division)
    CAPTURE(B);
    constexpr std::size_t kb = 5, vb = 3;  // bytes per key / value code row
    const std::size_t n = 3 * B - 1;
    // 3 logical pages; a 4th table entry that would follow page 2 shows that page_follows stops at pages()
    const std::vector<std::uint32_t> table = {2, 0, 1, 2};
    std::vector<std::uint8_t> k(4 * B * kb), v(4 * B * vb);
    std::vector<float> ks(4 * B), vs(4 * B);
    using Blk = kv::PagedQuantBlock<kv::Int8, kv::Int4>;
    const Blk blk{k.data(), ks.data(), v.data(), vs.data(), table.data(), B, B, n, kb, vb, 7, Blk::shift_for(B)};
    CHECK((blk.page_shift == Blk::kNoShift) == (B == 6));
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t phys = table[r / B] * B + r % B;
      CHECK(blk.row(r) == phys);
      CHECK(blk.k_row(r) == k.data() + phys * kb);
      CHECK(blk.v_row(r) == v.data() + phys * vb);
      CHECK(&blk.k_scale[0] + phys == &ks[phys]);
    }
    ks[table[1] * B + 2] = 0.25f;
    vs[table[1] * B + 2] = 0.5f;
    CHECK(blk.k_scale_at(B + 2) == 0.25f);
    CHECK(blk.v_scale_at(B + 2) == 0.5f);
    CHECK(blk.pages() == 3);
    // page 1 (physical 0) does not follow page 0 (physical 2); page 2 (physical 1) follows page 1
    CHECK_FALSE(blk.page_follows(1));
    CHECK(blk.page_follows(2));
    CHECK_FALSE(blk.page_follows(0));  // no predecessor
    CHECK_FALSE(blk.page_follows(3));  // past the last page
    const kv::QuantBlock<kv::Int8, kv::Int4> pg = blk.page(2);
    CHECK(pg.n == n - 2 * B);
    CHECK(pg.pos0 == 7 + 2 * B);
    CHECK(pg.k_row(1) == blk.k_row(2 * B + 1));
    CHECK(pg.v_row(1) == blk.v_row(2 * B + 1));
    CHECK(pg.k_scale + 1 == &ks[table[2] * B + 1]);
  }
  CHECK(kv::PagedQuantBlock<kv::Int8, kv::Int8>::shift_for(16) == 4);
  CHECK(kv::PagedQuantBlock<kv::Int8, kv::Int8>::shift_for(1) == 0);
  CHECK(kv::PagedQuantBlock<kv::Int8, kv::Int8>::shift_for(0) == kv::PagedQuantBlock<kv::Int8, kv::Int8>::kNoShift);
}

TEST_CASE("paged quantized block view: page_follows needs pages stored back to back") {
  const std::vector<std::uint32_t> table = {0, 1};
  std::vector<std::uint8_t> k(64), v(64);
  std::vector<float> s(32);
  using Blk = kv::PagedQuantBlock<kv::Int8, kv::Int8>;
  Blk blk{k.data(), s.data(), v.data(), s.data(), table.data(), 4, 4, 8, 1, 1, 0, Blk::shift_for(4)};
  CHECK(blk.page_follows(1));
  blk.page_stride = 8;  // pages 8 rows apart: physical page 1 is not right after page 0
  CHECK_FALSE(blk.page_follows(1));
}

TEST_CASE("quant block view: rows at their strides") {
  std::vector<std::uint8_t> k(40), v(40);
  std::vector<float> ks(8), vs(8);
  const kv::QuantBlock<kv::Int4, kv::Int8> blk{k.data(), ks.data(), v.data(), vs.data(), 8, 5, 4, 3};
  CHECK(blk.k_row(3) == k.data() + 15);
  CHECK(blk.v_row(3) == v.data() + 12);
  vs[6] = 2.0f;
  CHECK(blk.v_scale_at(6) == 2.0f);
}
