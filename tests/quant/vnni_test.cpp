// quant/vnni.hpp: the AVX-512 VNNI integer row kernel, through the explicit xsimd::avx512bw arch,
// against the scalar reference: within the documented fixed-point bound for any x, and exact up to
// fp32 summation when x lies on the fixed-point grid (the integer products themselves are exact).
#include "barato/quant/vnni.hpp"

#include <doctest/doctest.h>

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
      Int8Group<64>, AbsMax<6, PerRow>, Int4PerTensor<>, Int4PerRow<>, Int4Group<128>, Int4Group<256, float>, \
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

TEST_CASE("avx512-vnni prepare: the two byte planes hold x16 = 256·hi + lo with |x16| ≤ 16383, and an all-zero block is exact") {
  using K = RowKernel<xsimd::avx512bw, Int8PerRow<>>;
  const std::size_t cols = 256;
  auto x = barato::test::random_vector(cols, 91, -3.f, 3.f);
  for (std::size_t c = 128; c < cols; ++c) x[c] = 0.0f;  // second block all zero
  std::vector<std::byte> storage(K::activation_bytes(cols) + 64);
  void* p = storage.data();
  std::size_t space = storage.size();
  K::Activation act;
  K::prepare(x.data(), cols, act, static_cast<std::byte*>(std::align(64, K::activation_bytes(cols), p, space)));
  const K::Activation* a = &act;
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
  const auto m = ref::test_matrix<Int8PerRow<>>(3, cols, 92);
  ref::check_dots<K>(m, x);
}

#else
TEST_CASE("quant/vnni.hpp: not compiled (the translation unit does not enable AVX-512 VNNI, BW and VL)") {
  MESSAGE("AVX-512 VNNI not enabled: the VNNI row kernel is not built, nothing to test");
}
#endif
