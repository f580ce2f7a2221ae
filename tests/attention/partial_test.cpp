#include "barato/attention/partial.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

constexpr double kMergeRelTol = 1e-5;  // fp32 merge vs double reference (relative to max |o|)

/// Scores and value rows of one query over N keys.
struct Keys {
  std::size_t d;
  std::vector<float> s;  // [N]
  std::vector<float> v;  // [N, d]
};

Keys make_keys(std::size_t n, std::size_t d, unsigned seed, float spread = 4.0f) {
  return {d, test::random_vector(n, seed, -spread, spread), test::random_vector(n * d, seed + 100)};
}

/// A partial state over the subset `idx`, computed directly from its definition (in double).
struct State {
  std::vector<float> o;
  PartialStats st;
};
State state_of(const Keys& k, const std::vector<std::size_t>& idx) {
  State r{std::vector<float>(k.d, 0.0f), {}};
  if (idx.empty()) return r;
  double m = -INFINITY;
  for (std::size_t j : idx) m = std::max(m, double(k.s[j]));
  double l = 0;
  std::vector<double> o(k.d, 0.0);
  for (std::size_t j : idx) {
    const double e = std::exp(double(k.s[j]) - m);
    l += e;
    for (std::size_t c = 0; c < k.d; ++c) o[c] += e * k.v[j * k.d + c];
  }
  for (std::size_t c = 0; c < k.d; ++c) r.o[c] = static_cast<float>(o[c]);
  r.st = {static_cast<float>(m), static_cast<float>(l)};
  return r;
}

State merged(State a, const State& b) {
  attention::merge(a.o.data(), a.st, b.o.data(), b.st, a.o.size());
  return a;
}

std::vector<float> output(State s) {
  attention::finalize(s.o.data(), s.st, s.o.size());
  return s.o;
}

std::vector<std::size_t> range(std::size_t lo, std::size_t hi) {
  std::vector<std::size_t> r(hi - lo);
  std::iota(r.begin(), r.end(), lo);
  return r;
}

/// Checks two states describe the same attention: same max, same normalised output, and the same
/// (o, l) once expressed against the same max.
void check_same(const State& a, const State& b) {
  CHECK(a.st.m == doctest::Approx(b.st.m).epsilon(kMergeRelTol));
  CHECK(a.st.l == doctest::Approx(b.st.l).epsilon(kMergeRelTol));
  CHECK(test::max_rel_diff(a.o, b.o) <= kMergeRelTol);
  CHECK(test::max_rel_diff(output(a), output(b)) <= kMergeRelTol);
}

}  // namespace

TEST_CASE("merge of two disjoint states equals the state of their union") {
  const Keys k = make_keys(50, 13, 1);
  check_same(merged(state_of(k, range(0, 20)), state_of(k, range(20, 50))), state_of(k, range(0, 50)));
  // non-contiguous subsets: the algebra does not care about order or adjacency
  std::vector<std::size_t> even, odd;
  for (std::size_t j = 0; j < 50; ++j) (j % 2 ? odd : even).push_back(j);
  check_same(merged(state_of(k, even), state_of(k, odd)), state_of(k, range(0, 50)));
}

TEST_CASE("merge is commutative and associative") {
  const Keys k = make_keys(90, 16, 2);
  const State a = state_of(k, range(0, 30)), b = state_of(k, range(30, 31)), c = state_of(k, range(31, 90));
  check_same(merged(a, b), merged(b, a));
  check_same(merged(merged(a, b), c), merged(a, merged(b, c)));
  check_same(merged(merged(c, a), b), state_of(k, range(0, 90)));
}

TEST_CASE("empty states are identities, and an empty final state normalises to zeros") {
  const Keys k = make_keys(10, 7, 3);
  const State a = state_of(k, range(0, 10));
  const State e = state_of(k, {});
  CHECK(e.st.empty());
  const State ae = merged(a, e), ea = merged(e, a);
  CHECK(ae.o == a.o);
  CHECK(ea.o == a.o);
  CHECK(ae.st.m == a.st.m);
  CHECK(ea.st.l == a.st.l);
  const State ee = merged(e, e);
  CHECK(ee.st.empty());
  for (float x : output(ee)) CHECK(x == 0.0f);
}

TEST_CASE("merging any split of the keys into chunks equals attention over all keys") {
  std::mt19937 gen(4);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = 1 + gen() % 200, d = 1 + gen() % 40;
    CAPTURE(n); CAPTURE(d);
    const Keys k = make_keys(n, d, 10 + static_cast<unsigned>(trial), trial % 2 ? 30.0f : 3.0f);
    // random cut points, including empty chunks
    std::vector<std::size_t> cuts = {0, n};
    for (int c = 0; c < 5; ++c) cuts.push_back(gen() % (n + 1));
    std::sort(cuts.begin(), cuts.end());
    State acc = state_of(k, {});
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) acc = merged(acc, state_of(k, range(cuts[i], cuts[i + 1])));
    // the normalised output is softmax(s)·V
    std::vector<double> p(n);
    double m = -INFINITY, l = 0;
    for (float s : k.s) m = std::max(m, double(s));
    for (std::size_t j = 0; j < n; ++j) l += (p[j] = std::exp(double(k.s[j]) - m));
    std::vector<float> want(d);
    for (std::size_t c = 0; c < d; ++c) {
      double o = 0;
      for (std::size_t j = 0; j < n; ++j) o += p[j] / l * k.v[j * d + c];
      want[c] = static_cast<float>(o);
    }
    CHECK(test::max_rel_diff(output(acc), want) <= kMergeRelTol);
  }
}

TEST_CASE("merge is stable for far-apart maxima (no overflow or NaN)") {
  Keys k = make_keys(4, 3, 5);
  k.s = {-80.0f, 85.0f, -1000.0f, 60.0f};
  const State all = merged(merged(state_of(k, {0}), state_of(k, {1})), merged(state_of(k, {2}), state_of(k, {3})));
  for (float x : output(all)) CHECK(std::isfinite(x));
  check_same(all, state_of(k, range(0, 4)));
}

TEST_CASE("span merge rejects different sizes") {
  std::vector<float> a(4), b(5);
  PartialStats sa, sb{0.0f, 1.0f};
  CHECK_THROWS_AS(attention::merge(std::span<float>(a), sa, std::span<const float>(b), sb), shape_error);
  std::vector<float> c(4, 1.0f);
  attention::merge(std::span<float>(a), sa, std::span<const float>(c), sb);
  CHECK(a == c);
}

TEST_CASE("raise_max: rescales l and o only when the max rises and the state is not empty") {
  int calls = 0;
  float seen = 0.0f;
  auto scale_o = [&](float alpha) {
    ++calls;
    seen = alpha;
  };
  attention::PartialStats st;  // empty: the max moves, nothing is scaled
  st.raise_max(2.0f, scale_o);
  CHECK(st.m == 2.0f);
  CHECK(st.l == 0.0f);
  CHECK(calls == 0);
  st.l = 3.0f;
  st.raise_max(1.0f, scale_o);  // lower: unchanged
  st.raise_max(2.0f, scale_o);  // equal: unchanged
  CHECK(st.m == 2.0f);
  CHECK(st.l == 3.0f);
  CHECK(calls == 0);
  st.raise_max(5.0f, scale_o);  // higher: l and o times e^{2 − 5}
  CHECK(calls == 1);
  CHECK(seen == std::exp(2.0f - 5.0f));
  CHECK(st.l == 3.0f * std::exp(2.0f - 5.0f));
  CHECK(st.m == 5.0f);
}

TEST_CASE("partial states: empty merges are no-ops, an empty state finalizes to zeros, NaN propagates") {
  std::vector<float> oa(4, 9.0f), ob{1, 2, 3, 4};
  attention::PartialStats a, b;
  attention::merge(oa, a, ob, b);  // both empty
  CHECK(a.empty());
  attention::finalize(oa.data(), a, 4);
  for (const float x : oa) CHECK(x == 0.0f);
  b.m = 1.0f;
  b.l = 2.0f;
  attention::merge(oa, a, ob, b);  // into an empty state: a copy
  CHECK(a.m == 1.0f);
  CHECK(a.l == 2.0f);
  CHECK(oa == ob);
  attention::PartialStats n{.m = 0.5f, .l = std::numeric_limits<float>::quiet_NaN()};
  attention::merge(oa, a, ob, n);
  attention::finalize(oa.data(), a, 4);
  for (const float x : oa) CHECK(std::isnan(x));
}
