#pragma once
/// \file
/// `barato::prefetch_l2(p, bytes)`: asks the memory system to bring [p, p + bytes) into the L2 cache
/// ahead of use (`prefetcht1` on x86), one request per 64-byte line. Used where data are read in a
/// pattern the hardware prefetchers do not follow or not far enough: a paged KV cache's scattered
/// pages (attention/kernels/paged.hpp, quantized.hpp) and the packed weight stream of a quantized
/// mat-vec (quant/gemv.hpp).
///
/// Compilers treat a prefetch as free of side effects, so a loop of nothing but prefetches is
/// "finite and without effect" and may be deleted (GCC 12 at -O2 does, for a run-time trip count);
/// an empty volatile asm statement in the loop keeps it. A prefetch never faults, but the address
/// must still be computed inside (or one past) the object, which is the caller's duty.

#include <cstddef>

namespace barato {

/// Bytes per cache line assumed by `prefetch_l2`.
inline constexpr std::size_t kCacheLineBytes = 64;

/// Prefetches the lines of [p, p + bytes) into L2 (read access). No effect on results.
[[gnu::always_inline]] inline void prefetch_l2(const void* p, std::size_t bytes) noexcept {
  const char* c = static_cast<const char*>(p);
  for (std::size_t b = 0; b < bytes; b += kCacheLineBytes) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(c + b, 0, 2);
    __asm__ __volatile__("");  // keeps the loop (see the file comment)
#else
    (void)c;
#endif
  }
}

}  // namespace barato
