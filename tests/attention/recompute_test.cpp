#include "barato/attention/recompute.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/alloc_counter.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// The identity check: the cached path and the recompute path, both fp32, agree to this
/// maximum relative difference (max |cached − recomputed| / max |recomputed|).
constexpr double kCachedVsRecomputeRelTol = 1e-5;

using Case = test::AttentionCase;
}  // namespace

TEST_CASE("single-head recompute equals the double reference for every row; scores hold the causal P") {
  for (const std::size_t d : {1, 3, 64}) {
    for (const std::size_t n : {1, 2, 5, 127, 128, 129, 300}) {
      CAPTURE(d); CAPTURE(n);
      const auto q = test::random_vector(n * d, 1, -2.f, 2.f), k = test::random_vector(n * d, 2), v = test::random_vector(n * d, 3);
      std::vector<float> scores(n * n, -7.0f), out(n * d);
      const auto ni = static_cast<Eigen::Index>(n), di = static_cast<Eigen::Index>(d);
      attention::recompute(Eigen::Map<const attention::RowMatrixXf>(q.data(), ni, di),
                           Eigen::Map<const attention::RowMatrixXf>(k.data(), ni, di),
                           Eigen::Map<const attention::RowMatrixXf>(v.data(), ni, di), scores,
                           Eigen::Map<attention::RowMatrixXf>(out.data(), ni, di));
      CHECK(test::max_rel_diff(out, test::attention_ref(q, k, v, 1, 1, d, 0, 1.0 / std::sqrt(double(d)))) <=
            test::kFp32RelTol);
      std::size_t negative = 0, future_nonzero = 0, bad_rows = 0;
      for (std::size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          negative += scores[i * n + j] < 0.0f;
          sum += scores[i * n + j];
        }
        bad_rows += std::abs(sum - 1.0) > test::kFp32RelTol;  // softmax rows sum to 1 up to fp32 summation
        for (std::size_t j = i + 1; j < n; ++j) future_nonzero += scores[i * n + j] != 0.0f;
      }
      CHECK(negative == 0);
      CHECK(bad_rows == 0);        // every row of P sums to 1 over j <= i
      CHECK(future_nonzero == 0);  // and is 0 for j > i (the -7 fill was overwritten)
    }
  }
}

TEST_CASE("multi-head recompute (MHA / GQA / MQA) equals the reference") {
  for (const Case c : {Case{4, 4, 16, 40}, Case{8, 2, 8, 70}, Case{6, 1, 20, 33}, Case{3, 3, 5, 1}}) {
    CAPTURE(c.hq); CAPTURE(c.hkv); CAPTURE(c.d); CAPTURE(c.n);
    const attention::Heads heads{.n_q = c.hq, .n_kv = c.hkv, .head_dim = c.d};
    const auto q = test::random_vector(c.n * c.hq * c.d, 4, -2.f, 2.f);
    const auto k = test::random_vector(c.n * c.hkv * c.d, 5), v = test::random_vector(c.n * c.hkv * c.d, 6);
    std::vector<float> scores(c.n * c.n), out(q.size());
    attention::recompute(q, k, v, heads, scores, out, 0.3f);
    CHECK(test::max_rel_diff(out, test::attention_ref(q, k, v, c.hq, c.hkv, c.d, 0, 0.3)) <= test::kFp32RelTol);
  }
}

TEST_CASE("identity: cached decode, token by token, equals the recomputed rows (fp32 rel diff <= 1e-5)") {
  for (const Case c : {Case{1, 1, 64, 700}, Case{1, 1, 128, 300}, Case{8, 2, 64, 200}, Case{4, 1, 32, 150},
                       Case{2, 2, 7, 90}}) {
    CAPTURE(c.hq); CAPTURE(c.hkv); CAPTURE(c.d); CAPTURE(c.n);
    const attention::Heads heads{.n_q = c.hq, .n_kv = c.hkv, .head_dim = c.d};
    const auto q = test::random_vector(c.n * heads.q_dim(), 7, -3.f, 3.f);
    const auto k = test::random_vector(c.n * heads.kv_dim(), 8), v = test::random_vector(c.n * heads.kv_dim(), 9);
    std::vector<float> scores(c.n * c.n), recomputed(q.size());
    attention::recompute(q, k, v, heads, scores, recomputed);

    kv::Contiguous<float> cache(c.hkv, c.d, c.n);
    std::vector<float> cached(q.size());
    for (std::size_t p = 0; p < c.n; ++p) {
      cache.append(std::span<const float>(k.data() + p * heads.kv_dim(), heads.kv_dim()),
                   std::span<const float>(v.data() + p * heads.kv_dim(), heads.kv_dim()));
      attention::decode(std::span<const float>(q.data() + p * heads.q_dim(), heads.q_dim()), cache, heads,
                        std::span<float>(cached.data() + p * heads.q_dim(), heads.q_dim()));
    }
    CHECK(test::max_rel_diff(cached, recomputed) <= kCachedVsRecomputeRelTol);

    // fp16 / bf16 caches: same check, against the recompute of the rounded K/V.
    kv::Contiguous<f16> half(c.hkv, c.d, c.n);
    half.append(k, v);
    std::vector<float> k16(k.size()), v16(v.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      k16[i] = static_cast<float>(static_cast<f16>(k[i]));
      v16[i] = static_cast<float>(static_cast<f16>(v[i]));
    }
    std::vector<float> last(heads.q_dim());
    attention::decode(std::span<const float>(q.data() + (c.n - 1) * heads.q_dim(), heads.q_dim()), half, heads, last);
    attention::recompute(q, k16, v16, heads, scores, recomputed);
    const std::vector<float> want(recomputed.end() - static_cast<std::ptrdiff_t>(heads.q_dim()), recomputed.end());
    CHECK(test::max_rel_diff(last, want) <= kCachedVsRecomputeRelTol);
  }
}

TEST_CASE("prefill over P tokens (tiled attend) never materialises P x P: its only scratch, P*H_q stats, is on its stack") {
  const std::size_t P = 512, hq = 4, hkv = 2, d = 32;
  const attention::Heads heads{.n_q = hq, .n_kv = hkv, .head_dim = d};
  const auto q = test::random_vector(P * heads.q_dim(), 10, -2.f, 2.f);
  const auto k = test::random_vector(P * heads.kv_dim(), 11), v = test::random_vector(P * heads.kv_dim(), 12);
  kv::Contiguous<float> cache(hkv, d, P);
  cache.append(k, v);
  std::vector<float> tiled(q.size()), recomputed(q.size());

  // The tiled prefill: P*H_q partial states fit attend's stack scratch, so it allocates nothing at all.
  static_assert(P * hq <= attention::kAttendStackStats);
  std::size_t prefill_allocs = 0;
  {
    test::CountAllocations count;
    attention::attend(q, cache, heads, tiled);
    prefill_allocs = count.count();
  }
  CHECK(prefill_allocs == 0);

  // The recompute path needs the P x P score matrix.
  CountingResource recompute_mr;
  {
    Buffer<float> scores(P * P, &recompute_mr);
    attention::recompute(q, k, v, heads, scores.span(), recomputed);
  }
  CHECK(recompute_mr.peak() == P * P * sizeof(float));
  const std::size_t stats_bytes = P * hq * sizeof(attention::PartialStats);
  CHECK(stats_bytes * 16 < recompute_mr.peak());  // here 16 KiB against 1 MiB
  MESSAGE("prefill P = " << P << ": tiled extra bytes " << stats_bytes << " (stack), recompute score bytes "
                         << recompute_mr.peak());
  CHECK(test::max_rel_diff(tiled, recomputed) <= kCachedVsRecomputeRelTol);
}

TEST_CASE("recompute rejects bad shapes with shape_error") {
  const attention::Heads heads{.n_q = 4, .n_kv = 2, .head_dim = 8};
  const std::size_t n = 5;
  std::vector<float> q(n * 32), k(n * 16), v(n * 16), scores(n * n), out(n * 32);
  CHECK_NOTHROW(attention::recompute(q, k, v, heads, scores, out));
  std::vector<float> small(n * n - 1), bad_kv(n * 16 - 8), bad_out(n * 32 + 1), empty;
  CHECK_THROWS_AS(attention::recompute(q, k, v, heads, small, out), shape_error);
  CHECK_THROWS_AS(attention::recompute(q, bad_kv, v, heads, scores, out), shape_error);
  CHECK_THROWS_AS(attention::recompute(q, k, bad_kv, heads, scores, out), shape_error);
  CHECK_THROWS_AS(attention::recompute(q, k, v, heads, scores, bad_out), shape_error);
  CHECK_THROWS_AS(attention::recompute(empty, empty, empty, heads, scores, empty), shape_error);  // n = 0
  CHECK_THROWS_AS(attention::recompute(q, k, v, {.n_q = 4, .n_kv = 3, .head_dim = 8}, scores, out), shape_error);
  CHECK_THROWS_AS(attention::recompute(q, k, v, {.n_q = 0, .n_kv = 2, .head_dim = 8}, scores, out), shape_error);
  CHECK_THROWS_AS(attention::recompute(q, k, v, {.n_q = 4, .n_kv = 2, .head_dim = 0}, scores, out), shape_error);
  std::vector<float> q_odd(n * 32 + 3);
  CHECK_THROWS_AS(attention::recompute(q_odd, k, v, heads, scores, out), shape_error);

  attention::RowMatrixXf a(3, 4), b(3, 5), c(2, 4), o(3, 4);
  std::vector<float> s(9);
  CHECK_THROWS_AS(attention::recompute(a, b, a, s, o), shape_error);
  CHECK_THROWS_AS(attention::recompute(a, c, a, s, o), shape_error);
  CHECK_THROWS_AS(attention::recompute(a, a, a, std::span<float>(s.data(), 8), o), shape_error);
  attention::RowMatrixXf o_bad(3, 3);
  CHECK_THROWS_AS(attention::recompute(a, a, a, s, o_bad), shape_error);
}
