#include "barato/attention/heads.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/error.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::Heads;

TEST_CASE("head shapes: group, q_dim, kv_dim, default scale") {
  const Heads gqa{.n_q = 32, .n_kv = 8, .head_dim = 128};
  CHECK_NOTHROW(gqa.validate());
  CHECK(gqa.group() == 4);
  CHECK(gqa.q_dim() == 4096);
  CHECK(gqa.kv_dim() == 1024);
  CHECK(gqa.default_scale() == doctest::Approx(1.0 / std::sqrt(128.0)));
  CHECK(Heads{.n_q = 8, .n_kv = 1, .head_dim = 64}.group() == 8);  // MQA
  CHECK(Heads{.n_q = 8, .n_kv = 8, .head_dim = 64}.group() == 1);  // MHA
}

TEST_CASE("bad head shapes throw shape_error") {
  CHECK_THROWS_AS((Heads{.n_q = 0, .n_kv = 1, .head_dim = 8}.validate()), shape_error);
  CHECK_THROWS_AS((Heads{.n_q = 4, .n_kv = 0, .head_dim = 8}.validate()), shape_error);
  CHECK_THROWS_AS((Heads{.n_q = 4, .n_kv = 2, .head_dim = 0}.validate()), shape_error);
  CHECK_THROWS_AS((Heads{.n_q = 6, .n_kv = 4, .head_dim = 8}.validate()), shape_error);
  CHECK_THROWS_AS((Heads{.n_q = 1, .n_kv = 2, .head_dim = 8}.validate()), shape_error);
  try {
    Heads{.n_q = 6, .n_kv = 4, .head_dim = 8}.validate();
  } catch (const shape_error& e) {
    CHECK(std::string(e.what()).find("multiple") != std::string::npos);  // says what was expected
  }
}

TEST_CASE("MHA, GQA and MQA run through the same decode path and match the reference") {
  const std::size_t d = 16, n = 40;
  for (const std::size_t hkv : {8, 4, 2, 1}) {
    CAPTURE(hkv);
    const Heads heads{.n_q = 8, .n_kv = hkv, .head_dim = d};
    const auto k = test::random_vector(n * heads.kv_dim(), 1), v = test::random_vector(n * heads.kv_dim(), 2);
    const auto q = test::random_vector(heads.q_dim(), 3);
    kv::Contiguous<float> cache(hkv, d, n);
    cache.append(k, v);
    std::vector<float> out(heads.q_dim());
    attention::decode(q, cache, heads, out);
    CHECK(test::max_rel_diff(out, test::attention_ref(q, k, v, 8, hkv, d, n - 1, 0.25)) <= test::kFp32RelTol);
  }
}

TEST_CASE("decode and attend reject bad input with typed errors, never UB") {
  const Heads heads{.n_q = 4, .n_kv = 2, .head_dim = 8};
  kv::Contiguous<float> cache(2, 8, 16);
  std::vector<float> q(32), out(32);
  CHECK_THROWS_AS(attention::decode(q, cache, heads, out), shape_error);  // n = 0: empty cache
  cache.append(std::vector<float>(16 * 3, 0.1f), std::vector<float>(16 * 3, 0.2f));
  CHECK_NOTHROW(attention::decode(q, cache, heads, out));

  // zero heads, H_q % H_kv != 0, head_dim 0
  CHECK_THROWS_AS(attention::decode(q, cache, {.n_q = 0, .n_kv = 2, .head_dim = 8}, out), shape_error);
  CHECK_THROWS_AS(attention::decode(q, cache, {.n_q = 4, .n_kv = 0, .head_dim = 8}, out), shape_error);
  CHECK_THROWS_AS(attention::decode(q, cache, {.n_q = 3, .n_kv = 2, .head_dim = 8}, out), shape_error);
  CHECK_THROWS_AS(attention::decode(q, cache, {.n_q = 4, .n_kv = 2, .head_dim = 0}, out), shape_error);
  // heads that do not match the cache
  CHECK_THROWS_AS(attention::decode(q, cache, {.n_q = 4, .n_kv = 4, .head_dim = 8}, out), shape_error);
  std::vector<float> q64(64), out64(64);
  CHECK_THROWS_AS(attention::decode(q64, cache, {.n_q = 4, .n_kv = 2, .head_dim = 16}, out64), shape_error);
  // mismatched spans
  std::vector<float> q_short(31), out_long(33), empty;
  CHECK_THROWS_AS(attention::decode(q_short, cache, heads, out), shape_error);
  CHECK_THROWS_AS(attention::decode(q, cache, heads, out_long), shape_error);
  CHECK_THROWS_AS(attention::decode(empty, cache, heads, empty), shape_error);

  // attend: the same arguments as decode; more queries than cached positions, q not whole tokens,
  // mismatched out, no queries
  std::vector<float> q2(64), out2(64), q3(96), out3(96), q_ragged(40), out_ragged(40);
  CHECK_NOTHROW(attention::attend(q2, cache, heads, out2));   // positions 1, 2 of 3
  CHECK_NOTHROW(attention::attend(q3, cache, heads, out3));   // positions 0, 1, 2
  std::vector<float> q4(128), out4(128);
  CHECK_THROWS_AS(attention::attend(q4, cache, heads, out4), shape_error);  // 4 queries, 3 positions
  CHECK_THROWS_AS(attention::attend(q_ragged, cache, heads, out_ragged), shape_error);
  CHECK_THROWS_AS(attention::attend(q2, cache, heads, out), shape_error);
  CHECK_THROWS_AS(attention::attend(empty, cache, heads, empty), shape_error);
  CHECK_THROWS_AS(attention::decode(q2, cache, heads, out2), shape_error);  // decode is one query
}
