// quant/avx512.hpp: the AVX-512 fp32 row kernels (int8 widening; the 16-entry in-register table for
// 4-bit codes), through the explicit xsimd::avx512bw arch, against the scalar reference. Each format
// below is one the VNNI kernels do not take, so the arch type selects the kernel under test.
#include "barato/quant/avx512.hpp"

#include <doctest/doctest.h>

#include <string_view>

#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/kernel_check.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

#if XSIMD_WITH_AVX512BW && defined(__AVX512VL__)

TEST_CASE_TEMPLATE("avx512-int8 kernel equals the double reference (groups of 48, 96, 112 and 80 of 5-bit values)", F,
                   AbsMax<8, PerGroup<48>>, AbsMax<7, PerGroup<96>>, AbsMax<8, PerGroup<112>, float>,
                   AbsMax<5, PerGroup<80>>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(std::string_view(K::kName) == "avx512-int8");
  ref::check_row_kernel_shapes<K, F>(51);
  // groups with 64-, 32-, 16-column steps and a masked tail inside one group
  const auto m = ref::test_matrix<F>(4, 1000, 52);
  ref::check_dots<K>(m, barato::test::random_vector(1000, 53, -2.f, 2.f));
}

TEST_CASE("avx512-int8 also serves int8 per row and groups of 16 / 32 when the VNNI kernel is not compiled") {
  using K = RowKernel<xsimd::avx512bw, Int8PerRow<>>;
  CHECK(std::string_view(K::kName) == (kVnniCompiled ? "avx512-vnni" : "avx512-int8"));
  using K16 = RowKernel<xsimd::avx512bw, AbsMax<8, PerGroup<16>, float>>;
  CHECK(std::string_view(K16::kName) == (kVnniCompiled ? "avx512-vnni" : "avx512-int8"));
  ref::check_row_kernel_shapes<K16, AbsMax<8, PerGroup<16>, float>>(54);
}

TEST_CASE_TEMPLATE("avx512-lut16 kernel equals the double reference (4-bit groups of 16·k that the VNNI kernels do not take)", F,
                   Int4Group<32>, AbsMax<4, PerGroup<48>>, Int4Group<16, float>, AbsMax<3, PerGroup<80>>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(std::string_view(K::kName) == "avx512-lut16");
  ref::check_row_kernel_shapes<K, F>(61);
  // a group boundary inside every 128-column chunk and a scalar tail of 1000 % 128 = 104 columns
  const auto m = ref::test_matrix<F>(4, 1000, 62);
  ref::check_dots<K>(m, barato::test::random_vector(1000, 63, -2.f, 2.f));
}

#else
TEST_CASE("quant/avx512.hpp: not compiled (the translation unit does not enable AVX-512 BW and VL)") {
  MESSAGE("AVX-512 BW/VL not enabled: the AVX-512 row kernels are not built, nothing to test");
}
#endif
