#include "barato/kv/prefix_cache.hpp"

#include <doctest/doctest.h>

#include <iterator>
#include <map>
#include <random>
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
  kv::PrefixIndex idx(16);
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

TEST_CASE("prefix index: allocates from the given resource at construction only, for any sequence of operations") {
  CountingResource mem;
  {
    kv::PrefixIndex idx(100, &mem);
    const std::size_t built = mem.allocations();
    CHECK(mem.current() > 0);
    for (std::uint64_t i = 0; i < 100; ++i) CHECK(idx.insert(kv::detail::mix64(i), static_cast<std::uint32_t>(i)));
    for (std::uint64_t i = 0; i < 50; ++i) idx.erase(kv::detail::mix64(i), /*evicted=*/true);
    CHECK(idx.was_evicted(kv::detail::mix64(3)));
    CHECK(idx.size() == 50);
    CHECK(mem.allocations() == built);
  }
  CHECK(mem.current() == 0);
}

TEST_CASE("prefix index: matches a reference map and set over random inserts and erases (colliding home slots included)") {
  // 64 blocks in 128 slots; keys share their low bits often (i << 7 | small) so probe runs wrap and
  // backward-shift deletion is exercised.
  constexpr std::uint32_t kBlocks = 64;
  kv::PrefixIndex idx(kBlocks);
  std::map<std::uint64_t, std::uint32_t> ref;           // registered hash -> block
  std::map<std::uint32_t, std::uint64_t> ref_evicted;   // block -> hash last evicted from it
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> keys;
  for (std::uint64_t i = 0; i < 200; ++i) keys.push_back((rng() << 7) | (rng() % 5) | (i % 2 == 0 ? 127 : 0));
  auto block_free = [&](std::uint32_t b) {
    for (const auto& [k, v] : ref)
      if (v == b) return false;
    return true;
  };
  for (int step = 0; step < 20000; ++step) {
    const std::uint64_t key = keys[rng() % keys.size()];
    const auto it = ref.find(key);
    if (rng() % 2 == 0 && ref.size() < kBlocks) {
      const auto b = static_cast<std::uint32_t>(rng() % kBlocks);
      if (!block_free(b)) continue;  // a block holds one registered hash at a time
      const bool added = idx.insert(key, b);
      CHECK(added == (it == ref.end()));
      if (added) {
        ref[key] = b;
        for (auto e = ref_evicted.begin(); e != ref_evicted.end();)
          e = e->second == key ? ref_evicted.erase(e) : std::next(e);
      }
    } else if (it != ref.end()) {
      const bool evicted = rng() % 2 == 0;
      idx.erase(key, evicted);
      if (evicted) ref_evicted[it->second] = key;
      ref.erase(it);
    }
    REQUIRE(idx.size() == ref.size());
    if (step % 97 == 0)
      for (const std::uint64_t k : keys) {
        const auto r = ref.find(k);
        REQUIRE(idx.find(k) == (r == ref.end() ? kv::PrefixIndex::kNone : r->second));
        bool ev = false;
        for (const auto& [b, h] : ref_evicted) ev = ev || h == k;
        REQUIRE(idx.was_evicted(k) == ev);
      }
  }
}
