#include "barato/spec/drafter.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/sample/greedy.hpp"
#include "barato/spec/plain.hpp"
#include "barato/spec/speculative.hpp"
#include "support/step_models.hpp"

using namespace barato;

TEST_CASE("the null drafter turns the driver into plain decoding: one token per pass") {
  test::TableModel target({.vocab = 6, .capacity = 20}), ref({.vocab = 6, .capacity = 20});
  spec::NullDrafter none{6};
  spec::Speculative dec(target, none, spec::GreedyVerify{}, {.gamma = 3});
  sample::Rng rng(0);
  sample::Greedy g(6);
  const std::vector<Token> prompt = {2, 3};
  CHECK(dec.generate(prompt, 19, rng) == spec::decode_plain(ref, g, prompt, 19, rng));
  CHECK(dec.stats().passes() == 19);
  CHECK(dec.stats().empty_passes() == 19);
  CHECK(dec.stats().alpha() == 0.0);
}
