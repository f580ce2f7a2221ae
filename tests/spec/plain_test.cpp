#include "barato/spec/plain.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "support/step_models.hpp"

using namespace barato;

namespace {
constexpr std::size_t V = 9;
test::TableModelConfig cfg() { return {.vocab = V, .capacity = 30, .order = 2, .seed = 17}; }
}  // namespace

TEST_CASE("plain greedy decoding follows the model's argmax chain (oracle: the pure logits function)") {
  test::TableModel m(cfg());
  sample::Greedy g(V);
  sample::Rng rng(0);
  const std::vector<Token> prompt = {1, 2, 3, 4, 5};
  for (std::size_t chunk : {1u, 2u, 16u}) {
    const auto out = spec::decode_plain(m, g, prompt, 26, rng, std::nullopt, chunk);
    std::vector<Token> ctx = prompt;
    std::vector<float> l(V);
    for (std::size_t i = 0; i < 26; ++i) {
      m.logits_after(ctx, l);
      ctx.push_back(sample::argmax(l));
    }
    CHECK(out == std::vector<Token>(ctx.begin() + 5, ctx.end()));
    CHECK(m.size() == 30);  // the last token is never forwarded
  }
  CHECK_THROWS_AS((void)spec::decode_plain(m, g, prompt, 27, rng), capacity_error);
  CHECK_THROWS_AS((void)spec::decode_plain(m, g, std::vector<Token>{}, 2, rng), value_error);
}

TEST_CASE("plain sampling is reproducible per seed and stops after the stop token") {
  test::TableModel m(cfg());
  sample::Chain c(V, sample::Temperature{1.5f});
  const std::vector<Token> prompt = {0};
  sample::Rng a(9), b(9);
  const auto x = spec::decode_plain(m, c, prompt, 20, a);
  CHECK(x == spec::decode_plain(m, c, prompt, 20, b));
  sample::Rng a2(9);
  const auto y = spec::decode_plain(m, c, prompt, 20, a2, x[6]);
  CHECK(y.size() <= 7);
  CHECK(y.back() == x[6]);
  CHECK(std::equal(y.begin(), y.end(), x.begin()));
}
