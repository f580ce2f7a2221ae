#include "barato/attention/rope.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::RopeConfig;
using attention::RopeStyle;

namespace {

constexpr double kRopeAbsTol = 2e-5;  // fp32 rotation vs double complex rotation, |x| ≤ 1, pos ≤ 5000
/// q(m)·k(n) against q(m − n)·k(0): the fp32 angles m·θ_i carry an error ~m·u (m ≤ 740 here), so the
/// two scores differ by ~10⁻⁵ of |q||k|; relative to a score that can be small, 10⁻⁴.
constexpr double kShiftedScoreRelTol = 1e-4;
/// Least score change between relative positions 3 and 40 for "depends on m − n" to mean something:
/// an order of magnitude above kShiftedScoreRelTol · |score|.
constexpr double kRelativePositionEffectMin = 1e-3;

/// The direct formula, written independently: pair i is the complex number x_a + i·x_b multiplied
/// by e^{i·pos·θ_i}, θ_i = base^(−2i/r); (a, b) = (2i, 2i+1) adjacent, (i, i + r/2) half-split.
std::vector<float> rope_direct(std::vector<float> x, std::size_t heads, std::size_t d, std::size_t pos, double base,
                               RopeStyle style, std::size_t r) {
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t i = 0; i < r / 2; ++i) {
      const std::size_t a = h * d + (style == RopeStyle::adjacent ? 2 * i : i);
      const std::size_t b = h * d + (style == RopeStyle::adjacent ? 2 * i + 1 : i + r / 2);
      const double theta = std::pow(base, -2.0 * double(i) / double(r));
      const std::complex<double> z = std::complex<double>(x[a], x[b]) * std::polar(1.0, double(pos) * theta);
      x[a] = static_cast<float>(z.real());
      x[b] = static_cast<float>(z.imag());
    }
  }
  return x;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

}  // namespace

TEST_CASE("rope matches the direct complex rotation in both pairing conventions") {
  for (const RopeStyle style : {RopeStyle::adjacent, RopeStyle::half_split}) {
    for (const double base : {10000.0, 500000.0, 10.0}) {
      for (const std::size_t d : {2, 8, 64, 128}) {
        for (const std::size_t pos : {0, 1, 7, 255, 4999}) {
          CAPTURE(d); CAPTURE(pos); CAPTURE(base); CAPTURE(static_cast<int>(style));
          const std::size_t heads = 3;
          const auto x = test::random_vector(heads * d, static_cast<unsigned>(d + pos));
          auto got = x;
          attention::rope(got, heads, d, pos, {.base = static_cast<float>(base), .style = style});
          CHECK(max_abs_diff(got, rope_direct(x, heads, d, pos, base, style, d)) <= kRopeAbsTol);
        }
      }
    }
  }
}

TEST_CASE("partial rotary_dim rotates the first r dims and leaves the rest untouched") {
  for (const RopeStyle style : {RopeStyle::adjacent, RopeStyle::half_split}) {
    const std::size_t d = 64, r = 32, heads = 2, pos = 123;
    const auto x = test::random_vector(heads * d, 9);
    auto got = x;
    attention::rope(got, heads, d, pos, {.style = style, .rotary_dim = r});
    CHECK(max_abs_diff(got, rope_direct(x, heads, d, pos, 10000.0, style, r)) <= kRopeAbsTol);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t c = r; c < d; ++c) CHECK(got[h * d + c] == x[h * d + c]);
  }
}

TEST_CASE("half-split equals adjacent on de-interleaved dims (the two conventions differ by a permutation)") {
  const std::size_t d = 32, pos = 77;
  const auto x = test::random_vector(d, 10);
  auto adj = x;
  attention::rope(adj, 1, d, pos, {.style = RopeStyle::adjacent});
  // half-split pairs (i, i + d/2): move x[2i] -> i, x[2i+1] -> i + d/2
  std::vector<float> perm(d);
  for (std::size_t i = 0; i < d / 2; ++i) {
    perm[i] = x[2 * i];
    perm[i + d / 2] = x[2 * i + 1];
  }
  attention::rope(perm, 1, d, pos, {.style = RopeStyle::half_split});
  for (std::size_t i = 0; i < d / 2; ++i) {
    CHECK(perm[i] == doctest::Approx(adj[2 * i]).epsilon(test::kFp32AbsTol));  // the same rotation, pairs in another order
    CHECK(perm[i + d / 2] == doctest::Approx(adj[2 * i + 1]).epsilon(test::kFp32AbsTol));
  }
}

TEST_CASE("RopeTable::apply equals rope() at every position") {
  for (const RopeStyle style : {RopeStyle::adjacent, RopeStyle::half_split}) {
    const std::size_t d = 64, heads = 4, max_pos = 300;
    const RopeConfig cfg{.base = 10000.0f, .style = style};
    const attention::RopeTable table(d, max_pos, cfg);
    CHECK(table.max_pos() == max_pos);
    CHECK(table.head_dim() == d);
    for (std::size_t pos = 0; pos < max_pos; pos += 13) {
      const auto x = test::random_vector(heads * d, static_cast<unsigned>(pos));
      auto a = x, b = x;
      attention::rope(a, heads, d, pos, cfg);
      table.apply(b, heads, pos);
      CHECK(max_abs_diff(a, b) <= test::kFp32AbsTol);  // table vs on-the-fly sin/cos: a few ulps of |x| ≤ 1
    }
  }
}

TEST_CASE("one call rotates the q and k of a block of tokens: rope(q, k, heads, pos) and RopeTable::apply(q, k, heads, pos)") {
  for (const RopeStyle style : {RopeStyle::adjacent, RopeStyle::half_split}) {
    const attention::Heads heads{.n_q = 6, .n_kv = 2, .head_dim = 16};
    const std::size_t n = 5, pos = 37;
    const RopeConfig cfg{.base = 500000.0f, .style = style, .rotary_dim = 12};
    const attention::RopeTable table(heads.head_dim, 64, cfg);
    const auto q0 = test::random_vector(n * heads.q_dim(), 61), k0 = test::random_vector(n * heads.kv_dim(), 62);
    auto q_direct = q0, k_direct = k0, q_table = q0, k_table = k0, q_each = q0, k_each = k0;
    attention::rope(q_direct, k_direct, heads, pos, cfg);
    table.apply(q_table, k_table, heads, pos);
    for (std::size_t t = 0; t < n; ++t) {  // token t sits at pos + t
      table.apply(std::span<float>(q_each).subspan(t * heads.q_dim(), heads.q_dim()), heads.n_q, pos + t);
      table.apply(std::span<float>(k_each).subspan(t * heads.kv_dim(), heads.kv_dim()), heads.n_kv, pos + t);
    }
    CHECK(q_table == q_each);  // bitwise the per-token calls
    CHECK(k_table == k_each);
    CHECK(max_abs_diff(q_direct, q_table) <= 1e-6);
    CHECK(max_abs_diff(k_direct, k_table) <= 1e-6);
    CHECK(q_table != q0);
  }
  const attention::Heads heads{.n_q = 4, .n_kv = 2, .head_dim = 8};
  const attention::RopeTable t(8, 4);
  std::vector<float> q(2 * 32), k(2 * 16), k_short(16);
  CHECK_NOTHROW(t.apply(q, k, heads, 2));
  CHECK_THROWS_AS(t.apply(q, k, heads, 3), shape_error);        // positions 3, 4: past the table
  CHECK_THROWS_AS(t.apply(q, k_short, heads, 0), shape_error);  // 2 tokens of q, 1 of k
  CHECK_THROWS_AS(attention::rope(q, k_short, heads, 0), shape_error);
  std::vector<float> none;
  CHECK_THROWS_AS(attention::rope(none, none, heads, 0), shape_error);
  const attention::Heads wide{.n_q = 2, .n_kv = 1, .head_dim = 16};
  CHECK_THROWS_AS(t.apply(q, k, wide, 0), shape_error);  // head_dim differs from the table's
}

TEST_CASE("rotation preserves norms, and q(m)·k(n) depends only on m − n") {
  for (const RopeStyle style : {RopeStyle::adjacent, RopeStyle::half_split}) {
    const std::size_t d = 128;
    const auto q = test::random_vector(d, 11), k = test::random_vector(d, 12);
    for (const std::size_t pos : {0, 5, 1000, 4095}) {
      auto x = q;
      attention::rope(x, 1, d, pos, {.style = style});
      CHECK(dot(x, x) == doctest::Approx(dot(q, q)).epsilon(test::kFp32RelTol));
    }
    auto score = [&](std::size_t m, std::size_t n) {
      auto a = q, b = k;
      attention::rope(a, 1, d, m, {.style = style});
      attention::rope(b, 1, d, n, {.style = style});
      return dot(a, b);
    };
    for (const std::size_t delta : {0, 3, 40}) {
      const double s0 = score(delta, 0);
      CHECK(score(10 + delta, 10) == doctest::Approx(s0).epsilon(kShiftedScoreRelTol));
      CHECK(score(700 + delta, 700) == doctest::Approx(s0).epsilon(kShiftedScoreRelTol));
    }
    CHECK(std::abs(score(3, 0) - score(40, 0)) > kRelativePositionEffectMin);  // and it does depend on m − n
  }
}

TEST_CASE("rope rejects bad shapes with shape_error") {
  std::vector<float> x(2 * 8);
  CHECK_THROWS_AS(attention::rope(x, 2, 8, 0, {.rotary_dim = 7}), shape_error);   // odd
  CHECK_THROWS_AS(attention::rope(x, 2, 8, 0, {.rotary_dim = 10}), shape_error);  // > head_dim
  CHECK_THROWS_AS(attention::rope(x, 3, 8, 0), shape_error);                      // x size
  CHECK_THROWS_AS(attention::rope(x, 2, 0, 0), shape_error);                      // head_dim 0
  CHECK_THROWS_AS(attention::RopeTable(7, 10), shape_error);                      // odd head_dim
  CHECK_THROWS_AS(attention::RopeTable(0, 10), shape_error);
  const attention::RopeTable t(8, 4);
  CHECK_THROWS_AS(t.apply(x, 2, 4), shape_error);  // pos >= max_pos
  CHECK_THROWS_AS(t.apply(x, 1, 0), shape_error);
  CHECK_NOTHROW(t.apply(x, 2, 3));
}
