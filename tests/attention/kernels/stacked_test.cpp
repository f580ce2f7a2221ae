#include "barato/attention/kernels/stacked.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "barato/attention/kernels/accumulate.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/paged.hpp"
#include "support/reference.hpp"
#include "support/tolerances.hpp"

using namespace barato;

namespace {

/// g query heads over one KV head of a paged pool: the stacked kernel (two calls, split at `split`)
/// against `accumulate` (one call), outputs normalised, relative to max |v|. Heads past g (the
/// padding of the transposed queries) must not be written.
template <class T>
void check_stacked(std::size_t d, std::size_t g, std::size_t n, std::size_t split) {
  CAPTURE(d);
  CAPTURE(g);
  CAPTURE(n);
  CAPTURE(split);
  kv::PagedPool<T> pool({.n_layers = 1, .n_kv_heads = 1, .head_dim = d, .block_tokens = 16, .n_blocks = 2 * (n / 16 + 2),
                         .extent_blocks = 2});
  const kv::SeqId a = pool.add_sequence(), other = pool.add_sequence();
  for (std::size_t p = 0; p < n; p += 40) {  // interleaved: pages in short runs, scattered in memory
    const std::size_t m = std::min<std::size_t>(40, n - p);
    pool.append(a, 0, test::random_vector(m * d, 1 + static_cast<unsigned>(p)),
                test::random_vector(m * d, 2 + static_cast<unsigned>(p), -2.f, 2.f));
    pool.append(other, 0, test::random_vector(m * d, 3), test::random_vector(m * d, 4));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto q = test::random_vector(g * d, 9, -2.f, 2.f);  // [g, d]
  const std::size_t gp = (g + attention::detail::kStackedHeadPad - 1) / attention::detail::kStackedHeadPad * attention::detail::kStackedHeadPad;
  Buffer<float> qt(d * gp);  // [d, gp], zero padded
  for (std::size_t c = 0; c < d; ++c)
    for (std::size_t h = 0; h < g; ++h) qt[c * gp + h] = scale * q[h * d + c];
  constexpr float kSentinel = 12345.0f;
  std::vector<float> o((g + 1) * d, 0.0f), o_ref(g * d, 0.0f);
  std::fill(o.begin() + static_cast<std::ptrdiff_t>(g * d), o.end(), kSentinel);
  std::vector<attention::PartialStats> st(g + 1), st_ref(g);
  st[g] = {.m = kSentinel, .l = kSentinel};
  const attention::detail::StackedQueries sq{.qt = qt.data(), .g = g, .gp = gp, .o = o.data(), .st = st.data()};
  const attention::QueryGroup qg{.q = q.data(), .g = g, .d = d, .scale = scale, .o = o_ref.data(), .st = st_ref.data()};
  double max_v = 0;
  pool.for_each_block(a, 0, 0, [&](const kv::PagedBlock<T>& blk) {
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < d; ++c) max_v = std::max(max_v, std::abs(static_cast<double>(static_cast<float>(blk.v[blk.offset(r) + c]))));
    auto stacked = [&](std::size_t r0, std::size_t r1) {
      if (d == 64) attention::detail::accumulate_stacked<64, simd::DefaultArch>(sq, blk, r0, r1);
      else attention::detail::accumulate_stacked<128, simd::DefaultArch>(sq, blk, r0, r1);
    };
    stacked(0, split);
    stacked(split, n);
    attention::accumulate<simd::DefaultArch>(qg, blk, 0, n);
  });
  double err = 0;
  for (std::size_t h = 0; h < g; ++h) {
    attention::finalize(o.data() + h * d, st[h], d);
    attention::finalize(o_ref.data() + h * d, st_ref[h], d);
    for (std::size_t c = 0; c < d; ++c) err = std::max(err, std::abs(static_cast<double>(o[h * d + c]) - o_ref[h * d + c]));
  }
  CHECK(err <= test::kFp32RelTol * max_v);
  CHECK(std::all_of(o.begin() + static_cast<std::ptrdiff_t>(g * d), o.end(), [&](float x) { return x == kSentinel; }));
  CHECK(st[g].m == kSentinel);
  CHECK(st[g].l == kSentinel);
}

}  // namespace

TEST_CASE_TEMPLATE("accumulate_stacked equals accumulate within fp32 rounding (heads per block, tails, split calls)", T, float, f16) {
  for (const std::size_t d : {64, 128})
    for (const std::size_t g : {1, 5, 16, 17, 40, 112})
      for (const auto& [n, split] : {std::pair<std::size_t, std::size_t>{300, 100}, {77, 3}, {64, 64}, {5, 0}})
        check_stacked<T>(d, g, n, split);
}
