#include "barato/simd/arch.hpp"

#include <doctest/doctest.h>

#include <cstddef>

#include "support/archs.hpp"

using namespace barato;

TEST_CASE("reduce_max and reduce_add on every arch") {
  test::for_each_arch([&]<class Arch>(Arch) {
    using B = simd::Batch<float, Arch>;
    alignas(64) float t[B::size];
    for (std::size_t j = 0; j < B::size; ++j) t[j] = static_cast<float>((j * 7) % B::size) - 3.0f;
    const B b = B::load_aligned(t);
    CHECK(simd::reduce_max<float, Arch>(b) == static_cast<float>(B::size - 1) - 3.0f);
    float s = 0;
    for (float x : t) s += x;
    CHECK(simd::reduce_add<float, Arch>(b) == s);  // small integers: exact in any summation order
  });
}

namespace {
/// Row i of the test matrix: element j = i·100 + j² − 7j (distinct per row and lane).
template <class Arch>
void check_reduce_add_rows() {
  using B = simd::Batch<float, Arch>;
  constexpr std::size_t W = B::size;
  CAPTURE(W);
  B rows[W];
  float expect[W];
  for (std::size_t i = 0; i < W; ++i) {
    alignas(64) float t[W];
    expect[i] = 0;
    for (std::size_t j = 0; j < W; ++j) {
      t[j] = static_cast<float>(i * 100 + j * j) - 7.0f * static_cast<float>(j);
      expect[i] += t[j];
    }
    rows[i] = B::load_aligned(t);
  }
  alignas(64) float got[W];
  simd::reduce_add_rows<Arch>(rows).store_aligned(got);
  for (std::size_t i = 0; i < W; ++i) CHECK(got[i] == doctest::Approx(expect[i]));
}
}  // namespace

TEST_CASE("reduce_add_rows puts the sum of row i in lane i on every compiled arch (AVX-512 and AVX/AVX2 networks, portable SSE loop; regression: xsimd 8.1 haddp permutes lanes on AVX-512)") {
  test::for_each_arch([]<class Arch>(Arch) {
    check_reduce_add_rows<Arch>();
  });
#if XSIMD_WITH_AVX
  check_reduce_add_rows<xsimd::avx>();  // the 256-bit network without AVX2
#endif
}

TEST_CASE("simd::fma rounds once wherever FMA instructions are enabled and twice where they are not, on every arch (xsimd 8.1's own fma is x * y + z on AVX-512 and AVX2)") {
  // x = y = 1 + 2⁻¹², z = −(1 + 2⁻¹¹): x·y = 1 + 2⁻¹¹ + 2⁻²⁴ exactly. Fused: 2⁻²⁴. Rounded first
  // (2⁻²⁴ is half an ulp of 1, the tie goes to even): 1 + 2⁻¹¹, and the sum is 0.
  const float x = 1.0f + 0x1p-12f, z = -(1.0f + 0x1p-11f);
#if defined(__FMA__)
  const float expect = 0x1p-24f;
#else
  const float expect = 0.0f;
#endif
  test::for_each_arch([&]<class Arch>(Arch) {
    using B = simd::Batch<float, Arch>;
    alignas(64) float got[B::size];
    simd::fma(B(x), B(x), B(z)).store_aligned(got);
    for (std::size_t i = 0; i < B::size; ++i) CHECK(got[i] == expect);
    using D = simd::Batch<double, Arch>;
    const double dx = 1.0 + 0x1p-27, dz = -(1.0 + 0x1p-26);  // the same with 2⁻²⁷: fused 2⁻⁵⁴
    alignas(64) double dgot[D::size];
    simd::fma(D(dx), D(dx), D(dz)).store_aligned(dgot);
#if defined(__FMA__)
    for (std::size_t i = 0; i < D::size; ++i) CHECK(dgot[i] == 0x1p-54);
#else
    for (std::size_t i = 0; i < D::size; ++i) CHECK(dgot[i] == 0.0);
#endif
  });
}
