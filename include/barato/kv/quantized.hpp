#pragma once
/// \file
/// Quantized KV cache: keys and values stored as int8 or int4 codes with one absmax scale per
/// token per KV head, dequantised inside the attention kernel (no dequantised copy of the cache).
///
/// Row quantisation (symmetric absmax, one row = one token of one KV head, `head_dim` elements):
///   s = max_c |x_c| / kMaxCode,   code_c = clamp(round(x_c / s), −kMaxCode, kMaxCode),   x̂_c = s · code_c
/// (s = 0 and all codes 0 for an all-zero row). `Int8`: kMaxCode = 127, one byte per code.
/// `Int4`: kMaxCode = 7, two codes per byte — element 2i in the low nibble of byte i, element 2i+1 in
/// the high nibble, each stored as code + 8 (1…15). K and V may use different formats: keys are the
/// more sensitive ones (a key error moves every softmax weight), so `Quantized<Int8, Int4>` ("k8v4")
/// keeps 8-bit keys and halves the value bytes.
///
/// Bytes per token of one layer: n_kv_heads · (row_bytes_K(d) + 4 + row_bytes_V(d) + 4); the scales
/// are fp32. `bytes_reserved()` equals what a `CountingResource` measures (asserted in the tests).
///
/// Attention: `QuantBlock<KF, VF>` is this cache's block type; its `accumulate` overload (found by
/// argument-dependent lookup from attention::attend) runs the one online-softmax tile routine,
/// `attention::accumulate_rows`, over a row source that loads codes as floats and applies the row
/// scales to the scores (keys) and softmax weights (values).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <string_view>

#include "barato/attention/online_softmax.hpp"
#include "barato/attention/partial.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace barato::kv {

// ------------------------------------------------------------------------------------------------
// Storage formats
// ------------------------------------------------------------------------------------------------

/// 8-bit symmetric codes, one byte each.
struct Int8 {
  static constexpr unsigned kBits = 8;
  static constexpr int kMaxCode = 127;
  static constexpr std::string_view kName = "int8";
  /// Bytes of one row of `d` codes.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return d; }
  /// Code of element c of a packed row.
  [[nodiscard]] static int code(const std::uint8_t* row, std::size_t c) noexcept {
    return static_cast<int>(static_cast<std::int8_t>(row[c]));
  }
  /// Stores code q (|q| ≤ kMaxCode) as element c.
  static void put(std::uint8_t* row, std::size_t c, int q) noexcept {
    row[c] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
  }
};

/// 4-bit symmetric codes, two per byte (element 2i low nibble, 2i+1 high nibble, stored as code + 8).
struct Int4 {
  static constexpr unsigned kBits = 4;
  static constexpr int kMaxCode = 7;
  static constexpr std::string_view kName = "int4";
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return (d + 1) / 2; }
  [[nodiscard]] static int code(const std::uint8_t* row, std::size_t c) noexcept {
    const unsigned byte = row[c / 2];
    return static_cast<int>((c % 2 == 0 ? byte : byte >> 4) & 0x0Fu) - 8;
  }
  static void put(std::uint8_t* row, std::size_t c, int q) noexcept {
    const auto nib = static_cast<std::uint8_t>(q + 8);
    std::uint8_t& b = row[c / 2];
    b = c % 2 == 0 ? static_cast<std::uint8_t>((b & 0xF0u) | nib) : static_cast<std::uint8_t>((b & 0x0Fu) | (nib << 4));
  }
};

static_assert(Int8::row_bytes(64) == 64 && Int4::row_bytes(64) == 32 && Int4::row_bytes(5) == 3);

/// A KV code format: bits, largest code, packed row size, scalar code access.
template <class F>
concept KvFormat = requires(const std::uint8_t* cr, std::uint8_t* r, std::size_t c, int q) {
  { F::kBits } -> std::convertible_to<unsigned>;
  { F::kMaxCode } -> std::convertible_to<int>;
  { F::row_bytes(c) } -> std::convertible_to<std::size_t>;
  { F::code(cr, c) } -> std::convertible_to<int>;
  F::put(r, c, q);
};

/// Quantises one row x[0..d) into `out` (F::row_bytes(d) bytes) and returns its scale. Scalar:
/// appends are O(d) per row, attention is where the time goes.
template <KvFormat F>
[[nodiscard]] inline float quantize_row(const float* x, std::size_t d, std::uint8_t* out) noexcept {
  float amax = 0.0f;
  for (std::size_t c = 0; c < d; ++c) amax = std::max(amax, std::abs(x[c]));
  std::fill(out, out + F::row_bytes(d), std::uint8_t{0});
  if (amax == 0.0f || !std::isfinite(amax)) {
    for (std::size_t c = 0; c < d; ++c) F::put(out, c, 0);
    return 0.0f;
  }
  const float s = amax / static_cast<float>(F::kMaxCode);
  for (std::size_t c = 0; c < d; ++c) {
    const long q = std::lround(x[c] / s);
    F::put(out, c, static_cast<int>(std::clamp<long>(q, -F::kMaxCode, F::kMaxCode)));
  }
  return s;
}

/// Loads W = float lanes codes of a packed row starting at column c (c a multiple of W) as floats.
/// One isolated intrinsics kernel per format on AVX-512 (sign-extend int8; split nibbles, interleave,
/// zero-extend int4), and the portable scalar loop elsewhere.
template <class Arch, KvFormat F>
[[nodiscard]] inline simd::Batch<float, Arch> load_codes(const std::uint8_t* row, std::size_t c) noexcept {
  constexpr std::size_t W = simd::Batch<float, Arch>::size;
#if defined(__AVX512F__)
  if constexpr (simd::kHasAvx512<Arch> && W == 16 && std::same_as<F, Int8>) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  } else if constexpr (simd::kHasAvx512<Arch> && W == 16 && std::same_as<F, Int4>) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    const __m512i w = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(w), _mm512_set1_ps(8.0f));
  } else
#endif
  {
    alignas(64) float tmp[W];
    for (std::size_t i = 0; i < W; ++i) tmp[i] = static_cast<float>(F::code(row, c + i));
    return simd::Batch<float, Arch>::load_aligned(tmp);
  }
}

// ------------------------------------------------------------------------------------------------
// Block type and its attention kernel
// ------------------------------------------------------------------------------------------------

/// The view a quantized cache hands to attention for one KV head: `n` rows from logical position `pos0`.
template <KvFormat KF, KvFormat VF>
struct QuantBlock {
  using key_format = KF;
  using value_format = VF;
  const std::uint8_t* k = nullptr;   ///< [n, k_stride] key codes
  const float* k_scale = nullptr;    ///< [n] key row scales
  const std::uint8_t* v = nullptr;   ///< [n, v_stride] value codes
  const float* v_scale = nullptr;    ///< [n] value row scales
  std::size_t n = 0;                 ///< rows in the block
  std::size_t k_stride = 0;          ///< bytes between key rows (≥ KF::row_bytes(d))
  std::size_t v_stride = 0;          ///< bytes between value rows
  std::size_t pos0 = 0;              ///< logical position of row 0

  /// Codes and scale of row r (the row interface the quantized kernel reads; a paged block has the
  /// same interface over its page table, kv/paged_block.hpp).
  [[nodiscard]] const std::uint8_t* k_row(std::size_t r) const noexcept { return k + r * k_stride; }
  [[nodiscard]] const std::uint8_t* v_row(std::size_t r) const noexcept { return v + r * v_stride; }
  [[nodiscard]] float k_scale_at(std::size_t r) const noexcept { return k_scale[r]; }
  [[nodiscard]] float v_scale_at(std::size_t r) const noexcept { return v_scale[r]; }
};

/// Row source of a quantized block (`QuantBlock`, `PagedQuantBlock`) for `attention::accumulate_rows`.
template <class Blk>
struct QuantRows {
  using KF = typename Blk::key_format;
  using VF = typename Blk::value_format;
  static constexpr bool kScaled = true;
  const Blk& blk;
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> k(std::size_t r, std::size_t c) const noexcept {
    return load_codes<Arch, KF>(blk.k_row(r), c);
  }
  template <class Arch>
  [[nodiscard]] simd::Batch<float, Arch> v(std::size_t r, std::size_t c) const noexcept {
    return load_codes<Arch, VF>(blk.v_row(r), c);
  }
  [[nodiscard]] float k_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(KF::code(blk.k_row(r), c)); }
  [[nodiscard]] float v_at(std::size_t r, std::size_t c) const noexcept { return static_cast<float>(VF::code(blk.v_row(r), c)); }
  [[nodiscard]] float k_scale(std::size_t r) const noexcept { return blk.k_scale_at(r); }
  [[nodiscard]] float v_scale(std::size_t r) const noexcept { return blk.v_scale_at(r); }
};

/// Largest head_dim whose rows are staged for GQA, and rows per stage (2 · 32 · 128 floats = 32 KiB
/// of stack scratch, L1-resident).
inline constexpr std::size_t kMaxStagedHeadDim = 128;
inline constexpr std::size_t kStageRows = 32;

/// Attention kernel of a quantized block (found by ADL from attention::attend): folds rows [r0, r1)
/// into the partial states of the `g` query heads at q. Same contract as the dense `accumulate`.
///  - One query head (g = 1, MHA): the tile routine `attention::accumulate_rows` reads the codes
///    directly through `QuantRows` and applies the row scales to scores and weights.
///  - A GQA group (g > 1): every K/V row would otherwise be unpacked G times, so stages of
///    kStageRows rows are dequantised once (code · scale) into an L1 scratch and folded by the dense
///    kernel, `attention::accumulate` (which has the fixed-dimension fast path for d = 64 / 128).
/// Either way the online-softmax logic is attention's, not a copy of it.
namespace detail {
/// The kernel of the quantized block types (see `accumulate` below), over any block with the row
/// interface of `QuantBlock` (k_row, v_row, k_scale_at, v_scale_at, pos0).
template <class Arch, class Blk>
void accumulate_quantized(const float* q, std::size_t g, std::size_t d, float scale, const Blk& blk, std::size_t r0,
                          std::size_t r1, float* o, attention::PartialStats* st) noexcept {
  using KF = typename Blk::key_format;
  using VF = typename Blk::value_format;
  using Bt = simd::Batch<float, Arch>;
  constexpr std::size_t W = Bt::size;
  const std::size_t dp = (d + W - 1) / W * W;  // padded row of the scratch (aligned loads)
  if (g == 1 || dp > kMaxStagedHeadDim) {
    attention::accumulate_rows<Arch>(q, g, d, scale, QuantRows<Blk>{blk}, r0, r1, o, st);
    return;
  }
  alignas(64) float kf[kStageRows * kMaxStagedHeadDim];  // [kStageRows, dp] dequantised keys
  alignas(64) float vf[kStageRows * kMaxStagedHeadDim];  // [kStageRows, dp] dequantised values
  const std::size_t dv = d / W * W;
  for (std::size_t r = r0; r < r1; r += kStageRows) {
    const std::size_t nr = std::min(kStageRows, r1 - r);
    for (std::size_t j = 0; j < nr; ++j) {
      const std::uint8_t* kr = blk.k_row(r + j);
      const std::uint8_t* vr = blk.v_row(r + j);
      const float ks = blk.k_scale_at(r + j), vs = blk.v_scale_at(r + j);
      for (std::size_t c = 0; c < dv; c += W) {
        (load_codes<Arch, KF>(kr, c) * Bt(ks)).store_aligned(kf + j * dp + c);
        (load_codes<Arch, VF>(vr, c) * Bt(vs)).store_aligned(vf + j * dp + c);
      }
      for (std::size_t c = dv; c < d; ++c) {
        kf[j * dp + c] = ks * static_cast<float>(KF::code(kr, c));
        vf[j * dp + c] = vs * static_cast<float>(VF::code(vr, c));
      }
    }
    const DenseBlock<float> stage{kf, vf, nr, dp, blk.pos0 + r};
    attention::accumulate<Arch>(q, g, d, scale, stage, 0, nr, o, st);
  }
}
}  // namespace detail

template <class Arch = simd::DefaultArch, KvFormat KF, KvFormat VF>
void accumulate(const float* q, std::size_t g, std::size_t d, float scale, const QuantBlock<KF, VF>& blk, std::size_t r0,
                std::size_t r1, float* o, attention::PartialStats* st) noexcept {
  detail::accumulate_quantized<Arch>(q, g, d, scale, blk, r0, r1, o, st);
}

// ------------------------------------------------------------------------------------------------
// The cache
// ------------------------------------------------------------------------------------------------

/// A pre-allocated quantized KV cache of one layer: key codes in format `KF`, value codes in `VF`.
/// Layout per head: codes [capacity, row_bytes], scales [capacity].
template <KvFormat KF, KvFormat VF = KF>
class Quantized {
 public:
  using block_type = QuantBlock<KF, VF>;
  using key_format = KF;
  using value_format = VF;

  /// Reserves `capacity` positions of `n_kv_heads` × `head_dim` from `mr`; throws `shape_error` for a zero dimension.
  Quantized(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity,
            std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : n_kv_heads_(checked(n_kv_heads, "n_kv_heads")), head_dim_(checked(head_dim, "head_dim")),
        capacity_(checked(capacity, "capacity")), kb_(KF::row_bytes(head_dim)), vb_(VF::row_bytes(head_dim)),
        k_(n_kv_heads * capacity * kb_, mr), v_(n_kv_heads * capacity * vb_, mr),
        ks_(n_kv_heads * capacity, mr), vs_(n_kv_heads * capacity, mr) {}

  Quantized(Quantized&&) noexcept = default;
  Quantized& operator=(Quantized&&) noexcept = default;

  /// Bytes one token occupies in one layer: codes of K and V plus their two fp32 scales, per KV head.
  [[nodiscard]] static constexpr std::size_t bytes_per_token(std::size_t n_kv_heads, std::size_t head_dim) noexcept {
    return n_kv_heads * (KF::row_bytes(head_dim) + VF::row_bytes(head_dim) + 2 * sizeof(float));
  }

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return n_kv_heads_; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return head_dim_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return k_.bytes() + v_.bytes() + ks_.bytes() + vs_.bytes(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return size_ * bytes_per_token(n_kv_heads_, head_dim_); }

  /// Quantises and appends n_new tokens given as rows [n_new, n_kv_heads, head_dim]. Throws
  /// `shape_error` / `capacity_error`; the cache is unchanged in both cases.
  void append(std::span<const float> k, std::span<const float> v) {
    const std::size_t row = n_kv_heads_ * head_dim_;
    const std::size_t n_new = detail::append_tokens("kv::Quantized::append", k.size(), v.size(), row);
    detail::require_room("kv::Quantized::append", n_new, size_, capacity_);
    for (std::size_t t = 0; t < n_new; ++t) {
      for (std::size_t h = 0; h < n_kv_heads_; ++h) {
        const std::size_t slot = h * capacity_ + size_ + t;
        const std::size_t src = t * row + h * head_dim_;
        ks_[slot] = quantize_row<KF>(k.data() + src, head_dim_, k_.data() + slot * kb_);
        vs_[slot] = quantize_row<VF>(v.data() + src, head_dim_, v_.data() + slot * vb_);
      }
    }
    size_ += n_new;
  }

  /// Drops positions ≥ n; throws `shape_error` when n > size().
  void truncate(std::size_t n) {
    require(n <= size_, "kv::Quantized::truncate: n = ", n, " exceeds size ", size_);
    size_ = n;
  }
  void clear() noexcept { size_ = 0; }

  /// Calls f(QuantBlock) once with all stored positions of KV head h (nothing when empty).
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    BARATO_ASSERT(h < n_kv_heads_);
    if (size_ == 0) return;
    const std::size_t base = h * capacity_;
    f(block_type{k_.data() + base * kb_, ks_.data() + base, v_.data() + base * vb_, vs_.data() + base, size_, kb_, vb_, 0});
  }

  /// Dequantised key / value element (h, pos, c): scale · code (for tests and diagnostics).
  [[nodiscard]] float key(std::size_t h, std::size_t pos, std::size_t c) const {
    check_index(h, pos, c);
    const std::size_t slot = h * capacity_ + pos;
    return ks_[slot] * static_cast<float>(KF::code(k_.data() + slot * kb_, c));
  }
  [[nodiscard]] float value(std::size_t h, std::size_t pos, std::size_t c) const {
    check_index(h, pos, c);
    const std::size_t slot = h * capacity_ + pos;
    return vs_[slot] * static_cast<float>(VF::code(v_.data() + slot * vb_, c));
  }

 private:
  static std::size_t checked(std::size_t x, const char* name) {
    require(x > 0, "kv::Quantized: ", name, " must be > 0, got 0");
    return x;
  }
  void check_index(std::size_t h, std::size_t pos, std::size_t c) const {
    require(h < n_kv_heads_ && pos < size_ && c < head_dim_, "kv::Quantized: (head ", h, ", pos ", pos, ", dim ", c,
            ") out of range (", n_kv_heads_, " heads, ", size_, " positions, head_dim ", head_dim_, ")");
  }

  std::size_t n_kv_heads_, head_dim_, capacity_;
  std::size_t kb_, vb_;  // bytes per key / value row
  std::size_t size_ = 0;
  Buffer<std::uint8_t> k_;  // [n_kv_heads, capacity, kb] key codes
  Buffer<std::uint8_t> v_;  // [n_kv_heads, capacity, vb] value codes
  Buffer<float> ks_;        // [n_kv_heads, capacity] key scales
  Buffer<float> vs_;        // [n_kv_heads, capacity] value scales
};

static_assert(CachePolicy<Quantized<Int8>>);
static_assert(CachePolicy<Quantized<Int4>>);
static_assert(CachePolicy<Quantized<Int8, Int4>>);
static_assert(Quantized<Int8>::bytes_per_token(4, 64) == 4 * (64 + 64 + 8));
static_assert(Quantized<Int8, Int4>::bytes_per_token(4, 64) == 4 * (64 + 32 + 8));

}  // namespace barato::kv
