#pragma once
/// \file
/// The scratch where the quantized products keep their prepared activations (quant/gemv.hpp,
/// quant/activation.hpp): one `ActivationArena` per calling thread, 64-byte aligned, that grows to
/// the largest request it has seen and is then reused — after the first call of a shape (or a
/// `reserve` of it) no product allocates again on that thread.
///
/// Why per thread and not per layer: a layer's `apply` is `const` and may be called from several
/// threads at once, and the prepared activations of n vectors (≈ 2 bytes per column and vector for
/// the VNNI kernels: 64 × 4864 columns ≈ 620 KiB) are too large for the stack but only live for one
/// call, so every layer of a model can share one arena per thread. Only the thread that calls the
/// product prepares (the rows are then split between threads, which only read the arena).
/// A model calls `reserve` (e.g. `quant::Linear::reserve(n)`) once at construction with its largest n,
/// on the thread that will run it; a call on another thread grows that thread's arena once.

#include <cstddef>
#include <memory>
#include <new>

namespace barato::quant {

/// Growable, 64-byte aligned bytes owned by one thread (see the file comment); `local()` is the
/// calling thread's arena.
class ActivationArena {
 public:
  static constexpr std::size_t kAlign = 64;

  /// The calling thread's arena.
  [[nodiscard]] static ActivationArena& local() noexcept {
    thread_local ActivationArena arena;
    return arena;
  }

  /// At least `bytes` bytes, 64-byte aligned, valid until the next `get` or `reserve` that grows the
  /// arena. Allocates only when `bytes` exceeds every earlier request. Throws `std::bad_alloc`.
  [[nodiscard]] std::byte* get(std::size_t bytes) {
    reserve(bytes);
    return data_.get();
  }
  /// Grows the arena to at least `bytes` (no effect when it is already that large).
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    data_.reset(static_cast<std::byte*>(::operator new(rounded, std::align_val_t{kAlign})));
    capacity_ = rounded;
  }
  /// Bytes currently held.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{kAlign}); }
  };
  std::unique_ptr<std::byte[], Free> data_;  // [capacity_]
  std::size_t capacity_ = 0;
};

/// `bytes` rounded up to the arena's alignment (the stride of consecutive pieces in it).
[[nodiscard]] constexpr std::size_t scratch_round(std::size_t bytes) noexcept {
  return (bytes + ActivationArena::kAlign - 1) / ActivationArena::kAlign * ActivationArena::kAlign;
}

}  // namespace barato::quant
