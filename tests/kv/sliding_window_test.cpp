#include "barato/kv/sliding_window.hpp"

#include <doctest/doctest.h>

#include <cstdint>

#include <random>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/rope.hpp"
#include "barato/attention/split_k.hpp"
#include "barato/core/memory.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// Positions a window cache must hold after n appends: [0, min(S, n)) ∪ [max(S, n − R), n), where
/// R = W + chunk − 1 is its ring (R = W for the default chunk of 1).
std::vector<std::size_t> expected_kept(std::size_t n, std::size_t W, std::size_t S) {
  std::vector<std::size_t> out;
  for (std::size_t p = 0; p < std::min(S, n); ++p) out.push_back(p);
  for (std::size_t p = std::max(S, n > W ? n - W : 0); p < n; ++p) out.push_back(p);
  return out;
}
}  // namespace

TEST_CASE("sliding window: sinks + last W positions, true positions, <= 3 blocks, RoPE-correct attention") {
  for (const auto& ws : {std::pair<std::size_t, std::size_t>{37, 4}, {16, 0}, {5, 1}, {64, 8}}) {
    const std::size_t W = ws.first, S = ws.second;  // (named copies: clang 14 cannot capture bindings)
    CAPTURE(W); CAPTURE(S);
    const std::size_t H = 2, hq = 4, d = 24, n = 150;
    const attention::Heads heads{.n_q = hq, .n_kv = H, .head_dim = d};
    kv::SlidingWindow<float> c(H, d, W, S);
    auto k = test::random_vector(n * H * d, 7);
    const auto v = test::random_vector(n * H * d, 8);
    for (std::size_t p = 0; p < n; ++p)  // keys rotated at their true position, as a model stores them
      attention::rope(std::span<float>(k).subspan(p * H * d, H * d), H, d, p);
    CHECK(c.bytes_reserved() == (W + S) * 2 * H * d * sizeof(float));
    for (std::size_t p = 0; p < n; ++p) {
      c.append(std::span<const float>(k).subspan(p * H * d, H * d), std::span<const float>(v).subspan(p * H * d, H * d));
      const auto want = expected_kept(p + 1, W, S);
      std::vector<std::size_t> got;
      std::size_t blocks = 0;
      bool rows_ok = true;
      c.for_each_block(1, [&](const kv::DenseBlock<float>& b) {
        ++blocks;
        for (std::size_t r = 0; r < b.n; ++r) {
          got.push_back(b.pos0 + r);
          for (std::size_t x = 0; x < d; ++x) rows_ok = rows_ok && b.k[r * b.stride + x] == k[((b.pos0 + r) * H + 1) * d + x];
        }
      });
      REQUIRE(got == want);
      CHECK(rows_ok);
      CHECK(blocks <= 3);
      CHECK(c.size() == p + 1);
      CHECK(c.kept() == want.size());
      CHECK(c.bytes_used() == want.size() * 2 * H * d * sizeof(float));

      // decode at the true position p: query rotated at p, keys at their own positions
      auto q = test::random_vector(hq * d, 50 + static_cast<unsigned>(p), -2.f, 2.f);
      attention::rope(q, hq, d, p);
      std::vector<float> out(q.size());
      attention::decode(q, c, heads, out);
      std::vector<float> kk, vv;
      for (const std::size_t x : want)
        for (std::size_t i = 0; i < H * d; ++i) {
          kk.push_back(k[x * H * d + i]);
          vv.push_back(v[x * H * d + i]);
        }
      const auto ref = test::attention_ref(q, kk, vv, hq, H, d, want.size() - 1, 1.0 / std::sqrt(double(d)));
      CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
    }
  }
}

TEST_CASE("sliding window: rollback keeps evicted positions evicted; appends of up to chunk tokens keep the ring") {
  const std::size_t H = 1, d = 4, W = 8, S = 2, C = 6, R = W + C - 1;
  kv::SlidingWindow<float> c({.n_kv_heads = H, .head_dim = d, .window = W, .sinks = S, .chunk = C});
  CHECK(c.max_append() == C);
  CHECK(c.ring_slots() == R);
  std::vector<float> rows(30 * d);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i / d);  // row p holds p
  const auto span = [&](std::size_t p, std::size_t n) { return std::span<const float>(rows).subspan(p * d, n * d); };
  for (std::size_t p = 0; p < 30; p += 5) c.append(span(p, 5), span(p, 5));  // 30 positions in chunks of 5
  auto kept = [&] {
    std::vector<std::size_t> got;
    c.for_each_block(0, [&](const kv::DenseBlock<float>& b) {
      for (std::size_t r = 0; r < b.n; ++r) {
        CHECK(b.k[r * b.stride] == static_cast<float>(b.pos0 + r));
        got.push_back(b.pos0 + r);
      }
    });
    return got;
  };
  CHECK(kept() == expected_kept(30, R, S));  // ring held [17, 30)
  c.truncate(20);                            // now [17, 20)
  CHECK(kept() == std::vector<std::size_t>{0, 1, 17, 18, 19});
  for (std::size_t p = 20; p < 30; p += 5) c.append(span(p, 5), span(p, 5));
  CHECK(kept() == expected_kept(30, R, S));
  c.truncate(10);  // below everything the ring held
  CHECK(kept() == std::vector<std::size_t>{0, 1});
  c.truncate(1);
  CHECK(kept() == std::vector<std::size_t>{0});
  c.append(span(1, 4), span(1, 4));
  CHECK(kept() == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK_THROWS_AS(c.truncate(6), shape_error);
  CHECK_THROWS_AS(kv::SlidingWindow<float>(1, 4, 0), shape_error);
  CHECK_THROWS_AS(kv::SlidingWindow<float>(1, 4, 8, 2, 0), shape_error);  // chunk 0
}

TEST_CASE("sliding window: an append of more than chunk tokens throws shape_error and changes nothing") {
  const std::size_t H = 2, d = 8, W = 5, S = 1, C = 3;
  kv::SlidingWindow<float> c({.n_kv_heads = H, .head_dim = d, .window = W, .sinks = S, .chunk = C});
  const auto k = test::random_vector(20 * H * d, 3), v = test::random_vector(20 * H * d, 4);
  for (std::size_t p = 0; p < 12; p += 3)
    c.append(std::span<const float>(k).subspan(p * H * d, 3 * H * d), std::span<const float>(v).subspan(p * H * d, 3 * H * d));
  const auto snapshot = [&] {
    std::vector<float> out;
    for (std::size_t h = 0; h < H; ++h)
      c.for_each_block(h, [&](const kv::DenseBlock<float>& b) {
        out.push_back(static_cast<float>(b.pos0));
        for (std::size_t r = 0; r < b.n; ++r)
          for (std::size_t x = 0; x < d; ++x) {
            out.push_back(b.k[r * b.stride + x]);
            out.push_back(b.v[r * b.stride + x]);
          }
      });
    return out;
  };
  const auto before = snapshot();
  const std::size_t used = c.bytes_used(), kept = c.kept();
  CHECK_THROWS_AS(c.append(std::span<const float>(k).subspan(12 * H * d, 4 * H * d),
                           std::span<const float>(v).subspan(12 * H * d, 4 * H * d)),
                  shape_error);
  CHECK(c.size() == 12);
  CHECK(c.kept() == kept);
  CHECK(c.bytes_used() == used);
  CHECK(snapshot() == before);
  // at the limit it works
  c.append(std::span<const float>(k).subspan(12 * H * d, 3 * H * d), std::span<const float>(v).subspan(12 * H * d, 3 * H * d));
  CHECK(c.size() == 15);
}

TEST_CASE("sliding window: bytes_reserved = (S + W + chunk - 1) slots, as the memory resource measures") {
  for (const std::size_t C : {1, 4, 128}) {
    CAPTURE(C);
    CountingResource mem;
    const std::size_t H = 3, d = 16, W = 20, S = 4;
    {
      kv::SlidingWindow<float> c({.n_kv_heads = H, .head_dim = d, .window = W, .sinks = S, .chunk = C}, &mem);
      CHECK(c.bytes_reserved() == (S + W + C - 1) * 2 * H * d * sizeof(float));
      CHECK(mem.current() == c.bytes_reserved());
      kv::SlidingWindow<f16> h({.n_kv_heads = H, .head_dim = d, .window = W, .sinks = S, .chunk = C}, &mem);
      CHECK(h.bytes_reserved() == (S + W + C - 1) * 2 * H * d * sizeof(f16));
      CHECK(mem.current() == c.bytes_reserved() + h.bytes_reserved());
    }
    CHECK(mem.current() == 0);
  }
}

// The exactness the chunk buys: after appends of random sizes 1 … chunk, attention for every query of
// the chunk equals the windowed reference over ALL positions (sinks + its own last W), as if the
// tokens had been fed one at a time; decode_split_k too.
TEST_CASE("sliding window: chunked appends of random sizes give every query exactly its own window") {
  struct Shape {
    std::size_t W, S, C, hq, hkv, d;
  };
  for (const Shape sh : {Shape{16, 4, 8, 4, 2, 8}, Shape{7, 0, 16, 1, 1, 64}, Shape{37, 2, 37, 8, 2, 64},
                         Shape{5, 1, 1, 2, 2, 8}, Shape{100, 4, 70, 6, 3, 8}, Shape{24, 3, 5, 4, 1, 64}}) {
    CAPTURE(sh.W); CAPTURE(sh.S); CAPTURE(sh.C); CAPTURE(sh.hq); CAPTURE(sh.hkv); CAPTURE(sh.d);
    const std::size_t H = sh.hkv, d = sh.d, n = 230;
    const attention::Heads heads{.n_q = sh.hq, .n_kv = H, .head_dim = d};
    const double scale = 1.0 / std::sqrt(double(d));
    kv::SlidingWindow<float> c({.n_kv_heads = H, .head_dim = d, .window = sh.W, .sinks = sh.S, .chunk = sh.C});
    const auto k = test::random_vector(n * H * d, 61), v = test::random_vector(n * H * d, 62);
    const auto qall = test::random_vector(n * sh.hq * d, 63, -3.f, 3.f);  // strong scores: masking errors show
    std::mt19937 gen(static_cast<unsigned>(sh.W * 131 + sh.C));
    std::uniform_int_distribution<std::size_t> size_of(1, sh.C);
    attention::SplitKWorkspace ws(heads, 3);
    std::size_t p0 = 0, chunks = 0;
    double worst = 0, worst_split = 0;
    while (p0 < n) {
      const std::size_t m = std::min(size_of(gen), n - p0);
      c.append(std::span<const float>(k).subspan(p0 * H * d, m * H * d), std::span<const float>(v).subspan(p0 * H * d, m * H * d));
      const std::vector<float> q(qall.begin() + static_cast<std::ptrdiff_t>(p0 * sh.hq * d),
                                 qall.begin() + static_cast<std::ptrdiff_t>((p0 + m) * sh.hq * d));
      std::vector<float> out(q.size());
      attention::attend(q, c, heads, out);  // the m queries at p0 … p0+m−1
      const std::vector<float> kk(k.begin(), k.begin() + static_cast<std::ptrdiff_t>((p0 + m) * H * d));
      const std::vector<float> vv(v.begin(), v.begin() + static_cast<std::ptrdiff_t>((p0 + m) * H * d));
      worst = std::max(worst, test::max_rel_diff(out, test::windowed_attention_ref(q, kk, vv, sh.hq, H, d, p0, scale, sh.S, sh.W)));
      // the newest query through split-K decode
      const std::vector<float> ql(q.end() - static_cast<std::ptrdiff_t>(sh.hq * d), q.end());
      std::vector<float> o2(ql.size());
      attention::decode_split_k(ql, c, heads, o2, ws);
      worst_split = std::max(
          worst_split, test::max_rel_diff(o2, test::windowed_attention_ref(ql, kk, vv, sh.hq, H, d, p0 + m - 1, scale, sh.S, sh.W)));
      CHECK(c.kept() == expected_kept(p0 + m, sh.W + sh.C - 1, sh.S).size());
      p0 += m;
      ++chunks;
    }
    CHECK(chunks > 1);
    CHECK(worst <= test::kFp32RelTol);
    CHECK(worst_split <= test::kFp32RelTol);
  }
}

TEST_CASE("sliding window: a query's output is the same bit for bit whatever chunk it comes in") {
  // (what makes speculative decoding's verify passes over a window cache equal plain decoding)
  struct Shape {
    std::size_t W, S, C, hq, hkv, d;
  };
  for (const Shape sh : {Shape{16, 4, 8, 4, 2, 8}, Shape{70, 0, 16, 2, 1, 64}, Shape{37, 2, 37, 8, 2, 64},
                         Shape{100, 4, 70, 6, 3, 8}, Shape{130, 3, 9, 4, 1, 64}}) {
    CAPTURE(sh.W); CAPTURE(sh.S); CAPTURE(sh.C); CAPTURE(sh.hq); CAPTURE(sh.hkv); CAPTURE(sh.d);
    const std::size_t H = sh.hkv, d = sh.d, n = 300, row = sh.hq * d;
    const attention::Heads heads{.n_q = sh.hq, .n_kv = H, .head_dim = d};
    const kv::SlidingWindowConfig cfg{.n_kv_heads = H, .head_dim = d, .window = sh.W, .sinks = sh.S, .chunk = sh.C};
    const auto k = test::random_vector(n * H * d, 71), v = test::random_vector(n * H * d, 72);
    const auto q = test::random_vector(n * row, 73, -3.f, 3.f);
    const auto kv_rows = [&](const std::vector<float>& x, std::size_t p, std::size_t m) {
      return std::span<const float>(x).subspan(p * H * d, m * H * d);
    };
    kv::SlidingWindow<float> one(cfg), chunked(cfg);
    std::vector<float> out_one(n * row), out_chunked(n * row);
    for (std::size_t p = 0; p < n; ++p) {  // token by token: decode steps
      one.append(kv_rows(k, p, 1), kv_rows(v, p, 1));
      attention::decode(std::span<const float>(q).subspan(p * row, row), one, heads,
                        std::span<float>(out_one).subspan(p * row, row));
    }
    std::mt19937 gen(static_cast<unsigned>(sh.W * 7 + sh.C));
    std::uniform_int_distribution<std::size_t> size_of(1, sh.C);
    for (std::size_t p = 0; p < n;) {  // chunks of random sizes up to C
      const std::size_t m = std::min(size_of(gen), n - p);
      chunked.append(kv_rows(k, p, m), kv_rows(v, p, m));
      attention::attend(std::span<const float>(q).subspan(p * row, m * row), chunked, heads,
                        std::span<float>(out_chunked).subspan(p * row, m * row));
      p += m;
    }
    CHECK(out_chunked == out_one);
  }
}

TEST_CASE("sliding window: a window that cannot exist is a capacity_error, before any allocation") {
  barato::CountingResource mem;
  CHECK_THROWS_WITH_AS(barato::kv::SlidingWindow<float>(8, 128, SIZE_MAX - 4, 8, 8, &mem), doctest::Contains("overflows the position count"),
                       barato::capacity_error);
  const std::size_t phys = barato::physical_memory_bytes();
  if (phys != 0 && phys < (std::size_t{1} << 44))  // 2^31 slots x 8 x 128 x 4 x 2
    CHECK_THROWS_WITH_AS(barato::kv::SlidingWindow<float>(8, 128, std::size_t{1} << 31, 0, 1, &mem),
                         doctest::Contains("kv::SlidingWindow of 2147483648 slots: 17592186044416 bytes requested"), barato::capacity_error);
  CHECK(mem.allocations() == 0);
}
