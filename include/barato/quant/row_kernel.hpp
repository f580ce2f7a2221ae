#pragma once
/// \file
/// `quant::RowKernel<Arch, Format>`: the dot product of one quantized weight row with an fp32 vector,
/// computed from the packed codes (a row is never dequantized to memory). The primary template is the
/// portable xsimd kernel: it decodes up to 256 codes of a scale group into a small stack buffer of
/// levels and takes an xsimd dot product with x, then multiplies by the group's scale. Faster kernels
/// for particular instruction families are partial specializations selected by the arch type
/// (quant/avx512.hpp: int8 widening and a 16-entry lookup table for all 4-bit formats).
///
/// Every kernel computes Σ_c level(code_c) · scale_c · x_c in fp32; results of different kernels
/// differ only by summation order and by where the scale is multiplied in.

#include <cstddef>
#include <cstdint>

#include "barato/quant/format.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/arch.hpp"
#include "barato/simd/ops.hpp"

namespace barato::quant {

/// Portable kernel (any xsimd arch). O(cols); allocates nothing (1 KiB of stack).
template <class Arch, Format F>
struct RowKernel {
  static constexpr const char* kName = "xsimd";

  /// Σ_c Ŵ[r, c] · x[c], x has v.cols floats.
  [[nodiscard]] static float dot(const QuantizedView<F>& v, std::size_t r, const float* x) noexcept {
    using G = typename F::granularity;
    using P = CodePacking<F::kCodeBits>;
    constexpr std::size_t kChunk = 256;
    alignas(64) float lev[kChunk];  // decoded levels of one chunk
    const std::uint8_t* row = v.row(r);
    const auto* sc = v.row_scales(r);
    const std::size_t n = v.cols;
    const std::size_t seg = G::kGroup != 0 ? G::kGroup : n;
    float total = 0.f;
    for (std::size_t c0 = 0, j = 0; c0 < n; c0 += seg, ++j) {
      const std::size_t c1 = c0 + seg < n ? c0 + seg : n;
      float part = 0.f;
      for (std::size_t a = c0; a < c1; a += kChunk) {
        const std::size_t b = a + kChunk < c1 ? a + kChunk : c1;
        for (std::size_t c = a; c < b; ++c) lev[c - a] = F::level(P::get(row, c, n));
        part += simd::dot<float, Arch>(x + a, lev, b - a);
      }
      total += part * static_cast<float>(sc[G::kGroup != 0 ? j : 0]);
    }
    return total;
  }
};

}  // namespace barato::quant

#include "barato/quant/avx512.hpp"  // arch-selected specializations
