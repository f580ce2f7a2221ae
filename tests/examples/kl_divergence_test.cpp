// Tests of the comparison math in examples/models/kl_divergence.hpp: KL between two logit vectors
// (identity, hand-computed cases, −∞ entries, bad inputs), the running statistics against a direct
// computation, the Wilson interval, and compare_models on stories260K (fp32 vs itself, int8-row).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "barato/nn/any_linear.hpp"
#include "barato/quant/linear.hpp"
#include "models/kl_divergence.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"

using namespace barato_examples;

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

TEST_CASE("kl_divergence: identical logits give exactly 0") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> l(512);
  for (float& x : l) x = nd(rng);
  CHECK(kl_divergence(l, l) == 0.0);
  l[3] = kNegInf;
  l[100] = kNegInf;
  CHECK(kl_divergence(l, l) == 0.0);
  // A shift changes no probability: 0 up to rounding, never negative.
  std::vector<float> shifted = l;
  for (float& x : shifted) x += 64.0f;
  const double k = kl_divergence(l, shifted);
  CHECK(k >= 0.0);
  CHECK(k < 1e-9);
}

TEST_CASE("kl_divergence: hand-computed 3-token cases") {
  // P uniform, Q = softmax(1, 0, 0) = (e, 1, 1) / (e + 2): KL = ln((e + 2) / 3) − 1/3.
  const std::vector<float> uniform = {0.0f, 0.0f, 0.0f}, peaked = {1.0f, 0.0f, 0.0f};
  CHECK(kl_divergence(uniform, peaked) == doctest::Approx(std::log((std::exp(1.0) + 2.0) / 3.0) - 1.0 / 3.0).epsilon(1e-12));
  // The other direction: Σ P log(P / Q) with P = (e, 1, 1) / (e + 2), Q uniform = ln 3 − H(P).
  const double z = std::exp(1.0) + 2.0, p0 = std::exp(1.0) / z, p1 = 1.0 / z;
  const double expected = p0 * std::log(3 * p0) + 2 * p1 * std::log(3 * p1);
  CHECK(kl_divergence(peaked, uniform) == doctest::Approx(expected).epsilon(1e-12));
  CHECK(kl_divergence(peaked, uniform) != doctest::Approx(kl_divergence(uniform, peaked)));  // not symmetric
}

TEST_CASE("kl_divergence: -inf logits") {
  // P = (1/2, 0, 1/2): the −∞ reference entry contributes nothing whatever Q puts there.
  const std::vector<float> ref = {0.0f, kNegInf, 0.0f}, test = {0.0f, 5.0f, 0.0f};
  CHECK(kl_divergence(ref, test) == doctest::Approx(std::log((2.0 + std::exp(5.0)) / 2.0)).epsilon(1e-12));
  // Q = 0 where P > 0: infinite.
  CHECK(std::isinf(kl_divergence(test, ref)));
  // −∞ in both at the same place, the rest equal.
  CHECK(kl_divergence(ref, ref) == 0.0);
  // Invalid inputs.
  const std::vector<float> all_inf = {kNegInf, kNegInf, kNegInf};
  CHECK_THROWS_AS((void)kl_divergence(all_inf, test), barato::value_error);
  const std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  CHECK_THROWS_AS((void)kl_divergence(ref, nan), barato::value_error);
  const std::vector<float> pos_inf = {0.0f, std::numeric_limits<float>::infinity(), 0.0f};
  CHECK_THROWS_AS((void)kl_divergence(pos_inf, ref), barato::value_error);
  CHECK_THROWS_AS((void)kl_divergence(ref, std::vector<float>{0.0f, 0.0f}), barato::shape_error);
}

TEST_CASE("KldStats: against a direct computation") {
  SUBCASE("quantiles of 0..10 (shuffled)") {
    std::vector<double> v = {7, 3, 10, 0, 5, 1, 9, 2, 8, 4, 6};
    KldStats s;
    for (std::size_t i = 0; i < v.size(); ++i) s.add(v[i], i % 3 != 0);
    const KldSummary r = s.summary();
    CHECK(r.count == 11);
    CHECK(r.mean == doctest::Approx(5.0));
    CHECK(r.median == 5.0);
    CHECK(r.p90 == doctest::Approx(9.0));
    CHECK(r.p99 == doctest::Approx(9.9));
    CHECK(r.max == 10.0);
    CHECK(r.same_top1 == 7);  // i = 0, 3, 6, 9 are not
    CHECK(r.same_top1_share == doctest::Approx(7.0 / 11.0));
    // sample variance of 0..10 = 11, standard error = √(11 / 11) = 1
    CHECK(r.std_error == doctest::Approx(1.0));
  }
  SUBCASE("random values: Welford mean and standard error vs two passes; quantiles vs the sorted vector") {
    std::mt19937 rng(11);
    std::exponential_distribution<double> ed(200.0);
    std::vector<double> v(1001);
    KldStats s;
    for (double& x : v) {
      x = ed(rng);
      s.add(x, true);
    }
    double mean = 0;
    for (const double x : v) mean += x;
    mean /= double(v.size());
    double ss = 0;
    for (const double x : v) ss += (x - mean) * (x - mean);
    const double se = std::sqrt(ss / double(v.size() - 1) / double(v.size()));
    const KldSummary r = s.summary();
    CHECK(r.mean == doctest::Approx(mean).epsilon(1e-12));
    CHECK(r.std_error == doctest::Approx(se).epsilon(1e-9));
    std::vector<float> sorted(v.begin(), v.end());
    std::sort(sorted.begin(), sorted.end());
    CHECK(r.median == sorted[500]);  // rank 0.5 · 1000 = 500 exactly
    CHECK(r.p90 == doctest::Approx(sorted[900]));
    CHECK(r.p99 == doctest::Approx(sorted[990]));
    CHECK(r.max == sorted.back());
    CHECK(r.same_top1_share == 1.0);
  }
  SUBCASE("empty, one value, an infinite value, a negative value") {
    KldStats s;
    CHECK(s.summary().count == 0);
    CHECK(s.summary().mean == 0.0);
    s.add(0.25, false);
    CHECK(s.summary().median == 0.25);
    CHECK(s.summary().std_error == 0.0);
    s.add(std::numeric_limits<double>::infinity(), false);
    CHECK(std::isinf(s.summary().mean));
    CHECK(std::isinf(s.summary().max));
    CHECK_THROWS_AS(s.add(-1e-3, true), barato::value_error);
  }
}

TEST_CASE("wilson_interval") {
  const auto [lo, hi] = wilson_interval(8, 10);  // textbook value: [0.4902, 0.9433]
  CHECK(lo == doctest::Approx(0.490162).epsilon(1e-5));
  CHECK(hi == doctest::Approx(0.943318).epsilon(1e-5));
  const auto [lo0, hi0] = wilson_interval(0, 20);
  CHECK(lo0 == 0.0);
  CHECK(hi0 == doctest::Approx(0.161).epsilon(1e-2));
  const auto [lo1, hi1] = wilson_interval(20, 20);
  CHECK(hi1 == 1.0);
  CHECK(wilson_interval(2000, 2000).second == 1.0);  // exact at the ends, not 1 − ε
  CHECK(wilson_interval(0, 2000).first == 0.0);
  CHECK(lo1 == doctest::Approx(1.0 - hi0));
  CHECK_THROWS_AS((void)wilson_interval(3, 2), barato::value_error);
}

TEST_CASE("compare_models: stories260K, fp32 vs itself and vs int8-row") {
  const auto dir = barato::test::data_dir_or_skip("text/tinystories-valid-sample.txt");
  if (dir.empty()) return;
  const auto dense = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", dense.config.vocab_size);
  std::ifstream in(dir / "text/tinystories-valid-sample.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<Token> ids = tok.encode(text.substr(0, 2000), false);
  REQUIRE(ids.size() > 400);
  using Model = Llama<barato::kv::Contiguous<float>, barato::nn::AnyLinear>;
  const auto fp32 = convert_weights(dense, [](const barato::nn::DenseLinear& d) { return barato::nn::AnyLinear(d.copy()); });
  const auto int8 = convert_weights(dense, [](const barato::nn::DenseLinear& d) {
    return barato::nn::AnyLinear(barato::quant::Linear<barato::quant::Int8PerRow<>>(d.rows(), d.cols(), d.weights()));
  });
  const std::size_t V = dense.config.vocab_size, window = 150;  // several windows, a partial last one
  Model ref(fp32, make_contiguous_caches<float>(fp32.config, fp32.config.seq_len), {.max_chunk = 64});
  std::vector<float> s1(64 * V), s2(64 * V);
  const PerplexityResult ppl_ref = perplexity(ref, ids, window, s1);

  SUBCASE("fp32 vs fp32: exactly 0, 100 % top-1") {
    Model same(fp32, make_contiguous_caches<float>(fp32.config, fp32.config.seq_len), {.max_chunk = 64});
    const auto c = compare_models(ref, same, ids, window, s1, s2);
    const KldSummary k = c.kld.summary();
    CHECK(k.count == ids.size());
    CHECK(k.mean == 0.0);
    CHECK(k.max == 0.0);
    CHECK(k.same_top1 == ids.size());
    CHECK(c.delta_perplexity() == 0.0);
    CHECK(c.reference.total_nll == ppl_ref.total_nll);  // the same protocol as perplexity()
    CHECK(c.reference.windows == ppl_ref.windows);
  }
  SUBCASE("fp32 vs int8-row: small and positive") {
    Model q(int8, make_contiguous_caches<float>(int8.config, int8.config.seq_len), {.max_chunk = 64});
    std::size_t calls = 0;
    const auto c = compare_models(ref, q, ids, window, s1, s2, 0, [&](std::size_t, std::size_t) { ++calls; });
    const KldSummary k = c.kld.summary();
    CHECK(calls == c.test.windows);
    CHECK(k.count == ids.size());
    CHECK(c.reference.total_nll == ppl_ref.total_nll);
    Model q2(int8, make_contiguous_caches<float>(int8.config, int8.config.seq_len), {.max_chunk = 64});
    CHECK(c.test.total_nll == perplexity(q2, ids, window, s2).total_nll);
    CHECK(k.mean > 0.0);
    CHECK(k.mean < 0.005);  // int8 per row moves stories260K's distributions by well under 0.005 nats
    CHECK(k.median <= k.p90);
    CHECK(k.p90 <= k.p99);
    CHECK(k.p99 <= k.max);
    CHECK(k.same_top1_share > 0.9);
    CHECK(std::abs(c.delta_perplexity()) < 0.1);
  }
}
