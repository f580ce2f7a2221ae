#include "barato/kv/sliding_window.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/rope.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// Positions a window cache must hold after n appends: [0, min(S, n)) ∪ [max(S, n − W), n).
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

TEST_CASE("sliding window: rollback keeps evicted positions evicted; long appends keep only the survivors") {
  const std::size_t H = 1, d = 4, W = 8, S = 2;
  kv::SlidingWindow<float> c(H, d, W, S);
  std::vector<float> rows(30 * d);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i / d);  // row p holds p
  c.append(rows, rows);  // 30 positions in one append
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
  CHECK(kept() == expected_kept(30, W, S));
  c.truncate(25);  // ring held [22, 30): now [22, 25)
  CHECK(kept() == std::vector<std::size_t>{0, 1, 22, 23, 24});
  c.append(std::span<const float>(rows).subspan(25 * d, 5 * d), std::span<const float>(rows).subspan(25 * d, 5 * d));
  CHECK(kept() == expected_kept(30, W, S));
  c.truncate(10);  // below everything the ring held
  CHECK(kept() == std::vector<std::size_t>{0, 1});
  c.truncate(1);
  CHECK(kept() == std::vector<std::size_t>{0});
  c.append(std::span<const float>(rows).subspan(1 * d, 4 * d), std::span<const float>(rows).subspan(1 * d, 4 * d));
  CHECK(kept() == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK_THROWS_AS(c.truncate(6), shape_error);
  CHECK_THROWS_AS(kv::SlidingWindow<float>(1, 4, 0), shape_error);
}
