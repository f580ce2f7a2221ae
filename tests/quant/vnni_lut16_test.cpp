// quant/vnni_lut16.hpp: the AVX-512 VNNI table kernel (NF4 and 4-bit AbsMax with 64·k-column groups),
// through the explicit xsimd::avx512bw arch, against the scalar reference: within the documented bound
// (x to 15-bit and levels to 16-bit fixed point), and exact up to fp32 summation for AbsMax int4 (its
// levels are exact in 16-bit fixed point) when x lies on the fixed-point grid.
#include "barato/quant/vnni_lut16.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string_view>

#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/kernel_check.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

#if XSIMD_WITH_AVX512BW && defined(__AVX512VNNI__) && defined(__AVX512VL__)

TEST_CASE_TEMPLATE("avx512-vnni-lut16 kernel equals the double reference within the fixed-point bounds", F, Nf4<64>,
                   Nf4<64, float>, Nf4<128>, Int4Group<64>, AbsMax<4, PerGroup<192>>, AbsMax<3, PerGroup<64>, float>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(std::string_view(K::kName) == "avx512-vnni-lut16");
  ref::check_row_kernel_shapes<K, F>(101);
}

TEST_CASE_TEMPLATE("avx512-vnni-lut16 dot_rows_tails<N>: 16 rows' lane sums at once give each vector its dot_n<1> bits", F,
                   Nf4<64>, Nf4<64, float>, Nf4<128>, Int4Group<64>, AbsMax<4, PerGroup<192>>) {
  ref::check_dot_rows_tails<RowKernel<xsimd::avx512bw, F>, F>(102);
}

TEST_CASE("avx512-vnni-lut16 level scale: 8192 / max |level| (NF4: 8192, AbsMax int4: 1024, exact)") {
  CHECK(RowKernel<xsimd::avx512bw, Nf4<64>>::kLevelScale == 8192.0f);
  CHECK(RowKernel<xsimd::avx512bw, Int4Group<64>>::kLevelScale == 1024.0f);
  for (unsigned k = 0; k < 16; ++k) {  // every int4 level times 1024 is an integer: no level rounding
    const float l = Int4Group<64>::level(static_cast<std::uint8_t>(k)) * 1024.0f;
    CHECK(l == std::nearbyint(l));
  }
}

TEST_CASE_TEMPLATE("avx512-vnni-lut16, AbsMax int4: x on the fixed-point grid gives the exact product", F, Int4Group<64>,
                   AbsMax<4, PerGroup<192>>) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {128, 576, 384 + 77}) {
    const auto m = ref::test_matrix<F>(12, cols, 111);
    ref::check_dots<K>(m, ref::fixed_point_grid_vector(cols, 112), /*with_fixed_point=*/false);
  }
}

#else
TEST_CASE("quant/vnni_lut16.hpp: not compiled (the translation unit does not enable AVX-512 VNNI, BW and VL)") {
  MESSAGE("AVX-512 VNNI not enabled: the VNNI table kernel is not built, nothing to test");
}
#endif
