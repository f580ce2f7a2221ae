#pragma once
/// \file
/// `quant::RowKernel<Arch, Format>`: the dot product of one quantized weight row with an fp32 vector,
/// computed from the packed codes (a row is never dequantized to memory). The primary template is the
/// portable xsimd kernel: it decodes up to 256 codes of a scale group into a small stack buffer of
/// levels and takes an xsimd dot product with x, then multiplies by the group's scale. Faster kernels
/// for particular instruction families are partial specializations selected by the arch type
/// (quant/avx512.hpp: int8 widening and a 16-entry lookup table for 4-bit formats; quant/vnni.hpp and
/// quant/vnni_lut16.hpp: integer dot products on fixed-point activations; quant/vnni_ggml.hpp: ggml's
/// Q8_0 / Q4_0 product on int8 activations).
///
/// The kernel interface (every specialization has it):
///  - `Activation`: a prepared activation vector, a small trivially copyable view (the fp32 vector
///    itself for the fp32 kernels, pointers to fixed-point planes for the VNNI kernels);
///  - `activation_bytes(cols)`: the scratch one prepared vector needs (0 for the fp32 kernels), a
///    multiple of 64; `prepare(x, cols, a, scratch)` fills it (scratch 64-byte aligned);
///  - `dot_n<N>(view, r, a, out)`: out[j] = row r · a[j] for N prepared vectors — each weight of the
///    row is loaded (and decoded) once and multiplied into all N vectors, register-blocked;
///  - `dot(view, r, a)` = `dot_n<1>`.
/// **Batch invariance**: in `dot_n<N>` every output has its own accumulators and goes through exactly
/// the instructions of `dot_n<1>` in the same order (only the weight loads and decodes are shared), so
/// out[j] is bitwise the same for every N and every position j in the group.
/// The fp32 kernels compute Σ_c level(code_c) · scale_c · x_c in fp32 and differ only by summation
/// order and by where the scale is multiplied in.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "barato/core/prefetch.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/ggml_dot.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"

namespace barato::quant {

/// The activation as the fp32 kernels take it: the vector itself (nothing to prepare).
struct FloatActivation {
  const float* x = nullptr;  // [cols]
  std::size_t cols = 0;
};

/// Portable kernel (any xsimd arch). O(cols) per vector; allocates nothing (1 KiB of stack).
template <class Arch, Format F>
struct PortableRowKernel {
  static constexpr const char* kName = "xsimd";
  using Activation = FloatActivation;

  /// No scratch: the activation is x itself.
  static constexpr std::size_t activation_bytes(std::size_t /*cols*/) noexcept { return 0; }
  /// Binds x [cols] (no copy).
  static void prepare(const float* x, std::size_t cols, Activation& a, std::byte* /*scratch*/ = nullptr) noexcept {
    a = {x, cols};
  }

  /// out[j] = Σ_c Ŵ[r, c] · a[j].x[c] for j < N: each chunk of the row is decoded once for all N.
  template <std::size_t N>
  static void dot_n(const QuantizedView<F>& v, std::size_t r, const Activation* act, float* out) noexcept {
    using G = typename F::granularity;
    using P = packing_of<F>;
    constexpr std::size_t kChunk = 256;
    alignas(64) float lev[kChunk];  // decoded levels of one chunk
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t n = v.cols;
    const std::size_t seg = G::kGroup != 0 ? G::kGroup : n;
    float total[N];
    for (std::size_t j = 0; j < N; ++j) total[j] = 0.f;
    for (std::size_t c0 = 0, g = 0; c0 < n; c0 += seg, ++g) {
      const std::size_t c1 = c0 + seg < n ? c0 + seg : n;
      float part[N];
      for (std::size_t j = 0; j < N; ++j) part[j] = 0.f;
      for (std::size_t a = c0; a < c1; a += kChunk) {
        const std::size_t b = a + kChunk < c1 ? a + kChunk : c1;
        for (std::size_t c = a; c < b; ++c) lev[c - a] = F::level(P::get(row, c, n));
        for (std::size_t j = 0; j < N; ++j) part[j] += chunk_dot(act[j].x + a, lev, b - a);
      }
      const float s = to_float(sc[G::kGroup != 0 ? g : 0]);
      // one rounding or two, the same for every N (not the compiler's choice per code path:
      // simd::fma in simd/arch.hpp says why)
      for (std::size_t j = 0; j < N; ++j) {
#ifdef __FP_FAST_FMAF
        total[j] = std::fma(part[j], s, total[j]);
#else
        total[j] += part[j] * s;  // no FMA instructions: nothing to fuse it into
#endif
      }
    }
    for (std::size_t j = 0; j < N; ++j) out[j] = total[j];
  }

  /// Σ_c Ŵ[r, c] · x[c] (`dot_n<1>`).
  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const Activation& act) noexcept {
    float out;
    dot_n<1>(v, r, &act, &out);
    return out;
  }

 private:
  /// x · lev over n elements, out of line. Inlined into each dot_n<N>, GCC 12 compiled it so that the
  /// result differed in the last bit between N = 1 and N = 4 (seen for xsimd::avx2 at 172 columns);
  /// one out-of-line body rounds the same for every N.
  [[gnu::noinline]] static float chunk_dot(const float* x, const float* lev, std::size_t n) noexcept {
    return simd::dot<float, Arch>(x, lev, n);
  }
};

namespace detail {
/// Software prefetch distance in a matrix's packed codes, in bytes. Rows are stored back to back, so
/// the codes are one sequential stream, but on one core the hardware prefetchers alone leave the
/// 4-bit kernels well short of DRAM bandwidth. The fast kernels prefetch the line this far ahead of
/// each 64 bytes they read (spread over the loop: a burst of a row's lines at once slowed the int8
/// kernel on L3-resident matrices by ~18 %). Measured on the 0.5B-shape pass (bench_quant, one thread).
inline constexpr std::size_t kCodePrefetchBytes = 8192;

/// Prefetches (into L2) the line kCodePrefetchBytes past `p` (a pointer into v's codes) if it is
/// still inside the codes. No effect on results. Always inlined: it sits in every kernel's inner loop,
/// and a call there clobbers every vector register (in bench_quant's large translation unit GCC 12 made
/// it a call inside the Q4_0 kernel: the spills cost 1.2x the 0.5B pass, 2026-12-03).
template <Format F>
[[gnu::always_inline]] inline void prefetch_codes(const QuantizedView<F>& v, const std::uint8_t* p) noexcept {
  const std::size_t off = static_cast<std::size_t>(p - v.codes) + kCodePrefetchBytes;
  if (off < v.rows * v.row_bytes) prefetch_l2(v.codes + off, 1);
}

/// Rows [r, r1) × N vectors a through K's `dot_n<N>` one row at a time, into y[j · stride + row]:
/// the rows a kernel's `dot_rows_tails` leaves after its last 16.
template <class K, std::size_t N, Format F>
inline void dot_n_rows(const QuantizedView<F>& v, std::size_t r, std::size_t r1, const typename K::Activation* a, float* y,
                       std::size_t stride) noexcept {
  for (; r < r1; ++r) {
    float out[N];
    K::template dot_n<N>(v, r, a, out);
    for (std::size_t j = 0; j < N; ++j) y[j * stride + r] = out[j];
  }
}
}  // namespace detail

/// The kernel `gemv` uses for format F on Arch: the portable one unless a specialization below (or in
/// quant/avx512.hpp, quant/vnni.hpp) serves the pair.
template <class Arch, Format F>
struct RowKernel : PortableRowKernel<Arch, F> {};

/// True when the translation unit enables AVX-512 VNNI (and BW), so the VNNI kernel can be compiled.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
inline constexpr bool kVnniCompiled = true;
#else
inline constexpr bool kVnniCompiled = false;
#endif

/// True when format F keeps its codes in the default layout of its code width (`CodePacking`).
template <class F>
inline constexpr bool kDefaultPacking = std::is_same_v<packing_of<F>, CodePacking<F::kCodeBits>>;

/// The VNNI kernel (quant/vnni.hpp) serves integer AbsMax formats in 8- or 4-bit codes whose scale
/// group is a whole row / tensor or a multiple of 128 columns, and 8-bit codes with groups of 16, 32
/// or 64 (16: ggml's Q6_K / Q3_K sub-blocks as the examples load them).
template <class Arch, class F>
inline constexpr bool kUseVnni =
    kVnniCompiled && simd::kHasAvx512bw<Arch> && requires { F::kQMax; } && !GgmlDotFormat<F> &&
    ((F::kCodeBits == 8 && (F::granularity::kGroup % 128 == 0 || F::granularity::kGroup == 16 ||
                            F::granularity::kGroup == 32 || F::granularity::kGroup == 64)) ||
     (F::kCodeBits == 4 && kDefaultPacking<F> && F::granularity::kGroup % 128 == 0));

/// ggml's Q8_0 and Q4_0 take the VNNI kernel of ggml's product (quant/vnni_ggml.hpp: int8 activations
/// per 32 columns, as llama.cpp).
template <class Arch, class F>
inline constexpr bool kUseVnniGgml = kVnniCompiled && simd::kHasAvx512bw<Arch> && GgmlDotFormat<F>;

/// The VNNI table kernel (quant/vnni_lut16.hpp) serves the other 4-bit formats whose scale groups
/// are multiples of 64 columns: NF4 and AbsMax 4-bit with 64-column groups.
template <class Arch, class F>
inline constexpr bool kUseVnniLut16 = kVnniCompiled && simd::kHasAvx512bw<Arch> && F::kCodeBits == 4 && kDefaultPacking<F> &&
                                      F::granularity::kGroup != 0 && F::granularity::kGroup % 64 == 0 &&
                                      !kUseVnni<Arch, F>;

}  // namespace barato::quant

// arch-selected specializations
#include "barato/quant/avx512.hpp"
#include "barato/quant/vnni.hpp"
#include "barato/quant/vnni_ggml.hpp"
#include "barato/quant/vnni_lut16.hpp"
