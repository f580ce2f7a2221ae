#pragma once
/// \file
/// Measured memory: a counting `std::pmr::memory_resource` (current and peak bytes) and `Buffer<T>`,
/// the 64-byte aligned array every large barato owner (caches, packed matrices, scratch) allocates
/// through. Claims such as "bytes/token = 2·L·H_kv·d·s" are asserted against `CountingResource`.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/error.hpp"

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace barato {

/// Alignment of every `Buffer`: one cache line, enough for AVX-512 loads.
inline constexpr std::size_t kBufferAlignment = 64;

/// Bytes of physical memory of this machine (POSIX sysconf), or 0 when the platform does not say.
[[nodiscard]] inline std::size_t physical_memory_bytes() noexcept {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 && static_cast<unsigned long>(pages) <= SIZE_MAX / static_cast<unsigned long>(page))
    return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return 0;
}

/// a · b, or `capacity_error` naming `where` and `what` when the product overflows std::size_t
/// (sizes computed from a configuration: an absurd one must not wrap around to a small allocation).
[[nodiscard]] inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* where, const char* what) {
  require<capacity_error>(b == 0 || a <= SIZE_MAX / b, where, ": ", what, " = ", a, " x ", b,
                          " overflows the address space (", SIZE_MAX, " bytes)");
  return a * b;
}

/// Throws `capacity_error` naming `where` (streamable pieces, formatted only on failure) unless
/// `bytes` can exist: at most PTRDIFF_MAX (what one object may span) and, when the platform reports
/// it, the machine's physical memory (a `Buffer` is zero-filled, so every byte is touched). O(1).
template <class... Where>
void require_memory(std::size_t bytes, const Where&... where) {
  require<capacity_error>(bytes <= static_cast<std::size_t>(PTRDIFF_MAX), where..., ": ", bytes,
                          " bytes requested, more than one object can span (", PTRDIFF_MAX, " bytes)");
  static const std::size_t phys = physical_memory_bytes();  // asked once per process
  require<capacity_error>(phys == 0 || bytes <= phys, where..., ": ", bytes, " bytes requested, the machine has ", phys,
                          " bytes of physical memory");
}

/// A memory resource that forwards to `upstream` and counts bytes: current, peak, total and the
/// number of live allocations. Thread-safe. Give the same instance to every owner you want to measure.
class CountingResource final : public std::pmr::memory_resource {
 public:
  explicit CountingResource(std::pmr::memory_resource* upstream = std::pmr::new_delete_resource()) noexcept
      : upstream_(upstream) {}
  CountingResource(const CountingResource&) = delete;
  CountingResource& operator=(const CountingResource&) = delete;

  /// Bytes currently allocated through this resource.
  [[nodiscard]] std::size_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  /// Highest `current()` since construction or the last `reset_peak()`.
  [[nodiscard]] std::size_t peak() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Sum of all bytes ever allocated.
  [[nodiscard]] std::size_t total() const noexcept { return total_.load(std::memory_order_relaxed); }
  /// Number of allocations not yet freed.
  [[nodiscard]] std::size_t live_allocations() const noexcept { return live_.load(std::memory_order_relaxed); }
  /// Number of allocations ever made.
  [[nodiscard]] std::size_t allocations() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// Sets the peak to the current value (start of a measured region).
  void reset_peak() noexcept { peak_.store(current(), std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    void* p = upstream_->allocate(bytes, align);
    const std::size_t now = current_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t prev = peak_.load(std::memory_order_relaxed);
    while (now > prev && !peak_.compare_exchange_weak(prev, now, std::memory_order_relaxed)) {
    }
    total_.fetch_add(bytes, std::memory_order_relaxed);
    live_.fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    upstream_->deallocate(p, bytes, align);
    current_.fetch_sub(bytes, std::memory_order_relaxed);
    live_.fetch_sub(1, std::memory_order_relaxed);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  std::pmr::memory_resource* upstream_;
  std::atomic<std::size_t> current_{0}, peak_{0}, total_{0}, live_{0}, count_{0};
};

/// An owning, 64-byte aligned array of trivially copyable `T`, allocated from a memory resource and
/// zero-initialised. Move-only: copies are explicit (`copy()`), as they are expensive.
template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "Buffer holds trivially copyable elements");

 public:
  Buffer() noexcept = default;
  /// `n` zeroed elements from `mr`. Throws `capacity_error` (requested vs available bytes) when
  /// n · sizeof(T) overflows or exceeds what can exist (`require_memory`); whatever `mr` throws
  /// otherwise (std::bad_alloc) propagates.
  explicit Buffer(std::size_t n, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : mr_(mr), size_(n) {
    if (n != 0) {
      const std::size_t bytes = checked_mul(n, sizeof(T), "barato::Buffer", "elements x element bytes");
      require_memory(bytes, "barato::Buffer of ", n, " elements");
      if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) __builtin_unreachable();  // checked just above (tells GCC's -Wstringop-overflow)
      data_ = static_cast<T*>(mr_->allocate(bytes, kBufferAlignment));
      std::memset(static_cast<void*>(data_), 0, bytes);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : mr_(o.mr_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      mr_ = o.mr_;
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~Buffer() { release(); }

  /// A deep copy from the same memory resource.
  [[nodiscard]] Buffer copy() const {
    Buffer out(size_, mr_);
    if (size_ != 0) std::memcpy(static_cast<void*>(out.data_), data_, size_ * sizeof(T));
    return out;
  }

  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// Bytes owned (size · sizeof(T)).
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  [[nodiscard]] std::span<T> span() noexcept { return {data_, size_}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, size_}; }
  /// Row `i` of the buffer read as a row-major matrix of rows of `width` elements: elements
  /// [i·width, (i+1)·width). Requires (i + 1)·width ≤ size() (debug assert).
  [[nodiscard]] std::span<T> row(std::size_t i, std::size_t width) noexcept {
    BARATO_ASSERT((i + 1) * width <= size_);
    return {data_ + i * width, width};
  }
  [[nodiscard]] std::span<const T> row(std::size_t i, std::size_t width) const noexcept {
    BARATO_ASSERT((i + 1) * width <= size_);
    return {data_ + i * width, width};
  }
  /// The first `count` rows of `width` elements ([count, width], row-major): elements
  /// [0, count·width). Requires count·width ≤ size() (debug assert).
  [[nodiscard]] std::span<T> rows(std::size_t count, std::size_t width) noexcept {
    BARATO_ASSERT(count * width <= size_);
    return {data_, count * width};
  }
  [[nodiscard]] std::span<const T> rows(std::size_t count, std::size_t width) const noexcept {
    BARATO_ASSERT(count * width <= size_);
    return {data_, count * width};
  }
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data_[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  [[nodiscard]] T* begin() noexcept { return data_; }
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  [[nodiscard]] const T* begin() const noexcept { return data_; }
  [[nodiscard]] const T* end() const noexcept { return data_ + size_; }
  [[nodiscard]] std::pmr::memory_resource* resource() const noexcept { return mr_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) mr_->deallocate(data_, size_ * sizeof(T), kBufferAlignment);
    data_ = nullptr;
    size_ = 0;
  }

  std::pmr::memory_resource* mr_ = std::pmr::get_default_resource();
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace barato
