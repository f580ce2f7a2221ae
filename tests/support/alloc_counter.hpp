#pragma once
// Counts calls of the global operator new while a `CountAllocations` scope is active, to assert
// that a step "allocates nothing" (memory resources only see what is given to them; this sees
// everything else: std::vector, std::function, Eigen temporaries, ...). A `FailAllocation(k)` scope
// makes the k-th global allocation inside it throw `std::bad_alloc` (fault injection: every pmr
// vector, map and `Buffer` on the default resource ends in the global operator new).
// Replaces the global operator new/delete: include it in exactly ONE translation unit of a test
// executable (the test file itself).

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace barato::test {

inline std::atomic<bool> g_count_allocations{false};
inline std::atomic<std::size_t> g_allocations{0};
inline std::atomic<std::size_t> g_fail_at{0};     // 0: no fault armed; k: the k-th allocation throws
inline std::atomic<std::size_t> g_fault_seen{0};  // allocations since the fault was armed
inline std::atomic<bool> g_fault_fired{false};

/// While alive, every global operator new is counted; `count()` reads the number so far.
class CountAllocations {
 public:
  CountAllocations() noexcept {
    g_allocations.store(0);
    g_count_allocations.store(true);
  }
  ~CountAllocations() { g_count_allocations.store(false); }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  [[nodiscard]] std::size_t count() const noexcept { return g_allocations.load(); }
};

/// While alive, the k-th global operator new (k ≥ 1, counted from construction) throws
/// `std::bad_alloc`; the others succeed. `fired()` says whether the k-th allocation happened.
class FailAllocation {
 public:
  explicit FailAllocation(std::size_t k) noexcept {
    g_fault_seen.store(0);
    g_fault_fired.store(false);
    g_fail_at.store(k);
  }
  ~FailAllocation() { g_fail_at.store(0); }
  FailAllocation(const FailAllocation&) = delete;
  FailAllocation& operator=(const FailAllocation&) = delete;
  [[nodiscard]] bool fired() const noexcept { return g_fault_fired.load(); }
};

/// True when an armed fault makes this allocation fail (called by the replaced operator new).
[[nodiscard]] inline bool inject_fault() noexcept {
  const std::size_t k = g_fail_at.load(std::memory_order_relaxed);
  if (k == 0 || g_fault_seen.fetch_add(1) + 1 != k) return false;
  g_fault_fired.store(true);
  return true;
}

/// Out of line so the compiler does not pair the malloc/free below with new/delete expressions
/// it inlined (GCC 12 -Wmismatched-new-delete false positive).
[[gnu::noinline]] inline void release(void* p) noexcept { std::free(p); }

}  // namespace barato::test

void* operator new(std::size_t n) {
  if (barato::test::g_count_allocations.load(std::memory_order_relaxed)) barato::test::g_allocations.fetch_add(1);
  if (barato::test::inject_fault()) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (barato::test::g_count_allocations.load(std::memory_order_relaxed)) barato::test::g_allocations.fetch_add(1);
  if (barato::test::inject_fault()) throw std::bad_alloc();
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void operator delete(void* p) noexcept { barato::test::release(p); }
void operator delete[](void* p) noexcept { barato::test::release(p); }
void operator delete(void* p, std::size_t) noexcept { barato::test::release(p); }
void operator delete[](void* p, std::size_t) noexcept { barato::test::release(p); }
void operator delete(void* p, std::align_val_t) noexcept { barato::test::release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { barato::test::release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { barato::test::release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { barato::test::release(p); }
