#pragma once
/// \file
/// The page stores of a paged KV pool: where the K/V rows of every block live, and the view through
/// which attention reads one KV head of one layer across a sequence's pages. A store knows its
/// layout and format, nothing of sequences, sharing or prefixes (kv/paged.hpp orchestrates those).
///
/// Layout (`PageLayout`): rows [n_layers, n_kv_heads, n_blocks, B] of head_dim for K and for V, so
/// blocks b and b + 1 are adjacent in every (layer, head) — a sequence whose pages are consecutive
/// blocks reads like a contiguous cache — and a block holds every layer of its B positions.
///
/// Formats (`PageFormat`): an element type (`PageStore<T>`: fp32 / fp16 / bf16 rows, viewed as a
/// `PagedBlock<T>`) or `QuantizedPages<KF, VF>` (`PageStore<QuantizedPages<KF, VF>>`: int8 / int4
/// codes + one fp32 absmax scale per row, quantised exactly as `kv::Quantized` does, viewed as a
/// `PagedQuantBlock<KF, VF>`). Every store has the same members: `row_bytes`, `bytes`, `write`,
/// `copy` and `block`, so the pool is one code path for every format.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>

#include "barato/core/dtype.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/kv_format.hpp"
#include "barato/kv/paged_block.hpp"
#include "barato/kv/quant_block.hpp"
#include "barato/simd/convert.hpp"

namespace barato::kv {

/// Page format of a `PagedPool` that stores keys as KF codes and values as VF codes (kv/kv_format.hpp:
/// `Int8`, `Int4`) with one fp32 absmax scale per token and KV head, quantised on append exactly as
/// `kv::Quantized<KF, VF>` does. `PagedPool<QuantizedPages<Int8>>` is the paged int8 KV cache.
template <KvFormat KF, KvFormat VF = KF>
struct QuantizedPages {
  using key_format = KF;
  using value_format = VF;
};

namespace detail {
template <class T>
inline constexpr bool kIsQuantizedPages = false;
template <KvFormat KF, KvFormat VF>
inline constexpr bool kIsQuantizedPages<QuantizedPages<KF, VF>> = true;
}  // namespace detail

/// What a `PagedPool` can store: an element type (fp32 / fp16 / bf16 rows) or `QuantizedPages<KF, VF>`.
template <class T>
concept PageFormat = Element<T> || detail::kIsQuantizedPages<T>;

/// Geometry of a page store: rows [n_layers, n_kv_heads, n_blocks, block_tokens].
struct PageLayout {
  std::size_t n_layers = 1;      ///< layers per block
  std::size_t n_kv_heads = 0;    ///< KV heads per layer
  std::size_t n_blocks = 0;      ///< blocks in the store
  std::size_t block_tokens = 0;  ///< B: positions (rows) per block, layer and head

  /// Store row of (block b, layer, head h, position 0 of the block).
  [[nodiscard]] constexpr std::size_t row(std::size_t b, std::size_t layer, std::size_t h) const noexcept {
    return ((layer * n_kv_heads + h) * n_blocks + b) * block_tokens;
  }
  /// Rows in the store.
  [[nodiscard]] constexpr std::size_t rows() const noexcept { return n_blocks * block_rows(); }
  /// Rows of one block: every layer and head.
  [[nodiscard]] constexpr std::size_t block_rows() const noexcept { return n_layers * n_kv_heads * block_tokens; }
};

/// The K/V rows of a pool's pages in format T (a `PageFormat`); specialised per format.
template <class T>
class PageStore;

/// Pages of element rows: K and V each [rows, head_dim] of T, converted from fp32 on write.
template <Element T>
class PageStore<T> {
 public:
  using block_type = PagedBlock<T>;
  PageStore(const PageLayout& layout, std::size_t head_dim, std::pmr::memory_resource* mr)
      : layout_(layout), d_(head_dim), k_(layout.rows() * head_dim, mr), v_(layout.rows() * head_dim, mr) {}

  /// Bytes of one row of K plus V.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return 2 * d * sizeof(T); }
  [[nodiscard]] const PageLayout& layout() const noexcept { return layout_; }
  /// Bytes held from the memory resource.
  [[nodiscard]] std::size_t bytes() const noexcept { return k_.bytes() + v_.bytes(); }
  /// Stores key and value row `row` (head_dim floats each).
  void write(std::size_t row, const float* kr, const float* vr) noexcept {
    simd::from_float<T>(kr, k_.data() + row * d_, d_);
    simd::from_float<T>(vr, v_.data() + row * d_, d_);
  }
  /// Copies rows [src, src + n) to [dst, dst + n).
  void copy(std::size_t dst, std::size_t src, std::size_t n) noexcept {
    std::memcpy(k_.data() + dst * d_, k_.data() + src * d_, n * d_ * sizeof(T));
    std::memcpy(v_.data() + dst * d_, v_.data() + src * d_, n * d_ * sizeof(T));
  }
  /// The first n rows of (layer, head h) through page table `table` (logical page → block).
  [[nodiscard]] block_type block(std::size_t layer, std::size_t h, const std::uint32_t* table, std::size_t n) const noexcept {
    const std::size_t off = layout_.row(0, layer, h) * d_;
    return {.k = k_.data() + off, .v = v_.data() + off, .table = table, .page_rows = layout_.block_tokens,
            .page_stride = layout_.block_tokens * d_, .n = n, .stride = d_, .pos0 = 0};
  }
  /// Key / value row `row`.
  [[nodiscard]] std::span<const T> key(std::size_t row) const noexcept { return {k_.data() + row * d_, d_}; }
  [[nodiscard]] std::span<const T> value(std::size_t row) const noexcept { return {v_.data() + row * d_, d_}; }

 private:
  PageLayout layout_;
  std::size_t d_;   // head_dim
  Buffer<T> k_, v_;  // [rows, d]
};

/// Pages of quantized rows: key / value codes [rows, row_bytes] and one fp32 scale per row each.
template <KvFormat KF, KvFormat VF>
class PageStore<QuantizedPages<KF, VF>> {
 public:
  using block_type = PagedQuantBlock<KF, VF>;
  PageStore(const PageLayout& layout, std::size_t head_dim, std::pmr::memory_resource* mr)
      : layout_(layout), d_(head_dim), k_row_(KF::row_bytes(head_dim)), v_row_(VF::row_bytes(head_dim)),
        kc_(layout.rows() * k_row_, mr), vc_(layout.rows() * v_row_, mr), ks_(layout.rows(), mr), vs_(layout.rows(), mr) {}

  /// Bytes of one row of K plus V, scales included.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept {
    return KF::row_bytes(d) + VF::row_bytes(d) + 2 * sizeof(float);
  }
  [[nodiscard]] const PageLayout& layout() const noexcept { return layout_; }
  /// Bytes held from the memory resource.
  [[nodiscard]] std::size_t bytes() const noexcept { return kc_.bytes() + vc_.bytes() + ks_.bytes() + vs_.bytes(); }
  /// Quantises and stores key and value row `row` (head_dim floats each).
  void write(std::size_t row, const float* kr, const float* vr) noexcept {
    ks_.data()[row] = quantize_row<KF>(kr, d_, kc_.data() + row * k_row_);
    vs_.data()[row] = quantize_row<VF>(vr, d_, vc_.data() + row * v_row_);
  }
  /// Copies rows [src, src + n) to [dst, dst + n): codes and scales.
  void copy(std::size_t dst, std::size_t src, std::size_t n) noexcept {
    std::memcpy(kc_.data() + dst * k_row_, kc_.data() + src * k_row_, n * k_row_);
    std::memcpy(vc_.data() + dst * v_row_, vc_.data() + src * v_row_, n * v_row_);
    std::memcpy(ks_.data() + dst, ks_.data() + src, n * sizeof(float));
    std::memcpy(vs_.data() + dst, vs_.data() + src, n * sizeof(float));
  }
  /// The first n rows of (layer, head h) through page table `table` (logical page → block).
  [[nodiscard]] block_type block(std::size_t layer, std::size_t h, const std::uint32_t* table, std::size_t n) const noexcept {
    const std::size_t r0 = layout_.row(0, layer, h), B = layout_.block_tokens;
    return {.k = kc_.data() + r0 * k_row_, .k_scale = ks_.data() + r0, .v = vc_.data() + r0 * v_row_,
            .v_scale = vs_.data() + r0, .table = table, .page_rows = B, .page_stride = B, .n = n,
            .k_stride = k_row_, .v_stride = v_row_, .pos0 = 0, .page_shift = block_type::shift_for(B)};
  }

 private:
  PageLayout layout_;
  std::size_t d_, k_row_, v_row_;  // head_dim; bytes of one row of key / value codes
  Buffer<std::uint8_t> kc_, vc_;   // [rows, k_row], [rows, v_row]
  Buffer<float> ks_, vs_;          // [rows] scales
};

/// Copies every row of block `src` (all layers and heads) to block `dst` of the same store.
template <PageFormat T>
void copy_block(PageStore<T>& store, std::uint32_t dst, std::uint32_t src) noexcept {
  const PageLayout& l = store.layout();
  for (std::size_t layer = 0; layer < l.n_layers; ++layer)
    for (std::size_t h = 0; h < l.n_kv_heads; ++h) store.copy(l.row(dst, layer, h), l.row(src, layer, h), l.block_tokens);
}

}  // namespace barato::kv
