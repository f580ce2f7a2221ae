#include "barato/attention/cascade.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/error.hpp"
#include "barato/kv/paged.hpp"
#include "support/alloc_counter.hpp"  // the one TU of this executable that includes it
#include "support/reference.hpp"

using namespace barato;

namespace {

/// A decode step of S sequences in one pool: a root of `prefix` positions, forked S − 1 times, then
/// suffix[s] positions of its own appended to sequence s (every layer), and one query per sequence.
template <class F>
struct Step {
  attention::Heads heads;
  std::size_t B;
  kv::PagedPool<F> pool;
  std::vector<kv::SeqId> seqs;
  std::vector<float> q;  // [S, H_q, d]
  float max_abs_v = 0;   // over every value appended

  Step(const attention::Heads& h, std::size_t block, std::size_t prefix, const std::vector<std::size_t>& suffix,
       unsigned seed = 1)
      : heads(h), B(block),
        pool({.n_layers = 2, .n_kv_heads = h.n_kv, .head_dim = h.head_dim, .block_tokens = block,
              .n_blocks = blocks_needed(block, prefix, suffix), .extent_blocks = 4}) {
    const std::size_t S = suffix.size();
    seqs.push_back(pool.add_sequence());
    append(seqs[0], prefix, seed);
    for (std::size_t s = 1; s < S; ++s) seqs.push_back(pool.fork(seqs[0]));
    for (std::size_t s = 0; s < S; ++s) append(seqs[s], suffix[s], seed + 100 + static_cast<unsigned>(s));
    q = test::random_vector(S * h.q_dim(), seed + 7, -2.0f, 2.0f);
  }
  static std::size_t blocks_needed(std::size_t B, std::size_t prefix, const std::vector<std::size_t>& suffix) {
    std::size_t n = (prefix + B - 1) / B;
    for (const std::size_t s : suffix) n += (prefix % B + s + B - 1) / B + 1;
    return n + 4;
  }
  void append(kv::SeqId s, std::size_t n, unsigned seed) {
    if (n == 0) return;
    const auto k = test::random_vector(n * heads.kv_dim(), seed, -1.0f, 1.0f);
    const auto v = test::random_vector(n * heads.kv_dim(), seed + 50, -3.0f, 3.0f);
    for (const float x : v) max_abs_v = std::max(max_abs_v, std::abs(x));
    for (std::size_t l = 0; l < pool.n_layers(); ++l) pool.append(s, l, k, v);
  }
  /// Per-sequence `attention::decode` of layer `layer`: [S, H_q, d].
  std::vector<float> per_sequence(std::size_t layer, const attention::AttendOptions& opt = {}) {
    const std::size_t row = heads.q_dim();
    std::vector<float> out(seqs.size() * row);
    for (std::size_t s = 0; s < seqs.size(); ++s)
      attention::decode(std::span<const float>(q).subspan(s * row, row), pool.view(seqs[s], layer), heads,
                        std::span<float>(out).subspan(s * row, row), opt);
    return out;
  }
  std::vector<float> cascade(std::size_t layer, std::size_t* shared = nullptr, const attention::CascadeOptions& opt = {}) {
    attention::CascadeWorkspace ws(heads, seqs.size());
    std::vector<float> out(q.size(), -1.0f);
    const std::size_t p = attention::decode_cascade(q, pool, seqs, layer, heads, out, ws, opt);
    if (shared != nullptr) *shared = p;
    return out;
  }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

/// Shared positions of a fork family built by `Step`: the root's full blocks (the forks' own
/// positions start in other blocks), or all of a lone sequence's full blocks.
std::size_t expected_shared(std::size_t prefix, const std::vector<std::size_t>& suffix, std::size_t B) {
  return (suffix.size() == 1 ? prefix + suffix[0] : prefix) / B * B;
}

}  // namespace

TEST_CASE_TEMPLATE("decode_cascade equals per-sequence decode within kCascadeRelTol · max|v| (GQA, S, shared lengths, "
                   "block sizes, page formats)",
                   F, float, f16, kv::QuantizedPages<kv::Int8>, kv::QuantizedPages<kv::Int8, kv::Int4>) {
  struct Shape {
    std::size_t hq, hkv, d;
  };
  // fixed-dim kernel (d = 64, 128) with G = 7, 2, 1, 4 and the generic kernel (d = 32, G = 3)
  const Shape shapes[] = {{14, 2, 64}, {8, 4, 64}, {4, 4, 128}, {8, 2, 128}, {6, 2, 32}};
  double worst = 0;
  int cases = 0;
  for (const Shape& sh : shapes)
    for (const std::size_t B : {8, 16, 64})
      for (const std::size_t S : {1, 2, 5, 16})
        for (const std::size_t prefix : {0, 5, 64, 200, 512}) {
          const attention::Heads heads{.n_q = sh.hq, .n_kv = sh.hkv, .head_dim = sh.d};
          std::vector<std::size_t> suffix(S);
          for (std::size_t s = 0; s < S; ++s) suffix[s] = (s * 13 + 3) % 41;  // 3, 16, 29, 1, 14, …
          if (prefix == 0) suffix[0] = std::max<std::size_t>(suffix[0], 1);  // every sequence has a query
          Step<F> st(heads, B, prefix, suffix, static_cast<unsigned>(sh.d + B + S + prefix));
          for (const std::size_t layer : {0, 1}) {
            CAPTURE(sh.hq);
            CAPTURE(sh.hkv);
            CAPTURE(sh.d);
            CAPTURE(B);
            CAPTURE(S);
            CAPTURE(prefix);
            CAPTURE(layer);
            std::size_t shared = 0;
            const auto ref = st.per_sequence(layer);
            const auto got = st.cascade(layer, &shared);
            // sequences with an empty suffix keep the root's partial last block: still only full blocks count
            CHECK(shared == expected_shared(prefix, suffix, B));
            const double err = max_abs_diff(got, ref);
            worst = std::max(worst, err / st.max_abs_v);
            CHECK(err <= attention::kCascadeRelTol * st.max_abs_v);
            ++cases;
          }
        }
  MESSAGE(cases, " cases, worst |cascade - decode| / max|v| = ", worst);
}

TEST_CASE("decode_cascade with the whole cache shared (no suffix) and with nothing shared") {
  const attention::Heads heads{.n_q = 8, .n_kv = 2, .head_dim = 64};
  SUBCASE("whole cache: forks of a root of 128 positions (B = 16), no suffix") {
    Step<float> st(heads, 16, 128, std::vector<std::size_t>(6, 0));
    std::size_t shared = 0;
    const auto got = st.cascade(0, &shared);
    CHECK(shared == 128);
    CHECK(max_abs_diff(got, st.per_sequence(0)) <= attention::kCascadeRelTol * st.max_abs_v);
    // every sequence has the same cache and here the same query rows would give the same output: give
    // them distinct queries and check outputs differ (the stacking keeps sequences apart)
    CHECK(max_abs_diff(std::vector<float>(got.begin(), got.begin() + 512), std::vector<float>(got.begin() + 512, got.begin() + 1024)) > 1e-3);
  }
  SUBCASE("nothing shared: independent sequences") {
    kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = 2, .head_dim = 64, .block_tokens = 16, .n_blocks = 64});
    std::vector<kv::SeqId> seqs;
    for (unsigned s = 0; s < 4; ++s) {
      seqs.push_back(pool.add_sequence());
      const std::size_t n = 40 + 17 * s;
      pool.append(seqs.back(), 0, test::random_vector(n * 128, 10 + s), test::random_vector(n * 128, 20 + s));
    }
    const auto q = test::random_vector(4 * heads.q_dim(), 3, -2.f, 2.f);
    attention::CascadeWorkspace ws(heads, 8);
    std::vector<float> got(q.size()), ref(q.size());
    CHECK(attention::decode_cascade(q, pool, seqs, 0, heads, got, ws) == 0);
    for (std::size_t s = 0; s < 4; ++s)
      attention::decode(std::span<const float>(q).subspan(s * 512, 512), pool.view(seqs[s], 0), heads,
                        std::span<float>(ref).subspan(s * 512, 512));
    CHECK(max_abs_diff(got, ref) == 0.0);  // P = 0: each sequence is one decode-shaped call
  }
}

TEST_CASE("decode_cascade is bitwise per-sequence decode when the shared prefix is a multiple of the kernel chunk "
          "(fewer than kCascadeStackMinHeads stacked heads: the shared pass is `accumulate` too)") {
  // fixed-dim chunks: 64 rows at d = 64 and 32 rows at d = 128 (fp32); pages of 64 / 32 / 128 rows
  for (const auto& shape : {std::pair<std::size_t, std::size_t>{64, 64}, {128, 32}, {64, 128}}) {
    const std::size_t d = shape.first, B = shape.second;  // plain names: clang 14 cannot capture bindings
    CAPTURE(d);
    CAPTURE(B);
    const attention::Heads heads{.n_q = 6, .n_kv = 2, .head_dim = d};
    Step<float> st(heads, B, 3 * B + 5, {0, 7});  // S·G = 6 stacked heads
    static_assert(attention::kCascadeStackMinHeads > 6);
    std::size_t shared = 0;
    const auto got = st.cascade(1, &shared);
    CHECK(shared == 3 * B);
    CHECK(got == st.per_sequence(1));
  }
}

TEST_CASE("decode_cascade: explicit scale, thread counts give bitwise the same result") {
  const attention::Heads heads{.n_q = 12, .n_kv = 4, .head_dim = 64};
  Step<float> st(heads, 16, 300, {1, 20, 33, 0, 9, 60, 2, 5});
  const auto one = st.cascade(0, nullptr, {.scale = 0.05f, .threads = 1});
  for (const int t : {2, 3, 4}) CHECK(st.cascade(0, nullptr, {.scale = 0.05f, .threads = t}) == one);
  CHECK(max_abs_diff(one, st.per_sequence(0, {.scale = 0.05f})) <= attention::kCascadeRelTol * st.max_abs_v);
  // the scale is used: the default one gives another result
  CHECK(max_abs_diff(one, st.cascade(0)) > 1e-3);
}

TEST_CASE("decode_cascade allocates nothing in a step") {
  const attention::Heads heads{.n_q = 14, .n_kv = 2, .head_dim = 64};
  Step<float> st(heads, 16, 256, {3, 0, 40, 17});
  attention::CascadeWorkspace ws(heads, 16);  // sized for more sequences than the step has
  // q and o [16, 14, 64], (m, l) [16, 14], transposed queries [2, 64, 16 · 7 = 112]
  CHECK(ws.bytes() == 16 * 14 * (2 * 64 * sizeof(float) + sizeof(attention::PartialStats)) + 2 * 64 * 112 * sizeof(float));
  std::vector<float> out(st.q.size());
  for (const int threads : {1, 2}) {
    (void)attention::decode_cascade(st.q, st.pool, st.seqs, 0, heads, out, ws, {.threads = threads});  // warm-up
    test::CountAllocations count;
    for (int i = 0; i < 3; ++i)
      (void)attention::decode_cascade(st.q, st.pool, st.seqs, 1, heads, out, ws, {.threads = threads});
    CHECK(count.count() == 0);
  }
  CHECK(max_abs_diff(out, st.per_sequence(1)) <= attention::kCascadeRelTol * st.max_abs_v);
  // the workspace packs a smaller step densely: S = 2 with the same workspace
  const std::vector<kv::SeqId> two = {st.seqs[2], st.seqs[0]};
  std::vector<float> q2(st.q.begin() + 2 * 896, st.q.begin() + 3 * 896);
  q2.insert(q2.end(), st.q.begin(), st.q.begin() + 896);
  std::vector<float> out2(q2.size()), ref2(q2.size());
  (void)attention::decode_cascade(q2, st.pool, two, 1, heads, out2, ws);
  attention::decode(std::span<const float>(q2).subspan(0, 896), st.pool.view(two[0], 1), heads, std::span<float>(ref2).subspan(0, 896));
  attention::decode(std::span<const float>(q2).subspan(896), st.pool.view(two[1], 1), heads, std::span<float>(ref2).subspan(896));
  CHECK(max_abs_diff(out2, ref2) <= attention::kCascadeRelTol * st.max_abs_v);
}

TEST_CASE("decode_cascade rejects bad input with shape_error") {
  const attention::Heads heads{.n_q = 8, .n_kv = 2, .head_dim = 64};
  Step<float> st(heads, 16, 64, {1, 2, 3});
  attention::CascadeWorkspace ws(heads, 3);
  std::vector<float> out(st.q.size());
  const std::vector<float> short_q(st.q.begin(), st.q.end() - 1);
  CHECK_THROWS_AS((void)attention::decode_cascade(short_q, st.pool, st.seqs, 0, heads, out, ws), shape_error);
  std::vector<float> short_out(out.size() - 64);
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, st.seqs, 0, heads, short_out, ws), shape_error);
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, st.seqs, 2, heads, out, ws), shape_error);  // layer
  const attention::Heads other{.n_q = 8, .n_kv = 4, .head_dim = 64};
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, st.seqs, 0, other, out, ws), shape_error);
  attention::CascadeWorkspace small(heads, 2);
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, st.seqs, 0, heads, out, small), shape_error);
  attention::CascadeWorkspace mha(attention::Heads{.n_q = 2, .n_kv = 2, .head_dim = 64}, 3);
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, st.seqs, 0, heads, out, mha), shape_error);
  CHECK_THROWS_AS((void)attention::decode_cascade({}, st.pool, std::span<const kv::SeqId>{}, 0, heads,
                                                  std::span<float>{}, ws),
                  shape_error);
  const kv::SeqId empty = st.pool.add_sequence();
  const std::vector<kv::SeqId> with_empty = {st.seqs[0], empty, st.seqs[1]};
  CHECK_THROWS_AS((void)attention::decode_cascade(st.q, st.pool, with_empty, 0, heads, out, ws), shape_error);
  CHECK_THROWS_AS(attention::CascadeWorkspace(heads, 0), shape_error);
}

TEST_CASE("shared_prefix_positions: whole blocks identical in every table and full in every sequence") {
  kv::PagedPool<float> pool({.n_layers = 2, .n_kv_heads = 1, .head_dim = 8, .block_tokens = 4, .n_blocks = 64});
  auto fill = [&](kv::SeqId s, std::size_t layer, std::size_t n) {
    pool.append(s, layer, test::random_vector(n * 8, 1), test::random_vector(n * 8, 2));
  };
  const kv::SeqId a = pool.add_sequence();
  fill(a, 0, 10);  // layer 0: 2 full blocks + 2 rows
  fill(a, 1, 6);   // layer 1: 1 full block + 2 rows
  const std::vector<kv::SeqId> just_a = {a};
  CHECK(attention::shared_prefix_positions(pool, just_a, 0) == 8);
  CHECK(attention::shared_prefix_positions(pool, just_a, 1) == 4);
  CHECK(attention::shared_prefix_positions(pool, std::span<const kv::SeqId>{}, 0) == 0);
  const kv::SeqId b = pool.fork(a);
  const std::vector<kv::SeqId> ab = {a, b};
  CHECK(attention::shared_prefix_positions(pool, ab, 0) == 8);  // the shared partial block 2 does not count
  fill(b, 0, 3);  // b writes block 2 (copy-on-write) and block 3
  CHECK(pool.block_table(a)[2] != pool.block_table(b)[2]);
  CHECK(attention::shared_prefix_positions(pool, ab, 0) == 8);
  CHECK(attention::shared_prefix_positions(pool, ab, 1) == 4);  // layer 1 holds fewer positions
  pool.truncate(b, 0, 5);                                        // b's layer 0 now holds 1 full block only
  CHECK(attention::shared_prefix_positions(pool, ab, 0) == 4);
  const kv::SeqId c = pool.add_sequence();
  fill(c, 0, 12);
  const std::vector<kv::SeqId> abc = {a, b, c};
  CHECK(attention::shared_prefix_positions(pool, abc, 0) == 0);
  CHECK_THROWS_AS((void)attention::shared_prefix_positions(pool, ab, 2), shape_error);
}

TEST_CASE("shared_prefix_positions and decode_cascade over prefix-cache hits (admit)") {
  const attention::Heads heads{.n_q = 6, .n_kv = 2, .head_dim = 64};
  kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = 2, .head_dim = 64, .block_tokens = 16, .n_blocks = 64});
  std::vector<Token> prompt(100);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<Token>(i * 7 % 251);
  const auto k = test::random_vector(100 * 128, 5), v = test::random_vector(100 * 128, 6);
  const auto a = pool.admit(prompt);
  CHECK(a.match.cached_tokens == 0);
  pool.append(a.seq, 0, k, v);
  std::vector<Token> other = prompt;
  other[70] = 9999;  // diverges in block 4: blocks 0 … 3 are hits
  const auto b = pool.admit(other);
  CHECK(b.match.cached_tokens == 64);
  const std::size_t rest = other.size() - 64;
  pool.append(b.seq, 0, std::span<const float>(k).subspan(64 * 128, rest * 128),
              test::random_vector(rest * 128, 8));
  const std::vector<kv::SeqId> seqs = {a.seq, b.seq};
  const auto q = test::random_vector(2 * heads.q_dim(), 9, -2.f, 2.f);
  attention::CascadeWorkspace ws(heads, 2);
  std::vector<float> got(q.size()), ref(q.size());
  CHECK(attention::decode_cascade(q, pool, seqs, 0, heads, got, ws) == 64);
  for (std::size_t s = 0; s < 2; ++s)
    attention::decode(std::span<const float>(q).subspan(s * 384, 384), pool.view(seqs[s], 0), heads,
                      std::span<float>(ref).subspan(s * 384, 384));
  CHECK(got == ref);  // P = 64 is a multiple of the 64-row chunk (d = 64, fp32): bitwise
}

TEST_CASE("group_shared_prefixes: runs of one first block with a shared prefix, the rest left for plain decode") {
  kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = 1, .head_dim = 8, .block_tokens = 4, .n_blocks = 128});
  auto fill = [&](kv::SeqId s, std::size_t n) {
    pool.append(s, 0, test::random_vector(n * 8, 1), test::random_vector(n * 8, 2));
  };
  // family x: root of 12 positions, 2 forks; family y: root of 9, 1 fork, each with suffixes
  const kv::SeqId x = pool.add_sequence();
  fill(x, 12);
  const kv::SeqId x1 = pool.fork(x), x2 = pool.fork(x);
  const kv::SeqId y = pool.add_sequence();
  fill(y, 9);
  const kv::SeqId y1 = pool.fork(y);
  fill(y1, 2);
  fill(x2, 5);
  const kv::SeqId lone = pool.add_sequence();
  fill(lone, 30);
  const kv::SeqId tiny = pool.add_sequence();  // < one block: never grouped
  fill(tiny, 3);
  const kv::SeqId tiny_fork = pool.fork(tiny);
  std::vector<kv::SeqId> seqs = {tiny, y1, x2, lone, x, tiny_fork, y, x1};
  std::vector<attention::PrefixGroup> groups(seqs.size() / 2);
  const std::size_t n = attention::group_shared_prefixes(pool, std::span<kv::SeqId>(seqs), 0, std::span(groups));
  REQUIRE(n == 2);
  // every input sequence is still there, once
  std::vector<kv::SeqId> sorted = seqs, expect = {tiny, y1, x2, lone, x, tiny_fork, y, x1};
  std::sort(sorted.begin(), sorted.end());
  std::sort(expect.begin(), expect.end());
  CHECK(sorted == expect);
  auto members = [&](const attention::PrefixGroup& g) {
    std::vector<kv::SeqId> m(seqs.begin() + static_cast<std::ptrdiff_t>(g.begin), seqs.begin() + static_cast<std::ptrdiff_t>(g.end));
    std::sort(m.begin(), m.end());
    return m;
  };
  const attention::PrefixGroup& gx = members(groups[0]).front() == x ? groups[0] : groups[1];
  const attention::PrefixGroup& gy = &gx == &groups[0] ? groups[1] : groups[0];
  CHECK(members(gx) == std::vector<kv::SeqId>{x, x1, x2});
  CHECK(gx.shared == 12);
  CHECK(members(gy) == std::vector<kv::SeqId>{y, y1});
  CHECK(gy.shared == 8);
  CHECK(groups[0].end <= groups[1].begin);
  // min_seqs = 3 keeps only family x; min_shared = 10 keeps only family x too
  CHECK(attention::group_shared_prefixes(pool, std::span<kv::SeqId>(seqs), 0, std::span(groups), {.min_seqs = 3}) == 1);
  CHECK(members(groups[0]) == std::vector<kv::SeqId>{x, x1, x2});
  CHECK(attention::group_shared_prefixes(pool, std::span<kv::SeqId>(seqs), 0, std::span(groups), {.min_shared = 10}) == 1);
  CHECK(groups[0].shared == 12);
  // too little room for the groups, and min_seqs = 0
  std::vector<attention::PrefixGroup> few(3);
  CHECK_THROWS_AS((void)attention::group_shared_prefixes(pool, std::span<kv::SeqId>(seqs), 0, std::span(few)), shape_error);
  CHECK_THROWS_AS((void)attention::group_shared_prefixes(pool, std::span<kv::SeqId>(seqs), 0, std::span(groups), {.min_seqs = 0}),
                  shape_error);
}
