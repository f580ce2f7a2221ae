#include "barato/attention/kernels/paged.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/split_k.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

/// Attention (prefill of the last `prompt` positions, decode, split-K decode) over layer 1 of a paged
/// pool vs over a contiguous cache holding the same rows. A second sequence is appended in between,
/// so the pages of the sequence under test come in runs of consecutive blocks no longer than about
/// `extent` (1: every page scattered), and the kernel mixes contiguous and page-table chunks; with
/// `alone`, no second sequence: every page follows the one before.
void check_paged_vs_contiguous(std::size_t d, std::size_t B, std::size_t n, std::size_t extent, bool alone = false) {
  CAPTURE(d);
  CAPTURE(B);
  CAPTURE(n);
  CAPTURE(extent);
  CAPTURE(alone);
  constexpr std::size_t H = 2, Hq = 6, prompt = 70;
  const attention::Heads heads{.n_q = Hq, .n_kv = H, .head_dim = d};
  kv::PagedPool<float> pool({.n_layers = 2, .n_kv_heads = H, .head_dim = d, .block_tokens = B,
                             .n_blocks = 2 * ((n + B - 1) / B), .extent_blocks = extent});
  const kv::SeqId a = pool.add_sequence(), other = pool.add_sequence();
  kv::Contiguous<float> ref(H, d, n);
  const auto k = test::random_vector(n * H * d, 41), v = test::random_vector(n * H * d, 42);
  const std::size_t row = H * d;
  for (std::size_t p = 0; p < n; p += B) {
    const std::size_t m = std::min(B, n - p);
    const std::span<const float> kk(k.data() + p * row, m * row), vv(v.data() + p * row, m * row);
    for (std::size_t l = 0; l < 2; ++l) {
      if (!alone) pool.append(other, l, vv, kk);
      pool.append(a, l, kk, vv);
    }
    ref.append(kk, vv);
  }
  const auto table = pool.block_table(a);
  std::size_t longest = 1;  // longest run of consecutive blocks
  for (std::size_t i = 1, run = 1; i < table.size(); ++i) {
    run = table[i] == table[i - 1] + 1 ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  if (alone) CHECK(longest == table.size());
  if (extent == 1 && !alone) CHECK(longest == 1);
  if (extent > 1 && table.size() >= 2 * extent) CHECK(longest >= extent);  // whole extents fit
  const auto view = pool.view(a, 1);
  // bitwise equal for every page size (the chunk-boundary rule, attention/kernels/paged.hpp)
  auto same = [&](const std::vector<float>& got, const std::vector<float>& want) { CHECK(got == want); };
  {  // prefill: 64-row tiles inside the block, causal ends anywhere
    const auto q = test::random_vector(prompt * heads.q_dim(), 43, -2.f, 2.f);
    std::vector<float> got(q.size()), want(q.size());
    attention::attend(q, view, heads, got);  // the newest `prompt` positions
    attention::attend(q, ref, heads, want);  // the newest `prompt` positions
    same(got, want);
  }
  const auto q = test::random_vector(heads.q_dim(), 44, -2.f, 2.f);
  {
    std::vector<float> got(q.size()), want(q.size());
    attention::decode(q, view, heads, got);
    attention::decode(q, ref, heads, want);
    same(got, want);
  }
  {  // split-K: ranges start at multiples of 16 rows, anywhere relative to the pages
    attention::SplitKWorkspace ws(heads, 3);
    std::vector<float> got(q.size()), want(q.size());
    attention::decode_split_k(q, view, heads, got, ws);
    attention::decode_split_k(q, ref, heads, want, ws);
    same(got, want);
  }
}

}  // namespace

TEST_CASE("paged block: attention across pages equals attention over a contiguous copy bitwise, every page size") {
  for (const std::size_t d : {64, 128, 32, 96})  // fixed-dim chunks of 64 (d = 32, 64) and 32 rows (96, 128)
    for (const std::size_t B : {16, 32, 8, 24, 12, 4, 1})
      for (const std::size_t n : {70, 200})
        for (const std::size_t extent : {1, 3, 8, 16}) {
          check_paged_vs_contiguous(d, B, n, extent);
          if (extent == 1) check_paged_vs_contiguous(d, B, n, 0, /*alone=*/true);
        }
  // small-d (d = 8 on AVX-512), generic tiles (40 on AVX-512, 144) and the fixed-dim kernel at one
  // vector per row (16 on AVX-512), pages smaller than a tile too
  for (const std::size_t d : {8, 16, 40, 144})
    for (const std::size_t B : {16, 12, 4, 1}) {
      check_paged_vs_contiguous(d, B, 150, 1);
      check_paged_vs_contiguous(d, B, 150, 3);
      check_paged_vs_contiguous(d, B, 150, 0, /*alone=*/true);
    }
}

TEST_CASE("paged block: page(i) views and the fold of an unaligned range equals one dense call") {
  constexpr std::size_t d = 64, B = 16, n = 53;
  kv::PagedPool<float> pool({.n_layers = 1, .n_kv_heads = 1, .head_dim = d, .block_tokens = B, .n_blocks = 8});
  const kv::SeqId s = pool.add_sequence(), t = pool.add_sequence();
  const auto k = test::random_vector(n * d, 51), v = test::random_vector(n * d, 52);
  for (std::size_t p = 0; p < n; p += B) {
    const std::size_t m = std::min(B, n - p);
    pool.append(t, 0, std::span<const float>(k).subspan(p * d, m * d), std::span<const float>(v).subspan(p * d, m * d));
    pool.append(s, 0, std::span<const float>(k).subspan(p * d, m * d), std::span<const float>(v).subspan(p * d, m * d));
  }
  std::size_t calls = 0;
  pool.view(s, 0).for_each_block(0, [&](const kv::PagedBlock<float>& b) {
    ++calls;
    REQUIRE(b.pages() == 4);
    CHECK(b.page(3).n == n - 3 * B);
    CHECK(b.page(2).k == pool.key(s, 0, 0, 2 * B).data());
    // rows [5, 50): r0 not a multiple of W, so no page-table kernel call: chunks that span the
    // scattered pages are staged; bitwise one call over a dense block
    const kv::Contiguous<float> ref = [&] {
      kv::Contiguous<float> c(1, d, n);
      c.append(k, v);
      return c;
    }();
    const auto q = test::random_vector(2 * d, 53, -2.f, 2.f);
    std::vector<float> o1(2 * d, 0.0f), o2(2 * d, 0.0f);
    std::vector<attention::PartialStats> s1(2), s2(2);
    attention::accumulate(attention::QueryGroup{q.data(), 2, d, 0.125f, o1.data(), s1.data()}, b, 5, 50);
    ref.for_each_block(0, [&](const kv::DenseBlock<float>& dense) {
      attention::accumulate(attention::QueryGroup{q.data(), 2, d, 0.125f, o2.data(), s2.data()}, dense, 5, 50);
    });
    CHECK(o1 == o2);
    for (std::size_t h = 0; h < 2; ++h) {
      CHECK(s1[h].m == s2[h].m);
      CHECK(s1[h].l == s2[h].l);
    }
  });
  CHECK(calls == 1);
}

TEST_CASE("page stretches: cover [r0, r1) in order, start on chunk boundaries, and split for the prefetch") {
  // pages of B = 16 rows, d = 4 (stride 4) stored back to back; logical → physical table with runs
  // of consecutive pages (0-9, 20-21, 5 alone, 30-41) so that both kinds of stretch and long runs occur
  constexpr std::size_t B = 16, stride = 4, R = 32;  // R: the kernel's chunk
  std::vector<std::uint32_t> table;
  for (std::uint32_t p = 0; p < 10; ++p) table.push_back(p);
  table.push_back(20);
  table.push_back(21);
  table.push_back(50);
  for (std::uint32_t p = 30; p < 42; ++p) table.push_back(p);
  std::vector<float> k(64 * B * stride), v(64 * B * stride);
  const std::size_t n = table.size() * B - 3;
  const kv::PagedBlock<float> blk{.k = k.data(), .v = v.data(), .table = table.data(), .page_rows = B,
                                  .page_stride = B * stride, .n = n, .stride = stride, .pos0 = 0};
  for (const std::size_t r0 : {std::size_t{0}, std::size_t{48}})
    for (const std::size_t r1 : {n, std::size_t{300}}) {
      CAPTURE(r0);
      CAPTURE(r1);
      std::size_t at = r0, contiguous = 0, scattered = 0, prefetches = 0;
      for (const attention::detail::PageStretch& s : attention::detail::PageStretches<float, R>(blk, r0, r1)) {
        CHECK(s.begin == at);                    // in order, no gap
        CHECK(s.end > s.begin);
        CHECK((s.begin - r0) % R == 0);          // the bitwise rule: calls start on chunk boundaries
        CHECK((s.end == r1 || (s.end - r0) % R == 0));
        CHECK(s.contiguous == blk.consecutive(s.begin, s.end - s.begin));
        if (!s.contiguous)  // scattered: no chunk of it is contiguous by itself
          for (std::size_t c = s.begin; c < s.end; c += R) CHECK_FALSE(blk.consecutive(c, std::min(R, s.end - c)));
        CHECK((!s.prefetch_end || (s.contiguous && s.end < r1 && s.end - s.begin <= attention::detail::kPagePrefetchRows)));
        (s.contiguous ? contiguous : scattered) += 1;
        prefetches += s.prefetch_end ? 1 : 0;
        at = s.end;
      }
      CHECK(at == r1);  // covered
      CHECK(contiguous > 0);
      CHECK(scattered > 0);
      CHECK(prefetches > 0);
    }
}
