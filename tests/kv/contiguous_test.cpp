#include "barato/kv/contiguous.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

// Storage round trip fp32 -> T -> fp32, relative to |x| (normal range): half an ulp of the format.
constexpr double kF16RoundTripRelTol = 1.0 / 2048;  // 2^-11 (10 stored mantissa bits)
constexpr double kBf16RoundTripRelTol = 1.0 / 256;  // 2^-8  (7 stored mantissa bits)

/// Everything observable about a cache: size, bytes, and every stored key/value as floats.
template <Element T>
struct Snapshot {
  std::size_t size, used, reserved;
  std::vector<float> k, v;  // [size, H, d]
  bool operator==(const Snapshot&) const = default;
};
template <Element T>
Snapshot<T> snapshot(const kv::Contiguous<T>& c) {
  Snapshot<T> s{c.size(), c.bytes_used(), c.bytes_reserved(), {}, {}};
  for (std::size_t p = 0; p < c.size(); ++p)
    for (std::size_t h = 0; h < c.n_kv_heads(); ++h)
      for (std::size_t i = 0; i < c.head_dim(); ++i) {
        s.k.push_back(static_cast<float>(c.key(h, p)[i]));
        s.v.push_back(static_cast<float>(c.value(h, p)[i]));
      }
  return s;
}

}  // namespace

TEST_CASE("append, view, size, truncate and clear on a contiguous cache") {
  const std::size_t H = 3, d = 5, cap = 10;
  CountingResource mr;
  kv::Contiguous<float> c(H, d, cap, &mr);
  CHECK(c.size() == 0);
  CHECK(c.capacity() == cap);
  CHECK(c.bytes_reserved() == 2 * H * d * cap * sizeof(float));
  CHECK(c.bytes_reserved() == mr.current());  // bytes() is what the allocator saw
  CHECK(c.bytes_used() == 0);
  bool visited = false;
  c.for_each_block(0, [&](const auto&) { visited = true; });
  CHECK_FALSE(visited);  // an empty cache has no blocks

  const auto k = test::random_vector(7 * H * d, 1), v = test::random_vector(7 * H * d, 2);
  c.append(std::span<const float>(k).first(4 * H * d), std::span<const float>(v).first(4 * H * d));  // 4 tokens
  c.append(std::span<const float>(k).subspan(4 * H * d), std::span<const float>(v).subspan(4 * H * d));  // 3 more
  CHECK(c.size() == 7);
  CHECK(c.bytes_used() == 2 * 7 * H * d * sizeof(float));
  for (std::size_t p = 0; p < 7; ++p)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < d; ++i) {
        CHECK(c.key(h, p)[i] == k[(p * H + h) * d + i]);
        CHECK(c.value(h, p)[i] == v[(p * H + h) * d + i]);
      }
  for (std::size_t h = 0; h < H; ++h) {
    int blocks = 0;
    c.for_each_block(h, [&](const kv::DenseBlock<float>& b) {
      ++blocks;
      CHECK(b.n == 7);
      CHECK(b.pos0 == 0);
      CHECK(b.stride >= d);
      for (std::size_t p = 0; p < b.n; ++p) CHECK(b.k[p * b.stride + 2] == k[(p * H + h) * d + 2]);
    });
    CHECK(blocks == 1);
  }

  c.truncate(3);  // speculative rollback
  CHECK(c.size() == 3);
  CHECK(c.bytes_used() == 2 * 3 * H * d * sizeof(float));
  CHECK_THROWS_AS((void)c.key(0, 3), shape_error);
  c.truncate(3);  // no-op
  CHECK_THROWS_AS(c.truncate(4), shape_error);
  // appending after a rollback overwrites the dropped positions
  const auto k2 = test::random_vector(H * d, 3);
  c.append(k2, k2);
  CHECK(c.size() == 4);
  CHECK(c.key(1, 3)[0] == k2[d]);
  CHECK(c.key(1, 2)[0] == k[(2 * H + 1) * d]);
  c.clear();
  CHECK(c.size() == 0);
  CHECK(c.bytes_reserved() == mr.current());
}

TEST_CASE("appending past capacity throws capacity_error and leaves the cache exactly as it was") {
  const std::size_t H = 2, d = 4, cap = 6;
  kv::Contiguous<float> c(H, d, cap);
  c.append(test::random_vector(5 * H * d, 4), test::random_vector(5 * H * d, 5));
  const auto before = snapshot(c);
  const auto two = test::random_vector(2 * H * d, 6);
  CHECK_THROWS_AS(c.append(two, two), capacity_error);  // 5 + 2 > 6
  CHECK(snapshot(c) == before);
  // bad spans: shape_error, also unchanged
  CHECK_THROWS_AS(c.append(std::vector<float>(H * d), std::vector<float>(H * d + 1)), shape_error);
  CHECK_THROWS_AS(c.append(std::vector<float>(H * d + 1), std::vector<float>(H * d + 1)), shape_error);
  CHECK(snapshot(c) == before);
  // exactly to capacity works, one more does not
  const auto one = test::random_vector(H * d, 7);
  c.append(one, one);
  CHECK(c.size() == cap);
  const auto full = snapshot(c);
  CHECK_THROWS_AS(c.append(one, one), capacity_error);
  CHECK(snapshot(c) == full);
  try {
    c.append(one, one);
  } catch (const capacity_error& e) {
    CHECK(std::string(e.what()).find("capacity 6") != std::string::npos);
  }
}

TEST_CASE("copy() is deep and explicit; moves keep the contents") {
  kv::Contiguous<float> a(1, 4, 8);
  const auto x = test::random_vector(3 * 4, 8);
  a.append(x, x);
  kv::Contiguous<float> b = a.copy();
  a.truncate(0);
  a.append(std::vector<float>(4, 9.0f), std::vector<float>(4, 9.0f));
  CHECK(b.size() == 3);
  CHECK(b.key(0, 0)[0] == x[0]);
  kv::Contiguous<float> m = std::move(b);
  CHECK(m.size() == 3);
  CHECK(m.value(0, 2)[3] == x[11]);
}

TEST_CASE("bad construction throws shape_error") {
  CHECK_THROWS_AS(kv::Contiguous<float>(0, 4, 8), shape_error);
  CHECK_THROWS_AS(kv::Contiguous<float>(1, 0, 8), shape_error);
  CHECK_THROWS_AS(kv::Contiguous<float>(1, 4, 0), shape_error);
}

TEST_CASE_TEMPLATE("fp16 / bf16 storage round trip within half an ulp of the format", T, f16, bf16) {
  const double tol = std::is_same_v<T, f16> ? kF16RoundTripRelTol : kBf16RoundTripRelTol;
  const std::size_t H = 2, d = 37, n = 20;  // d = 37: the vector part and a scalar tail of the conversion
  CountingResource mr;
  kv::Contiguous<T> c(H, d, n, &mr);
  CHECK(mr.current() == 2 * H * d * n * sizeof(T));
  const auto k = test::random_vector(n * H * d, 9, -100.f, 100.f), v = test::random_vector(n * H * d, 10, -1.f, 1.f);
  c.append(k, v);
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < d; ++i) {
        const float kx = k[(p * H + h) * d + i], vx = v[(p * H + h) * d + i];
        const float kg = static_cast<float>(c.key(h, p)[i]), vg = static_cast<float>(c.value(h, p)[i]);
        REQUIRE(std::abs(double(kg) - kx) <= tol * std::abs(double(kx)) + test::kFp32UnitRounding);
        REQUIRE(std::abs(double(vg) - vx) <= tol * std::abs(double(vx)) + test::kFp32UnitRounding);
        REQUIRE(c.key(h, p)[i] == static_cast<T>(kx));  // round to nearest even, as Eigen converts
      }
}

TEST_CASE("a context that cannot exist is a capacity_error naming the requested and available sizes, before any allocation") {
  CountingResource mem;
  // 2^31 tokens x 8 heads x 128 x 4 bytes x (K, V) = 2^44 bytes (16 TiB)
  const std::size_t phys = physical_memory_bytes();
  if (phys != 0 && phys < (std::size_t{1} << 44)) {
    CHECK_THROWS_WITH_AS(kv::Contiguous<float>(8, 128, std::size_t{1} << 31, &mem),
                         doctest::Contains(("kv::Contiguous of capacity 2147483648 tokens: 17592186044416 bytes requested, the machine has " +
                                            std::to_string(phys)).c_str()),
                         capacity_error);
  }
  // sizes whose product wraps around
  CHECK_THROWS_WITH_AS(kv::Contiguous<float>(std::size_t{1} << 32, 128, std::size_t{1} << 32, &mem),
                       doctest::Contains("kv::Contiguous: n_kv_heads x capacity = 4294967296 x 4294967296 overflows"), capacity_error);
  CHECK(mem.allocations() == 0);
}
