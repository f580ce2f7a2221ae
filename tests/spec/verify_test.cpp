#include "barato/spec/verify.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "barato/spec/model_drafter.hpp"
#include "barato/spec/ngram_drafter.hpp"
#include "barato/spec/speculative.hpp"
#include "barato/spec/theory.hpp"
#include "support/chi_square.hpp"
#include "support/step_models.hpp"

using namespace barato;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kPValue = 1e-3;         // goodness-of-fit threshold asserted by the exactness tests
constexpr std::size_t kTrials = 100000;  // seeded trials per distribution test
constexpr double kChiTableTol = 1e-6;    // our chi-square tail vs tabulated critical values

std::vector<float> log_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(x > 0 ? static_cast<float>(std::log(x)) : -kInf);
  return l;
}

/// Distribution of the first emitted token of a speculative pass: target FixedModel(p), draft
/// FixedModel(q), both sampled with softmax (Chain<>), γ drafts, stochastic verification.
std::vector<std::size_t> first_token_counts(const std::vector<double>& p, const std::vector<double>& q, std::size_t gamma,
                                            std::uint64_t seed, double* acceptance = nullptr) {
  const std::size_t V = p.size();
  test::FixedModel target(log_of(p), 32), draft(log_of(q), 32);
  spec::ModelDrafter drafter(draft, sample::Chain(V));
  spec::Speculative dec(target, drafter, spec::StochasticVerify(sample::Chain(V)), {.gamma = gamma});
  sample::Rng rng(seed);
  std::vector<std::size_t> counts(V);
  const std::vector<Token> prompt = {0};
  for (std::size_t t = 0; t < kTrials; ++t) {
    dec.start(prompt);
    ++counts[static_cast<std::size_t>(dec.step(rng)[0])];
  }
  if (acceptance != nullptr) *acceptance = dec.stats().acceptance_at(0);
  return counts;
}
}  // namespace

TEST_CASE("the chi-square tail matches tabulated critical values") {
  CHECK(std::abs(test::chi_square_sf(3.841459, 1) - 0.05) < kChiTableTol);
  CHECK(std::abs(test::chi_square_sf(18.307038, 10) - 0.05) < kChiTableTol);
  CHECK(std::abs(test::chi_square_sf(49.801850, 35) - 0.05) < kChiTableTol);
  CHECK(std::abs(test::chi_square_sf(135.806723, 100) - 0.01) < kChiTableTol);
  CHECK(std::abs(test::chi_square_sf(0.114832, 3) - 0.99) < kChiTableTol);
  CHECK(std::abs(test::chi_square_sf(7.0, 2) - std::exp(-3.5)) < kChiTableTol);  // dof 2: e^{−x/2}
}

TEST_CASE("GreedyVerify: accept while argmax == draft, emit the correction or the bonus token") {
  // rows: argmax 2, 0, 1, 3
  const std::vector<float> logits = {0, 1, 5, 0, /**/ 4, 1, 1, 0, /**/ 0, 3, 3, 0, /**/ 0, 0, 0, 9};
  spec::GreedyVerify rule;
  sample::Rng rng(0);
  auto v = rule.verify(logits, std::vector<Token>{2, 0, 1}, {}, std::vector<Token>{7, 2, 0, 1}, rng);
  CHECK(v.accepted == 3);
  CHECK(v.next == 3);
  v = rule.verify(logits, std::vector<Token>{2, 1, 1}, {}, std::vector<Token>{7, 2, 1, 1}, rng);
  CHECK(v.accepted == 1);
  CHECK(v.next == 0);
  v = rule.verify(std::span<const float>(logits).first(4), std::vector<Token>{}, {}, std::vector<Token>{7}, rng);
  CHECK(v.accepted == 0);
  CHECK(v.next == 2);
  v = rule.verify(std::span<const float>(logits).first(12), std::vector<Token>{2, 0}, {}, std::vector<Token>{2, 0}, rng);
  CHECK(v.accepted == 2);
  CHECK(v.next == 1);  // row 2: ids 1 and 2 tie → the lower id
}

TEST_CASE("StochasticVerify: the first emitted token is distributed as the target's p (good draft)") {
  const std::vector<double> p = {0.30, 0.25, 0.20, 0.12, 0.08, 0.05};
  const std::vector<double> q = {0.28, 0.27, 0.18, 0.14, 0.07, 0.06};
  double acc = 0;
  const auto counts = first_token_counts(p, q, 3, 1, &acc);
  const auto chi = test::chi_square_test(counts, p);
  CAPTURE(chi.statistic);
  CHECK(chi.p_value > kPValue);
  // the first draft is accepted with probability Σ min(p, q) (binomial: 5 standard deviations)
  std::vector<float> pf(p.begin(), p.end()), qf(q.begin(), q.end());
  const double beta = spec::acceptance_probability(pf, qf);
  CHECK(std::abs(acc - beta) < 5 * std::sqrt(beta * (1 - beta) / double(kTrials)));
}

TEST_CASE("StochasticVerify: exact also with a poor draft (disjoint mass, zeros on both sides)") {
  const std::vector<double> p = {0.40, 0.00, 0.30, 0.20, 0.10, 0.00, 0.00};
  const std::vector<double> q = {0.02, 0.50, 0.03, 0.00, 0.05, 0.30, 0.10};
  double acc = 0;
  const auto counts = first_token_counts(p, q, 4, 2, &acc);
  CHECK(counts[1] == 0);
  CHECK(counts[5] == 0);
  CHECK(test::chi_square_test(counts, p).p_value > kPValue);
  CHECK(acc < 0.15);  // Σ min(p, q) = 0.02 + 0.03 + 0.05 = 0.10
}

TEST_CASE("negative control: the test rejects tokens drawn from the draft without verification") {
  const std::vector<double> p = {0.30, 0.25, 0.20, 0.12, 0.08, 0.05};
  const std::vector<double> q = {0.28, 0.27, 0.18, 0.14, 0.07, 0.06};  // the "good" draft above
  std::vector<float> qf(q.begin(), q.end());
  sample::Rng rng(3);
  std::vector<std::size_t> counts(p.size());
  for (std::size_t t = 0; t < kTrials; ++t) ++counts[static_cast<std::size_t>(sample::draw(qf, rng))];
  CHECK(test::chi_square_test(counts, p).p_value < kPValue);
}

TEST_CASE("StochasticVerify with deterministic drafters (one-hot q): n-gram and a greedy draft model") {
  const std::vector<double> p = {0.15, 0.35, 0.10, 0.25, 0.15};
  const std::size_t V = p.size();
  SUBCASE("n-gram drafter") {
    test::FixedModel target(log_of(p), 32);
    spec::NgramDrafter drafter(V, {.max_n = 2});
    spec::Speculative dec(target, drafter, spec::StochasticVerify(sample::Chain(V)), {.gamma = 3});
    const std::vector<Token> prompt = {1, 3, 4, 1, 3};  // proposes 4, 1, 3
    sample::Rng rng(4);
    std::vector<std::size_t> counts(V);
    for (std::size_t t = 0; t < kTrials; ++t) {
      dec.start(prompt);
      ++counts[static_cast<std::size_t>(dec.step(rng)[0])];
    }
    CHECK(dec.stats().proposed() == 3 * kTrials);
    CHECK(test::chi_square_test(counts, p).p_value > kPValue);
  }
  SUBCASE("greedy draft model") {
    test::FixedModel target(log_of(p), 32), draft(log_of({0.1, 0.2, 0.6, 0.05, 0.05}), 32);
    spec::ModelDrafter drafter(draft, sample::Greedy(V));
    spec::Speculative dec(target, drafter, spec::StochasticVerify(sample::Chain(V)), {.gamma = 2});
    sample::Rng rng(5);
    std::vector<std::size_t> counts(V);
    const std::vector<Token> prompt = {0};
    for (std::size_t t = 0; t < kTrials; ++t) {
      dec.start(prompt);
      ++counts[static_cast<std::size_t>(dec.step(rng)[0])];
    }
    CHECK(test::chi_square_test(counts, p).p_value > kPValue);
  }
}

TEST_CASE("StochasticVerify: the first two emitted tokens are jointly distributed as the target's (context-dependent models, processed samplers)") {
  const std::size_t V = 5;
  test::TableModel target({.vocab = V, .capacity = 16, .order = 1, .seed = 21, .scale = 1.5f});
  test::TableModel draft({.vocab = V, .capacity = 16, .order = 1, .seed = 21, .scale = 1.5f, .noise_seed = 5, .noise = 1.0f});
  auto target_sampler = [&] { return sample::Chain(V, sample::RepetitionPenalty{1.5f}, sample::TopK{4}, sample::Temperature{1.3f}); };
  spec::ModelDrafter drafter(draft, sample::Chain(V, sample::Temperature{0.8f}));
  spec::Speculative dec(target, drafter, spec::StochasticVerify(target_sampler()), {.gamma = 3});
  const std::vector<Token> prompt = {2, 4};

  // exact pair distribution p(a | prompt) · p(b | prompt, a) with the same sampler settings
  auto ref = target_sampler();
  std::vector<double> pair(V * V);
  std::vector<float> l(V), pa(V), pb(V);
  target.logits_after(prompt, l);
  ref.probabilities(l, prompt, pa);
  for (std::size_t a = 0; a < V; ++a) {
    std::vector<Token> ctx = prompt;
    ctx.push_back(static_cast<Token>(a));
    target.logits_after(ctx, l);
    ref.probabilities(l, ctx, pb);
    for (std::size_t b = 0; b < V; ++b) pair[a * V + b] = double(pa[a]) * double(pb[b]);
  }
  sample::Rng rng(6);
  std::vector<std::size_t> counts(V * V);
  for (std::size_t t = 0; t < kTrials; ++t) {
    dec.start(prompt);
    auto out = dec.step(rng);
    const auto a = static_cast<std::size_t>(out[0]);
    const auto b = static_cast<std::size_t>(out.size() > 1 ? out[1] : dec.step(rng)[0]);
    ++counts[a * V + b];
  }
  CHECK(dec.stats().accepted() > 0);
  CHECK(dec.stats().examined() > dec.stats().accepted());  // both branches exercised
  const auto chi = test::chi_square_test(counts, pair);
  CAPTURE(chi.statistic);
  CAPTURE(chi.dof);
  CHECK(chi.p_value > kPValue);
}
