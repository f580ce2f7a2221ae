#include "barato/attention/attend.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/kv/sliding_window.hpp"
#include "support/alloc_counter.hpp"
#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// Least difference between masked and unmasked attention for a mask test to mean anything: three
/// orders of magnitude above the fp32 tolerance the masked result is checked with.
constexpr double kMaskEffectMin = 1e-2;

using Case = test::AttentionCase;
}  // namespace

TEST_CASE("decode over a contiguous cache equals the double-precision reference (MHA/GQA/MQA, odd d and n)") {
  for (const Case c : {Case{1, 1, 64, 1}, Case{1, 1, 64, 17}, Case{8, 4, 8, 100}, Case{4, 4, 128, 33},
                       Case{6, 1, 20, 50}, Case{2, 2, 3, 5}, Case{14, 2, 64, 300}}) {
    CAPTURE(c.hq); CAPTURE(c.hkv); CAPTURE(c.d); CAPTURE(c.n);
    const attention::Heads heads{.n_q = c.hq, .n_kv = c.hkv, .head_dim = c.d};
    auto k = test::random_vector(c.n * c.hkv * c.d, 1);
    auto v = test::random_vector(c.n * c.hkv * c.d, 2);
    auto q = test::random_vector(c.hq * c.d, 3, -3.f, 3.f);
    kv::Contiguous<float> cache(c.hkv, c.d, c.n + 3);
    cache.append(k, v);
    std::vector<float> out(q.size());
    attention::decode(q, cache, heads, out);
    const auto ref = test::attention_ref(q, k, v, c.hq, c.hkv, c.d, c.n - 1, 1.0 / std::sqrt(double(c.d)));
    CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
  }
}

TEST_CASE("prefill (tiled attend over P queries) equals the reference, with and without threads") {
  const std::size_t hq = 8, hkv = 4, d = 16, past = 37, P = 150;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  auto k = test::random_vector((past + P) * hkv * d, 4);
  auto v = test::random_vector((past + P) * hkv * d, 5);
  auto q = test::random_vector(P * hq * d, 6, -2.f, 2.f);
  kv::Contiguous<float> cache(hkv, d, past + P);
  cache.append(k, v);
  const auto ref = test::attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
  for (int threads : {1, 2}) {
    std::vector<float> out(q.size());
    attention::attend(q, cache, heads, out, {.threads = threads});
    CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
  }
}

TEST_CASE("threads change no bit: attend split over queries or over KV heads equals one thread") {
  // n from a decode (heads split) to blocks where every thread gets kMinQueriesPerThread queries and
  // more (queries split, each thread's part in stack batches when H_q·n exceeds kAttendStackStats);
  // contiguous, windowed and scattered paged caches; thread counts that do not divide the heads.
  struct Shape { std::size_t hq, hkv, d; };
  for (const Shape sh : {Shape{8, 4, 8}, Shape{14, 2, 64}, Shape{40, 8, 16}}) {
    const attention::Heads heads{.n_q = sh.hq, .n_kv = sh.hkv, .head_dim = sh.d};
    const std::size_t row = sh.hkv * sh.d, past = 45;
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{17}, std::size_t{33},
                                std::size_t{150}}) {
      CAPTURE(sh.hq); CAPTURE(sh.d); CAPTURE(n);
      const auto k = test::random_vector((past + n) * row, 81), v = test::random_vector((past + n) * row, 82);
      const auto q = test::random_vector(n * heads.q_dim(), 83, -3.f, 3.f);
      kv::Contiguous<float> flat(sh.hkv, sh.d, past + n);
      flat.append(k, v);
      kv::SlidingWindow<float> window({.n_kv_heads = sh.hkv, .head_dim = sh.d, .window = 20, .sinks = 2, .chunk = std::max(n, past)});
      window.append(std::span<const float>(k).first(past * row), std::span<const float>(v).first(past * row));
      window.append(std::span<const float>(k).subspan(past * row), std::span<const float>(v).subspan(past * row));
      kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = sh.hkv, .head_dim = sh.d, .block_tokens = 8,
                                 .n_blocks = 2 * ((past + n + 7) / 8), .extent_blocks = 1});
      auto paged = pool.view(pool.add_sequence(), 0), other = pool.view(pool.add_sequence(), 0);
      for (std::size_t t = 0; t < past + n; t += 8) {  // pages taken in turn: none adjacent
        const std::size_t m = std::min<std::size_t>(8, past + n - t);
        paged.append(std::span<const float>(k).subspan(t * row, m * row), std::span<const float>(v).subspan(t * row, m * row));
        other.append(std::span<const float>(v).subspan(t * row, m * row), std::span<const float>(k).subspan(t * row, m * row));
      }
      auto run = [&](const auto& cache, int threads) {
        std::vector<float> out(q.size());
        attention::attend(q, cache, heads, out, {.threads = threads});
        return out;
      };
      const auto one_flat = run(flat, 1), one_window = run(window, 1), one_paged = run(paged, 1);
      CHECK(one_paged == one_flat);
      for (const int threads : {2, 3, 4}) {
        CAPTURE(threads);
        CHECK(run(flat, threads) == one_flat);
        CHECK(run(window, threads) == one_window);
        CHECK(run(paged, threads) == one_flat);
      }
    }
  }
}

TEST_CASE("causal_split: the parts cover the queries in order, each within one query's keys of an even share") {
  for (const std::size_t p0 : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{5000}})
    for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{16}, std::size_t{129}, std::size_t{1000}})
      for (const std::size_t parts : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}}) {
        CAPTURE(p0); CAPTURE(n); CAPTURE(parts);
        auto keys = [&](std::size_t lo, std::size_t hi) {  // keys seen by queries [lo, hi), counted one by one
          std::size_t w = 0;
          for (std::size_t t = lo; t < hi; ++t) w += p0 + t + 1;
          return w;
        };
        CHECK(attention::causal_keys(p0, n) == keys(0, n));
        const double share = static_cast<double>(keys(0, n)) / static_cast<double>(parts);
        CHECK(attention::detail::causal_split(p0, n, 0, parts) == 0);
        CHECK(attention::detail::causal_split(p0, n, parts, parts) == n);
        for (std::size_t i = 0; i < parts; ++i) {
          const std::size_t lo = attention::detail::causal_split(p0, n, i, parts);
          const std::size_t hi = attention::detail::causal_split(p0, n, i + 1, parts);
          REQUIRE(lo <= hi);
          // a part is off an even share by less than its last query's keys (whole queries)
          CHECK(std::abs(static_cast<double>(keys(lo, hi)) - share) <= static_cast<double>(p0 + n) + 1e-9);
        }
      }
}

TEST_CASE("query_parts: queries split only with enough per thread, and never when the states need the heap") {
  using attention::query_parts;
  const std::size_t q8 = attention::kMinQueriesPerThread;
  CHECK(query_parts(2 * q8, 8, 2) == 2);
  CHECK(query_parts(2 * q8 - 1, 8, 2) == 1);
  CHECK(query_parts(3 * q8, 8, 3) == 3);
  CHECK(query_parts(1000, 8, 1) == 1);
  CHECK(query_parts(1000, attention::kAttendStackStats, 2) == 2);
  CHECK(query_parts(1000, attention::kAttendStackStats + 1, 2) == 1);  // heap states: one part, heads split
}

TEST_CASE("windowed cache: a prefill chunk wider than the tile clips every query to its own window") {
  // P = 150 queries cross several 64-row tiles and the ring's wrap; each query must see its sinks and
  // its last W positions only — the cache holds up to chunk − 1 older ones that must stay hidden.
  for (const std::size_t d : {8, 64}) {
    CAPTURE(d);
    const std::size_t hq = 8, hkv = 2, W = 40, S = 3, P = 150, past = 90;
    const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
    kv::SlidingWindow<float> cache({.n_kv_heads = hkv, .head_dim = d, .window = W, .sinks = S, .chunk = P});
    const auto k = test::random_vector((past + P) * hkv * d, 14), v = test::random_vector((past + P) * hkv * d, 15);
    cache.append(std::span<const float>(k).first(past * hkv * d), std::span<const float>(v).first(past * hkv * d));
    cache.append(std::span<const float>(k).subspan(past * hkv * d), std::span<const float>(v).subspan(past * hkv * d));
    const auto q = test::random_vector(P * hq * d, 16, -3.f, 3.f);
    const auto ref = test::windowed_attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)), S, W);
    const auto full = test::attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
    CHECK(test::max_rel_diff(full, ref) > kMaskEffectMin);  // the window matters for these inputs
    for (int threads : {1, 2}) {
      std::vector<float> out(q.size());
      attention::attend(q, cache, heads, out, {.threads = threads});
      CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
    }
  }
}

namespace {
/// Prefill (P queries over 70 positions: two 64-row tiles) and decode through `attend<Arch>` / `decode<Arch>` over a
/// Contiguous<T> cache, against the double reference over the values the cache stores (T-rounded).
template <class Arch, Element T>
void check_through_arch(std::size_t d) {
  CAPTURE(d);
  const std::size_t hq = 4, hkv = 2, past = 30, P = 40;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  auto k = test::random_vector((past + P) * hkv * d, 21), v = test::random_vector((past + P) * hkv * d, 22);
  kv::Contiguous<T> cache(hkv, d, past + P);
  cache.append(k, v);
  for (auto& x : k) x = static_cast<float>(static_cast<T>(x));  // what the kernels read
  for (auto& x : v) x = static_cast<float>(static_cast<T>(x));
  const auto q = test::random_vector(P * hq * d, 23, -2.f, 2.f);
  const auto ref = test::attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
  std::vector<float> out(q.size());
  attention::attend<Arch>(q, cache, heads, out);  // the P newest positions: past … past + P − 1
  CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);

  const std::vector<float> q1(q.end() - static_cast<std::ptrdiff_t>(hq * d), q.end());
  const std::vector<float> ref1(ref.end() - static_cast<std::ptrdiff_t>(hq * d), ref.end());
  std::vector<float> out1(hq * d);
  attention::decode<Arch>(q1, cache, heads, out1);
  CHECK(test::max_rel_diff(out1, ref1) <= test::kFp32RelTol);
}
}  // namespace

TEST_CASE_TEMPLATE("attend and decode through every explicit arch equal the reference (small-d, fixed-dim, generic kernels)", T,
                   float, f16) {
  // d = 4, 8: the small-d kernel on AVX-512 (generic elsewhere); 24, 40: the generic kernel (24 on
  // 8-lane rows under AVX-512); 48, 64, 96, 128: the fixed-dim kernel; 144: generic; the portable arch
  // runs 4 lanes throughout.
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t d : {4, 8, 24, 40, 48, 64, 96, 128, 144}) check_through_arch<Arch, T>(d);
  });
}

namespace {
/// Prefill and decode through attend<Arch> / decode<Arch> over caches whose blocks have their own
/// kernels: a paged pool (pages of 16 tokens, scattered between two sequences) must give bitwise the
/// result of a contiguous cache with the same rows (pages start at multiples of every kernel's row
/// tile), and quantized caches (int8, int4) the double reference over their dequantised rows.
template <class Arch>
void check_block_kernels_through_arch(std::size_t hq, std::size_t d) {
  CAPTURE(hq);
  CAPTURE(d);
  const std::size_t hkv = 2, past = 30, P = 40, n = past + P, row = hkv * d;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  const auto k = test::random_vector(n * row, 31), v = test::random_vector(n * row, 32);
  const auto q = test::random_vector(P * hq * d, 33, -2.f, 2.f);
  const std::vector<float> q1(q.end() - static_cast<std::ptrdiff_t>(hq * d), q.end());
  auto prefill = [&](const auto& cache) {
    std::vector<float> out(q.size());
    attention::attend<Arch>(q, cache, heads, out);
    return out;
  };
  auto step = [&](const auto& cache) {
    std::vector<float> out(q1.size());
    attention::decode<Arch>(q1, cache, heads, out);
    return out;
  };

  kv::Contiguous<float> flat(hkv, d, n);
  flat.append(k, v);
  kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = hkv, .head_dim = d, .block_tokens = 16,
                             .n_blocks = 2 * ((n + 15) / 16), .extent_blocks = 1});
  auto a = pool.view(pool.add_sequence(), 0), b = pool.view(pool.add_sequence(), 0);
  for (std::size_t t = 0; t < n; t += 16) {  // a and b take pages in turn: a's pages are not adjacent
    const std::size_t m = std::min<std::size_t>(16, n - t);
    a.append(std::span<const float>(k).subspan(t * row, m * row), std::span<const float>(v).subspan(t * row, m * row));
    b.append(std::span<const float>(v).subspan(t * row, m * row), std::span<const float>(k).subspan(t * row, m * row));
  }
  CHECK(prefill(a) == prefill(flat));
  CHECK(step(a) == step(flat));

  auto check_quantized = [&](auto cache) {
    cache.append(k, v);
    std::vector<float> kd(n * row), vd(n * row);  // the rows the kernels read
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t h = 0; h < hkv; ++h)
        for (std::size_t c = 0; c < d; ++c) {
          kd[(p * hkv + h) * d + c] = cache.key(h, p, c);
          vd[(p * hkv + h) * d + c] = cache.value(h, p, c);
        }
    const auto ref = test::attention_ref(q, kd, vd, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
    CHECK(test::max_rel_diff(prefill(cache), ref) <= test::kFp32RelTol);
    const std::vector<float> ref1(ref.end() - static_cast<std::ptrdiff_t>(hq * d), ref.end());
    CHECK(test::max_rel_diff(step(cache), ref1) <= test::kFp32RelTol);
  };
  check_quantized(kv::Quantized<kv::Int8>(hkv, d, n));
  check_quantized(kv::Quantized<kv::Int4>(hkv, d, n));
}
}  // namespace

TEST_CASE("paged and quantized caches through every explicit arch: paged == contiguous bitwise, quantized == reference") {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t d : {8, 40, 64, 96})
      for (const std::size_t hq : {2, 4}) check_block_kernels_through_arch<Arch>(hq, d);  // MHA and GQA (staged rows)
  });
}

TEST_CASE("a prefill block with more partial states than attend's stack runs in batches: no allocation, same result") {
  // 40 query heads × 120 queries = 4800 states > kAttendStackStats: two batches of 102 and 18 queries.
  const std::size_t hq = 40, hkv = 8, d = 16, past = 10, P = 120;
  static_assert(hq * P > attention::kAttendStackStats);
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  const auto k = test::random_vector((past + P) * hkv * d, 61), v = test::random_vector((past + P) * hkv * d, 62);
  kv::Contiguous<float> cache(hkv, d, past + P);
  cache.append(k, v);
  const auto q = test::random_vector(P * hq * d, 63, -2.f, 2.f);
  std::vector<float> out(q.size());
  std::size_t allocs = 0;
  {
    test::CountAllocations count;
    attention::attend(q, cache, heads, out);
    allocs = count.count();
  }
  CHECK(allocs == 0);
  const auto ref = test::attention_ref(q, k, v, hq, hkv, d, past, 1.0 / std::sqrt(double(d)));
  CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
  // each query of the second batch equals the same query run in a block of its own size
  const std::size_t per = attention::kAttendStackStats / hq, row = hq * d;
  std::vector<float> tail(out.size() - per * row);
  attention::attend(std::span<const float>(q).subspan(per * row), cache, heads, tail);
  CHECK(std::equal(tail.begin(), tail.end(), out.begin() + static_cast<std::ptrdiff_t>(per * row)));
}

namespace {
/// Prefill blocks (P queries: the newest P positions, several 64-row tiles and causal ends anywhere)
/// and decode through attend<Arch> / decode<Arch> over a paged pool with pages of B tokens must equal,
/// bit for bit, the same calls over a contiguous cache with the same rows, whatever B, the head
/// dimension (every kernel: small-d, generic, half-width generic, fixed-dim) and the element type.
/// `scattered`: a second sequence takes pages in turn, so no two pages of the one under test are
/// adjacent in memory; otherwise its pages follow one another (one run).
template <class Arch, Element T = float>
void check_paged_equals_contiguous(std::size_t hq, std::size_t d, std::size_t B, std::size_t n, bool scattered) {
  CAPTURE(hq);
  CAPTURE(d);
  CAPTURE(B);
  CAPTURE(n);
  CAPTURE(scattered);
  const std::size_t hkv = 2, row = hkv * d;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  const auto k = test::random_vector(n * row, 71), v = test::random_vector(n * row, 72);
  kv::Contiguous<T> flat(hkv, d, n);
  flat.append(k, v);
  kv::PagedPool<T> pool({.n_layers = 1, .n_kv_heads = hkv, .head_dim = d, .block_tokens = B,
                         .n_blocks = 2 * ((n + B - 1) / B), .extent_blocks = 1});
  auto a = pool.view(pool.add_sequence(), 0), b = pool.view(pool.add_sequence(), 0);
  for (std::size_t t = 0; t < n; t += B) {
    const std::size_t m = std::min(B, n - t);
    const auto kk = std::span<const float>(k).subspan(t * row, m * row);
    const auto vv = std::span<const float>(v).subspan(t * row, m * row);
    a.append(kk, vv);
    if (scattered) b.append(vv, kk);
  }
  const auto table = pool.block_table(a.sequence());
  bool adjacent = false;
  for (std::size_t i = 1; i < table.size(); ++i) adjacent |= table[i] == table[i - 1] + 1;
  CHECK(adjacent == (!scattered && table.size() > 1));
  for (const std::size_t P : {std::size_t{1}, std::size_t{5}, n}) {
    CAPTURE(P);
    const auto q = test::random_vector(P * heads.q_dim(), 73 + P, -2.f, 2.f);
    std::vector<float> got(q.size()), want(q.size());
    attention::attend<Arch>(q, a, heads, got);
    attention::attend<Arch>(q, flat, heads, want);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}
}  // namespace

TEST_CASE("paged == contiguous bitwise for every page size (1 … 32 tokens), head dimension, GQA and MHA") {
  // n = 70: two prefill tiles and a partial page for every B; 150: long enough for a 64-row chunk
  // of the fixed-dim kernel (and the prefetch split) to span many small pages
  for (const std::size_t d : {8, 16, 24, 32, 48, 64, 80, 128})
    for (const std::size_t B : {1, 2, 4, 8, 12, 16, 32})
      for (const bool scattered : {false, true}) {
        check_paged_equals_contiguous<simd::DefaultArch>(6, d, B, 70, scattered);
        if (d == 8 || d == 64 || d == 80) check_paged_equals_contiguous<simd::DefaultArch>(2, d, B, 150, scattered);
      }
  // fp16 rows: the fixed-dim kernel's chunk depends on the element type (64 rows at d = 96, 128)
  for (const std::size_t d : {8, 40, 96, 128})
    for (const std::size_t B : {4, 16}) check_paged_equals_contiguous<simd::DefaultArch, f16>(6, d, B, 150, true);
}

TEST_CASE("paged == contiguous bitwise for small pages through every explicit arch") {
  test::for_each_arch([&]<class Arch>(Arch) {
    for (const std::size_t d : {8, 40, 64, 96})
      for (const std::size_t B : {1, 4, 8}) check_paged_equals_contiguous<Arch>(4, d, B, 70, true);
  });
}

TEST_CASE("attend edge cases: a NaN key or an inf value reaches exactly the queries that see it; equal keys average") {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const std::size_t hq = 4, hkv = 2, d = 8, P = 6;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  auto k = test::random_vector(P * hkv * d, 71), v = test::random_vector(P * hkv * d, 72);
  k[(2 * hkv + 0) * d + 3] = kNaN;  // position 2, KV head 0
  v[(4 * hkv + 1) * d + 5] = kInf;  // position 4, KV head 1
  kv::Contiguous<float> cache(hkv, d, P);
  cache.append(k, v);
  const auto q = test::random_vector(P * hq * d, 73);
  std::vector<float> out(q.size());
  attention::attend(q, cache, heads, out);
  for (std::size_t p = 0; p < P; ++p)
    for (std::size_t h = 0; h < hq; ++h) {
      CAPTURE(p);
      CAPTURE(h);
      const std::size_t g = h / (hq / hkv);  // the KV head of query head h
      const bool sees_bad = (g == 0 && p >= 2) || (g == 1 && p >= 4);
      bool finite = true;
      for (std::size_t c = 0; c < d; ++c) finite = finite && std::isfinite(out[(p * hq + h) * d + c]);
      CHECK(finite == !sees_bad);
    }
  // equal keys: every visible position weighs the same
  std::vector<float> ke(P * hkv * d, 0.5f), ve = test::random_vector(P * hkv * d, 74);
  kv::Contiguous<float> flat(hkv, d, P);
  flat.append(ke, ve);
  attention::attend(q, flat, heads, out);
  for (std::size_t p = 0; p < P; ++p)
    for (std::size_t h = 0; h < hq; ++h)
      for (std::size_t c = 0; c < d; ++c) {
        double mean = 0;
        for (std::size_t j = 0; j <= p; ++j) mean += ve[(j * hkv + h / 2) * d + c];
        mean /= static_cast<double>(p + 1);
        CHECK(out[(p * hq + h) * d + c] == doctest::Approx(mean).epsilon(1e-5));
      }
  // a quantized cache stores the non-finite rows as zeros: every output stays finite
  kv::Quantized<kv::Int8> qc(hkv, d, P);
  qc.append(k, v);
  attention::attend(q, qc, heads, out);
  for (const float x : out) CHECK(std::isfinite(x));
}
