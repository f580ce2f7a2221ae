#include "barato/spec/ngram_drafter.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace barato;

namespace {
std::vector<Token> propose(const spec::NgramDrafter& d, const std::vector<Token>& ctx, std::size_t gamma) {
  std::vector<Token> out(gamma);
  sample::Rng rng(0);
  out.resize(d.propose(ctx, out, {}, rng));
  return out;
}
}  // namespace

TEST_CASE("proposes the continuation of the latest earlier occurrence of the longest matching suffix") {
  const spec::NgramDrafter d(10, {.max_n = 3});
  CHECK(propose(d, {1, 2, 3, 4, 1, 2}, 3) == std::vector<Token>{3, 4, 1});      // 3-gram [4,1,2] unseen → 2-gram [1,2]
  CHECK(propose(d, {5, 1, 9, 1, 7, 1}, 4) == std::vector<Token>{7, 1});         // latest earlier [1] is at 3
  CHECK(propose(d, {1, 2, 3, 9, 2, 3, 8, 1, 2, 3}, 2) == std::vector<Token>{9, 2});  // [1,2,3] beats the later [2,3]
  CHECK(propose(d, {7, 7, 7}, 5) == std::vector<Token>{7});                     // clipped at the end of the context
  CHECK(propose(d, {1, 2, 3}, 3).empty());                                      // no earlier occurrence
  CHECK(propose(d, {4}, 3).empty());
  CHECK(propose(d, {1, 2, 1}, 0).empty());
}

TEST_CASE("min_n stops the fallback to short matches") {
  const spec::NgramDrafter d(10, {.max_n = 3, .min_n = 2});
  CHECK(propose(d, {5, 1, 9, 1}, 3).empty());
  CHECK(propose(d, {5, 1, 9, 5, 1}, 3) == std::vector<Token>{9, 5, 1});
  CHECK_THROWS_AS(spec::NgramDrafter(10, {.max_n = 1, .min_n = 2}), value_error);
  CHECK_THROWS_AS(spec::NgramDrafter(10, {.max_n = 2, .min_n = 0}), value_error);
}

TEST_CASE("q rows are one-hot at the proposed tokens; sizes are checked") {
  const spec::NgramDrafter d(4, {.max_n = 2});
  sample::Rng rng(0);
  const std::vector<Token> ctx = {0, 3, 2, 0, 3};
  std::vector<Token> out(2);
  std::vector<float> q(2 * 4, 9.0f);
  REQUIRE(d.propose(ctx, out, q, rng) == 2);
  CHECK(out == std::vector<Token>{2, 0});
  CHECK(q == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0});
  std::vector<float> small(3);
  CHECK_THROWS_AS((void)d.propose(ctx, out, small, rng), shape_error);
  const std::vector<Token> bad = {0, 7, 0};
  CHECK_THROWS_AS((void)d.propose(bad, out, q, rng), value_error);
}
