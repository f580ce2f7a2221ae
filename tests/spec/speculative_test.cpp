#include "barato/spec/speculative.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "barato/spec/model_drafter.hpp"
#include "barato/spec/ngram_drafter.hpp"
#include "barato/spec/plain.hpp"
#include "support/step_models.hpp"

// ---- counting global allocation, to prove a pass allocates nothing ---------------------------------
namespace {
std::atomic<std::size_t> g_allocations{0};
void* counted(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = align < alignof(std::max_align_t) ? alignof(std::max_align_t) : align;
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a + (n == 0 ? a : 0))) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return counted(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return counted(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace barato;

namespace {
constexpr std::size_t kVocab = 12;
constexpr std::size_t kCapacity = 80;

test::TableModelConfig target_config() { return {.vocab = kVocab, .capacity = kCapacity, .order = 2, .seed = 7}; }

const std::vector<std::vector<Token>> kPrompts = {{3}, {1, 2}, {5, 5, 5, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {11, 0, 11, 0, 11}};

std::vector<Token> plain_greedy(const std::vector<Token>& prompt, std::size_t max_new, std::optional<Token> stop = {}) {
  test::TableModel m(target_config());
  sample::Greedy g(kVocab);
  sample::Rng rng(0);
  return spec::decode_plain(m, g, prompt, max_new, rng, stop);
}

/// Runs greedy speculative decoding to the capacity end for every prompt and γ and compares with plain
/// greedy decoding; also checks the stats are consistent with the output.
template <class MakeDrafter, class MakeRule>
void check_greedy_exact(MakeDrafter make_drafter, MakeRule make_rule, const std::string& name) {
  std::size_t accepted = 0, examined = 0;
  for (const std::size_t gamma : {1u, 2u, 3u, 5u, 8u}) {
    for (const auto& prompt : kPrompts) {
      CAPTURE(name);
      CAPTURE(gamma);
      CAPTURE(prompt.size());
      test::TableModel target(target_config());
      auto drafter = make_drafter();
      spec::Speculative dec(target, drafter.get(), make_rule(), {.gamma = gamma});
      sample::Rng rng(1);
      const std::size_t max_new = kCapacity + 1 - prompt.size();
      const auto out = dec.generate(prompt, max_new, rng);
      CHECK(out == plain_greedy(prompt, max_new));
      const auto& st = dec.stats();
      CHECK(st.emitted() == out.size());
      std::size_t passes = 0;
      for (std::size_t a = 0; a <= gamma; ++a) passes += st.passes_accepting(a);
      CHECK(passes == st.passes());
      accepted += st.accepted();
      examined += st.examined();
      CHECK(target.forward_calls() == st.passes() + (prompt.size() > 1 ? (prompt.size() - 2) / (gamma + 1) + 1 : 0));
    }
  }
}

/// Holds a draft model and a ModelDrafter over it (the drafter references the model).
template <class S>
struct OwnedModelDrafter {
  test::TableModel model;
  spec::ModelDrafter<test::TableModel, S> drafter;
  OwnedModelDrafter(test::TableModelConfig c, S s) : model(c), drafter(model, std::move(s)) {}
  OwnedModelDrafter(OwnedModelDrafter&&) = delete;  // the drafter points at `model`: returned by elision only
  auto& get() { return drafter; }
};
struct OwnedNgram {
  spec::NgramDrafter drafter;
  auto& get() { return drafter; }
};
struct OwnedNull {
  spec::NullDrafter drafter{kVocab};
  auto& get() { return drafter; }
};
}  // namespace

TEST_CASE("greedy speculative decoding equals plain greedy decoding token for token, for every drafter") {
  auto greedy_rule = [] { return spec::GreedyVerify{}; };
  auto draft = [](test::TableModelConfig c) {
    return [c] { return OwnedModelDrafter<sample::Greedy>(c, sample::Greedy(kVocab)); };
  };
  auto same = target_config();
  auto close = target_config();
  close.noise_seed = 3;
  close.noise = 1.5f;
  auto poor = target_config();
  poor.seed = 99;
  poor.order = 1;
  auto small = target_config();
  small.capacity = 20;  // runs out long before the target: proposes fewer, then nothing
  check_greedy_exact(draft(same), greedy_rule, "identical draft model");
  check_greedy_exact(draft(close), greedy_rule, "close draft model");
  check_greedy_exact(draft(poor), greedy_rule, "unrelated draft model");
  check_greedy_exact(draft(small), greedy_rule, "small-capacity draft model");
  for (std::size_t n = 1; n <= 4; ++n)
    check_greedy_exact([n] { return OwnedNgram{spec::NgramDrafter(kVocab, {.max_n = n})}; }, greedy_rule,
                       "ngram:" + std::to_string(n));
  check_greedy_exact([] { return OwnedNull{}; }, greedy_rule, "no drafter");
  // stochastic verification of a greedy target is greedy verification
  check_greedy_exact(draft(close), [] { return spec::StochasticVerify(sample::Greedy(kVocab)); }, "stochastic rule, greedy samplers");
  check_greedy_exact([] { return OwnedNgram{spec::NgramDrafter(kVocab)}; },
                     [] { return spec::StochasticVerify(sample::Greedy(kVocab)); }, "stochastic rule, ngram");
}

TEST_CASE("an identical draft model is always accepted: alpha = 1 and gamma+1 tokens per pass") {
  test::TableModel target(target_config());
  OwnedModelDrafter<sample::Greedy> d(target_config(), sample::Greedy(kVocab));
  spec::Speculative dec(target, d.get(), spec::GreedyVerify{}, {.gamma = 4});
  sample::Rng rng(0);
  const std::vector<Token> prompt = {1, 2, 3};
  const auto out = dec.generate(prompt, 50, rng);  // 50 = 10 passes of 5
  CHECK(out.size() == 50);
  CHECK(dec.stats().alpha() == 1.0);
  CHECK(dec.stats().passes() == 10);
  CHECK(dec.stats().tokens_per_pass() == 5.0);
  CHECK(dec.stats().passes_accepting(4) == 10);
  for (std::size_t i = 0; i < 4; ++i) CHECK(dec.stats().acceptance_at(i) == 1.0);
}

TEST_CASE("after every pass, rejections included, the target's cache equals a fresh pass over the committed tokens") {
  for (const bool stochastic : {false, true}) {
    CAPTURE(stochastic);
    test::TableModel target(target_config());
    auto cfg = target_config();
    cfg.noise_seed = 8;
    cfg.noise = 2.0f;
    test::TableModel draft(cfg);
    spec::ModelDrafter drafter(draft, sample::Chain(kVocab, sample::Temperature{0.9f}));
    spec::SpecOptions opt{.gamma = 4};
    sample::Rng rng(2);
    const std::vector<Token> prompt = {4, 7, 1};
    auto run = [&](auto rule) {
      spec::Speculative dec(target, drafter, std::move(rule), opt);
      dec.start(prompt);
      std::size_t rejections = 0;
      while (dec.tokens().size() < 60) {
        if (dec.step(rng).size() < opt.gamma + 1) ++rejections;
        const auto tokens = dec.tokens();
        test::TableModel fresh(target_config());
        std::vector<float> logits((tokens.size() - 1) * kVocab);
        fresh.forward(tokens.first(tokens.size() - 1), logits);
        REQUIRE(target.cache().size() == fresh.cache().size());
        CHECK(std::equal(target.cache().begin(), target.cache().end(), fresh.cache().begin()));
        // the drafter's cache also equals a fresh pass over what it believes it holds
        test::TableModel fresh_draft(cfg);
        std::vector<float> dl(drafter.cached().size() * kVocab);
        if (!drafter.cached().empty()) fresh_draft.forward(drafter.cached(), dl);
        REQUIRE(draft.cache().size() == fresh_draft.cache().size());
        CHECK(std::equal(draft.cache().begin(), draft.cache().end(), fresh_draft.cache().begin()));
      }
      CHECK(rejections > 3);
    };
    if (stochastic)
      run(spec::StochasticVerify(sample::Chain(kVocab)));
    else
      run(spec::GreedyVerify{});
  }
}

TEST_CASE("stop token: output ends at its first occurrence, as in plain decoding, and the state is rolled back") {
  const std::vector<Token> prompt = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const auto full = plain_greedy(prompt, 40);
  const Token stop = full[17];
  const auto expected = plain_greedy(prompt, 40, stop);
  REQUIRE(expected.size() <= 18);
  test::TableModel target(target_config());
  spec::NgramDrafter ngram(kVocab);
  spec::Speculative dec(target, ngram, spec::GreedyVerify{}, {.gamma = 5, .stop_token = stop});
  sample::Rng rng(0);
  CHECK(dec.generate(prompt, 40, rng) == expected);
  CHECK(dec.tokens().size() == prompt.size() + expected.size());
  CHECK(target.size() + 1 == dec.tokens().size());
}

TEST_CASE("capacity and argument errors") {
  test::TableModel target(target_config());
  spec::NgramDrafter ngram(kVocab);
  spec::Speculative dec(target, ngram, spec::GreedyVerify{}, {.gamma = 3});
  sample::Rng rng(0);
  const std::vector<Token> too_long(kCapacity + 1, 1);
  CHECK_THROWS_AS(dec.start(too_long), capacity_error);
  CHECK_THROWS_AS(dec.start(std::vector<Token>{}), value_error);
  CHECK_THROWS_AS((void)dec.generate(std::vector<Token>{1, 2}, kCapacity, rng), capacity_error);
  CHECK_THROWS_AS((void)dec.step(rng), value_error);  // not started
  const std::vector<Token> full(kCapacity, 2);
  dec.start(full);
  CHECK(dec.step(rng).size() == 1);  // the last position: no room for drafts
  CHECK_THROWS_AS((void)dec.step(rng), capacity_error);
  spec::NgramDrafter other_vocab(kVocab + 1);
  CHECK_THROWS_AS(spec::Speculative(target, other_vocab, spec::GreedyVerify{}, {.gamma = 2}), shape_error);
  CHECK_THROWS_AS(spec::Speculative(target, ngram, spec::GreedyVerify{}, {.gamma = 0}), value_error);
}

TEST_CASE("a speculative pass allocates nothing") {
  test::TableModel target(target_config());
  auto cfg = target_config();
  cfg.noise = 1.0f;
  test::TableModel draft(cfg);
  spec::ModelDrafter drafter(draft, sample::Chain(kVocab, sample::TopK{5}, sample::TopP{0.9f}));
  spec::Speculative dec(target, drafter, spec::StochasticVerify(sample::Chain(kVocab, sample::TopK{5})), {.gamma = 4});
  sample::Rng rng(3);
  dec.start(std::vector<Token>{1, 2, 3, 4});
  const auto before = g_allocations.load();
  for (int i = 0; i < 10; ++i) (void)dec.step(rng);
  CHECK(g_allocations.load() == before);
}
