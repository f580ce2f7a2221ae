#pragma once
/// \file
/// The quantization-format concept: a type that carries every fact of a weight storage format —
/// the scale granularity (per tensor, per output row, per group of G consecutive weights of a row),
/// the bits of information per weight, the bits each stored code occupies, the scale's storage type,
/// the packing order of codes in a row, and the scalar reference rules that turn a float into a code
/// and a code back into a float. `QuantizedMatrix<Format>` owns weights in a format; its view is what
/// the kernels (quant/gemv.hpp) take.
///
/// Rules a `requires` clause cannot express:
///  - A scale group is quantized as: a = max |w| over the group; s = a / kScaleDivisor (float);
///    s is stored as `scale_type`; codes use the *stored* scale s' = float(stored):
///    code = encode(w / s') (nearest level); s' = 0 (all-zero group) gives `kZeroCode` everywhere.
///  - `level(code)` is the unscaled value of a code; the dequantized weight is level(code) · s'.
///  - `encode(level(c)) == c` for every valid code c, and `level(kZeroCode) == 0`.
///
/// Two optional hooks let a format bring facts of its own (ggml's Q8_0 / Q4_0, quant/ggml.hpp, use both):
///  - `typename F::packing`: where the codes of a row live (a type with `kCodeBits`, `row_bytes`,
///    `locate`, `get`, `set`, as `CodePacking`); without it, `CodePacking<kCodeBits>` below.
///    `packing_of<F>` names the one that applies. Kernels that assume a layout check it.
///  - `F::quantize_group(w, n, codes) -> scale_type` (concept `QuantizesGroups`; `PerGroup` formats
///    only): the format's own rule for one scale group of n ≤ kGroup weights — it writes the n codes
///    (one per byte, unpacked) and returns the stored scale. `QuantizedMatrix` then calls it instead
///    of the absmax rule above. Why a hook: ggml's quantizers take codes from the unrounded scale and
///    round half away from zero (or truncate), which no choice of `kScaleDivisor` / `encode` can
///    express, and the rule must not become a run-time flag of the shared path.
///
/// Code packing (`CodePacking<kCodeBits>`), the same for every format without a `packing` member:
///  - 8-bit codes: one byte per weight, in column order.
///  - 4-bit codes: each row is split into chunks of 128 codes (64 bytes) plus a tail of cols % 128
///    codes. In a chunk, code p = 16k + j (k < 8, j < 16) sits in the 32-bit little-endian word j at
///    bits 4k…4k+3 (byte 4j + k/2, low nibble when k is even), so shifting the 16 words right by 4k
///    yields the codes of 16 consecutive columns — what the AVX-512 kernel wants. In the tail, code p
///    sits in byte p/2, low nibble first (two 4-bit codes per byte).
///  - 2-bit codes: four per byte in column order, lowest bits first.
///  - Every row starts on a byte boundary: row_bytes = ceil(cols · kCodeBits / 8).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "barato/core/dtype.hpp"

namespace barato::quant {

// ---- granularity: which weights share one scale ---------------------------------------------------

/// One scale for the whole matrix.
struct PerTensor {
  static constexpr std::size_t kGroup = 0;  ///< 0: the scale group is not a fixed-size block
  static constexpr std::string_view kName = "tensor";
  [[nodiscard]] static constexpr std::size_t scales_per_row(std::size_t) noexcept { return 0; }
  [[nodiscard]] static constexpr std::size_t scale_count(std::size_t, std::size_t) noexcept { return 1; }
};

/// One scale per output row.
struct PerRow {
  static constexpr std::size_t kGroup = 0;
  static constexpr std::string_view kName = "row";
  [[nodiscard]] static constexpr std::size_t scales_per_row(std::size_t) noexcept { return 1; }
  [[nodiscard]] static constexpr std::size_t scale_count(std::size_t rows, std::size_t) noexcept { return rows; }
};

/// One scale per group of G consecutive weights of a row, starting at column 0. When cols % G != 0
/// the last group of each row is shorter (cols % G weights) and gets its own scale from its own
/// absmax. To group a whole tensor across row boundaries (llama2.c's Q8_0 export), quantize it as a
/// 1 × N matrix.
template <std::size_t G>
struct PerGroup {
  static_assert(G >= 2, "a group holds at least two weights");
  static constexpr std::size_t kGroup = G;
  static constexpr std::string_view kName = "group";
  [[nodiscard]] static constexpr std::size_t scales_per_row(std::size_t cols) noexcept { return (cols + G - 1) / G; }
  [[nodiscard]] static constexpr std::size_t scale_count(std::size_t rows, std::size_t cols) noexcept {
    return rows * scales_per_row(cols);
  }
};

/// A scale granularity: PerTensor, PerRow or PerGroup<G>.
template <class T>
concept Granularity = requires(std::size_t n) {
  { T::kGroup } -> std::convertible_to<std::size_t>;
  { T::scales_per_row(n) } -> std::convertible_to<std::size_t>;
  { T::scale_count(n, n) } -> std::convertible_to<std::size_t>;
};

// ---- code packing -----------------------------------------------------------------------------------

/// Where code c of a row of `cols` codes lives (see the file comment for the layout).
template <unsigned CodeBits>
struct CodePacking {
  static_assert(CodeBits == 8 || CodeBits == 4 || CodeBits == 2, "codes are stored in 8, 4 or 2 bits");
  static constexpr unsigned kCodeBits = CodeBits;
  /// Codes per interleaved chunk of the 4-bit layout (one 64-byte vector).
  static constexpr std::size_t kChunk = 128;
  static constexpr bool kLittleEndian = true;  ///< 4-bit chunks are read as little-endian 32-bit words

  /// Bytes of one packed row.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t cols) noexcept { return (cols * CodeBits + 7) / 8; }

  /// Where a code lives in a packed row: its byte and the bit shift inside it.
  struct Slot {
    std::size_t byte;
    unsigned shift;
  };
  /// Byte and bit offset of code c in a row of `cols` codes.
  [[nodiscard]] static constexpr Slot locate(std::size_t c, std::size_t cols) noexcept {
    if constexpr (CodeBits == 8) {
      (void)cols;
      return {c, 0};
    } else if constexpr (CodeBits == 4) {
      const std::size_t full = cols / kChunk * kChunk;
      if (c < full) {
        const std::size_t p = c % kChunk, k = p / 16, j = p % 16;
        return {c / kChunk * (kChunk / 2) + 4 * j + k / 2, static_cast<unsigned>(4 * (k % 2))};
      }
      const std::size_t p = c - full;
      return {full / 2 + p / 2, static_cast<unsigned>(4 * (p % 2))};
    } else {
      (void)cols;
      return {c / 4, static_cast<unsigned>(2 * (c % 4))};
    }
  }
  /// Reads code c of a packed row.
  [[nodiscard]] static constexpr std::uint8_t get(const std::uint8_t* row, std::size_t c, std::size_t cols) noexcept {
    const Slot s = locate(c, cols);
    return static_cast<std::uint8_t>((row[s.byte] >> s.shift) & ((1u << CodeBits) - 1u));
  }
  /// Writes code c of a packed row (the other codes of the byte are kept).
  static constexpr void set(std::uint8_t* row, std::size_t c, std::size_t cols, std::uint8_t code) noexcept {
    const Slot s = locate(c, cols);
    const unsigned mask = ((1u << CodeBits) - 1u) << s.shift;
    row[s.byte] = static_cast<std::uint8_t>((row[s.byte] & ~mask) | ((static_cast<unsigned>(code) << s.shift) & mask));
  }
};

/// 4-bit codes in blocks of `Block` codes, each block split in halves (ggml's Q4_0 nibble order):
/// byte j of a block (Block / 2 bytes) holds code j in its low nibble and code j + Block/2 in its high
/// nibble; blocks of a row follow each other. A last partial block of t = cols % Block codes stores
/// code p in byte p/2, low nibble first. Every row starts on a byte boundary.
template <std::size_t Block>
struct SplitNibblePacking {
  static_assert(Block >= 2 && Block % 2 == 0, "a split-nibble block has an even number of codes");
  static constexpr unsigned kCodeBits = 4;
  static constexpr std::size_t kBlock = Block;

  /// Bytes of one packed row.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t cols) noexcept { return (cols + 1) / 2; }
  /// Byte and bit offset of code c in a row of `cols` codes.
  [[nodiscard]] static constexpr typename CodePacking<4>::Slot locate(std::size_t c, std::size_t cols) noexcept {
    const std::size_t full = cols / Block * Block;
    if (c < full) {
      const std::size_t p = c % Block;
      return {c / Block * (Block / 2) + p % (Block / 2), static_cast<unsigned>(p < Block / 2 ? 0 : 4)};
    }
    const std::size_t p = c - full;
    return {full / 2 + p / 2, static_cast<unsigned>(4 * (p % 2))};
  }
  /// Reads code c of a packed row.
  [[nodiscard]] static constexpr std::uint8_t get(const std::uint8_t* row, std::size_t c, std::size_t cols) noexcept {
    const auto s = locate(c, cols);
    return static_cast<std::uint8_t>((row[s.byte] >> s.shift) & 0x0Fu);
  }
  /// Writes code c of a packed row (the other nibble of the byte is kept).
  static constexpr void set(std::uint8_t* row, std::size_t c, std::size_t cols, std::uint8_t code) noexcept {
    const auto s = locate(c, cols);
    const unsigned mask = 0x0Fu << s.shift;
    row[s.byte] = static_cast<std::uint8_t>((row[s.byte] & ~mask) | ((static_cast<unsigned>(code) << s.shift) & mask));
  }
};

// ---- the concept ------------------------------------------------------------------------------------

/// A weight quantization format (see the file comment for the rules).
template <class F>
concept Format = Element<typename F::scale_type> && Granularity<typename F::granularity> &&
                 requires(float v, std::uint8_t code) {
                   { F::kBits } -> std::convertible_to<unsigned>;       // information bits per weight
                   { F::kCodeBits } -> std::convertible_to<unsigned>;   // storage bits per code: 8, 4 or 2
                   { F::kScaleDivisor } -> std::convertible_to<float>;  // scale = absmax / kScaleDivisor
                   { F::kZeroCode } -> std::convertible_to<std::uint8_t>;
                   { F::kName } -> std::convertible_to<std::string_view>;
                   { F::level(code) } -> std::same_as<float>;
                   { F::encode(v) } -> std::same_as<std::uint8_t>;
                 };

namespace detail {
template <class F>
struct PackingOf {
  using type = CodePacking<F::kCodeBits>;
};
template <class F>
  requires requires { typename F::packing; }
struct PackingOf<F> {
  using type = typename F::packing;
};
}  // namespace detail

/// The code packing of format F: `F::packing` when the format names one, else `CodePacking<F::kCodeBits>`.
template <Format F>
using packing_of = typename detail::PackingOf<F>::type;

/// A format with its own rule for a scale group (see the file comment): `quantize_group(w, n, codes)`
/// writes n codes and returns the stored scale.
template <class F>
concept QuantizesGroups = Format<F> && (F::granularity::kGroup != 0) &&
                          requires(const float* w, std::size_t n, std::uint8_t* codes) {
                            { F::quantize_group(w, n, codes) } -> std::same_as<typename F::scale_type>;
                          };

/// Facts derived from a format's members, shared by all formats.
template <class Granularity, unsigned CodeBits, class Scale>
struct BlockFacts {
  /// Weights per scale group (0 for per-tensor / per-row, whose group is a whole row or matrix).
  static constexpr std::size_t kBlockSize = Granularity::kGroup;
  /// Bytes of one full group (codes + its scale); 0 when the group is not a fixed-size block.
  static constexpr std::size_t kBytesPerBlock =
      kBlockSize == 0 ? 0 : (kBlockSize * CodeBits + 7) / 8 + sizeof(Scale);
  /// Storage bits per weight of full groups, scales included. For per-row and per-tensor formats this
  /// is the code width only; the exact figure with scales is `QuantizedMatrix::bits_per_weight()`.
  static constexpr double kBitsPerWeight =
      kBlockSize == 0 ? double(CodeBits) : double(CodeBits) + 8.0 * double(sizeof(Scale)) / double(kBlockSize);
};

}  // namespace barato::quant
