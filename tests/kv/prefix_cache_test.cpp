#include "barato/kv/prefix_cache.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/core/memory.hpp"

using namespace barato;

TEST_CASE("prefix hash chains: equal hash means equal whole prefix, not only an equal block") {
  const std::vector<Token> a{1, 2, 3, 4}, b{1, 2, 3, 5}, c{4, 3, 2, 1};
  const auto ha = kv::block_hash(kv::kRootHash, a);
  CHECK(ha == kv::block_hash(kv::kRootHash, a));
  CHECK(ha != kv::block_hash(kv::kRootHash, b));
  CHECK(ha != kv::block_hash(kv::kRootHash, c));  // order matters
  // the same block after different prefixes hashes differently
  CHECK(kv::block_hash(ha, a) != kv::block_hash(kv::block_hash(kv::kRootHash, b), a));
  CHECK(kv::block_hash(kv::kRootHash, std::vector<Token>{0}) != kv::block_hash(kv::kRootHash, std::vector<Token>{0, 0}));
}

TEST_CASE("prefix index: insert, find, erase as eviction vs modification; statistics by stop reason") {
  kv::PrefixIndex idx;
  CHECK(idx.find(42) == kv::PrefixIndex::kNone);
  CHECK(idx.insert(42, 7));
  CHECK_FALSE(idx.insert(42, 8));  // first block registered under a prefix wins
  CHECK(idx.find(42) == 7);
  idx.erase(42, /*evicted=*/true);
  CHECK(idx.find(42) == kv::PrefixIndex::kNone);
  CHECK(idx.was_evicted(42));
  CHECK(idx.insert(42, 9));
  CHECK_FALSE(idx.was_evicted(42));
  idx.erase(42, /*evicted=*/false);
  CHECK_FALSE(idx.was_evicted(42));
  CHECK(idx.size() == 0);

  kv::PrefixCacheStats st;
  st.count({.cached_tokens = 32, .blocks_hit = 2, .usable_blocks = 3, .stop = kv::PrefixMiss::differs});
  st.count({.cached_tokens = 0, .blocks_hit = 0, .usable_blocks = 0, .stop = kv::PrefixMiss::too_short});
  st.count({.cached_tokens = 16, .blocks_hit = 1, .usable_blocks = 1, .stop = kv::PrefixMiss::none});
  st.count({.cached_tokens = 0, .blocks_hit = 0, .usable_blocks = 4, .stop = kv::PrefixMiss::evicted});
  CHECK(st.lookups == 4);
  CHECK(st.lookups_with_hit == 2);
  CHECK(st.blocks_hit == 3);
  CHECK(st.tokens_saved == 48);
  CHECK(st.miss_differs == 1);
  CHECK(st.miss_too_short == 1);
  CHECK(st.stop_full == 1);
  CHECK(st.miss_evicted == 1);
  CHECK(kv::to_string(kv::PrefixMiss::evicted) == "evicted");
}

TEST_CASE("extend_hash_chain: one hash per full block, each chained to the one before, extended incrementally") {
  const std::vector<Token> t{1, 2, 3, 4, 5, 6, 7};
  std::vector<std::uint64_t> h;
  kv::extend_hash_chain(std::span<const Token>(t).first(3), 2, h);
  REQUIRE(h.size() == 1);
  CHECK(h[0] == kv::block_hash(kv::kRootHash, std::vector<Token>{1, 2}));
  kv::extend_hash_chain(t, 2, h);  // the same tokens, grown: only the new full blocks are hashed
  REQUIRE(h.size() == 3);
  CHECK(h[1] == kv::block_hash(h[0], std::vector<Token>{3, 4}));
  CHECK(h[2] == kv::block_hash(h[1], std::vector<Token>{5, 6}));
}

TEST_CASE("prefix index: both of its sets allocate from the given resource") {
  CountingResource mem;
  {
    kv::PrefixIndex idx(&mem);
    for (std::uint64_t i = 0; i < 100; ++i) CHECK(idx.insert(i, static_cast<std::uint32_t>(i)));
    const std::size_t map_only = mem.current();
    CHECK(map_only > 0);
    for (std::uint64_t i = 0; i < 50; ++i) idx.erase(i, /*evicted=*/true);
    CHECK(idx.was_evicted(3));
    CHECK(mem.allocations() > 100);  // nodes of both sets
  }
  CHECK(mem.current() == 0);
}
