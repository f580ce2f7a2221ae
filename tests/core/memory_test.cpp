#include "barato/core/memory.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory_resource>
#include <string>
#include <utility>
#include <vector>

using namespace barato;

TEST_CASE("CountingResource counts current, peak, total and live allocations") {
  CountingResource mr;
  CHECK(mr.current() == 0);
  void* a = mr.allocate(100, 8);
  void* b = mr.allocate(1000, 64);
  CHECK(mr.current() == 1100);
  CHECK(mr.peak() == 1100);
  CHECK(mr.live_allocations() == 2);
  mr.deallocate(b, 1000, 64);
  CHECK(mr.current() == 100);
  CHECK(mr.peak() == 1100);  // the peak remembers
  CHECK(mr.total() == 1100);
  mr.reset_peak();
  CHECK(mr.peak() == 100);
  void* c = mr.allocate(50, 8);
  CHECK(mr.peak() == 150);
  CHECK(mr.allocations() == 3);
  mr.deallocate(a, 100, 8);
  mr.deallocate(c, 50, 8);
  CHECK(mr.current() == 0);
  CHECK(mr.live_allocations() == 0);
  CHECK(mr.total() == 1150);
  CHECK(mr.is_equal(mr));
  CountingResource other;
  CHECK_FALSE(mr.is_equal(other));
}

TEST_CASE("CountingResource forwards to its upstream and works under pmr containers") {
  CountingResource upstream;
  CountingResource mr(&upstream);
  {
    std::pmr::vector<int> v(&mr);
    v.resize(1000);
    CHECK(mr.current() >= 1000 * sizeof(int));
    CHECK(upstream.current() == mr.current());  // every byte went through the upstream
  }
  CHECK(mr.current() == 0);
  CHECK(upstream.current() == 0);
  CHECK(upstream.peak() == mr.peak());
}

TEST_CASE("Buffer: aligned, zeroed, sized, measured by its resource") {
  CountingResource mr;
  {
    Buffer<float> b(37, &mr);
    CHECK(b.size() == 37);
    CHECK(b.bytes() == 37 * sizeof(float));
    CHECK(mr.current() == b.bytes());
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % kBufferAlignment == 0);
    for (float x : b) CHECK(x == 0.0f);
    CHECK(b.resource() == &mr);
    b[3] = 2.5f;
    CHECK(b.span()[3] == 2.5f);
  }
  CHECK(mr.current() == 0);
  Buffer<double> empty(0, &mr);
  CHECK(empty.empty());
  CHECK(empty.data() == nullptr);
  CHECK(mr.allocations() == 1);  // a zero-size buffer does not allocate
}

TEST_CASE("Buffer: move transfers ownership, copy() is deep and from the same resource") {
  CountingResource mr;
  Buffer<int> a(10, &mr);
  for (int i = 0; i < 10; ++i) a[static_cast<std::size_t>(i)] = i;
  Buffer<int> c = a.copy();
  CHECK(mr.current() == 2 * 10 * sizeof(int));
  c[0] = 42;
  CHECK(a[0] == 0);
  const int* p = a.data();
  Buffer<int> m(std::move(a));
  CHECK(m.data() == p);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  Buffer<int> n;
  n = std::move(m);
  CHECK(n.data() == p);
  CHECK(n[9] == 9);
  CHECK(mr.current() == 2 * 10 * sizeof(int));
  n = Buffer<int>(3, &mr);  // the old block is released
  CHECK(mr.current() == (10 + 3) * sizeof(int));
}

TEST_CASE("Buffer: row(i, width) and rows(count, width) view a row-major matrix") {
  Buffer<int> b(12);  // [3, 4]
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int>(i);
  const std::span<int> r1 = b.row(1, 4);
  REQUIRE(r1.size() == 4);
  CHECK(r1.data() == b.data() + 4);
  CHECK(r1[0] == 4);
  CHECK(r1[3] == 7);
  r1[2] = -1;  // a view: writes land in the buffer
  CHECK(b[6] == -1);
  const Buffer<int>& cb = b;
  CHECK(cb.row(2, 4).front() == 8);
  CHECK(cb.row(5, 2).front() == 10);  // the same memory read as [6, 2]
  const std::span<const int> first = cb.rows(2, 4);
  CHECK(first.size() == 8);
  CHECK(first.data() == b.data());
  CHECK(b.rows(3, 4).size() == b.size());
  CHECK(b.rows(0, 4).empty());
}

TEST_CASE("Buffer: a size that overflows or cannot exist is a capacity_error naming it, before any allocation") {
  CountingResource mem;
  // 2^62 floats = 2^64 bytes: the byte count would wrap around to 0
  CHECK_THROWS_WITH_AS(Buffer<float>(std::size_t{1} << 62, &mem), doctest::Contains("4611686018427387904 x 4 overflows"),
                       capacity_error);
  // 2^61 floats = 2^63 bytes: representable, but more than one object may span
  CHECK_THROWS_WITH_AS(Buffer<float>(std::size_t{1} << 61, &mem), doctest::Contains("9223372036854775808 bytes requested"),
                       capacity_error);
  const std::size_t phys = physical_memory_bytes();
  if (phys != 0) {
    CHECK_THROWS_WITH_AS(Buffer<std::uint8_t>(phys + 1, &mem),
                         doctest::Contains((std::to_string(phys + 1) + " bytes requested, the machine has " + std::to_string(phys)).c_str()),
                         capacity_error);
  }
  CHECK(mem.allocations() == 0);
  CHECK(checked_mul(std::size_t{1} << 31, std::size_t{1} << 32, "t", "x") == std::size_t{1} << 63);
  CHECK_THROWS_WITH_AS((void)checked_mul(std::size_t{1} << 32, std::size_t{1} << 32, "here", "a x b"),
                       doctest::Contains("here: a x b = 4294967296 x 4294967296 overflows"), capacity_error);
  CHECK(checked_mul(SIZE_MAX, 0, "t", "x") == 0);
}
