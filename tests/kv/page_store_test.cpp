#include "barato/kv/page_store.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "barato/core/memory.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("page layout: rows [layers, heads, blocks, B], so blocks b and b + 1 are adjacent in every (layer, head)") {
  const kv::PageLayout l{.n_layers = 3, .n_kv_heads = 2, .n_blocks = 5, .block_tokens = 4};
  CHECK(l.rows() == 3 * 2 * 5 * 4);
  CHECK(l.block_rows() == 3 * 2 * 4);
  CHECK(l.row(0, 0, 0) == 0);
  CHECK(l.row(1, 0, 0) == 4);
  CHECK(l.row(0, 0, 1) == 5 * 4);
  CHECK(l.row(0, 1, 0) == 2 * 5 * 4);
  CHECK(l.row(4, 2, 1) + 4 == l.rows());  // the last block of the last (layer, head) ends the store
}

TEST_CASE_TEMPLATE("page store of element rows: write, copy a block, and the paged view of one head", T, float, f16) {
  const kv::PageLayout l{.n_layers = 2, .n_kv_heads = 2, .n_blocks = 4, .block_tokens = 4};
  const std::size_t d = 8;
  CountingResource mem;
  kv::PageStore<T> store(l, d, &mem);
  CHECK(store.bytes() == mem.current());
  CHECK(store.bytes() == l.rows() * kv::PageStore<T>::row_bytes(d));
  CHECK(kv::PageStore<T>::row_bytes(d) == 2 * d * sizeof(T));
  const auto k = test::random_vector(d, 1), v = test::random_vector(d, 2);
  store.write(l.row(2, 1, 1) + 3, k.data(), v.data());  // block 2, layer 1, head 1, slot 3
  std::vector<T> kt(d), vt(d);  // the conversion the store applies
  simd::from_float<T>(k.data(), kt.data(), d);
  simd::from_float<T>(v.data(), vt.data(), d);
  for (std::size_t c = 0; c < d; ++c) {
    CHECK(to_float(store.key(l.row(2, 1, 1) + 3)[c]) == to_float(kt[c]));
    CHECK(to_float(store.value(l.row(2, 1, 1) + 3)[c]) == to_float(vt[c]));
  }
  kv::copy_block(store, 0, 2);  // every layer and head of block 2 into block 0
  CHECK(std::equal(store.key(l.row(0, 1, 1) + 3).begin(), store.key(l.row(0, 1, 1) + 3).end(),
                   store.key(l.row(2, 1, 1) + 3).begin()));
  // the view of (layer 1, head 1) through a table {2, 0}: logical page 0 is block 2
  const std::uint32_t table[] = {2, 0};
  const kv::PagedBlock<T> b = store.block(1, 1, table, 7);
  CHECK(b.n == 7);
  CHECK(b.page_rows == 4);
  CHECK(b.page_stride == 4 * d);
  CHECK(b.stride == d);
  CHECK(b.pos0 == 0);
  CHECK(b.table == table);
  CHECK(b.k + b.offset(3) == store.key(l.row(2, 1, 1) + 3).data());
  CHECK(b.v + b.offset(4) == store.value(l.row(0, 1, 1)).data());  // logical row 4: page 1 = block 0
}

TEST_CASE("page store of quantized rows: codes + scales as kv::Quantized writes them, copies, and the view") {
  using F = kv::QuantizedPages<kv::Int8, kv::Int4>;
  static_assert(kv::PageFormat<F> && kv::PageFormat<float> && !kv::PageFormat<int>);
  const kv::PageLayout l{.n_layers = 1, .n_kv_heads = 2, .n_blocks = 3, .block_tokens = 4};
  const std::size_t d = 16;
  CountingResource mem;
  kv::PageStore<F> store(l, d, &mem);
  CHECK(kv::PageStore<F>::row_bytes(d) == d + d / 2 + 2 * sizeof(float));
  CHECK(store.bytes() == mem.current());
  CHECK(store.bytes() == l.rows() * kv::PageStore<F>::row_bytes(d));
  const auto k = test::random_vector(d, 3), v = test::random_vector(d, 4);
  store.write(l.row(1, 0, 1) + 2, k.data(), v.data());
  kv::copy_block(store, 2, 1);
  const std::uint32_t table[] = {1, 2};
  for (const std::uint32_t* t : {table, table + 1}) {  // block 1, then its copy (block 2)
    const auto b = store.block(0, 1, t, 4);
    CHECK(b.page_shift == 2);
    CHECK(b.k_stride == d);
    CHECK(b.v_stride == d / 2);
    std::vector<std::uint8_t> kc(d), vc(d / 2);
    CHECK(b.k_scale_at(2) == kv::quantize_row<kv::Int8>(k.data(), d, kc.data()));
    CHECK(b.v_scale_at(2) == kv::quantize_row<kv::Int4>(v.data(), d, vc.data()));
    CHECK(std::equal(kc.begin(), kc.end(), b.k_row(2)));
    CHECK(std::equal(vc.begin(), vc.end(), b.v_row(2)));
  }
}
