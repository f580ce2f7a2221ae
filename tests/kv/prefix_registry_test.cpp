#include "barato/kv/prefix_registry.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/core/memory.hpp"

using namespace barato;
using kv::PrefixMiss;

namespace {
/// The chain hashes of the full blocks of B tokens of `t`.
std::vector<std::uint64_t> chain(const std::vector<Token>& t, std::size_t B) {
  std::vector<std::uint64_t> h;
  kv::extend_hash_chain(t, B, h);
  return h;
}
/// Registers block i of `t` (chain `h`) as physical block `b`.
bool add(kv::PrefixRegistry& r, std::uint32_t b, const std::vector<Token>& t, const std::vector<std::uint64_t>& h,
         std::size_t i, std::size_t B) {
  return r.insert(b, h[i], i == 0 ? kv::kRootHash : h[i - 1], std::span<const Token>(t).subspan(i * B, B));
}
}  // namespace

TEST_CASE("prefix registry: lookup follows the chain of registered blocks, read-only, and names why it stops") {
  const std::size_t B = 4;
  kv::PrefixRegistry r(8, B, true);
  std::vector<Token> t(13);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<Token>(10 + i);
  const auto h = chain(t, B);
  REQUIRE(h.size() == 3);
  CHECK(add(r, 5, t, h, 0, B));
  CHECK(add(r, 2, t, h, 1, B));
  CHECK_FALSE(add(r, 7, t, h, 1, B));  // the prefix is registered in block 2 already
  CHECK(r.cached_blocks() == 2);
  CHECK(r.stats().blocks_registered == 2);

  std::vector<std::uint32_t> hits;
  auto m = r.lookup(t, [&](std::uint32_t b) { hits.push_back(b); });
  CHECK(hits == std::vector<std::uint32_t>{5, 2});
  CHECK(m.blocks_hit == 2);
  CHECK(m.cached_tokens == 8);
  CHECK(m.usable_blocks == 3);
  CHECK(m.stop == PrefixMiss::differs);  // block 2 of t was never registered
  CHECK(r.stats().lookups == 0);         // lookups are counted only when acted on
  r.count(m);
  CHECK(r.stats().lookups == 1);
  CHECK(r.stats().tokens_saved == 8);

  // the last prompt token is always computed: a prompt of exactly 2 blocks reuses 1
  const std::vector<Token> two(t.begin(), t.begin() + 8);
  CHECK(r.lookup(two, [](std::uint32_t) {}).blocks_hit == 1);
  CHECK(r.lookup(std::vector<Token>(t.begin(), t.begin() + 4), [](std::uint32_t) {}).stop == PrefixMiss::too_short);

  // the same block after another prefix is a different entry: no hit
  std::vector<Token> u = t;
  u[0] = 99;
  CHECK(r.lookup(u, [](std::uint32_t) {}).blocks_hit == 0);

  // rewritten (forget) vs reclaimed (evict): only an eviction is reported as such
  r.forget(2);
  m = r.lookup(t, [](std::uint32_t) {});
  CHECK(m.blocks_hit == 1);
  CHECK(m.stop == PrefixMiss::differs);
  CHECK(add(r, 2, t, h, 1, B));
  r.evict(2);
  m = r.lookup(t, [](std::uint32_t) {});
  CHECK(m.blocks_hit == 1);
  CHECK(m.stop == PrefixMiss::evicted);
  CHECK(r.stats().blocks_evicted == 1);
  CHECK(r.cached_blocks() == 1);
}

TEST_CASE("prefix registry: a hit verifies the stored tokens and parent, not only the hash") {
  const std::size_t B = 2;
  kv::PrefixRegistry r(4, B, true);
  const std::vector<Token> t{1, 2, 3, 4, 5};
  const auto h = chain(t, B);
  // register block 0 under the right hash but with other tokens (what a 64-bit collision would look like)
  const std::vector<Token> wrong{7, 7};
  CHECK(r.insert(3, h[0], kv::kRootHash, wrong));
  const auto m = r.lookup(t, [](std::uint32_t) { FAIL("no block may be reused"); });
  CHECK(m.blocks_hit == 0);
  CHECK(m.stop == PrefixMiss::differs);
}

TEST_CASE("prefix registry: disabled, it misses every lookup; its arrays come from the given resource") {
  CountingResource mem;
  {
    const std::size_t B = 4;
    kv::PrefixRegistry off(8, B, false, &mem);
    CHECK_FALSE(off.enabled());
    std::vector<Token> t(9, 1);
    const auto m = off.lookup(t, [](std::uint32_t) { FAIL("disabled"); });
    CHECK(m.stop == PrefixMiss::differs);
    CHECK(m.usable_blocks == 2);
    CHECK(mem.current() >= 8 * (2 * sizeof(std::uint64_t) + B * sizeof(Token)));
    const std::size_t disabled = mem.current();
    kv::PrefixRegistry on(8, B, true, &mem);
    CHECK(mem.current() > 2 * disabled);  // the hash index too, sized for every block up front
    const std::size_t before = mem.allocations();
    const auto h = chain(t, B);
    CHECK(add(on, 0, t, h, 0, B));
    CHECK(mem.allocations() == before);  // registering allocates nothing (it cannot throw)
  }
  CHECK(mem.current() == 0);
}
