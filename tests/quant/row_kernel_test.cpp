// quant/row_kernel.hpp: the portable row kernel (the primary template, used by every arch without the
// AVX-512 BW intrinsics) against the scalar reference, and the rules that pick the intrinsics kernels.
#include "barato/quant/row_kernel.hpp"

#include <doctest/doctest.h>

#include <string_view>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "quant/kernel_check.hpp"
#include "support/archs.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

TEST_CASE_TEMPLATE("PortableRowKernel equals the double reference on the portable arch and on every explicit arch", F,
                   Int8PerTensor<>, Int8PerRow<>, Int8Group<32, float>, AbsMax<6, PerRow>, AbsMax<8, PerGroup<48>>,
                   Int4PerTensor<>, Int4Group<64>, Int4Group<128>, AbsMax<4, PerGroup<40>>, AbsMax<3, PerRow>,
                   AbsMax<2, PerGroup<32>>, Nf4<64>, Nf4<64, float>) {
  barato::test::for_each_arch([&]<class Arch>(Arch) {
    ref::check_row_kernel_shapes<PortableRowKernel<Arch, F>, F>(31);
  });
  // a scale group longer than the kernel's 256-column decode chunk (two chunks per group)
  const auto m = ref::test_matrix<F>(3, 700, 41);
  ref::check_dots<PortableRowKernel<barato::test::PortableArch, F>>(m, barato::test::random_vector(700, 42, -2.f, 2.f));
}

TEST_CASE("PortableRowKernel: prepare binds x without copying; zero rows give zero") {
  using K = PortableRowKernel<barato::test::PortableArch, Int8PerRow<>>;
  const std::vector<float> x(64, 1.0f);
  K::Activation a;
  K::prepare(x.data(), x.size(), a);
  CHECK(a.x == x.data());
  CHECK(a.cols == x.size());
  const QuantizedMatrix<Int8PerRow<>> zero(2, 64, std::vector<float>(128, 0.0f));
  CHECK(K::dot(zero.view(), 1, a) == 0.0f);
}

TEST_CASE("without AVX-512 BW in the arch type every format takes the portable kernel") {
  static_assert(std::string_view(RowKernel<barato::test::PortableArch, Int8PerRow<>>::kName) == "xsimd");
  static_assert(std::string_view(RowKernel<barato::test::PortableArch, Nf4<64>>::kName) == "xsimd");
  static_assert(!kUseVnni<barato::test::PortableArch, Int8PerRow<>>);
  static_assert(!kUseVnniLut16<barato::test::PortableArch, Nf4<64>>);
#if XSIMD_WITH_AVX512F
  // AVX-512 F without BW: the intrinsics kernels need BW, so the portable one serves
  static_assert(!simd::kHasAvx512bw<xsimd::avx512f>);
  static_assert(std::string_view(RowKernel<xsimd::avx512f, Int8PerRow<>>::kName) == "xsimd");
  static_assert(std::string_view(RowKernel<xsimd::avx512f, Int4Group<128>>::kName) == "xsimd");
#endif
  CHECK(true);
}

#if XSIMD_WITH_AVX512BW
TEST_CASE("kUseVnni / kUseVnniLut16: which formats the VNNI kernels serve (mutually exclusive)") {
  using A = xsimd::avx512bw;
  const bool v = kVnniCompiled;
  // integer VNNI: 8-bit codes per row / tensor / 128·k groups / groups of 32 or 64; 4-bit codes per 128·k
  CHECK(kUseVnni<A, Int8PerRow<>> == v);
  CHECK(kUseVnni<A, Int8PerTensor<>> == v);
  CHECK(kUseVnni<A, Int8Group<128>> == v);
  CHECK(kUseVnni<A, Int8Group<256>> == v);
  CHECK(kUseVnni<A, Int8Group<32>> == v);
  CHECK(kUseVnni<A, Int8Group<64>> == v);
  CHECK(kUseVnni<A, AbsMax<6, PerRow>> == v);  // 6-bit values stored in 8-bit codes
  CHECK(kUseVnni<A, Int4Group<128>> == v);
  CHECK(kUseVnni<A, Int4PerRow<>> == v);
  CHECK_FALSE(kUseVnni<A, AbsMax<8, PerGroup<48>>>);
  CHECK_FALSE(kUseVnni<A, Int4Group<64>>);
  CHECK_FALSE(kUseVnni<A, Nf4<64>>);  // no integer levels
  // VNNI table kernel: the other 4-bit formats with 64·k groups
  CHECK(kUseVnniLut16<A, Nf4<64>> == v);
  CHECK(kUseVnniLut16<A, Int4Group<64>> == v);
  CHECK(kUseVnniLut16<A, AbsMax<4, PerGroup<192>>> == v);
  CHECK_FALSE(kUseVnniLut16<A, Int4Group<128>>);  // taken by the integer kernel
  CHECK_FALSE(kUseVnniLut16<A, Int4Group<32>>);
  CHECK_FALSE(kUseVnniLut16<A, Int4PerRow<>>);
  CHECK_FALSE(kUseVnniLut16<A, Int8PerRow<>>);
}
#endif
