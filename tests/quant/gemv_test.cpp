#include "barato/quant/gemv.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/kernel_check.hpp"
#include "quant/reference.hpp"
#include "support/archs.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

namespace {

/// gemv / gemv_batch over `Arch` against the double product of the dequantized matrix.
template <class Arch, class F>
void check_kernel(std::size_t rows, std::size_t cols, unsigned seed) {
  CAPTURE(rows);
  CAPTURE(cols);
  const std::string_view kernel = RowKernel<Arch, F>::kName;
  CAPTURE(kernel);
  const auto m = ref::test_matrix<F>(rows, cols, seed);
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
  check_kernel<Arch, F>(160, 896, 14);  // enough work for two threads
}

}  // namespace

TEST_CASE_TEMPLATE("quantized gemv equals the double reference for every format (default arch kernels)", F,
                   Int8PerTensor<>, Int8PerRow<>, AbsMax<8, PerGroup<32>, float>, Int8Group<128>, AbsMax<6, PerRow>,
                   Int8Group<64>, AbsMax<8, PerGroup<48>>, Int4PerTensor<>, Int4PerRow<>, Int4Group<32>, Int4Group<64>, Int4Group<128>, AbsMax<4, PerGroup<48>>, AbsMax<4, PerGroup<40>>,
                   AbsMax<3, PerRow>, AbsMax<2, PerGroup<32>>, Nf4<64>, Nf4<64, float>) {
  check_shapes<simd::DefaultArch, F>();
}

TEST_CASE_TEMPLATE("rows wider than the VNNI activation planes fall back to the portable kernel", F, Int8PerRow<>,
                   Int4Group<128>, Nf4<64>, Int8Group<32, float>) {
  check_kernel<simd::DefaultArch, F>(3, 16512, 15);
}

// One format per code width and scale granularity (tests/quant/row_kernel_test.cpp runs the portable
// kernel itself over more formats and every arch).
TEST_CASE_TEMPLATE("the portable xsimd kernel (portable arch) equals the double reference", F, Int8PerTensor<>,
                   Int8PerRow<>, AbsMax<8, PerGroup<32>, float>, AbsMax<6, PerRow>, Int4Group<128>, Int4Group<64>,
                   AbsMax<4, PerGroup<40>>, AbsMax<3, PerRow>, AbsMax<2, PerGroup<32>>, Nf4<64>) {
  static_assert(std::string_view(RowKernel<barato::test::PortableArch, F>::kName) == "xsimd");
  check_shapes<barato::test::PortableArch, F>();
}

#if XSIMD_WITH_AVX2
TEST_CASE_TEMPLATE("the portable xsimd kernel (AVX2 arch) equals the double reference", F, Int8PerRow<>,
                   AbsMax<8, PerGroup<32>, float>, Int4Group<128>, Int4PerTensor<>, Nf4<64>) {
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
    CHECK(std::string_view(RowKernel<simd::DefaultArch, AbsMax<8, PerGroup<48>>>::kName) == "avx512-int8");
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int4Group<32>>::kName) == "avx512-lut16");
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Nf4<64>>::kName) == (vnni ? "avx512-vnni-lut16" : "avx512-lut16"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, Int4Group<64>>::kName) == (vnni ? "avx512-vnni-lut16" : "avx512-lut16"));
    CHECK(std::string_view(RowKernel<simd::DefaultArch, AbsMax<4, PerGroup<40>>>::kName) == "xsimd");
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
