#include "barato/quant/gemv.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/kernel_check.hpp"
#include "quant/reference.hpp"
#include "support/alloc_counter.hpp"
#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

namespace {

/// gemv / gemv_batch over `Arch` against the double product of the dequantized matrix. `split`: the
/// shape is meant to give the two-thread calls two threads (asserted, so that a change of the threshold
/// cannot quietly leave the split untested).
template <class Arch, class F>
void check_kernel(std::size_t rows, std::size_t cols, unsigned seed, bool split = false) {
  CAPTURE(rows);
  CAPTURE(cols);
  const std::string_view kernel = RowKernel<Arch, F>::kName;
  CAPTURE(kernel);
  const auto m = ref::test_matrix<F>(rows, cols, seed);
  if (split) REQUIRE(quant::detail::useful_threads(rows, cols, 1, m.view().row_bytes, 2) == 2);
  std::vector<float> w_hat(rows * cols);
  m.dequantize(w_hat);
  // n = kVecTile + 1 vectors: gemv_batch prepares one full tile of vectors and then a partial one.
  const std::size_t n = quant::detail::kVecTile + 1;
  const auto x = barato::test::random_vector(n * cols, seed + 1, -2.0f, 2.0f);
  std::vector<float> y(rows), yb(n * rows), y2(rows), ys(n * rows);
  for (std::size_t t = 0; t < n; ++t) {
    const auto expect = ref::matvec(w_hat, rows, cols, x.data() + t * cols);
    const auto scale = ref::abs_matvec(w_hat, rows, cols, x.data() + t * cols);
    gemv<Arch>(m.view(), std::span<const float>(x.data() + t * cols, cols), y, 1);
    gemv<Arch>(m.view(), std::span<const float>(x.data() + t * cols, cols), y2, 2);
    // The VNNI kernels round x to 15-bit fixed point per 128-column block (and the table kernel the
    // levels to 16-bit fixed point): add those roundings' bounds.
    const auto fixed_point_bound = ref::fixed_point_bound<RowKernel<Arch, F>>(m, w_hat, x.data() + t * cols);
    for (std::size_t r = 0; r < rows; ++r) {
      REQUIRE(std::fabs(double(y[r]) - expect[r]) <= ref::kKernelRelTol * (scale[r] + barato::test::kTiny) + fixed_point_bound[r]);
      REQUIRE(y2[r] == y[r]);  // identical for any thread count
    }
    std::copy(y.begin(), y.end(), ys.begin() + static_cast<std::ptrdiff_t>(t * rows));
  }
  gemv_batch<Arch>(m.view(), x, yb, n, 2);
  for (std::size_t t = 0; t < n; ++t) {
    CAPTURE(t);
    for (std::size_t r = 0; r < rows; ++r) REQUIRE(yb[t * rows + r] == ys[t * rows + r]);  // batch row t = gemv of x_t
  }
}

template <class Arch, class F>
void check_shapes() {
  check_kernel<Arch, F>(40, 512, 11);   // full 128-chunks
  check_kernel<Arch, F>(17, 172, 12);   // ragged: stories260K's w2 width
  check_kernel<Arch, F>(5, 61, 13);     // odd width, no full chunk
  check_kernel<Arch, F>(1200, 896, 14, true);  // enough rows and work for two threads at n = 1 (2-bit too)
}

}  // namespace

TEST_CASE_TEMPLATE("quantized gemv equals the double reference for every format (default arch kernels)", F,
                   Int8PerTensor<>, Int8PerRow<>, AbsMax<8, PerGroup<32>, float>, Int8Group<128>, AbsMax<6, PerRow>,
                   Int8Group<64>, Int8Group<16>, Int8Group<16, float>, AbsMax<8, PerGroup<48>>, Int4PerTensor<>, Int4PerRow<>, Int4Group<32>, Int4Group<64>, Int4Group<128>, AbsMax<4, PerGroup<48>>, AbsMax<4, PerGroup<40>>,
                   AbsMax<3, PerRow>, AbsMax<2, PerGroup<32>>, Nf4<64>, Nf4<64, float>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  check_shapes<simd::DefaultArch, F>();
}

TEST_CASE_TEMPLATE("rows wider than 16384 columns (the old stack planes) take the same kernels", F, Int8PerRow<>,
                   Int4Group<128>, Nf4<64>, Int8Group<32, float>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  check_kernel<simd::DefaultArch, F>(3, 16512, 15);
}

// One format per code width and scale granularity (tests/quant/row_kernel_test.cpp runs the portable
// kernel itself over more formats and every arch).
TEST_CASE_TEMPLATE("the portable xsimd kernel (portable arch) equals the double reference", F, Int8PerTensor<>,
                   Int8PerRow<>, AbsMax<8, PerGroup<32>, float>, AbsMax<6, PerRow>, Int4Group<128>, Int4Group<64>,
                   AbsMax<4, PerGroup<40>>, AbsMax<3, PerRow>, AbsMax<2, PerGroup<32>>, Nf4<64>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  static_assert(std::string_view(RowKernel<barato::test::PortableArch, F>::kName) == "xsimd");
  check_shapes<barato::test::PortableArch, F>();
}

#if XSIMD_WITH_AVX2
TEST_CASE_TEMPLATE("the portable xsimd kernel (AVX2 arch) equals the double reference", F, Int8PerRow<>,
                   AbsMax<8, PerGroup<32>, float>, Int4Group<128>, Int4PerTensor<>, Nf4<64>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  static_assert(std::string_view(RowKernel<xsimd::avx2, F>::kName) == "xsimd");
  check_shapes<xsimd::avx2, F>();
}
#endif

// The explicit xsimd::avx512bw arch is the default arch wherever the flags enable AVX-512 BW (xsimd's
// best arch), so the "default arch" case above runs the AVX-512 / VNNI kernels; each of them is also
// tested through RowKernel<xsimd::avx512bw, F> in its own file (avx512_test.cpp, vnni_test.cpp, …).
static_assert(!XSIMD_WITH_AVX512BW || std::is_same_v<simd::DefaultArch, xsimd::avx512bw>);

TEST_CASE("the default arch picks the intrinsics kernels where the ISA has them") {
  if constexpr (simd::kHasAvx512bw<simd::DefaultArch>) {
    const bool vnni = kVnniCompiled;
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int8PerRow<>>::kName) == (vnni ? "avx512-vnni" : "avx512-int8"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int4Group<128>>::kName) == (vnni ? "avx512-vnni" : "avx512-lut16"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int8Group<32, float>>::kName) == (vnni ? "avx512-vnni" : "avx512-int8"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int8Group<64>>::kName) == (vnni ? "avx512-vnni" : "avx512-int8"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int8Group<16, float>>::kName) == (vnni ? "avx512-vnni" : "avx512-int8"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, AbsMax<8, PerGroup<48>>>::kName) == "avx512-int8");
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int4Group<32>>::kName) == "avx512-lut16");
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Nf4<64>>::kName) == (vnni ? "avx512-vnni-lut16" : "avx512-lut16"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int4Group<64>>::kName) == (vnni ? "avx512-vnni-lut16" : "avx512-lut16"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, AbsMax<4, PerGroup<40>>>::kName) == "xsimd");
    CHECK(std::string_view(RowKernel<simd::DefaultArch, GgmlQ8_0>::kName) == (vnni ? "avx512-vnni-q8" : "avx512-int8"));
    // Q4_0's split-nibble order is not the layout of the fp32 4-bit table kernel
    CHECK(std::string_view(RowKernel<simd::DefaultArch, GgmlQ4_0>::kName) == (vnni ? "avx512-vnni-q8" : "xsimd"));
  }
}

TEST_CASE("gemv rejects mismatched sizes") {
  const auto w = ref::normal_vector(4 * 8, 1);
  const QuantizedMatrix<Int8PerRow<>> m(4, 8, w);
  std::vector<float> x(7), y(4), y5(5), x8(8);
  CHECK_THROWS_AS(gemv(m.view(), x, y), shape_error);
  CHECK_THROWS_AS(gemv(m.view(), x8, y5), shape_error);
  std::vector<float> xb(16), yb(8);
  CHECK_THROWS_AS(gemv_batch(m.view(), xb, yb, 3), shape_error);
}

namespace {

/// Row t of gemv_batch over the first n vectors equals gemv of x_t bit for bit, for every n in
/// 1 … kMaxN (full and partial groups of kVecTile, one and two vector blocks of kVecBlock) and for
/// 1 and 2 threads; with Sweep::sampled, for one n of each size class only (the loop names them).
/// `split`: the two-thread products of the larger n are meant to take two threads (asserted).
enum class Sweep { every_n, sampled };
template <class Arch, class F>
void check_batch_invariance(std::size_t rows, std::size_t cols, unsigned seed, bool split = false,
                            Sweep sweep = Sweep::every_n) {
  CAPTURE(rows);
  CAPTURE(cols);
  const std::string_view kernel = RowKernel<Arch, F>::kName;
  CAPTURE(kernel);
  constexpr std::size_t kMaxN = 70;
  static_assert(kMaxN > quant::detail::kVecBlock);
  const auto m = ref::test_matrix<F>(rows, cols, seed);
  if (split) REQUIRE(quant::detail::useful_threads(rows, cols, kMaxN, m.view().row_bytes, 2) == 2);
  const auto x = barato::test::random_vector(kMaxN * cols, seed + 1, -2.0f, 2.0f);
  std::vector<float> single(kMaxN * rows), yb(kMaxN * rows);
  for (std::size_t t = 0; t < kMaxN; ++t)
    gemv<Arch>(m.view(), std::span<const float>(x.data() + t * cols, cols), std::span<float>(single.data() + t * rows, rows), 1);
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    for (std::size_t n = 1; n <= kMaxN; ++n) {
      // n = 1 … 5 (a full tile of kVecTile and one more), a tile less one, the largest single vector
      // block and one past it, and kMaxN
      if (sweep == Sweep::sampled && n > quant::detail::kVecTile + 1 && n != 2 * quant::detail::kVecTile - 1 &&
          n != quant::detail::kVecBlock && n != quant::detail::kVecBlock + 1 && n != kMaxN)
        continue;
      CAPTURE(n);
      std::fill(yb.begin(), yb.end(), -1.0f);
      gemv_batch<Arch>(m.view(), std::span<const float>(x.data(), n * cols), std::span<float>(yb.data(), n * rows), n,
                       threads);
      for (std::size_t i = 0; i < n * rows; ++i)
        if (yb[i] != single[i]) REQUIRE(yb[i] == single[i]);  // bitwise; one REQUIRE per mismatch only
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("gemv_batch rows equal gemv bitwise for n = 1 … 70 and 1 or 2 threads (default arch kernels)", F,
                   Int8PerTensor<>, Int8PerRow<>, Int8Group<16>, Int8Group<16, float>, Int8Group<32>,
                   AbsMax<8, PerGroup<32>, float>, Int8Group<64>, Int8Group<128>, AbsMax<8, PerGroup<48>>, Int4PerRow<>, Int4Group<32>, Int4Group<64>, Int4Group<128>,
                   AbsMax<4, PerGroup<40>>, Nf4<64>, Nf4<64, float>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  check_batch_invariance<simd::DefaultArch, F>(272, 300, 21, true);  // 2 full 128-blocks + a 44-column tail; 2 threads from n ≈ 12
  check_batch_invariance<simd::DefaultArch, F>(37, 300, 26);  // an odd row count: the last row goes alone to dot_n
}

TEST_CASE_TEMPLATE("narrow rows: one vector's rows taken 16 at a time (dot_rows_tails<1>) give gemv_batch's bits", F,
                   Int8PerTensor<>, Int8PerRow<>, Int8Group<128>, Int4PerRow<>, Int4Group<128>, AbsMax<4, PerGroup<256>, float>,
                   Int4Group<64>, Nf4<64>, Nf4<64, float>, GgmlQ8_0, GgmlQ4_0, Q4_0F32, Int8Group<16>, Int8Group<16, float>,
                   Int8Group<32>, AbsMax<8, PerGroup<32>, float>, Int8Group<64>) {
  // n = 1 against the batched kernels; every n of the sweep runs at 272 × 300 above (15 of these 17 formats)
  check_batch_invariance<simd::DefaultArch, F>(50, 64, 30, false, Sweep::sampled);   // all columns fp32 tail: three 16-row sets and 2 rows
  check_batch_invariance<simd::DefaultArch, F>(64, 172, 31, false, Sweep::sampled);  // stories260K's w2: one block + a 44-column tail
}

TEST_CASE_TEMPLATE("narrow rows of zero codes under negative scales: gemv and gemv_batch agree to the sign of zero", F,
                   Int8PerRow<>, Int8PerTensor<>, Int4PerRow<>, Int8Group<32>, AbsMax<8, PerGroup<32>, float>) {
  // Codes and scales as a loader passes them (no quantizer: a scale may be negative). All codes 0 and
  // every scale −0.5: with 64 columns (no full block) each row's part over the full blocks is 0 · s = −0,
  // and 16-row gemv (dot_rows_tails<1>) must give the bits the batched path gives, −0 included.
  using S = typename F::scale_type;
  const std::size_t rows = 40, cols = 64;  // two 16-row sets and 8 rows alone
  Buffer<std::uint8_t> codes(rows * packing_of<F>::row_bytes(cols));
  std::fill(codes.begin(), codes.end(), std::uint8_t{0});
  Buffer<S> scales(F::granularity::scale_count(rows, cols));
  std::fill(scales.begin(), scales.end(), S(-0.5f));
  const QuantizedMatrix<F> m(rows, cols, std::move(codes), std::move(scales));
  const std::size_t n = 3;
  const auto x = barato::test::random_vector(n * cols, 41, -2.0f, 2.0f);
  std::vector<float> y(rows), yb(n * rows);
  gemv_batch(m.view(), x, yb, n, 1);
  for (std::size_t t = 0; t < n; ++t) {
    gemv(m.view(), std::span<const float>(x.data() + t * cols, cols), y, 1);
    for (std::size_t r = 0; r < rows; ++r) {
      CAPTURE(t);
      CAPTURE(r);
      REQUIRE(std::bit_cast<std::uint32_t>(y[r]) == std::bit_cast<std::uint32_t>(yb[t * rows + r]));
    }
  }
}

TEST_CASE_TEMPLATE("grouped formats: gemv_batch rows equal gemv bitwise over many blocks (every block accumulator fed)", F,
                   Int8Group<128>, Int4Group<128>, Int4Group<256, float>) {
  check_batch_invariance<simd::DefaultArch, F>(40, 1100, 27);  // 8 full 128-blocks + a 76-column tail
  check_batch_invariance<simd::DefaultArch, F>(33, 18 * 128, 28);  // 18 blocks: two spans of the VNNI kernel
  check_batch_invariance<simd::DefaultArch, F>(34, 13 * 128 + 5, 29);  // 13 blocks (a partial span of 4 quads) + a tail
}

TEST_CASE_TEMPLATE("ggml formats: gemv_batch rows equal gemv bitwise at widths made of whole 32-column blocks", F,
                   GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  check_batch_invariance<simd::DefaultArch, F>(40, 448, 24);  // 3 full 128-blocks + 2 groups of 32
  check_batch_invariance<simd::DefaultArch, F>(33, 192, 25);  // stories260K-h192's FFN width: 128 + 64
}

TEST_CASE_TEMPLATE("gemv_batch rows equal gemv bitwise (portable kernels)", F, Int8PerRow<>, Int4Group<128>, Nf4<64>,
                   GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  check_batch_invariance<barato::test::PortableArch, F>(40, 172, 22);
#if XSIMD_WITH_AVX2
  check_batch_invariance<xsimd::avx2, F>(40, 172, 23);
#endif
}

TEST_CASE("gemv_batch over several L2 row blocks (n > kVecBlock) equals gemv bitwise") {
  // 1024 int8 columns: kRowBlockBytes / 1024 = 512 rows per block, so 1100 rows are three blocks.
  using F = Int8PerRow<>;
  const std::size_t rows = 1100, cols = 1024, n = 66;
  static_assert(quant::detail::kRowBlockBytes / 1024 < 1100 / 2);
  const auto m = ref::test_matrix<F>(rows, cols, 31);
  const auto x = barato::test::random_vector(n * cols, 32, -2.0f, 2.0f);
  std::vector<float> y(rows), yb(n * rows);
  gemv_batch(m.view(), x, yb, n, 2);
  for (std::size_t t = 0; t < n; ++t) {
    gemv(m.view(), std::span<const float>(x.data() + t * cols, cols), y, 1);
    for (std::size_t r = 0; r < rows; ++r)
      if (yb[t * rows + r] != y[r]) REQUIRE(yb[t * rows + r] == y[r]);
  }
}

TEST_CASE("gemv_batch allocates only to grow the thread's arena: nothing after reserve_gemv or a first call") {
  using F = Int8PerRow<>;
  const std::size_t rows = 64, cols = 896, n = 64;
  const auto m = ref::test_matrix<F>(rows, cols, 41);
  const auto x = barato::test::random_vector(n * cols, 42, -1.0f, 1.0f);
  std::vector<float> y(n * rows);
  reserve_gemv<simd::DefaultArch, F>(n, cols);
  const std::size_t held = ActivationArena::local().capacity();
  CHECK(held >= quant::detail::batch_scratch_bytes<RowKernel<simd::DefaultArch, F>>(n, cols));
  {
    barato::test::CountAllocations count;
    gemv_batch(m.view(), x, y, n, 1);
    gemv_batch(m.view(), std::span<const float>(x.data(), 5 * cols), std::span<float>(y.data(), 5 * rows), 5, 1);
    gemv(m.view(), std::span<const float>(x.data(), cols), std::span<float>(y.data(), rows), 1);
    CHECK(count.count() == 0);
  }
  CHECK(ActivationArena::local().capacity() == held);
  // a larger batch grows the arena once, then the same call allocates nothing
  // (earlier test cases on this thread may have left the arena larger than n vectors need)
  std::size_t n2 = 2 * n;
  while (quant::detail::batch_scratch_bytes<RowKernel<simd::DefaultArch, F>>(n2, cols) <= held) n2 *= 2;
  const auto x2 = barato::test::random_vector(n2 * cols, 43, -1.0f, 1.0f);
  std::vector<float> y2(n2 * rows);
  {
    barato::test::CountAllocations count;
    gemv_batch(m.view(), x2, y2, n2, 1);
    CHECK(count.count() == 1);
  }
  {
    barato::test::CountAllocations count;
    gemv_batch(m.view(), x2, y2, n2, 1);
    CHECK(count.count() == 0);
  }
}
