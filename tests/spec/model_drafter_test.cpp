#include "barato/spec/model_drafter.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "support/step_models.hpp"

using namespace barato;

namespace {
constexpr std::size_t V = 10;
constexpr double kProbTol = 1e-6;
test::TableModelConfig cfg(std::size_t capacity = 40) { return {.vocab = V, .capacity = capacity, .order = 2, .seed = 3}; }

/// The draft model's greedy continuation of `ctx`, computed from the pure logits function.
std::vector<Token> greedy_continuation(const test::TableModel& m, std::vector<Token> ctx, std::size_t n) {
  std::vector<Token> out;
  std::vector<float> l(V);
  for (std::size_t i = 0; i < n; ++i) {
    m.logits_after(ctx, l);
    out.push_back(sample::argmax(l));
    ctx.push_back(out.back());
  }
  return out;
}
}  // namespace

TEST_CASE("proposes the draft model's own continuation; its cache holds context + all drafts but the last") {
  test::TableModel m(cfg());
  spec::ModelDrafter d(m, sample::Greedy(V), 4);
  sample::Rng rng(0);
  const std::vector<Token> ctx = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 9 tokens: three chunks of 4, 4, 1
  std::vector<Token> out(5);
  REQUIRE(d.propose(ctx, out, {}, rng) == 5);
  CHECK(out == greedy_continuation(m, ctx, 5));
  CHECK(m.size() == ctx.size() + 4);
  CHECK(m.forward_calls() == 3 + 4);
  std::vector<Token> mirror(ctx);
  mirror.insert(mirror.end(), out.begin(), out.end() - 1);
  CHECK(std::vector<Token>(d.cached().begin(), d.cached().end()) == mirror);
}

TEST_CASE("catch-up after verification: rolls back to the common prefix and forwards only what is new") {
  test::TableModel m(cfg());
  spec::ModelDrafter d(m, sample::Greedy(V));
  sample::Rng rng(0);
  std::vector<Token> ctx = {4, 4, 2};
  std::vector<Token> out(4);
  REQUIRE(d.propose(ctx, out, {}, rng) == 4);
  SUBCASE("two accepted, then a correction: 1 token of catch-up") {
    ctx.insert(ctx.end(), out.begin(), out.begin() + 2);
    ctx.push_back((out[2] + 1) % static_cast<Token>(V));
    const auto before = m.positions_forwarded();
    REQUIRE(d.propose(ctx, out, {}, rng) == 4);
    CHECK(m.positions_forwarded() - before == 1 + 3);
    CHECK(out == greedy_continuation(m, ctx, 4));
  }
  SUBCASE("all accepted plus a bonus token: 2 tokens of catch-up") {
    ctx.insert(ctx.end(), out.begin(), out.end());
    ctx.push_back(0);
    const auto before = m.positions_forwarded();
    REQUIRE(d.propose(ctx, out, {}, rng) == 4);
    CHECK(m.positions_forwarded() - before == 2 + 3);
    CHECK(out == greedy_continuation(m, ctx, 4));
  }
  SUBCASE("an unrelated context: starts over") {
    const std::vector<Token> other = {9, 8};
    REQUIRE(d.propose(other, out, {}, rng) == 4);
    CHECK(out == greedy_continuation(m, other, 4));
    CHECK(m.size() == 2 + 3);
  }
  SUBCASE("someone else reset the model: the drafter notices") {
    m.reset();
    ctx.push_back(out[0]);
    REQUIRE(d.propose(ctx, out, {}, rng) == 4);
    CHECK(out == greedy_continuation(m, ctx, 4));
  }
}

TEST_CASE("q rows are the sampler's distributions given context + previous drafts") {
  test::TableModel m(cfg());
  auto make = [] { return sample::Chain(V, sample::RepetitionPenalty{1.4f}, sample::Temperature{0.7f}); };
  spec::ModelDrafter d(m, make());
  sample::Rng rng(5);
  std::vector<Token> ctx = {3, 1, 3};
  std::vector<Token> out(3);
  std::vector<float> q(3 * V);
  REQUIRE(d.propose(ctx, out, q, rng) == 3);
  auto ref = make();
  std::vector<float> l(V), p(V);
  for (std::size_t i = 0; i < 3; ++i) {
    m.logits_after(ctx, l);
    ref.probabilities(l, ctx, p);
    for (std::size_t v = 0; v < V; ++v) CHECK(std::abs(q[i * V + v] - p[v]) < kProbTol);
    CHECK(q[i * V + static_cast<std::size_t>(out[i])] > 0.0f);
    ctx.push_back(out[i]);
  }
}

TEST_CASE("the draft model's capacity limits the proposal instead of throwing") {
  test::TableModel m(cfg(6));
  spec::ModelDrafter d(m, sample::Greedy(V));
  sample::Rng rng(0);
  std::vector<Token> out(4);
  CHECK(d.propose(std::vector<Token>{1, 2, 3, 4, 5}, out, {}, rng) == 2);  // 5 + 2 − 1 = 6 positions
  CHECK(m.size() == 6);
  CHECK(d.propose(std::vector<Token>{1, 2, 3, 4, 5, 6}, out, {}, rng) == 1);
  CHECK(d.propose(std::vector<Token>{1, 2, 3, 4, 5, 6, 7}, out, {}, rng) == 0);
  test::TableModel big({.vocab = V + 1, .capacity = 8});
  CHECK_THROWS_AS(spec::ModelDrafter(big, sample::Greedy(V)), shape_error);
}
