#include "barato/kv/paged.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/quantized.hpp"
#include "support/fault_injection.hpp"
#include "support/reference.hpp"

using namespace barato;
using kv::SeqId;

namespace {

// K/V rows in these tests are a function of (layer, position, the tokens up to and including that
// position, head, column) — as in a real model — so a reused prefix block must hold exactly what
// recomputation would write, and every stored element can be checked against its definition.
std::uint64_t prefix_key(const std::vector<Token>& toks, std::size_t pos) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i <= pos; ++i) h = (h ^ static_cast<std::uint32_t>(toks[i])) * 1099511628211ULL;
  return h;
}
float element(std::uint64_t key, std::size_t layer, std::size_t head, std::size_t c, bool value) {
  std::uint64_t x = key ^ (layer * 0x9E3779B97F4A7C15ULL) ^ (head << 40) ^ (c << 20) ^ (value ? 0xABCDEFULL : 0);
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct Shape {
  std::size_t L = 2, H = 2, d = 16, B = 16;
};

/// Rows [n, H, d] of positions [p0, p1) for one layer.
void rows_for(const std::vector<Token>& toks, std::size_t layer, std::size_t p0, std::size_t p1, const Shape& s,
              std::vector<float>& k, std::vector<float>& v) {
  k.clear();
  v.clear();
  for (std::size_t p = p0; p < p1; ++p) {
    const std::uint64_t key = prefix_key(toks, p);
    for (std::size_t h = 0; h < s.H; ++h)
      for (std::size_t c = 0; c < s.d; ++c) {
        k.push_back(element(key, layer, h, c, false));
        v.push_back(element(key, layer, h, c, true));
      }
  }
}

/// Appends positions [size, toks.size()) of every layer (the "model prefill").
void fill(kv::PagedPool<float>& pool, SeqId id, const std::vector<Token>& toks, const Shape& s) {
  std::vector<float> k, v;
  for (std::size_t l = 0; l < s.L; ++l) {
    rows_for(toks, l, pool.size(id, l), toks.size(), s, k, v);
    pool.append(id, l, k, v);
  }
}

struct Snapshot {
  std::vector<std::vector<std::uint32_t>> tables;
  std::vector<std::size_t> sizes;
  std::vector<std::uint32_t> refs;
  std::vector<std::uint32_t> free;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const kv::PagedPool<float>& pool, const std::vector<SeqId>& ids) {
  Snapshot s;
  for (const SeqId id : ids) {
    const auto t = pool.block_table(id);
    s.tables.emplace_back(t.begin(), t.end());
    for (std::size_t l = 0; l < pool.n_layers(); ++l) s.sizes.push_back(pool.size(id, l));
  }
  for (std::uint32_t b = 0; b < pool.n_blocks(); ++b) s.refs.push_back(pool.refcount(b));
  s.free = pool.free_list();
  return s;
}

}  // namespace

TEST_CASE("paged: fork shares blocks, append into a shared partial block copies it, release frees") {
  const Shape s;
  kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 8});
  std::vector<Token> a(40);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<Token>(i % 7);
  const SeqId x = pool.add_sequence();
  pool.declare_tokens(x, a);
  fill(pool, x, a, s);
  CHECK(pool.used_blocks() == 3);
  const SeqId y = pool.fork(x);
  CHECK(pool.used_blocks() == 3);
  for (const auto b : pool.block_table(x)) CHECK(pool.refcount(b) == 2);
  CHECK(std::equal(pool.block_table(x).begin(), pool.block_table(x).end(), pool.block_table(y).begin()));

  // y appends one token: block 2 (8 of 16 rows filled) is shared → copied; blocks 0, 1 stay shared.
  std::vector<Token> b = a;
  b.push_back(99);
  pool.declare_tokens(y, std::span<const Token>(b).last(1));
  fill(pool, y, b, s);
  CHECK(pool.used_blocks() == 4);
  CHECK(pool.block_table(x)[2] != pool.block_table(y)[2]);
  CHECK(pool.block_table(x)[1] == pool.block_table(y)[1]);
  CHECK(pool.refcount(pool.block_table(x)[2]) == 1);
  CHECK(pool.refcount(pool.block_table(x)[0]) == 2);
  // x still sees its own rows; y sees the copy plus its new row.
  CHECK(pool.key(x, 1, 1, 39)[3] == element(prefix_key(a, 39), 1, 1, 3, false));
  CHECK(pool.key(y, 1, 1, 39)[3] == element(prefix_key(b, 39), 1, 1, 3, false));
  CHECK(pool.value(y, 0, 0, 40)[5] == element(prefix_key(b, 40), 0, 0, 5, true));
  CHECK(pool.size(x, 0) == 40);

  pool.release(x);
  CHECK(pool.used_blocks() == 3);  // x's private block 2 returned
  pool.release(y);
  CHECK(pool.used_blocks() == 0);
  CHECK(pool.free_blocks() == 8);
  CHECK_THROWS_AS(pool.release(y), shape_error);
}

TEST_CASE("paged: pool exhaustion throws capacity_error and leaves every sequence and the pool unchanged") {
  const Shape s;
  kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 5});
  std::vector<Token> a(30, 3), b(35, 4);
  const SeqId x = pool.admit(a).seq;
  fill(pool, x, a, s);
  const SeqId y = pool.admit(b).seq;
  fill(pool, y, b, s);  // 2 + 3 blocks: the pool is full
  CHECK(pool.free_blocks() == 0);
  const SeqId z = pool.fork(x);
  const std::vector<SeqId> ids{x, y, z};
  const Snapshot before = snapshot(pool, ids);
  std::vector<float> k, v;
  std::vector<Token> a2 = a;
  a2.push_back(5);
  rows_for(a2, 0, 30, 31, s, k, v);
  CHECK_THROWS_AS(pool.append(z, 0, k, v), capacity_error);  // needs a copy of the shared partial block
  CHECK(snapshot(pool, ids) == before);
  a2.resize(33, 6);
  rows_for(a2, 1, 30, 33, s, k, v);
  CHECK_THROWS_AS(pool.append(x, 1, k, v), capacity_error);  // copy + one new block
  CHECK(snapshot(pool, ids) == before);
  pool.release(y);
  pool.append(z, 0, std::span<const float>(k).first(s.H * s.d), std::span<const float>(v).first(s.H * s.d));
  CHECK(pool.size(z, 0) == 31);
}

TEST_CASE("paged: automatic prefix sharing reuses cached blocks and reports why lookups stop") {
  const Shape s;
  kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 12});
  std::vector<Token> sys(40);
  for (std::size_t i = 0; i < sys.size(); ++i) sys[i] = static_cast<Token>(100 + i);
  auto prompt = [&](Token tail, std::size_t n_tail) {
    auto p = sys;
    for (std::size_t i = 0; i < n_tail; ++i) p.push_back(tail);
    return p;
  };
  const auto p1 = prompt(1, 5);
  auto ad1 = pool.admit(p1);
  CHECK(ad1.match.cached_tokens == 0);
  CHECK(ad1.match.stop == kv::PrefixMiss::differs);
  fill(pool, ad1.seq, p1, s);
  CHECK(pool.cached_blocks() == 2);  // blocks 0, 1 are full in both layers

  const auto p2 = prompt(2, 9);
  auto ad2 = pool.admit(p2);
  CHECK(ad2.match.cached_tokens == 32);
  CHECK(ad2.match.blocks_hit == 2);
  CHECK(ad2.match.stop == kv::PrefixMiss::differs);  // block 2 differs (tail tokens)
  CHECK(pool.block_table(ad2.seq)[0] == pool.block_table(ad1.seq)[0]);
  CHECK(pool.refcount(pool.block_table(ad1.seq)[1]) == 2);
  fill(pool, ad2.seq, p2, s);  // the model prefills only positions 32..48
  for (std::size_t p = 0; p < p2.size(); ++p)
    CHECK(pool.key(ad2.seq, 1, 0, p)[7] == element(prefix_key(p2, p), 1, 0, 7, false));

  // a prompt of exactly 2 blocks can reuse only 1 (the last token must be computed)
  const std::vector<Token> p3(sys.begin(), sys.begin() + 32);
  auto ad3 = pool.admit(p3);
  CHECK(ad3.match.cached_tokens == 16);
  CHECK(ad3.match.stop == kv::PrefixMiss::none);
  // shorter than one block
  auto ad4 = pool.admit(std::vector<Token>(10, 7));
  CHECK(ad4.match.stop == kv::PrefixMiss::too_short);

  // release everything; cached blocks stay reusable until the allocator reclaims them
  for (SeqId id : {ad1.seq, ad2.seq, ad3.seq, ad4.seq}) pool.release(id);
  CHECK(pool.used_blocks() == 0);
  auto ad5 = pool.admit(p2);
  CHECK(ad5.match.blocks_hit == 3);  // p2's own third block was registered too
  pool.release(ad5.seq);
  // fill the whole pool with unrelated content: every cached block is evicted
  std::vector<Token> other(12 * 16, 9);
  const SeqId o = pool.admit(other).seq;
  fill(pool, o, other, s);
  pool.release(o);
  auto ad6 = pool.admit(p2);
  CHECK(ad6.match.cached_tokens == 0);
  CHECK(ad6.match.stop == kv::PrefixMiss::evicted);

  const auto& st = pool.prefix_stats();
  CHECK(st.lookups == 7);
  CHECK(st.blocks_hit == 2 + 1 + 3);
  CHECK(st.tokens_saved == 16 * (2 + 1 + 3));
  CHECK(st.miss_too_short == 1);
  CHECK(st.miss_evicted == 1);
  CHECK(st.miss_differs == 3);
  CHECK(st.stop_full == 2);
  CHECK(st.blocks_evicted >= 3);
}

namespace {
/// Lengths of the runs of consecutive blocks in a table.
std::vector<std::size_t> runs_of(std::span<const std::uint32_t> table) {
  std::vector<std::size_t> runs;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (i == 0 || table[i] != table[i - 1] + 1) runs.push_back(0);
    ++runs.back();
  }
  return runs;
}
}  // namespace

TEST_CASE("paged: sequences growing side by side get runs of consecutive blocks, one extent each") {
  const Shape s{.L = 2, .H = 2, .d = 8, .B = 4};
  std::vector<Token> ta(96), tb(96);
  for (std::size_t i = 0; i < ta.size(); ++i) {
    ta[i] = static_cast<Token>(i % 13);
    tb[i] = static_cast<Token>(100 + i % 7);
  }
  for (const std::size_t extent : {8, 5, 1}) {
    CAPTURE(extent);
    kv::PagedPool<float> pool(
        {.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 64, .extent_blocks = extent});
    const SeqId a = pool.add_sequence(), b = pool.add_sequence();
    for (std::size_t n = s.B; n <= ta.size(); n += s.B) {  // one block each, in turn
      fill(pool, a, std::vector<Token>(ta.begin(), ta.begin() + static_cast<std::ptrdiff_t>(n)), s);
      fill(pool, b, std::vector<Token>(tb.begin(), tb.begin() + static_cast<std::ptrdiff_t>(n)), s);
    }
    for (const SeqId id : {a, b}) {
      const auto table = pool.block_table(id);
      REQUIRE(table.size() == 24);
      const auto runs = runs_of(table);  // whole extents; 24 = 4 · 5 + 4: the last run of 5 is shorter
      REQUIRE(runs.size() == (24 + extent - 1) / extent);
      for (std::size_t i = 0; i + 1 < runs.size(); ++i) CHECK(runs[i] == extent);
      CHECK(runs.back() == 24 - extent * (runs.size() - 1));
      for (std::size_t i = 0; i < table.size(); i += extent) CHECK(table[i] % extent == 0);  // runs start at extents
    }
  }
}

TEST_CASE("paged: the allocator prefers blocks without cached content and still fills a fragmented pool") {
  const Shape s{.L = 1, .H = 1, .d = 8, .B = 4};
  kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 32,
                             .extent_blocks = 4});
  // a prompt of 5 full blocks becomes cached content once its sequence is released
  std::vector<Token> prompt(21);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(i * 3 % 11);
  const auto ad = pool.admit(prompt);
  fill(pool, ad.seq, prompt, s);
  pool.release(ad.seq);
  REQUIRE(pool.cached_blocks() == 5);
  // one-block sequences take every other block, then a random half of them leave: scattered free blocks
  std::vector<SeqId> held;
  while (pool.free_blocks() > 0) {
    held.push_back(pool.add_sequence());
    std::vector<Token> t(s.B, static_cast<Token>(held.size()));
    fill(pool, held.back(), t, s);
    if (pool.prefix_stats().blocks_evicted > 0) break;  // clean blocks ran out: cached ones are next
  }
  // every clean block was used before any cached one
  CHECK(pool.prefix_stats().blocks_evicted == 1);
  CHECK(pool.free_blocks() == 4);
  std::shuffle(held.begin(), held.end(), std::mt19937(3));
  for (std::size_t i = 0; i < held.size() / 2; ++i) pool.release(held[i]);
  const std::size_t free_now = pool.free_blocks();
  // a new sequence takes exactly the free blocks, then runs out without changing anything
  const SeqId x = pool.add_sequence();
  std::vector<Token> tx(free_now * s.B);
  for (std::size_t i = 0; i < tx.size(); ++i) tx[i] = static_cast<Token>(i % 5);
  for (std::size_t n = s.B; n <= tx.size(); n += s.B)
    fill(pool, x, std::vector<Token>(tx.begin(), tx.begin() + static_cast<std::ptrdiff_t>(n)), s);
  CHECK(pool.free_blocks() == 0);
  CHECK(std::set<std::uint32_t>(pool.block_table(x).begin(), pool.block_table(x).end()).size() == free_now);
  std::vector<float> k(s.H * s.d, 0.5f), v(s.H * s.d, 0.25f);
  CHECK_THROWS_AS(pool.append(x, 0, k, v), capacity_error);
  CHECK(pool.size(x, 0) == tx.size());
}

TEST_CASE("paged property test: random append / fork / release / truncate / prefix-hit against a reference model") {
  struct Config {
    std::size_t B, extent;  // extent 0: the default (one extent spans this small pool)
  };
  for (const Config cfg : {Config{16, 0}, Config{32, 0}, Config{16, 4}}) {
    const std::size_t B = cfg.B;
    CAPTURE(B);
    CAPTURE(cfg.extent);
    const Shape s{.L = 2, .H = 2, .d = 16, .B = B};
    const std::size_t n_blocks = 640 / B;
    kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = B, .n_blocks = n_blocks,
                               .extent_blocks = cfg.extent});
    std::map<SeqId, std::vector<Token>> ref;  // the reference model: live sequences and their tokens
    std::mt19937 rng(static_cast<unsigned>(1234 + B + cfg.extent));
    const std::vector<Token> sys = [] {
      std::vector<Token> v(70);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<Token>(i % 5);
      return v;
    }();
    auto pick = [&]() {
      auto it = ref.begin();
      std::advance(it, static_cast<long>(rng() % ref.size()));
      return it->first;
    };
    std::size_t capacity_errors = 0, failed_admits = 0, ops = 0;
    const attention::Heads heads{.n_q = 4, .n_kv = s.H, .head_dim = s.d};

    for (int step = 0; step < 700; ++step) {
      const unsigned op = rng() % 100;
      std::vector<SeqId> ids;
      for (const auto& [id, _] : ref) ids.push_back(id);
      if (op < 20 || ref.empty()) {  // admit a prompt (often sharing the system prompt: prefix hits)
        std::vector<Token> p;
        const unsigned kind = rng() % 3;
        if (kind != 0) p.assign(sys.begin(), sys.begin() + static_cast<long>(rng() % sys.size() + 1));
        const std::size_t tail = rng() % 40;
        for (std::size_t i = 0; i < tail; ++i) p.push_back(static_cast<Token>(rng() % 4));
        if (p.empty()) p.push_back(1);
        const auto cost = pool.blocks_to_admit(p);  // read-only: the same hit admit finds next
        const std::size_t lookups = pool.prefix_stats().lookups, free0 = pool.free_blocks();
        const auto ad = pool.admit(p);
        CHECK(pool.prefix_stats().lookups == lookups + 1);
        CHECK(ad.match.cached_tokens == cost.match.cached_tokens);
        CHECK(ad.match.stop == cost.match.stop);
        CHECK(ad.match.cached_tokens % B == 0);
        CHECK(ad.match.cached_tokens <= (p.size() - 1) / B * B);
        ids.push_back(ad.seq);
        const Snapshot before = snapshot(pool, ids);
        try {
          fill(pool, ad.seq, p, s);
          CHECK(free0 - pool.free_blocks() == cost.blocks);  // what the query said the admission takes
          ref[ad.seq] = p;
        } catch (const capacity_error&) {
          ++capacity_errors;
          ++failed_admits;
          // every layer starts at cached_tokens, so layer 0 needs every new block and fails first,
          // before any layer appended: the pool is as admit left it
          CHECK(snapshot(pool, ids) == before);
          CHECK(cost.blocks > free0);
          pool.release(ad.seq);
        }
      } else if (op < 60) {  // decode one token
        const SeqId id = pick();
        auto toks = ref[id];
        toks.push_back(static_cast<Token>(rng() % 4));
        const Snapshot before = snapshot(pool, ids);
        const std::size_t need = pool.blocks_to_grow(id, 1), free0 = pool.free_blocks();
        std::vector<float> k, v;
        rows_for(toks, 0, toks.size() - 1, toks.size(), s, k, v);
        try {
          pool.append(id, 0, k, v);
          CHECK(free0 - pool.free_blocks() == need);  // layer 0 takes the block (or the copy)
        } catch (const capacity_error&) {
          ++capacity_errors;
          CHECK(need > free0);
          CHECK(snapshot(pool, ids) == before);
          pool.release(id);  // preempt the request (as a scheduler would)
          ref.erase(id);
          continue;
        }
        pool.declare_tokens(id, std::span<const Token>(toks).last(1));
        for (std::size_t l = 1; l < s.L; ++l) {
          rows_for(toks, l, toks.size() - 1, toks.size(), s, k, v);
          pool.append(id, l, k, v);  // layer 0 already took the block: never fails
        }
        ref[id] = toks;
      } else if (op < 72) {
        const SeqId id = pick();
        ref[pool.fork(id)] = ref[id];
      } else if (op < 84) {
        const SeqId id = pick();
        pool.release(id);
        ref.erase(id);
      } else {
        const SeqId id = pick();
        const std::size_t n = rng() % (ref[id].size() + 1);
        pool.truncate(id, n);
        ref[id].resize(n);
      }
      ++ops;

      // ---- invariants: contents, refcounts, free list, attention ----
      std::vector<std::uint32_t> count(n_blocks, 0);
      for (const auto& [id, toks] : ref) {
        REQUIRE(pool.is_live(id));
        const auto table = pool.block_table(id);
        CHECK(table.size() == (toks.size() + B - 1) / B);
        for (const auto b : table) ++count[b];
        for (std::size_t l = 0; l < s.L; ++l) {
          REQUIRE(pool.size(id, l) == toks.size());
          for (std::size_t p = 0; p < toks.size(); ++p) {
            const std::uint64_t key = prefix_key(toks, p);
            for (std::size_t h = 0; h < s.H; ++h)
              for (std::size_t c = 0; c < s.d; c += 5) {
                if (pool.key(id, l, h, p)[c] != element(key, l, h, c, false) ||
                    pool.value(id, l, h, p)[c] != element(key, l, h, c, true)) {
                  FAIL("content mismatch: seq ", id, " layer ", l, " pos ", p);
                }
              }
          }
        }
      }
      for (std::uint32_t b = 0; b < n_blocks; ++b) REQUIRE(pool.refcount(b) == count[b]);
      const auto fl = pool.free_list();
      CHECK(fl.size() == pool.free_blocks());
      CHECK(std::set<std::uint32_t>(fl.begin(), fl.end()).size() == fl.size());
      for (const auto b : fl) CHECK(count[b] == 0);
      CHECK(fl.size() + static_cast<std::size_t>(std::count_if(count.begin(), count.end(), [](auto c) { return c > 0; })) ==
            n_blocks);

      if (!ref.empty()) {
        const SeqId id = pick();
        const auto& toks = ref[id];
        if (!toks.empty()) {
          const std::size_t l = rng() % s.L;
          std::vector<float> k, v;
          rows_for(toks, l, 0, toks.size(), s, k, v);
          kv::Contiguous<float> copy(s.H, s.d, toks.size());
          copy.append(k, v);
          const auto q = test::random_vector(heads.q_dim(), static_cast<unsigned>(step), -2.f, 2.f);
          std::vector<float> a(q.size()), b(q.size());
          attention::decode(q, pool.view(id, l), heads, a);
          attention::decode(q, copy, heads, b);
          CHECK(a == b);
        }
      }
    }
    const auto& st = pool.prefix_stats();
    MESSAGE("B=", B, ": ops ", ops, ", capacity errors ", capacity_errors, ", lookups ", st.lookups, ", blocks hit ",
            st.blocks_hit, ", evicted ", st.blocks_evicted, ", miss differs/evicted/short ", st.miss_differs, "/",
            st.miss_evicted, "/", st.miss_too_short);
    CHECK(st.blocks_hit > 0);
    CHECK(capacity_errors > 0);
    CHECK(failed_admits > 0);  // the failed-admit path above ran
    CHECK(st.blocks_evicted > 0);
  }
}

TEST_CASE_TEMPLATE("paged, quantized pages: same codes as kv::Quantized, fork + copy-on-write, bytes == allocator", F,
                   kv::QuantizedPages<kv::Int8>, kv::QuantizedPages<kv::Int8, kv::Int4>) {
  using KF = typename F::key_format;
  using VF = typename F::value_format;
  const Shape s{.L = 2, .H = 2, .d = 64, .B = 16};
  const std::size_t n = 75;
  CountingResource mem, wide_mem;
  kv::PagedPool<F> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 16}, &mem);
  // scales included: one fp32 per token, head and K or V
  const std::size_t per_token = kv::Quantized<KF, VF>::bytes_per_token(s.H, s.d);
  CHECK(pool.block_bytes() == s.L * s.B * per_token);
  CHECK(pool.bytes_reserved() == 16 * pool.block_bytes());
  // the resource holds the pages (bytes_reserved) and the metadata, which does not depend on head_dim:
  // a pool with twice the head_dim holds exactly its extra page bytes more
  {
    const kv::PagedPool<F> wide({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = 2 * s.d, .block_tokens = s.B, .n_blocks = 16},
                                &wide_mem);
    CHECK(mem.current() > pool.bytes_reserved());
    CHECK(wide_mem.current() - mem.current() == wide.bytes_reserved() - pool.bytes_reserved());
  }

  const auto k = test::random_vector(n * s.H * s.d, 7), v = test::random_vector(n * s.H * s.d, 8);
  const SeqId a = pool.add_sequence();
  const std::size_t before_append = mem.current();
  for (std::size_t l = 0; l < s.L; ++l) pool.append(a, l, k, v);
  kv::Quantized<KF, VF> ref(s.H, s.d, n);
  ref.append(k, v);
  const auto view = pool.view(a, 1);
  CHECK(view.bytes_used() == n * per_token);
  // appends take pages from the pool: the resource gains only the block table (reserved for 5 pages)
  CHECK(mem.current() - before_append == pool.block_table(a).size() * sizeof(std::uint32_t));

  // Every stored code and scale equals kv::Quantized's (the same quantiser): compare row by row.
  for (std::size_t h = 0; h < s.H; ++h) {
    std::size_t pages = 0, next = 0;
    std::size_t blocks = 0;
    view.for_each_block(h, [&](const kv::PagedQuantBlock<KF, VF>& all) {  // one block spanning every page
      ++blocks;
      CHECK(all.n == n);
      for (std::size_t i = 0; i < all.pages(); ++i) {
      const kv::QuantBlock<KF, VF> pg = all.page(i);
      CHECK(pg.pos0 == next);
      ref.for_each_block(h, [&](const kv::QuantBlock<KF, VF>& whole) {
        for (std::size_t r = 0; r < pg.n; ++r) {
          CHECK(pg.k_scale[r] == whole.k_scale[pg.pos0 + r]);
          CHECK(pg.v_scale[r] == whole.v_scale[pg.pos0 + r]);
          CHECK(std::equal(pg.k + r * pg.k_stride, pg.k + r * pg.k_stride + KF::row_bytes(s.d),
                           whole.k + (pg.pos0 + r) * whole.k_stride));
          CHECK(std::equal(pg.v + r * pg.v_stride, pg.v + r * pg.v_stride + VF::row_bytes(s.d),
                           whole.v + (pg.pos0 + r) * whole.v_stride));
        }
      });
      next += pg.n;
      ++pages;
      }
    });
    CHECK(blocks == 1);
    CHECK(next == n);
    CHECK(pages == (n + s.B - 1) / s.B);
  }

  // Attention over the pages equals attention over the one-block cache bitwise: the same kernel reads
  // the same codes and scales in the same order, through the page table (GQA staging and MHA rows).
  const attention::Heads heads{.n_q = 6, .n_kv = s.H, .head_dim = s.d};
  const auto q = test::random_vector(heads.q_dim(), 9, -2.f, 2.f);
  std::vector<float> got(q.size()), want(q.size());
  attention::decode(q, view, heads, got);
  attention::decode(q, ref, heads, want);
  CHECK(got == want);
  const attention::Heads mha{.n_q = s.H, .n_kv = s.H, .head_dim = s.d};
  const auto q1 = test::random_vector(mha.q_dim(), 12, -2.f, 2.f);
  std::vector<float> got1(q1.size()), want1(q1.size());
  attention::decode(q1, view, mha, got1);
  attention::decode(q1, ref, mha, want1);
  CHECK(got1 == want1);

  // fork shares every page; appending to the fork copies the shared partial page (codes and scales),
  // so the original sequence reads exactly what it read before.
  const SeqId b = pool.fork(a);
  const std::size_t used = pool.used_blocks();
  const auto k2 = test::random_vector(3 * s.H * s.d, 10), v2 = test::random_vector(3 * s.H * s.d, 11);
  for (std::size_t l = 0; l < s.L; ++l) pool.append(b, l, k2, v2);
  CHECK(pool.used_blocks() == used + 1);
  std::vector<float> again(q.size());
  attention::decode(q, pool.view(a, 1), heads, again);
  CHECK(again == got);
  std::vector<float> forked(q.size());
  attention::decode(q, pool.view(b, 1), heads, forked);
  CHECK(forked != got);
  pool.release(b);
  CHECK(pool.used_blocks() == used);

  // pages scattered (extent 1) or in runs of 2 or 3 consecutive blocks (the MHA fold merges runs):
  // still bitwise equal
  for (const std::size_t extent : {1, 2, 3}) {
    CAPTURE(extent);
    kv::PagedPool<F> mixed(
        {.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 16, .extent_blocks = extent});
    const SeqId x = mixed.add_sequence(), y = mixed.add_sequence();
    const std::size_t row = s.H * s.d;
    for (std::size_t p = 0; p < n; p += s.B) {
      const std::size_t m = std::min(s.B, n - p);
      const std::span<const float> kk(k.data() + p * row, m * row), vv(v.data() + p * row, m * row);
      for (std::size_t l = 0; l < s.L; ++l) {
        mixed.append(y, l, vv, kk);
        mixed.append(x, l, kk, vv);
      }
    }
    std::vector<float> g_gqa(q.size()), g_mha(q1.size());
    attention::decode(q, mixed.view(x, 1), heads, g_gqa);
    attention::decode(q1, mixed.view(x, 1), mha, g_mha);
    CHECK(g_gqa == want);
    CHECK(g_mha == want1);
  }
}

namespace {
/// Appends positions [size, size + n) to every layer (rows from `toks`) and returns the free blocks taken.
std::size_t grow(kv::PagedPool<float>& pool, SeqId id, const std::vector<Token>& toks, std::size_t n, const Shape& s) {
  const std::size_t free0 = pool.free_blocks();
  std::vector<float> k, v;
  for (std::size_t l = 0; l < s.L; ++l) {
    const std::size_t p0 = pool.size(id, l);
    rows_for(toks, l, p0, p0 + n, s, k, v);
    pool.append(id, l, k, v);
  }
  return free0 - pool.free_blocks();
}
}  // namespace

TEST_CASE("paged: blocks_to_grow and blocks_to_admit say what an append or an admission takes, changing nothing") {
  const Shape s{.L = 2, .H = 1, .d = 8, .B = 4};
  kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 12});
  std::vector<Token> t(40);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<Token>(i * 7 % 13);
  const std::vector<Token> prompt(t.begin(), t.begin() + 10);  // 3 pages, 2 of them full

  const auto cold = pool.blocks_to_admit(prompt);
  CHECK(cold.match.cached_tokens == 0);
  CHECK(cold.blocks == 3);
  CHECK(pool.prefix_stats().lookups == 0);  // the query is not a lookup
  const SeqId a = pool.admit(prompt).seq;
  CHECK(grow(pool, a, t, 10, s) == cold.blocks);

  // growing a: 10 → 12 stays in the partial page, → 13 takes one page, → 22 three
  const Snapshot before = snapshot(pool, {a});
  CHECK(pool.blocks_to_grow(a, 0) == 0);
  CHECK(pool.blocks_to_grow(a, 2) == 0);
  CHECK(pool.blocks_to_grow(a, 3) == 1);
  CHECK(pool.blocks_to_grow(a, 12) == 3);
  CHECK(snapshot(pool, {a}) == before);
  // a fork shares the partial page: the first write into it copies it (one block more)
  const SeqId b = pool.fork(a);
  CHECK(pool.blocks_to_grow(b, 2) == 1);
  CHECK(pool.blocks_to_grow(b, 3) == 2);
  CHECK(grow(pool, b, t, 3, s) == 2);
  CHECK(pool.blocks_to_grow(a, 3) == 1);  // a's partial page is its own again
  CHECK(grow(pool, a, t, 3, s) == 1);

  // layers of unequal length (layer 0 one position ahead, as in the middle of a decode step):
  // every page some layer writes counts once
  pool.truncate(a, 12);
  std::vector<float> k, v;
  rows_for(t, 0, 12, 13, s, k, v);
  pool.append(a, 0, k, v);  // layer 0: 13 positions (4 pages), layer 1: 12 (3 pages)
  CHECK(pool.blocks_to_grow(a, 1) == 0);  // layer 0 writes page 3 (exists), layer 1 page 3 too
  CHECK(pool.blocks_to_grow(a, 4) == 1);  // layer 0 writes pages 3, 4; layer 1 page 3
  const std::size_t free0 = pool.free_blocks();
  rows_for(t, 0, 13, 17, s, k, v);
  pool.append(a, 0, k, v);
  rows_for(t, 1, 12, 16, s, k, v);
  pool.append(a, 1, k, v);
  CHECK(free0 - pool.free_blocks() == 1);

  // admission after a prefix hit: referenced hit blocks cost nothing, free (cached) ones leave the list
  const std::vector<Token> longer(t.begin(), t.begin() + 14);  // 4 pages
  const auto warm = pool.blocks_to_admit(longer);
  CHECK(warm.match.blocks_hit == 2);  // a knows 10 tokens: its pages 0, 1 are registered
  CHECK(warm.blocks == 2);            // pages 2, 3; the hit blocks are a's
  const SeqId c = pool.admit(longer).seq;
  CHECK(grow(pool, c, longer, 6, s) == warm.blocks);  // c registers its page 2 too
  for (const SeqId id : {a, b, c}) pool.release(id);
  const auto freed = pool.blocks_to_admit(longer);
  CHECK(freed.match.blocks_hit == 3);
  CHECK(freed.blocks == 1 + 3);  // the three cached hit blocks are free now: admitting takes them back
  const std::size_t free1 = pool.free_blocks();
  const SeqId d = pool.admit(longer).seq;
  CHECK(free1 - pool.free_blocks() + grow(pool, d, longer, 2, s) == freed.blocks);

  // a growth beyond the free blocks is exactly the one that throws capacity_error
  const std::size_t room = pool.free_blocks() * s.B + (s.B - pool.size(d, 0) % s.B) % s.B;
  CHECK(pool.blocks_to_grow(d, room) == pool.free_blocks());
  CHECK(pool.blocks_to_grow(d, room + 1) == pool.free_blocks() + 1);
  std::vector<Token> more = longer;
  for (std::size_t i = 0; i <= room; ++i) more.push_back(static_cast<Token>(i % 3));
  rows_for(more, 0, 14, 14 + room + 1, s, k, v);
  CHECK_THROWS_AS(pool.append(d, 0, k, v), capacity_error);
  const std::size_t left = pool.free_blocks();
  CHECK(grow(pool, d, more, room, s) == left);
  CHECK(pool.free_blocks() == 0);
}

TEST_CASE("paged: every allocation of a pool's lifetime goes through its memory resource") {
  const Shape s{.L = 2, .H = 2, .d = 8, .B = 4};
  std::vector<Token> t(30);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<Token>(i % 9);
  const std::vector<Token> prompt(t.begin(), t.begin() + 21), other(32, 5);
  std::vector<float> k, v, k1, v1, ko, vo;  // rows prepared outside the counted region
  rows_for(t, 0, 0, 21, s, k, v);
  rows_for(t, 0, 21, 22, s, k1, v1);
  rows_for(other, 0, 0, 32, s, ko, vo);
  CountingResource mem;
  std::size_t news = 0, tables = 0, evicted = 0, hit = 0;
  {
    test::CountAllocations count;
    {
      kv::PagedPool<float> pool({.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 12,
                                 .extent_blocks = 4},
                                &mem);
      const SeqId a = pool.admit(prompt).seq;  // tables, tokens, hashes, the prefix index
      for (std::size_t l = 0; l < s.L; ++l) pool.append(a, l, k, v);
      const SeqId b = pool.fork(a);  // a second table
      pool.declare_tokens(b, std::span<const Token>(t).subspan(21, 1));
      for (std::size_t l = 0; l < s.L; ++l) pool.append(b, l, k1, v1);  // copy-on-write
      pool.truncate(a, 9);
      pool.release(a);
      pool.release(b);
      const SeqId c = pool.admit(prompt).seq;  // a prefix hit on freed blocks
      hit = pool.block_table(c).size();
      pool.release(c);
      const SeqId o = pool.add_sequence();
      for (std::size_t l = 0; l < s.L; ++l) pool.append(o, l, ko, vo);  // 8 blocks: 7 clean + 1 evicted
      evicted = pool.prefix_stats().blocks_evicted;
      tables = mem.current() - pool.bytes_reserved();
    }
    news = count.count();
  }
  CHECK(hit == 5);
  CHECK(evicted == 1);
  CHECK(tables > 0);                    // the metadata is counted ...
  CHECK(news == mem.allocations());     // ... and nothing the pool owns bypasses the resource
  CHECK(mem.current() == 0);            // everything was returned
}

namespace {
/// Everything observable about a pool: each sequence's lengths, table, known tokens and stored K/V
/// rows; every block's count and cached bit; the free list; the registry (its size, statistics and
/// what `blocks_to_admit` finds for `probes`, which sees the index and the evicted set).
std::string full_snapshot(const kv::PagedPool<float>& pool, const std::vector<SeqId>& ids,
                          const std::vector<std::vector<Token>>& probes) {
  test::Snapshot s;
  for (const SeqId id : ids) {
    s("live", pool.is_live(id));
    if (!pool.is_live(id)) continue;
    s.range("table", pool.block_table(id)).range("tokens", pool.tokens(id));
    for (std::size_t l = 0; l < pool.n_layers(); ++l) {
      s("len", pool.size(id, l));
      for (std::size_t h = 0; h < pool.n_kv_heads(); ++h)
        for (std::size_t p = 0; p < pool.size(id, l); ++p) s.range("k", pool.key(id, l, h, p)).range("v", pool.value(id, l, h, p));
    }
  }
  for (std::uint32_t b = 0; b < pool.n_blocks(); ++b) s("ref", pool.refcount(b))("cached", pool.is_cached(b));
  s.range("free", pool.free_list())("n_free", pool.free_blocks())("n_cached", pool.cached_blocks());
  const auto& st = pool.prefix_stats();
  s("lookups", st.lookups)("hit", st.lookups_with_hit)("blocks_hit", st.blocks_hit)("saved", st.tokens_saved);
  s("full", st.stop_full)("short", st.miss_too_short)("differs", st.miss_differs)("evicted", st.miss_evicted);
  s("n_evicted", st.blocks_evicted)("registered", st.blocks_registered)("bytes_used", pool.bytes_used());
  for (const auto& pr : probes) {
    const auto c = pool.blocks_to_admit(pr);
    s("probe_hit", c.match.blocks_hit)("probe_stop", static_cast<int>(c.match.stop))("probe_blocks", c.blocks);
  }
  return s.str();
}

/// A pool in a state every strong-guarantee operation can act on: sequence 0 (a system prompt + a
/// tail, its first two blocks cached and block 2 partial), its fork 1, and a released sequence whose
/// three full blocks stay cached on the free list; 3 clean blocks remain free.
struct FaultScene {
  Shape s;
  std::vector<Token> sys, a, other;
  FaultScene() {
    for (Token i = 0; i < 40; ++i) sys.push_back(100 + i);
    a = sys;
    a.insert(a.end(), 5, 1);  // 45 tokens: blocks 0, 1 full, block 2 partial
    other.assign(3 * s.B + 1, 9);
  }
  [[nodiscard]] std::unique_ptr<kv::PagedPool<float>> make() const {
    auto pool = std::make_unique<kv::PagedPool<float>>(
        kv::PagedConfig{.n_layers = s.L, .n_kv_heads = s.H, .head_dim = s.d, .block_tokens = s.B, .n_blocks = 10});
    const SeqId a0 = pool->admit(a).seq;  // id 0
    fill(*pool, a0, a, s);
    (void)pool->fork(a0);  // id 1
    const SeqId o = pool->admit(other).seq;  // id 2
    fill(*pool, o, other, s);
    pool->release(o);
    REQUIRE(pool->free_blocks() == 7);
    return pool;
  }
  [[nodiscard]] std::vector<std::vector<Token>> probes() const {
    auto longer = a;
    longer.insert(longer.end(), 30, 1);
    return {a, longer, other, sys};
  }
  [[nodiscard]] std::string snap(const kv::PagedPool<float>& pool) const { return full_snapshot(pool, {0, 1, 2, 3}, probes()); }
};
}  // namespace

TEST_CASE("paged: append, fork and admit whose k-th allocation fails leave the pool exactly as it was, for every k") {
  const FaultScene sc;
  auto snap = [&](const auto& pool) { return sc.snap(*pool); };
  auto make = [&] { return sc.make(); };
  SUBCASE("append: copy-on-write of a shared block, then a full block is registered") {
    // Sequence 0 completes block 2 (shared with its fork): layer 0 first, then the faulted layer 1.
    auto tokens = sc.a;
    tokens.insert(tokens.end(), 11, 1);
    auto prepared = [&] {
      auto pool = sc.make();
      pool->declare_tokens(0, std::span<const Token>(tokens).subspan(sc.a.size()));
      std::vector<float> k, v;
      rows_for(tokens, 0, sc.a.size(), tokens.size(), sc.s, k, v);
      pool->append(0, 0, k, v);
      return pool;
    };
    std::vector<float> k, v;
    rows_for(tokens, 1, sc.a.size(), tokens.size(), sc.s, k, v);
    // Regression: the registry's hash map allocated a node when the block was registered, after the
    // copy had replaced the shared block — a fault left the table pointing at a half-made state.
    // The registry now allocates only at construction, so this append allocates nothing at all.
    CHECK(test::check_strong_guarantee(prepared, [&](auto& pool) { pool->append(0, 1, k, v); }, snap) == 0);
  }
  SUBCASE("append: new pages reclaim cached free blocks (evictions)") {
    auto tokens = sc.a;
    tokens.insert(tokens.end(), 90, 1);  // 135 tokens: a copy of page 2 + 6 new pages, 4 from cached blocks
    std::vector<float> k, v;
    rows_for(tokens, 0, sc.a.size(), tokens.size(), sc.s, k, v);
    CHECK(test::check_strong_guarantee(make, [&](auto& pool) { pool->append(0, 0, k, v); }, snap) > 0);
  }
  SUBCASE("fork") {
    CHECK(test::check_strong_guarantee(make, [](auto& pool) { return pool->fork(0); }, snap) > 0);
  }
  SUBCASE("admit with a prefix hit (two cached blocks) and a hit on a free cached block") {
    auto p = sc.sys;
    p.insert(p.end(), 3, 7);
    CHECK(test::check_strong_guarantee(make, [&](auto& pool) { return pool->admit(p).seq; }, snap) > 0);
    CHECK(test::check_strong_guarantee(make, [&](auto& pool) { return pool->admit(sc.other).seq; }, snap) > 0);
  }
}

TEST_CASE("paged: a pool that cannot exist is a capacity_error naming the requested and available sizes, before any allocation") {
  CountingResource mem;
  const auto pool_of = [&](std::size_t n_blocks, std::size_t layers) {
    return kv::PagedPool<float>({.n_layers = layers, .n_kv_heads = 8, .head_dim = 128, .block_tokens = 16, .n_blocks = n_blocks}, &mem);
  };
  CHECK_THROWS_WITH_AS(pool_of(1'000'000'000'000, 32), doctest::Contains("n_blocks = 1000000000000 requested, at most 2^32 - 2 = 4294967294"),
                       capacity_error);
  // 2^31 blocks of 16 tokens, 32 layers, 8 heads: 2^43 rows of 1024 bytes (K and V of 128 fp32) = 2^53 bytes
  const std::size_t phys = physical_memory_bytes();
  if (phys != 0 && phys < (std::size_t{1} << 53))
    CHECK_THROWS_WITH_AS(pool_of(std::size_t{1} << 31, 32),
                         doctest::Contains(("kv::PagedPool of 2147483648 blocks of 16 tokens: 9007199254740992 bytes requested, the machine has " +
                                            std::to_string(phys)).c_str()),
                         capacity_error);
  // rows that overflow std::size_t
  CHECK_THROWS_WITH_AS(pool_of(std::size_t{1} << 31, std::size_t{1} << 40), doctest::Contains("overflows"), capacity_error);
  CHECK(mem.allocations() == 0);
}
