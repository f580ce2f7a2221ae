#pragma once
// The explicit xsimd architectures the SIMD kernels are tested through, besides `simd::DefaultArch`.
// A kernel is selected by the arch type, so passing each of these to a public entry point
// (`simd::dot<T, Arch>`, `quant::gemv<Arch>`, `attention::attend<Arch>` / `decode<Arch>`, …) runs a
// different kernel on the same machine:
//  - `PortableArch` (xsimd::sse2 on x86-64: 4 float lanes, no AVX) selects every portable path:
//    quant::PortableRowKernel, attention's generic row kernel, the portable `reduce_add_rows` loop,
//    the scalar fp16/bf16 loads. It is enabled on every x86-64 compiler, so the portable path is
//    tested everywhere.
//  - xsimd::avx2 (8 lanes): the AVX/AVX2 transpose-add network; portable quant kernel.
//  - xsimd::avx512f (16 lanes, AVX-512 F without BW): the AVX-512 transpose-add, fp16/bf16 loads,
//    the small-d attention kernel; quant falls back to the portable kernel (its intrinsics need BW).
//  - xsimd::avx512bw: the AVX-512 and VNNI quant kernels (quant/avx512.hpp, vnni.hpp, vnni_lut16.hpp).
// An arch that the compile flags do not enable (barato's tests build with -march=native) is left out:
// its batch type would not compile, and the CPU would not run it.

#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <xsimd/xsimd.hpp>

namespace barato::test {

#if XSIMD_WITH_SSE2
using PortableArch = xsimd::sse2;
#else
using PortableArch = xsimd::default_arch;  // non-x86 targets: the only arch there is
#endif

namespace detail {
/// f(Arch{}) with the arch's name in the message of any assertion that fails inside.
template <class Arch, class F>
void run_on(F& f) {
  const std::string name = Arch::name();  // doctest would print a const char* as an address
  INFO("arch = " << name);
  f(Arch{});
}
template <class Arch, class F>
void unless_default(F& f) {
  if constexpr (!std::is_same_v<Arch, xsimd::default_arch>) run_on<Arch>(f);
}
}  // namespace detail

/// Calls f(Arch{}) for the default arch, PortableArch and every one of avx2, avx512f, avx512bw the
/// compile flags enable, each arch once; a failing assertion names the arch. Use with a generic lambda:
/// `for_each_arch([&]<class Arch>(Arch) { … kernel<Arch>(…) … });`.
template <class F>
void for_each_arch(F&& f) {
  detail::run_on<xsimd::default_arch>(f);
  detail::unless_default<PortableArch>(f);
#if XSIMD_WITH_AVX2
  detail::unless_default<xsimd::avx2>(f);
#endif
#if XSIMD_WITH_AVX512F
  detail::unless_default<xsimd::avx512f>(f);
#endif
#if XSIMD_WITH_AVX512BW
  detail::unless_default<xsimd::avx512bw>(f);
#endif
}

}  // namespace barato::test
