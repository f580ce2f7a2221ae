#pragma once
/// \file
/// `kv::Contiguous<T>`: the pre-allocated KV cache of one layer. Layout [n_kv_heads][capacity][head_dim]
/// for K and for V, so each head's keys are one dense block; appends convert fp32 rows to T.

#include <cstddef>
#include <cstring>
#include <memory_resource>
#include <span>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/simd/convert.hpp"

namespace barato::kv {

/// A pre-allocated KV cache of one layer: [n_kv_heads, capacity, head_dim] keys and values of element T, one block per head.
template <Element T = float>
class Contiguous {
 public:
  using element_type = T;
  using block_type = DenseBlock<T>;

  /// Reserves `capacity` positions of `n_kv_heads` × `head_dim` for K and V from `mr`.
  /// Throws `shape_error` when any dimension is zero, `capacity_error` (requested vs available
  /// bytes) when the cache cannot exist: a size that overflows, more than the physical memory.
  Contiguous(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity,
             std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : n_kv_heads_(checked(n_kv_heads, "n_kv_heads")), head_dim_(checked(head_dim, "head_dim")),
        capacity_(checked(capacity, "capacity")),
        k_(elements(n_kv_heads, head_dim, capacity), mr), v_(n_kv_heads * capacity * head_dim, mr) {}

  Contiguous(Contiguous&&) noexcept = default;
  Contiguous& operator=(Contiguous&&) noexcept = default;
  /// Explicit deep copy (same memory resource).
  [[nodiscard]] Contiguous copy() const { return Contiguous(*this, 0); }

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return n_kv_heads_; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return head_dim_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return k_.bytes() + v_.bytes(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return 2 * size_ * n_kv_heads_ * head_dim_ * sizeof(T); }

  /// Appends n_new tokens given as rows [n_new, n_kv_heads, head_dim]. Throws `shape_error` for
  /// mismatched spans and `capacity_error` past capacity; in both cases the cache is unchanged.
  void append(std::span<const float> k, std::span<const float> v) {
    const std::size_t row = n_kv_heads_ * head_dim_;
    const std::size_t n_new = detail::append_tokens("kv::Contiguous::append", k.size(), v.size(), row);
    detail::require_room("kv::Contiguous::append", n_new, size_, capacity_);
    for (std::size_t t = 0; t < n_new; ++t) {
      for (std::size_t h = 0; h < n_kv_heads_; ++h) {
        const std::size_t dst = (h * capacity_ + size_ + t) * head_dim_;
        const std::size_t src = t * row + h * head_dim_;
        simd::from_float<T>(k.data() + src, k_.data() + dst, head_dim_);
        simd::from_float<T>(v.data() + src, v_.data() + dst, head_dim_);
      }
    }
    size_ += n_new;
  }

  /// Drops positions ≥ n. Throws `shape_error` when n > size().
  void truncate(std::size_t n) {
    require(n <= size_, "kv::Contiguous::truncate: n = ", n, " exceeds size ", size_);
    size_ = n;
  }

  /// Empties the cache (keeps the allocation).
  void clear() noexcept { size_ = 0; }

  /// Calls f(DenseBlock<T>) once with all stored positions of KV head h (nothing when empty).
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    BARATO_ASSERT(h < n_kv_heads_);
    if (size_ == 0) return;
    const std::size_t off = h * capacity_ * head_dim_;
    f(DenseBlock<T>{k_.data() + off, v_.data() + off, size_, head_dim_, 0});
  }

  /// Key / value row of head h at position pos (pos < size()).
  [[nodiscard]] std::span<const T> key(std::size_t h, std::size_t pos) const {
    check_index(h, pos);
    return {k_.data() + (h * capacity_ + pos) * head_dim_, head_dim_};
  }
  [[nodiscard]] std::span<const T> value(std::size_t h, std::size_t pos) const {
    check_index(h, pos);
    return {v_.data() + (h * capacity_ + pos) * head_dim_, head_dim_};
  }

 private:
  Contiguous(const Contiguous& o, int)
      : n_kv_heads_(o.n_kv_heads_), head_dim_(o.head_dim_), capacity_(o.capacity_), size_(o.size_),
        k_(o.k_.copy()), v_(o.v_.copy()) {}
  static std::size_t checked(std::size_t x, const char* name) {
    require(x > 0, "kv::Contiguous: ", name, " must be > 0, got 0");
    return x;
  }
  /// n_kv_heads · capacity · head_dim, checked: the K and V buffers together must be able to exist.
  static std::size_t elements(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity) {
    const std::size_t e = checked_mul(checked_mul(n_kv_heads, capacity, "kv::Contiguous", "n_kv_heads x capacity"), head_dim,
                                      "kv::Contiguous", "(n_kv_heads capacity) x head_dim");
    const std::size_t bytes = checked_mul(checked_mul(e, sizeof(T), "kv::Contiguous", "elements x element bytes"), 2,
                                          "kv::Contiguous", "K and V bytes");
    require_memory(bytes, "kv::Contiguous of capacity ", capacity, " tokens");
    return e;
  }
  void check_index(std::size_t h, std::size_t pos) const {
    require(h < n_kv_heads_ && pos < size_, "kv::Contiguous: (head ", h, ", pos ", pos, ") out of range (", n_kv_heads_,
            " heads, ", size_, " positions)");
  }

  std::size_t n_kv_heads_, head_dim_, capacity_;
  std::size_t size_ = 0;
  Buffer<T> k_;  // [n_kv_heads, capacity, head_dim]
  Buffer<T> v_;  // [n_kv_heads, capacity, head_dim]
};

static_assert(CachePolicy<Contiguous<float>>);
static_assert(CachePolicy<Contiguous<f16>>);
static_assert(CachePolicy<Contiguous<bf16>>);

}  // namespace barato::kv
