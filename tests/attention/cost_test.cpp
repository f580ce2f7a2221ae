#include "barato/attention/cost.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/recompute.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/counted_attention.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("instrumented loops compute attention (so what they count is attention)") {
  const std::size_t n = 23, d = 8;
  const auto q = test::random_vector(n * d, 1, -2.f, 2.f), k = test::random_vector(n * d, 2), v = test::random_vector(n * d, 3);
  const auto ref = test::attention_ref(q, k, v, 1, 1, d, 0, 1.0 / std::sqrt(double(d)));
  CHECK(test::max_rel_diff(test::counted_recompute(q, k, v, n, d).out, ref) <= test::kFp32RelTol);
  const std::vector<float> last(ref.end() - static_cast<std::ptrdiff_t>(d), ref.end());
  CHECK(test::max_rel_diff(test::counted_cached_step(q, k, v, n, d).out, last) <= test::kFp32RelTol);

  // ... and agree with the library paths whose cost the model describes.
  std::vector<float> scores(n * n), out(n * d), step(d);
  attention::recompute(q, k, v, {.n_q = 1, .n_kv = 1, .head_dim = d}, scores, out);
  CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
  kv::Contiguous<float> cache(1, d, n);
  cache.append(k, v);
  attention::decode(std::span<const float>(q.data() + (n - 1) * d, d), cache, {.n_q = 1, .n_kv = 1, .head_dim = d}, step);
  CHECK(test::max_rel_diff(step, last) <= test::kFp32RelTol);
}

TEST_CASE("step costs equal the operations counted by the instrumented loops") {
  for (const std::size_t d : {1, 3, 8, 64}) {
    for (const std::size_t n : {1, 2, 3, 7, 16, 33, 100}) {
      CAPTURE(d); CAPTURE(n);
      const auto q = test::random_vector(n * d, 4), k = test::random_vector(n * d, 5), v = test::random_vector(n * d, 6);
      const auto re = test::counted_recompute(q, k, v, n, d);
      CHECK(attention::recompute_step_cost(n, d).macs == re.macs);
      CHECK(attention::recompute_step_cost(n, d).score_bytes == re.peak_score_bytes);
      const auto ca = test::counted_cached_step(q, k, v, n, d);
      CHECK(attention::cached_step_cost(n, d).macs == ca.macs);
      CHECK(attention::cached_step_cost(n, d).score_bytes == ca.peak_score_bytes);
    }
  }
}

TEST_CASE("generation totals from a cold start equal the counted sums (closed forms)") {
  for (const std::size_t d : {1, 2, 5}) {
    for (const std::size_t t : {1, 2, 3, 10, 31, 48}) {
      CAPTURE(d); CAPTURE(t);
      const auto q = test::random_vector(t * d, 7), k = test::random_vector(t * d, 8), v = test::random_vector(t * d, 9);
      const auto re = test::counted_generation(test::counted_recompute, q, k, v, t, d);
      const auto ca = test::counted_generation(test::counted_cached_step, q, k, v, t, d);
      CHECK(attention::recompute_generation_cost(t, d).macs == re.macs);
      CHECK(attention::recompute_generation_cost(t, d).peak_score_bytes == re.peak_score_bytes);
      CHECK(attention::cached_generation_cost(t, d).macs == ca.macs);
      CHECK(attention::cached_generation_cost(t, d).peak_score_bytes == ca.peak_score_bytes);
    }
  }
}

TEST_CASE("closed forms stay exact at the tutorial's sizes (no overflow, ratio (T+2)/3)") {
  for (const std::uint64_t t : {48, 128, 512, 2048, 8192, 65536}) {
    CAPTURE(t);
    std::uint64_t re = 0, ca = 0;  // summed step by step, in 64-bit integers
    for (std::uint64_t n = 1; n <= t; ++n) {
      re += attention::recompute_step_cost(n, 128).macs;
      ca += attention::cached_step_cost(n, 128).macs;
    }
    CHECK(attention::recompute_generation_cost(t, 128).macs == re);
    CHECK(attention::cached_generation_cost(t, 128).macs == ca);
    CHECK(static_cast<double>(re) / static_cast<double>(ca) == doctest::Approx((static_cast<double>(t) + 2) / 3));
  }
  CHECK(attention::recompute_step_cost(4096, 64).score_bytes == 67108864);
  CHECK(attention::cached_step_cost(4096, 64).score_bytes == 16384);
}

TEST_CASE("K/V bytes of a cached step equal what a contiguous cache of that context holds") {
  for (const DType t : {DType::f32, DType::f16, DType::bf16}) {
    CountingResource mr;
    const std::size_t n = 77, d = 64;
    if (t == DType::f32) { kv::Contiguous<float> c(1, d, n, &mr); CHECK(mr.current() == attention::cached_kv_bytes_read(n, d, t)); }
    if (t == DType::f16) { kv::Contiguous<f16> c(1, d, n, &mr); CHECK(mr.current() == attention::cached_kv_bytes_read(n, d, t)); }
    if (t == DType::bf16) { kv::Contiguous<bf16> c(1, d, n, &mr); CHECK(mr.current() == attention::cached_kv_bytes_read(n, d, t)); }
  }
}
