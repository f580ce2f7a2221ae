// quant/vnni.hpp: the AVX-512 VNNI integer row kernel, through the explicit xsimd::avx512bw arch,
// against the scalar reference: within the documented fixed-point bound for any x, and exact up to
// fp32 summation when x lies on the fixed-point grid (the integer products themselves are exact).
#include "barato/quant/vnni.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "quant/kernel_check.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

#if XSIMD_WITH_AVX512BW && defined(__AVX512VNNI__) && defined(__AVX512VL__)

#define BARATO_VNNI_FORMATS                                                                                   \
  Int8PerTensor<>, Int8PerRow<>, Int8PerRow<float>, Int8Group<128>, Int8Group<256>, Int8Group<32, float>,     \
      Int8Group<64>, Int8Group<16>, Int8Group<16, float>, AbsMax<6, PerRow>, Int4PerTensor<>, Int4PerRow<>, Int4Group<128>, Int4Group<256, float>, \
      AbsMax<3, PerRow>

TEST_CASE_TEMPLATE("avx512-vnni kernel equals the double reference within the fixed-point bound of x", F, BARATO_VNNI_FORMATS) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(std::string_view(K::kName) == "avx512-vnni");
  ref::check_row_kernel_shapes<K, F>(71);
}

TEST_CASE_TEMPLATE("avx512-vnni kernel: x on the fixed-point grid gives the exact product (integer products, no rounding)", F,
                   BARATO_VNNI_FORMATS) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {128, 512, 384 + 77}) {
    const auto m = ref::test_matrix<F>(12, cols, 81);
    ref::check_dots<K>(m, ref::fixed_point_grid_vector(cols, 82), /*with_fixed_point=*/false);
  }
}

/// Aligned scratch for one prepared vector of kernel K (the kernel needs 64-byte alignment).
template <class K>
struct Prepared {
  std::vector<std::byte> storage;
  typename K::Activation act;
  Prepared(const std::vector<float>& x) : storage(K::activation_bytes(x.size()) + 64) {
    void* p = storage.data();
    std::size_t space = storage.size();
    K::prepare(x.data(), x.size(), act, static_cast<std::byte*>(std::align(64, K::activation_bytes(x.size()), p, space)));
  }
};

/// Both preparations of x into fresh scratch (filled with different junk, so untouched bytes
/// cannot agree by accident); the scratch bytes they write must be the same.
template <class K>
void check_prepare_matches_scalar(const std::vector<float>& x) {
  const std::size_t bytes = K::activation_bytes(x.size() / 64 * 64);
  std::vector<std::byte> sv(bytes + 64, std::byte{0xAB}), ss(bytes + 64, std::byte{0xAB});
  auto aligned = [&](std::vector<std::byte>& st) {
    void* p = st.data();
    std::size_t space = st.size();
    return static_cast<std::byte*>(std::align(64, bytes, p, space));
  };
  std::byte* pv = aligned(sv);
  std::byte* ps = aligned(ss);
  typename K::Activation av, as;
  K::prepare(x.data(), x.size(), av, pv);
  K::prepare_scalar(x.data(), x.size(), as, ps);
  REQUIRE(av.blocks == as.blocks);
  const std::size_t B = K::Activation::kBlock, blocks = av.blocks;
  CHECK(std::equal(av.hi, av.hi + blocks * B, as.hi));
  CHECK(std::equal(av.lo, av.lo + blocks * B, as.lo));
  CHECK(std::equal(av.sx, av.sx + blocks, as.sx));
  if constexpr (K::kRowStep) {
    CHECK(av.corr_row == as.corr_row);
  } else {
    CHECK(std::equal(av.corr, av.corr + blocks * 16, as.corr));
    if constexpr (K::kSmallGroups) CHECK(std::equal(av.corr_lo, av.corr_lo + blocks * 16, as.corr_lo));
  }
}

TEST_CASE_TEMPLATE("avx512-vnni prepare (16 columns per instruction) writes the same planes, steps and corrections as prepare_scalar", F,
                   BARATO_VNNI_FORMATS) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {64, 128, 896, 384 + 77, 4864}) {
    CAPTURE(cols);
    check_prepare_matches_scalar<K>(barato::test::random_vector(cols, 301, -3.f, 3.f));
    // ties of the rounding: with max |x| = 16383, x · (1 / step) lands on k + 0.5 (rounded to even)
    std::vector<float> ties(cols);
    for (std::size_t c = 0; c < cols; ++c) ties[c] = (c % 7 == 0 ? 16383.0f : 0.5f + static_cast<float>(c % 301)) * (c % 2 ? -1.f : 1.f);
    check_prepare_matches_scalar<K>(ties);
    // an outlier, an all-zero block, negative zeros and the largest codes
    auto mixed = barato::test::random_vector(cols, 302, -1.f, 1.f);
    mixed[cols / 3] = 250.0f;
    for (std::size_t c = 0; c < std::min<std::size_t>(cols, 128); ++c) mixed[c] = c % 2 ? -0.0f : 0.0f;
    check_prepare_matches_scalar<K>(mixed);
  }
}

TEST_CASE("avx512-vnni prepare (scale groups): the two byte planes hold x16 = 256·hi + lo with |x16| ≤ 16383, each block its own step, an all-zero block exact") {
  using K = RowKernel<xsimd::avx512bw, Int8Group<128>>;
  static_assert(!K::kRowStep);
  const std::size_t cols = 256;
  auto x = barato::test::random_vector(cols, 91, -3.f, 3.f);
  for (std::size_t c = 128; c < cols; ++c) x[c] = 0.0f;  // second block all zero
  const Prepared<K> p(x);
  const K::Activation* a = &p.act;
  REQUIRE(a->blocks == 2);
  CHECK(a->sx[1] == 0.0f);
  float xmax = 0;
  for (std::size_t c = 0; c < 128; ++c) xmax = std::max(xmax, std::fabs(x[c]));
  CHECK(a->sx[0] == xmax / float(kFixedPointMax));
  for (std::size_t c = 0; c < 128; ++c) {  // int8 codes: planes in natural column order
    const int x16 = 256 * a->hi[c] + a->lo[c];
    REQUIRE(std::abs(x16) <= kFixedPointMax);
    REQUIRE(std::fabs(double(x16) * a->sx[0] - x[c]) <= 0.5 * a->sx[0] * (1 + ref::kFixedStepSlack));
    CHECK(256 * a->hi[128 + c] + a->lo[128 + c] == 0);
  }
  // a zero activation block contributes nothing, whatever the weights
  const auto m = ref::test_matrix<Int8Group<128>>(3, cols, 92);
  ref::check_dots<K>(m, x);
}

/// The row-step rule written out independently: step = max |x| / 16383 over the full 128-column
/// blocks, x16 = round(x / step) (to nearest even, clamped), and the exact Σ level(code) · x16 in
/// int64, scaled once in double by step and the row's scale. Full blocks only (cols % 128 == 0).
template <class F>
float row_step_reference(const QuantizedView<F>& v, std::size_t r, const std::vector<float>& x) {
  float m = 0;
  for (const float e : x) m = std::max(m, std::fabs(e));
  const float step = m / float(kFixedPointMax);
  const float inv = step > 0 ? 1.0f / step : 0.0f;
  std::int64_t exact = 0;
  for (std::size_t c = 0; c < v.cols; ++c) {
    const long q = std::lrint(x[c] * inv);
    exact += static_cast<std::int64_t>(F::level(v.code(r, c))) * std::clamp<long>(q, -kFixedPointMax, kFixedPointMax);
  }
  return static_cast<float>(static_cast<double>(exact) * double(step) * double(v.scale(r, 0)));
}

TEST_CASE_TEMPLATE("avx512-vnni dot_rows_tails<N>: 16 rows' tail columns at once give each vector its dot_n<1> bits", F,
                   BARATO_VNNI_FORMATS) {
  ref::check_dot_rows_tails<RowKernel<xsimd::avx512bw, F>, F>(95);
}

TEST_CASE_TEMPLATE("avx512-vnni, one scale per row (kRowStep): one step for the whole vector and the exact integer sum, bit for bit, one or two rows per call", F,
                   Int8PerRow<>, Int8PerTensor<>, Int4PerRow<>, AbsMax<6, PerRow>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(K::kRowStep);
  for (const std::size_t cols : {128, 896, 4864}) {
    CAPTURE(cols);
    auto x = barato::test::random_vector(cols, 93, -2.f, 2.f);
    x[cols / 2] = 40.0f;  // an outlier: every block gets the vector's step, not its own
    const Prepared<K> p(x);
    const float step = 40.0f / float(kFixedPointMax);
    std::int64_t sum = 0;
    for (std::size_t b = 0; b < p.act.blocks; ++b) {
      REQUIRE(p.act.sx[b] == step);
      for (std::size_t i = 0; i < 128; ++i) sum += 256 * p.act.hi[b * 128 + i] + p.act.lo[b * 128 + i];
    }
    CHECK(p.act.corr_row == -std::int64_t{K::kOffset} * sum);
    const auto m = ref::test_matrix<F>(9, cols, 94);
    for (std::size_t r = 0; r < m.rows(); ++r) {
      CAPTURE(r);
      float out[3];
      const typename K::Activation acts[3] = {p.act, p.act, p.act};
      K::template dot_n<3>(m.view(), r, acts, out);
      const float expect = row_step_reference(m.view(), r, x);
      REQUIRE(out[0] == expect);
      REQUIRE(out[1] == expect);
      REQUIRE(K::dot(m.view(), r, p.act) == expect);
      if (r + 1 < m.rows()) {  // two rows per call: the same results
        float two[6];
        K::template dot2_n<3>(m.view(), r, acts, two);
        const float next = row_step_reference(m.view(), r + 1, x);
        for (std::size_t j = 0; j < 3; ++j) {
          REQUIRE(two[j] == expect);
          REQUIRE(two[3 + j] == next);
        }
      }
    }
  }
}

/// The grouped formats' result by its definition (quant/vnni.hpp `dot_rows_blocks`), element by
/// element: per 128-column block the exact S_b = Σ level · x16 from the prepared planes, block b into
/// accumulator b mod 4 by acc ← fma(float(S_b), fl(w_b · sx_b), acc) in block order, the 4 totalled
/// in `sum_accumulators4`'s order, plus the kernel's fp32 tail.
template <class K, class F>
float block_chain_reference(const QuantizedView<F>& v, std::size_t r, const typename K::Activation& a) {
  float acc[4] = {};
  for (std::size_t b = 0; b < a.blocks; ++b) {
    std::int64_t s = 0;
    for (std::size_t i = 0; i < 128; ++i) {
      const std::size_t pos = K::store_position(i);  // where column 128b + i sits in the planes
      s += static_cast<std::int64_t>(F::level(v.code(r, b * 128 + i))) * (256 * a.hi[b * 128 + pos] + a.lo[b * 128 + pos]);
    }
    acc[b % 4] = std::fma(static_cast<float>(s), v.scale(r, b * 128) * a.sx[b], acc[b % 4]);
  }
  const float total = sum_accumulators4(acc);
  return a.blocks * 128 < v.cols ? K::add_tail(total, v, r, v.row(r), a.blocks * 128, v.cols, a.x) : total;
}

TEST_CASE_TEMPLATE("avx512-vnni, groups of 128 columns or more: the exact block sums into 4 fp32 accumulators, bit for bit, one or two rows per call", F,
                   Int8Group<128>, Int8Group<256>, Int4Group<128>, Int4Group<256, float>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(!K::kRowStep && !K::kSmallGroups);
  if (!K::kAmxBlocks) {  // without the tiles the kernel keeps its lane accumulators (dot_rows_lanes)
    MESSAGE("AMX tiles not compiled: the block-sum chain is not in use");
    return;
  }
  // every block count of a span's own code (1 … 16 blocks, each a template instance), a 17th block
  // starting a second span, a tail after 2 and after 38 blocks, and 40 blocks (3 spans, each
  // accumulator fed 10 times)
  std::vector<std::size_t> widths;
  for (std::size_t blocks = 1; blocks <= 17; ++blocks) widths.push_back(blocks * 128);
  for (const std::size_t cols : {300, 4864 + 64, 40 * 128}) widths.push_back(cols);
  for (const std::size_t cols : widths) {
    CAPTURE(cols);
    auto x = barato::test::random_vector(cols, 95, -2.f, 2.f);
    x[cols / 3] = 40.0f;  // an outlier: its block gets a coarser step than the others
    const Prepared<K> p(x);
    const auto m = ref::test_matrix<F>(5, cols, 96);
    std::vector<float> expect(m.rows());
    for (std::size_t r = 0; r < m.rows(); ++r) expect[r] = block_chain_reference<K>(m.view(), r, p.act);
    const typename K::Activation acts[3] = {p.act, p.act, p.act};
    for (std::size_t r = 0; r < m.rows(); ++r) {
      CAPTURE(r);
      float out[3], two[6];
      K::template dot_n<3>(m.view(), r, acts, out);
      for (std::size_t j = 0; j < 3; ++j) REQUIRE(out[j] == expect[r]);
      REQUIRE(K::dot(m.view(), r, p.act) == expect[r]);
      K::template dot_n<2>(m.view(), r, acts, out);  // one and two vectors: constant span sizes
      for (std::size_t j = 0; j < 2; ++j) REQUIRE(out[j] == expect[r]);
      if (r + 1 < m.rows()) {
        K::template dot2_n<3>(m.view(), r, acts, two);
        for (std::size_t j = 0; j < 3; ++j) {
          REQUIRE(two[j] == expect[r]);
          REQUIRE(two[3 + j] == expect[r + 1]);
        }
      }
    }
  }
}

TEST_CASE("avx512-vnni, kRowStep: rows of several int32 segments, at the largest lane sums, stay exact (int64 widening)") {
  using F = Int8PerRow<>;
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t blocks : {K::kRowSegmentBlocks, K::kRowSegmentBlocks + 3, 3 * K::kRowSegmentBlocks + 5}) {
    const std::size_t cols = blocks * 128;
    CAPTURE(cols);
    // row 0: every code +127 (u = 255); row 1: every code −127 (u = 1); row 2: alternating signs
    std::vector<float> w(3 * cols);
    for (std::size_t c = 0; c < cols; ++c) {
      w[c] = 1.0f;
      w[cols + c] = -1.0f;
      w[2 * cols + c] = c % 2 == 0 ? 1.0f : -1.0f;
    }
    const QuantizedMatrix<F> m(3, cols, w);
    // x16 = 16383 everywhere (the largest Σ u·x16 a lane can hold), then x16 = 256·63 + 127 (the
    // largest low byte) everywhere but one element at the top of the range
    std::vector<float> top(cols, 1.0f), low_max(cols, 16255.0f / 16383.0f);
    low_max[5] = 1.0f;
    for (const auto* x : {&top, &low_max}) {
      const Prepared<K> p(*x);
      REQUIRE(p.act.blocks == blocks);
      for (std::size_t r = 0; r < 3; ++r) {
        CAPTURE(r);
        CHECK(K::dot(m.view(), r, p.act) == row_step_reference(m.view(), r, *x));
      }
    }
  }
}

#else
TEST_CASE("quant/vnni.hpp: not compiled (the translation unit does not enable AVX-512 VNNI, BW and VL)") {
  MESSAGE("AVX-512 VNNI not enabled: the VNNI row kernel is not built, nothing to test");
}
#endif
