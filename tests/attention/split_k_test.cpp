#include "barato/attention/split_k.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/alloc_counter.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
constexpr double kSplitVsDecodeRelTol = 1e-5;  // fp32: split-K vs one-pass decode (summation order only)

struct Case {
  std::size_t hq, hkv, d, n;
};

template <Element T>
void check_case(const Case& c, std::size_t splits, int threads) {
  CAPTURE(c.hq); CAPTURE(c.hkv); CAPTURE(c.d); CAPTURE(c.n); CAPTURE(splits); CAPTURE(threads);
  const attention::Heads heads{.n_q = c.hq, .n_kv = c.hkv, .head_dim = c.d};
  const auto k = test::random_vector(c.n * heads.kv_dim(), 1), v = test::random_vector(c.n * heads.kv_dim(), 2);
  const auto q = test::random_vector(heads.q_dim(), 3, -3.f, 3.f);
  kv::Contiguous<T> cache(c.hkv, c.d, c.n + 5);
  cache.append(k, v);
  std::vector<float> one_pass(q.size()), split(q.size(), -1.0f);
  attention::decode(q, cache, heads, one_pass);
  attention::SplitKWorkspace ws(heads, splits);
  attention::decode_split_k(q, cache, heads, split, ws, {.threads = threads});
  CHECK(test::max_rel_diff(split, one_pass) <= kSplitVsDecodeRelTol);
  if constexpr (std::is_same_v<T, float>)
    CHECK(test::max_rel_diff(split, test::attention_ref(q, k, v, c.hq, c.hkv, c.d, c.n - 1, 1.0 / std::sqrt(double(c.d)))) <=
          test::kFp32RelTol);
}
}  // namespace

TEST_CASE("split-K decode equals one-pass decode (MHA/GQA/MQA, any split count, threads 1 and 2)") {
  for (const Case c : {Case{1, 1, 64, 1}, Case{1, 1, 64, 15}, Case{1, 1, 128, 1000}, Case{8, 2, 64, 333},
                       Case{4, 1, 20, 100}, Case{6, 6, 3, 17}}) {
    for (const std::size_t splits : {1, 2, 3, 7, 64}) {
      for (const int threads : {1, 2}) check_case<float>(c, splits, threads);
    }
  }
}

TEST_CASE("split-K over fp16 and bf16 caches") {
  check_case<f16>(Case{4, 2, 64, 500}, 4, 2);
  check_case<bf16>(Case{4, 2, 128, 129}, 3, 1);
}

TEST_CASE("chunk boundaries cover [0, n) in order, aligned to kSplitKRowAlign") {
  for (const std::size_t n : {1, 16, 17, 1000, 4096}) {
    for (const std::size_t s : {1, 2, 5, 300}) {
      CHECK(attention::detail::split_k_begin(n, 0, s) == 0);
      CHECK(attention::detail::split_k_begin(n, s, s) == n);
      for (std::size_t i = 0; i < s; ++i) {
        const std::size_t b = attention::detail::split_k_begin(n, i, s), e = attention::detail::split_k_begin(n, i + 1, s);
        CHECK(b <= e);
        CHECK((b % attention::kSplitKRowAlign == 0 || b == n));
      }
    }
  }
}

TEST_CASE("the workspace is sized at construction and a split-K step allocates nothing") {
  const attention::Heads heads{.n_q = 8, .n_kv = 2, .head_dim = 64};
  CountingResource mr;
  attention::SplitKWorkspace ws(heads, 4, &mr);
  CHECK(mr.current() == 4 * (heads.q_dim() * sizeof(float) + heads.n_q * sizeof(attention::PartialStats)));
  CHECK(ws.bytes() == mr.current());
  kv::Contiguous<float> cache(2, 64, 256);
  cache.append(test::random_vector(256 * 128, 4), test::random_vector(256 * 128, 5));
  const auto q = test::random_vector(heads.q_dim(), 6);
  std::vector<float> out(heads.q_dim());
  const std::size_t allocations_before = mr.allocations();
  test::CountAllocations count;
  attention::decode_split_k(q, cache, heads, out, ws);
  CHECK(count.count() == 0);
  CHECK(mr.allocations() == allocations_before);
}

TEST_CASE("split-K rejects bad input with shape_error") {
  const attention::Heads heads{.n_q = 4, .n_kv = 2, .head_dim = 8};
  CHECK_THROWS_AS(attention::SplitKWorkspace(heads, 0), shape_error);
  CHECK_THROWS_AS(attention::SplitKWorkspace({.n_q = 3, .n_kv = 2, .head_dim = 8}, 2), shape_error);
  CHECK_THROWS_AS(attention::SplitKWorkspace({.n_q = 0, .n_kv = 0, .head_dim = 8}, 2), shape_error);
  attention::SplitKWorkspace ws(heads, 2);
  kv::Contiguous<float> cache(2, 8, 10);
  std::vector<float> q(32), out(32);
  CHECK_THROWS_AS(attention::decode_split_k(q, cache, heads, out, ws), shape_error);  // empty cache
  cache.append(std::vector<float>(16, 0.5f), std::vector<float>(16, 0.5f));
  CHECK_NOTHROW(attention::decode_split_k(q, cache, heads, out, ws));
  std::vector<float> q_bad(31), out_bad(33);
  CHECK_THROWS_AS(attention::decode_split_k(q_bad, cache, heads, out, ws), shape_error);
  CHECK_THROWS_AS(attention::decode_split_k(q, cache, heads, out_bad, ws), shape_error);
  attention::SplitKWorkspace other(attention::Heads{.n_q = 2, .n_kv = 2, .head_dim = 8}, 2);
  CHECK_THROWS_AS(attention::decode_split_k(q, cache, heads, out, other), shape_error);
  kv::Contiguous<float> wrong(1, 8, 10);
  wrong.append(std::vector<float>(8), std::vector<float>(8));
  CHECK_THROWS_AS(attention::decode_split_k(q, wrong, heads, out, ws), shape_error);
}
