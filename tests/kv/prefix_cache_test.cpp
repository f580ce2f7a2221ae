#include "barato/kv/prefix_cache.hpp"

#include <doctest/doctest.h>

#include <vector>

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
