#pragma once
/// \file
/// Quantized KV cache: keys and values stored as int8 or int4 codes with one absmax scale per
/// token per KV head (formats and quantiser: kv/kv_format.hpp), dequantised inside the attention
/// kernel (no dequantised copy of the cache). K and V may use different formats: keys are the
/// more sensitive ones (a key error moves every softmax weight), so `Quantized<Int8, Int4>` ("k8v4")
/// keeps 8-bit keys and halves the value bytes.
///
/// Bytes per token of one layer: n_kv_heads · (row_bytes_K(d) + 4 + row_bytes_V(d) + 4); the scales
/// are fp32. `bytes_reserved()` equals what a `CountingResource` measures (asserted in the tests).
///
/// Attention: `QuantBlock<KF, VF>` (kv/quant_block.hpp) is this cache's block view; the kernel that
/// reads it is attention/kernels/quantized.hpp.

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/kv_format.hpp"
#include "barato/kv/quant_block.hpp"

namespace barato::kv {

/// A pre-allocated quantized KV cache of one layer: key codes in format `KF`, value codes in `VF`.
/// Layout per head: codes [capacity, row_bytes], scales [capacity].
template <KvFormat KF, KvFormat VF = KF>
class Quantized {
 public:
  using block_type = QuantBlock<KF, VF>;
  using key_format = KF;
  using value_format = VF;

  /// Reserves `capacity` positions of `n_kv_heads` × `head_dim` from `mr`; throws `shape_error` for a
  /// zero dimension, `capacity_error` (requested vs available bytes) for a cache that cannot exist.
  Quantized(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity,
            std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : n_kv_heads_(checked(n_kv_heads, "n_kv_heads")), head_dim_(checked(head_dim, "head_dim")),
        capacity_(checked(capacity, "capacity")), kb_(KF::row_bytes(head_dim)), vb_(VF::row_bytes(head_dim)),
        k_(slots(n_kv_heads, head_dim, capacity) * kb_, mr), v_(n_kv_heads * capacity * vb_, mr),
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
  /// n_kv_heads · capacity rows, checked: codes and scales together must be able to exist.
  static std::size_t slots(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity) {
    const std::size_t n = checked_mul(n_kv_heads, capacity, "kv::Quantized", "n_kv_heads x capacity");
    require_memory(checked_mul(n, KF::row_bytes(head_dim) + VF::row_bytes(head_dim) + 2 * sizeof(float), "kv::Quantized",
                               "rows x row bytes"),
                   "kv::Quantized of capacity ", capacity, " tokens");
    return n;
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
