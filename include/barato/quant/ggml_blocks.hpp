#pragma once
/// \file
/// Lossless conversion between ggml's block bytes and `QuantizedMatrix<GgmlQ8_0 / GgmlQ4_0>`, and the
/// quantizer from fp32 straight to block bytes (what a GGUF writer calls).
///
/// ggml's bytes of a row-major [rows, cols] matrix (cols % 32 == 0): the blocks of a row one after
/// another, rows one after another, no padding. A block is its scale d (IEEE fp16, little-endian: 2
/// bytes) followed by the codes — Q8_0: 32 int8; Q4_0: 16 bytes, byte j = u_j | u_{j+16} << 4
/// (quant/ggml.hpp). barato keeps codes and scales apart ([rows, row_bytes] codes, [rows, cols / 32]
/// scales) in the same code order, so converting is copying: `from_ggml_blocks` then `to_ggml_blocks`
/// gives back the bytes it was given, and `quantize_ggml_blocks(w)` equals
/// `to_ggml_blocks(QuantizedMatrix<F>(rows, cols, w))`.
///
/// Byte order: barato assumes a little-endian host (as the 4-bit layout of quant/format.hpp does), so
/// an fp16 scale is its two bytes as stored.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/quantized_matrix.hpp"

namespace barato::quant {

/// The ggml block formats: GgmlQ8_0 and GgmlQ4_0.
template <class F>
concept GgmlBlockFormat = std::is_same_v<F, GgmlQ8_0> || std::is_same_v<F, GgmlQ4_0>;

/// Bytes of a [rows, cols] matrix in ggml's layout of F: rows · cols / 32 blocks of F::kGgmlBlockBytes.
template <GgmlBlockFormat F>
[[nodiscard]] constexpr std::size_t ggml_bytes(std::size_t rows, std::size_t cols) noexcept {
  return rows * (cols / 32) * F::kGgmlBlockBytes;
}

namespace detail {
/// Throws `shape_error` unless rows, cols > 0, cols % 32 == 0 and `bytes` == ggml_bytes(rows, cols).
template <GgmlBlockFormat F>
void check_ggml_shape(const char* fn, std::size_t rows, std::size_t cols, std::size_t bytes) {
  require(rows > 0 && cols > 0 && cols % 32 == 0, "quant::", fn, ": ", F::kName, " needs rows > 0 and cols a positive ",
          "multiple of 32, got ", rows, " x ", cols);
  require(bytes == ggml_bytes<F>(rows, cols), "quant::", fn, ": ", F::kName, " ", rows, " x ", cols, " takes ",
          ggml_bytes<F>(rows, cols), " bytes (", rows * cols / 32, " blocks of ", F::kGgmlBlockBytes, "), got ", bytes);
}
}  // namespace detail

/// Where block bytes come from, for error messages: a file name and the byte offset of the first
/// block in it (a GGUF reader passes the tensor's file and data offset).
struct GgmlSource {
  std::string_view file = "<ggml blocks>";  ///< the file (or a description) the bytes come from
  std::size_t offset = 0;                   ///< byte offset of bytes[0] in that file
};

/// The matrix whose ggml block bytes are `bytes` ([rows, cols], cols % 32 == 0), without requantizing:
/// scales and codes are copied into barato's layout. Throws `shape_error` on a size or shape mismatch,
/// `format_error` for a scale that is not finite (naming `source.file`, the byte offset
/// source.offset + the block's offset, the block, its row and columns). O(bytes); allocates the
/// matrix from `mr`.
template <GgmlBlockFormat F>
[[nodiscard]] QuantizedMatrix<F> from_ggml_blocks(std::size_t rows, std::size_t cols, std::span<const std::uint8_t> bytes,
                                                  GgmlSource source = {},
                                                  std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  detail::check_ggml_shape<F>("from_ggml_blocks", rows, cols, bytes.size());
  constexpr std::size_t kCodeBytes = F::kGgmlBlockBytes - 2;  // per block
  const std::size_t blocks = rows * cols / 32;
  Buffer<std::uint8_t> codes(blocks * kCodeBytes, mr);  // [rows, cols · kCodeBits / 8]
  Buffer<f16> scales(blocks, mr);                       // [rows, cols / 32]
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = bytes.data() + b * F::kGgmlBlockBytes;
    std::uint16_t bits = 0;
    std::memcpy(&bits, blk, 2);
    const f16 d = std::bit_cast<f16>(bits);
    if (!std::isfinite(to_float(d)))
      throw format_error(std::string(source.file), source.offset + b * F::kGgmlBlockBytes,
                         barato::detail::cat("quant::from_ggml_blocks: ", F::kName, " block ", b, " (row ", b / (cols / 32),
                                     ", columns ", b % (cols / 32) * 32, "…", b % (cols / 32) * 32 + 31,
                                     "): scale (fp16 bits ", bits, ") is not finite; expected a finite fp16 scale"));
    scales.data()[b] = d;
    std::memcpy(codes.data() + b * kCodeBytes, blk + 2, kCodeBytes);
  }
  return QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales));
}

/// Writes the ggml block bytes of `m` (cols % 32 == 0) into `out` (ggml_bytes(rows, cols) bytes).
/// Throws `shape_error` on a size or shape mismatch. O(bytes); allocates nothing.
template <GgmlBlockFormat F>
void to_ggml_blocks(const QuantizedView<F>& m, std::span<std::uint8_t> out) {
  detail::check_ggml_shape<F>("to_ggml_blocks", m.rows, m.cols, out.size());
  constexpr std::size_t kCodeBytes = F::kGgmlBlockBytes - 2;
  const std::size_t blocks = m.rows * m.cols / 32;
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint8_t* blk = out.data() + b * F::kGgmlBlockBytes;
    const std::uint16_t bits = std::bit_cast<std::uint16_t>(m.scales[b]);
    std::memcpy(blk, &bits, 2);
    std::memcpy(blk + 2, m.codes + b * kCodeBytes, kCodeBytes);
  }
}

/// Quantizes fp32 `w` ([rows, cols] row-major, cols % 32 == 0) with F's ggml rule straight into ggml's
/// block bytes `out` (ggml_bytes(rows, cols) bytes): byte for byte what ggml's reference quantizer
/// writes. Throws `shape_error` on a size or shape mismatch, `value_error` for a non-finite weight or a
/// block whose scale overflows fp16 (|w| > 65504 · 127 for Q8_0, > 65504 · 8 for Q4_0). O(rows · cols);
/// allocates nothing.
template <GgmlBlockFormat F>
void quantize_ggml_blocks(std::size_t rows, std::size_t cols, std::span<const float> w, std::span<std::uint8_t> out) {
  require(w.size() == rows * cols, "quant::quantize_ggml_blocks: expected rows*cols = ", rows, "*", cols, " = ",
          rows * cols, " weights, got ", w.size());
  detail::check_ggml_shape<F>("quantize_ggml_blocks", rows, cols, out.size());
  const std::size_t blocks = rows * cols / 32;
  std::uint8_t q[32];  // one block's codes, unpacked
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* x = w.data() + b * 32;
    for (std::size_t j = 0; j < 32; ++j)
      require<value_error>(std::isfinite(x[j]), "quant::quantize_ggml_blocks: weight (", (b * 32 + j) / cols, ", ",
                           (b * 32 + j) % cols, ") is not finite (", x[j], "); expected finite weights");
    const f16 d = F::quantize_group(x, 32, q);
    require<value_error>(std::isfinite(to_float(d)), "quant::quantize_ggml_blocks: ", F::kName, " block ", b, " (row ",
                         b / (cols / 32), ") gives a scale that overflows fp16");
    std::uint8_t* blk = out.data() + b * F::kGgmlBlockBytes;
    const std::uint16_t bits = std::bit_cast<std::uint16_t>(d);
    std::memcpy(blk, &bits, 2);
    if constexpr (F::kCodeBits == 8) {
      std::memcpy(blk + 2, q, 32);
    } else {
      for (std::size_t j = 0; j < 16; ++j) blk[2 + j] = static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4));
    }
  }
}

}  // namespace barato::quant
