#include "barato/kv/block_allocator.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "barato/core/memory.hpp"

using namespace barato;
using Ids = std::vector<kv::BlockAllocator::BlockId>;

TEST_CASE("block allocator: counts, and a free list that reuses clean blocks first and evicts cached ones oldest first") {
  kv::BlockAllocator a(6, 6);
  CHECK(a.free_blocks() == 6);
  CHECK(a.free_list() == Ids{0, 1, 2, 3, 4, 5});
  const auto t0 = a.take(kv::BlockAllocator::kNoBlock);
  CHECK(t0.block == 0);
  CHECK_FALSE(t0.evicted);
  CHECK(a.refcount(0) == 1);
  CHECK(a.take(0).block == 1);  // the block after the caller's page
  CHECK(a.take(1).block == 2);
  a.retain(1);  // a fork
  CHECK(a.shared(1));
  CHECK_FALSE(a.shared(0));
  CHECK(a.used_blocks() == 3);
  a.set_cached(0, true);
  a.set_cached(2, true);
  a.release(2);  // cached: to the back
  a.release(0);
  a.release(1);  // still referenced once
  CHECK(a.refcount(1) == 1);
  CHECK(a.free_list() == Ids{3, 4, 5, 2, 0});
  a.release(1);  // clean: to the front
  CHECK(a.free_list() == Ids{1, 3, 4, 5, 2, 0});
  // clean blocks go first: the block after the caller's page (2 + 1 = 3), else the list head
  CHECK(a.take(2).block == 3);
  CHECK(a.take(kv::BlockAllocator::kNoBlock).block == 1);
  CHECK(a.take(1).block == 4);  // after 1 comes 2, which is cached: the list head (4)
  CHECK(a.take(4).block == 5);
  // then the cached block freed longest ago, evicted
  const auto e = a.take(5);
  CHECK(e.block == 2);
  CHECK(e.evicted);
  CHECK_FALSE(a.is_cached(2));
  // a prefix hit on a free cached block takes it off the list
  CHECK(a.is_cached(0));
  a.retain(0);
  CHECK(a.free_blocks() == 0);
  CHECK(a.refcount(0) == 1);
  CHECK_THROWS_AS((void)a.refcount(6), std::out_of_range);
}

TEST_CASE("block allocator: new runs start at wholly free clean extents, round robin") {
  kv::BlockAllocator a(10, 4);  // extents {0..3}, {4..7}, {8, 9}
  CHECK(a.extent() == 4);
  CHECK(a.take(kv::BlockAllocator::kNoBlock).block == 0);
  CHECK(a.take(kv::BlockAllocator::kNoBlock).block == 4);  // extent 0 is no longer wholly free
  CHECK(a.take(kv::BlockAllocator::kNoBlock).block == 8);  // the short last extent counts when whole
  CHECK(a.take(8).block == 9);
  CHECK(a.take(9).block == 1);  // no whole extent left, 10 does not exist: the list head
  a.release(4);                 // extent 1 is wholly free again
  CHECK(a.take(1).block == 2);  // the next block still comes first
  CHECK(a.take(kv::BlockAllocator::kNoBlock).block == 4);
  // a cached free block keeps its extent from counting as clean
  kv::BlockAllocator c(8, 4);
  CHECK(c.take(kv::BlockAllocator::kNoBlock).block == 0);
  CHECK(c.take(kv::BlockAllocator::kNoBlock).block == 4);  // the round robin is back at extent 0
  c.set_cached(0, true);
  c.release(0);
  c.release(4);  // the list head; extent 1 is wholly free and clean again, extent 0 is not
  CHECK(c.take(kv::BlockAllocator::kNoBlock).block == 4);
  CHECK(c.take(kv::BlockAllocator::kNoBlock).block == 1);  // no whole clean extent: the head
}

TEST_CASE("block allocator: its arrays come from the given resource, allocated once") {
  CountingResource mem;
  {
    kv::BlockAllocator a(100, 16, &mem);
    const std::size_t n = mem.allocations();
    CHECK(n > 0);
    CHECK(mem.current() >= 100 * (sizeof(std::uint32_t) + 1 + 2 * sizeof(std::uint32_t)));
    for (int i = 0; i < 50; ++i) (void)a.take(kv::BlockAllocator::kNoBlock);
    for (kv::BlockAllocator::BlockId b = 0; b < 20; ++b) a.release(b);
    CHECK(mem.allocations() == n);  // take / retain / release allocate nothing
  }
  CHECK(mem.current() == 0);
}
