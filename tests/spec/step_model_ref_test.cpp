// spec/step_model_ref.hpp: every call through a StepModelRef reaches the model it refers to, errors
// included; `target` recovers the model's type; and speculative decoding over references (target and
// draft) emits exactly the tokens, with the same statistics, as over the models themselves.
#include "barato/spec/step_model_ref.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "barato/spec/model_drafter.hpp"
#include "barato/spec/speculative.hpp"
#include "barato/spec/verify.hpp"
#include "support/step_models.hpp"

using namespace barato;

namespace {

test::TableModelConfig config(std::uint64_t seed, float noise = 0.0f) {
  return {.vocab = 10, .capacity = 48, .order = 2, .seed = 7, .noise_seed = seed, .noise = noise};
}

}  // namespace

static_assert(spec::StepModel<spec::StepModelRef>);
static_assert(std::is_trivially_copyable_v<spec::StepModelRef>);

TEST_CASE("StepModelRef: sizes, forward, truncate and reset reach the model; its errors come through unchanged") {
  test::TableModel model(config(0)), twin(config(0));
  const spec::StepModelRef ref(model);
  CHECK(ref.vocab_size() == 10);
  CHECK(ref.capacity() == 48);
  CHECK(ref.size() == 0);
  const std::vector<Token> tokens = {1, 4, 2, 7, 7, 0, 3};
  std::vector<float> got(tokens.size() * 10), want(tokens.size() * 10);
  ref.forward(tokens, got);
  twin.forward(tokens, want);
  CHECK(got == want);
  CHECK(ref.size() == 7);
  CHECK(model.size() == 7);
  CHECK(model.forward_calls() == 1);
  ref.truncate(3);
  CHECK(model.size() == 3);
  CHECK(std::vector<test::CacheEntry>(model.cache().begin(), model.cache().end()) ==
        std::vector<test::CacheEntry>(twin.cache().begin(), twin.cache().begin() + 3));
  const spec::StepModelRef copy = ref;  // copies refer to the same model
  copy.reset();
  CHECK(model.size() == 0);
  CHECK(ref.size() == 0);
  // the model's own errors, and it is left as it was
  model.forward(tokens, got);
  const std::vector<Token> too_many(42, 1);
  std::vector<float> big(too_many.size() * 10);
  CHECK_THROWS_AS(ref.forward(too_many, big), capacity_error);
  CHECK(model.size() == 7);
  CHECK_THROWS_AS(ref.truncate(8), shape_error);
  CHECK(model.size() == 7);
}

TEST_CASE("StepModelRef::target: the model for its own type, null for another") {
  test::TableModel table(config(0));
  test::FixedModel fixed({0.0f, 1.0f}, 4);
  const spec::StepModelRef a(table), b(fixed);
  CHECK(a.target<test::TableModel>() == &table);
  CHECK(a.target<test::FixedModel>() == nullptr);
  CHECK(b.target<test::FixedModel>() == &fixed);
  CHECK(b.target<test::TableModel>() == nullptr);
}

TEST_CASE("Speculative over StepModelRefs (target and draft) emits the tokens and statistics it does over the models") {
  const std::vector<Token> prompt = {3, 1, 4, 1, 5};
  for (const float temperature : {0.0f, 0.8f}) {
    for (const std::size_t gamma : {1u, 3u, 6u}) {
      CAPTURE(temperature);
      CAPTURE(gamma);
      struct Run {
        std::vector<Token> out;
        std::size_t passes, accepted, target_calls;
      };
      const auto run = [&](bool by_ref) {
        test::TableModel target(config(0)), draft(config(99, 0.7f));
        const spec::StepModelRef target_ref(target), draft_ref(draft);
        const auto go = [&](auto& t, auto& d) {
          sample::Rng rng(11);
          const auto finish = [&](auto& drafter, auto rule) {
            spec::Speculative dec(t, drafter, std::move(rule), {.gamma = gamma});
            const auto out = dec.generate(prompt, 30, rng);
            return Run{{out.begin(), out.end()}, dec.stats().passes(), dec.stats().accepted(), target.forward_calls()};
          };
          if (temperature == 0.0f) {
            spec::ModelDrafter drafter(d, sample::Greedy(10));
            return finish(drafter, spec::GreedyVerify{});
          }
          spec::ModelDrafter drafter(d, sample::Chain(10, sample::Temperature{temperature}));
          return finish(drafter, spec::StochasticVerify(sample::Chain(10, sample::Temperature{temperature})));
        };
        if (by_ref) {
          spec::StepModelRef t = target_ref, d = draft_ref;
          return go(t, d);
        }
        return go(target, draft);
      };
      const Run direct = run(false), through = run(true);
      CHECK(direct.out.size() == 30);
      CHECK(through.out == direct.out);
      CHECK(through.passes == direct.passes);
      CHECK(through.accepted == direct.accepted);
      CHECK(through.target_calls == direct.target_calls);
    }
  }
}
