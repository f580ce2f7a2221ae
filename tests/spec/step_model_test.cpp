// spec/step_model.hpp: the StepModel concept (what requires can check) and its rules (what it cannot),
// written once as a contract and run over the step models the spec tests use (tests/support/
// step_models.hpp), so the speculative-decoding tests rest on models that keep the rules.
#include "barato/spec/step_model.hpp"

#include <doctest/doctest.h>

#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "support/step_models.hpp"

using namespace barato;

namespace {

/// Types that miss one member of the concept.
struct NoReset {
  std::size_t vocab_size() const { return 1; }
  std::size_t size() const { return 0; }
  std::size_t capacity() const { return 1; }
  void forward(std::span<const Token>, std::span<float>) {}
  void truncate(std::size_t) {}
};
struct ForwardOnConst {  // forward must be allowed to change the model, size() must be const
  std::size_t vocab_size() const { return 1; }
  std::size_t size() { return 0; }
  std::size_t capacity() const { return 1; }
  void forward(std::span<const Token>, std::span<float>) {}
  void truncate(std::size_t) {}
  void reset() {}
};
static_assert(!spec::StepModel<NoReset> && !spec::StepModel<ForwardOnConst>);

/// Logits of `tokens` forwarded into `m` as one block.
template <spec::StepModel M>
std::vector<float> forward(M& m, const std::vector<Token>& tokens) {
  std::vector<float> logits(tokens.size() * m.vocab_size());
  m.forward(tokens, logits);
  return logits;
}

/// The rules of spec/step_model.hpp, for fresh models built by `make()`.
template <spec::StepModel M, class Make>
void check_contract(Make make) {
  const std::vector<Token> seq = {1, 4, 2, 7, 7, 0, 3, 5, 6, 2, 1, 1};
  // 1. a block forward equals the same tokens one at a time (row i: the distribution after tokens[i])
  M block = make(), single = make();
  const auto all = forward(block, seq);
  CHECK(block.size() == seq.size());
  const std::size_t V = block.vocab_size();
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const auto row = forward(single, {seq[i]});
    CHECK(std::equal(row.begin(), row.end(), all.begin() + static_cast<std::ptrdiff_t>(i * V)));
  }
  // 2. truncate(n): afterwards the model behaves as if only the first n tokens had been forwarded
  for (const std::size_t n : {std::size_t{0}, std::size_t{3}, seq.size() - 1}) {
    CAPTURE(n);
    M m = make();
    (void)forward(m, seq);
    m.truncate(n);
    CHECK(m.size() == n);
    M fresh = make();
    if (n > 0) (void)forward(fresh, std::vector<Token>(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(n)));
    CHECK(forward(m, {6, 3}) == forward(fresh, {6, 3}));
  }
  // 3. reset(): empty, and then like a fresh model
  M m = make();
  (void)forward(m, seq);
  m.reset();
  CHECK(m.size() == 0);
  M fresh = make();
  CHECK(forward(m, {2, 5, 1}) == forward(fresh, {2, 5, 1}));
  // 4. positions past capacity throw capacity_error and leave the model unchanged
  M full = make();
  std::vector<Token> fill(full.capacity() - 1, 1);
  (void)forward(full, fill);
  std::vector<float> two(2 * V);
  const std::vector<Token> over = {2, 3};
  CHECK_THROWS_AS(full.forward(over, two), capacity_error);
  CHECK(full.size() == full.capacity() - 1);
  M twin = make();
  (void)forward(twin, fill);
  CHECK(forward(full, {4}) == forward(twin, {4}));
}

}  // namespace

TEST_CASE("StepModel contract: the table-driven model (orders 1, 2, 3; with draft noise)") {
  for (const std::size_t order : {1, 2, 3}) {
    CAPTURE(order);
    check_contract<test::TableModel>([&] {
      return test::TableModel({.vocab = 8, .capacity = 20, .order = order, .seed = 5, .noise_seed = 9, .noise = 0.3f});
    });
  }
}

TEST_CASE("StepModel contract: the fixed-logits model") {
  check_contract<test::FixedModel>([] { return test::FixedModel({0.5f, -1.0f, 2.0f, 0.0f, 0.25f, 1.0f, -3.0f, 0.1f}, 20); });
}
