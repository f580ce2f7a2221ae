// distill/top_k.hpp: top-k selection against a sort, the sparse KD loss against the dense KD loss on the
// renormalised k-id distributions, its gradient against finite differences in double, and the errors.
#include "barato/distill/top_k.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "barato/distill/losses.hpp"

using namespace barato;
using namespace barato::distill;

namespace {
constexpr double kDoubleTol = 1e-12;
/// As in losses_test.cpp: central differences with h = 1e-5 in double.
constexpr double kFiniteDiffTol = 1e-7;
constexpr double kStep = 1e-5;
/// Vocabulary of the test rows. The cached teacher logits are float; the dense references are fed the
/// same float values, so sparse and dense differ by double rounding only (kDoubleTol).
constexpr std::size_t kVocab = 64;

std::vector<float> random_logits(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> z(n);
  for (float& x : z) x = d(rng);
  return z;
}
}  // namespace

TEST_CASE("top_k returns the k largest logits, largest first, with their ids") {
  const auto z = random_logits(kVocab, 1);
  std::vector<int> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
  for (const std::size_t k : {std::size_t{1}, std::size_t{5}, std::size_t{20}, kVocab}) {
    std::vector<Token> ids(k);
    std::vector<float> v(k);
    top_k(z, ids, v);
    for (std::size_t j = 0; j < k; ++j) {
      CHECK(ids[j] == order[j]);
      CHECK(v[j] == z[static_cast<std::size_t>(order[j])]);
    }
  }
  // ties keep the lower id first
  std::vector<Token> ids(2);
  std::vector<float> v(2);
  top_k(std::vector<float>{1.0f, 3.0f, 3.0f, 0.0f}, ids, v);
  CHECK(ids[0] == 1);
  CHECK(ids[1] == 2);
}

TEST_CASE("sparse KD = dense KD between the teacher and the student restricted to the same k ids") {
  const auto zt = random_logits(kVocab, 2);
  const auto zs_f = random_logits(kVocab, 3);
  const std::vector<double> zs(zs_f.begin(), zs_f.end());
  const std::size_t k = 8;
  std::vector<Token> ids(k);
  std::vector<float> tv(k);
  top_k(zt, ids, tv);
  std::vector<double> sk(k), tk(tv.begin(), tv.end());
  for (std::size_t j = 0; j < k; ++j) sk[j] = zs[static_cast<std::size_t>(ids[j])];
  for (const double t : {1.0, 2.0, 4.0}) {
    for (const auto scaling : {TemperatureScaling::squared, TemperatureScaling::none}) {
      const KdOptions opt{.temperature = t, .scaling = scaling};
      CHECK(sparse_kd_loss(ids, tv, zs, opt) == doctest::Approx(kd_loss(tk, sk, opt)).epsilon(kDoubleTol));
    }
  }
  // the T² switch, independently of kd_loss: squared = T² · none
  for (const double t : {2.0, 4.0})
    CHECK(sparse_kd_loss(ids, tv, zs, {.temperature = t}) ==
          doctest::Approx(t * t * sparse_kd_loss(ids, tv, zs, {.temperature = t, .scaling = TemperatureScaling::none})).epsilon(kDoubleTol));
  // k = vocab: the sparse loss is the dense one
  std::vector<Token> all(kVocab);
  std::vector<float> av(kVocab);
  top_k(zt, all, av);
  CHECK(sparse_kd_loss(all, av, zs, {.temperature = 2.0}) == doctest::Approx(kd_loss(zt, zs, {.temperature = 2.0})).epsilon(kDoubleTol));
  // a student equal to the teacher on the k ids up to a constant has loss 0, whatever its tail
  std::vector<double> copy(kVocab, -30.0);
  for (std::size_t j = 0; j < k; ++j) copy[static_cast<std::size_t>(ids[j])] = double(tv[j]) + 3.0;
  CHECK(sparse_kd_loss(ids, tv, copy) == doctest::Approx(0.0).epsilon(kDoubleTol));
}

TEST_CASE("sparse_kd_gradient matches central finite differences on the k ids (0 elsewhere)") {
  const auto zt = random_logits(kVocab, 4);
  const auto zs_f = random_logits(kVocab, 5);
  const std::vector<double> zs(zs_f.begin(), zs_f.end());
  std::vector<Token> ids(6);
  std::vector<float> tv(6);
  top_k(zt, ids, tv);
  for (const double t : {1.0, 2.0, 4.0}) {
    const KdOptions opt{.temperature = t};
    std::vector<double> g(ids.size());
    const double loss = sparse_kd_gradient(ids, tv, zs, opt, g);
    CHECK(loss == doctest::Approx(sparse_kd_loss(ids, tv, zs, opt)).epsilon(kDoubleTol));
    for (std::size_t j = 0; j < ids.size(); ++j) {
      std::vector<double> a = zs, b = zs;
      a[static_cast<std::size_t>(ids[j])] += kStep;
      b[static_cast<std::size_t>(ids[j])] -= kStep;
      const double fd = (sparse_kd_loss(ids, tv, a, opt) - sparse_kd_loss(ids, tv, b, opt)) / (2 * kStep);
      CHECK(g[j] == doctest::Approx(fd).epsilon(kFiniteDiffTol).scale(1.0));
    }
    // a logit outside the k ids does not change the loss
    std::vector<double> c = zs;
    std::size_t outside = 0;
    while (std::find(ids.begin(), ids.end(), static_cast<Token>(outside)) != ids.end()) ++outside;
    c[outside] += 5.0;
    CHECK(sparse_kd_loss(ids, tv, c, opt) == doctest::Approx(loss).epsilon(kDoubleTol));
  }
}

TEST_CASE("bad input: ids out of range, size mismatch, NaN, k outside [1, vocab]") {
  const auto z = random_logits(8, 6);
  std::vector<Token> ids = {0, 9};
  std::vector<float> tv = {1.0f, 0.5f};
  CHECK_THROWS_AS((void)sparse_kd_loss(ids, tv, z), value_error);
  ids = {0, 1};
  CHECK_THROWS_AS((void)sparse_kd_loss(ids, std::vector<float>{1.0f}, z), shape_error);
  CHECK_THROWS_AS((void)sparse_kd_loss(ids, std::vector<float>{1.0f, std::nanf("")}, z), value_error);
  auto zn = z;
  zn[1] = std::nanf("");
  CHECK_THROWS_AS((void)sparse_kd_loss(ids, tv, zn), value_error);
  std::vector<double> g(3);
  CHECK_THROWS_AS((void)sparse_kd_gradient(ids, tv, z, {}, g), shape_error);
  std::vector<Token> none;
  std::vector<float> nv;
  CHECK_THROWS_AS(top_k(z, none, nv), shape_error);
  std::vector<Token> many(9);
  std::vector<float> mv(9);
  CHECK_THROWS_AS(top_k(z, many, mv), shape_error);
}
