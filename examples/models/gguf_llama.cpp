// gguf_llama.hpp's out-of-line part: `gguf_linear`, where every GGUF tensor type's layer is built,
// and with it the kernels of quant::Linear<GgmlQ8_0 / GgmlQ4_0 / int8 groups of 32 and 16>,
// quant::OffsetLinear<Q4_0F32 / int8 groups of 32 and 16> and nn::Dense<float / f16 / bf16> behind
// nn::AnyLinear. Compiled once (target barato_example_models)
// instead of in every tool, tutorial and test that loads a model.

#include "models/gguf_llama.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>
#include <string_view>
#include <utility>

#include "barato/core/dtype.hpp"
#include "barato/core/memory.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/ggml_blocks.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/offset_linear.hpp"
#include "models/ggml_dequant.hpp"
#include "models/gguf.hpp"

namespace barato_examples {

barato::nn::AnyLinear gguf_linear(const GgufTensor& t, std::size_t rows, std::size_t cols, std::pmr::memory_resource* mr,
                                  std::string_view file, std::size_t file_offset) {
  const auto quantized = [&](auto format) {
    using F = decltype(format);
    const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(t.data.data()), t.data.size());
    return barato::nn::AnyLinear(barato::quant::Linear<F>(
        barato::quant::from_ggml_blocks<F>(rows, cols, bytes, barato::quant::GgmlSource{file, file_offset}, mr)));
  };
  switch (static_cast<GgmlType>(t.type)) {
    case GgmlType::q8_0: return quantized(barato::quant::GgmlQ8_0{});
    case GgmlType::q4_0: return quantized(barato::quant::GgmlQ4_0{});
    default: break;
  }
  // A scale times a small integer per group (Q5_0, Q3_K, Q6_K; IQ4_NL / IQ4_XS, the integer one of 16
  // levels) → int8 codes, one byte each, and fp32 scales; plus an offset per group (Q4_1, Q5_1, Q2_K,
  // Q4_K, Q5_K) → the same with the offsets beside them. ne0 (the columns) is a multiple of the block (checked by the reader), so no group crosses a row.
  const auto int_groups = [&](auto format, bool offsets) {
    using F = decltype(format);
    constexpr std::size_t G = F::granularity::kGroup;
    barato::Buffer<std::uint8_t> codes(rows * cols, mr);
    barato::Buffer<float> scales(rows * cols / G, mr);
    const std::span<std::int8_t> q(reinterpret_cast<std::int8_t*>(codes.data()), codes.size());
    if (!offsets) {
      ggml_to_int_groups(t.data, t.type, t.ne, q, scales.span(), file, file_offset);
      return barato::nn::AnyLinear(barato::quant::Linear<F>(barato::quant::QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales))));
    }
    barato::Buffer<float> o(rows * cols / G, mr);
    ggml_to_offset_groups(t.data, t.type, t.ne, q, scales.span(), o.span(), file, file_offset);
    return barato::nn::AnyLinear(barato::quant::OffsetLinear<F>(
        barato::quant::QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales)), o.span(), mr));
  };
  const bool offsets = ggml_offset_groups(t.type);
  if (offsets && ggml_offset_bits(t.type) == 4) {
    // Q4_1 / Q4_K: 4-bit integers u with scale s and offset o per group of 32 → Q4_0F32's centred
    // codes, s · u + o = s · (u − 8) + (o + 8s): ggml's 4-bit product on int8 activations (the codes'
    // sum is then over −8 … 7: about half the activation error of 0 … 15) at 6 bits per weight. The new
    // offset o + 8s is rounded to fp32 once (8s is exact): the weights are the file's to within
    // 2⁻²⁴ |o + 8s|.
    using F = barato::quant::Q4_0F32;
    const std::size_t n = rows * cols, groups = n / 32;
    barato::Buffer<float> scales(groups, mr), o(groups, mr);
    barato::Buffer<std::uint8_t> codes(n / 2, mr);
    {
      barato::Buffer<std::uint8_t> ints(n, mr);
      ggml_to_offset_groups(t.data, t.type, t.ne, {reinterpret_cast<std::int8_t*>(ints.data()), n}, scales.span(), o.span(),
                            file, file_offset);
      for (std::size_t g = 0; g < groups; ++g) {  // F's split-nibble order: byte j = u_j | u_{j+16} << 4
        const std::uint8_t* u = ints.data() + 32 * g;
        std::uint8_t* b = codes.data() + 16 * g;
        for (std::size_t j = 0; j < 16; ++j) b[j] = static_cast<std::uint8_t>(u[j] | u[j + 16] << 4);
        o[g] += 8.0f * scales[g];
      }
    }
    return barato::nn::AnyLinear(
        barato::quant::OffsetLinear<F>(barato::quant::QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales)), o.span(), mr));
  }
  if (offsets || ggml_int_groups(t.type)) {
    const std::size_t group = offsets ? ggml_offset_group(t.type) : ggml_int_group(t.type);
    if (group == 32) return int_groups(barato::quant::AbsMax<8, barato::quant::PerGroup<32>, float>{}, offsets);
    return int_groups(barato::quant::AbsMax<8, barato::quant::PerGroup<16>, float>{}, offsets);
  }
  // The rest is read straight into the layer's storage (no fp32 temporary: `gguf_dense_fp32` says
  // why): F16 / BF16 values as the file's own bits (the reader checked the tensor's size), the other
  // types as their exact fp32 values.
  const auto half = [&](auto element) {
    using T = decltype(element);
    static_assert(sizeof(T) == 2);
    barato::nn::Dense<T> d(rows, cols, mr);
    barato::require(t.data.size() == d.weights().size_bytes(), "gguf_linear: tensor bytes ", t.data.size(), " != ", rows, " x ",
                    cols, " x 2");
    std::memcpy(d.weights().data(), t.data.data(), t.data.size());
    return barato::nn::AnyLinear(std::move(d));
  };
  if (t.type == static_cast<std::uint32_t>(GgmlType::f16)) return half(barato::f16{});
  if (t.type == static_cast<std::uint32_t>(GgmlType::bf16)) return half(barato::bf16{});
  return gguf_dense_fp32(t, rows, cols, mr, file, file_offset);
}

}  // namespace barato_examples
