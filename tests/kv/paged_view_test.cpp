#include "barato/kv/paged_view.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("paged view: a view per (sequence, layer) is a CachePolicy and attention reads the pages in place") {
  static_assert(kv::CachePolicy<kv::PagedView<float>>);
  const std::size_t L = 3, H = 2, d = 32, B = 16, n = 77;
  kv::PagedPool<float> pool({.n_layers = L, .n_kv_heads = H, .head_dim = d, .block_tokens = B, .n_blocks = 20});
  const kv::SeqId other = pool.add_sequence(), id = pool.add_sequence();
  const auto k = test::random_vector(n * H * d, 1), v = test::random_vector(n * H * d, 2);
  for (std::size_t p = 0; p < n; p += B) {  // interleaved with another sequence: scattered pages
    const std::size_t m = std::min(B, n - p);
    const std::span<const float> kk(k.data() + p * H * d, m * H * d), vv(v.data() + p * H * d, m * H * d);
    for (std::size_t l = 0; l < L; ++l) pool.append(other, l, vv, kk);
    auto view = pool.view(id, 2);
    view.append(kk, vv);
  }
  const auto view = pool.view(id, 2);
  CHECK(view.sequence() == id);
  CHECK(view.layer() == 2);
  CHECK(&view.pool() == &pool);
  CHECK(view.size() == n);
  CHECK(pool.size(id, 0) == 0);  // only layer 2 was appended
  std::size_t blocks = 0;
  view.for_each_block(1, [&](const kv::PagedBlock<float>& b) {  // one block spanning every page
    CHECK(b.pos0 == 0);
    CHECK(b.n == n);
    REQUIRE(b.pages() == 5);
    for (std::size_t i = 0; i < b.pages(); ++i) {
      const kv::DenseBlock<float> pg = b.page(i);
      CHECK(pg.pos0 == i * B);
      CHECK(pg.n == std::min<std::size_t>(B, n - i * B));
      CHECK(pg.k == pool.key(id, 2, 1, pg.pos0).data());  // pointers into the pool: no gather copy
      CHECK(pg.v == pool.value(id, 2, 1, pg.pos0).data());
    }
    ++blocks;
  });
  CHECK(blocks == 1);
  CHECK(view.bytes_used() == n * 2 * H * d * sizeof(float));
  CHECK(view.bytes_reserved() == 5 * B * 2 * H * d * sizeof(float));

  // attention through the view equals attention over a contiguous copy, bitwise (pages of 16 rows)
  kv::Contiguous<float> copy(H, d, n);
  copy.append(k, v);
  const attention::Heads heads{.n_q = 4, .n_kv = H, .head_dim = d};
  const auto q = test::random_vector(heads.q_dim(), 3, -2.f, 2.f);
  std::vector<float> a(q.size()), c(q.size());
  attention::decode(q, view, heads, a);
  attention::decode(q, copy, heads, c);
  CHECK(a == c);

  auto mutable_view = pool.view(id, 2);
  mutable_view.truncate(40);
  CHECK(view.size() == 40);  // views are handles: every view of (sequence, layer) sees the change
  CHECK(pool.block_table(id).size() == 3);
}
