#include "barato/kv/growable.hpp"

#include <doctest/doctest.h>

#include <cstdint>

#include <new>

#include "barato/core/memory.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// A memory resource that fails (std::bad_alloc) once `budget` allocations have been made.
class FailingResource final : public std::pmr::memory_resource {
 public:
  explicit FailingResource(std::size_t budget) : budget_(budget) {}
  std::size_t budget_;

 private:
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (budget_ == 0) throw std::bad_alloc();
    --budget_;
    return std::pmr::new_delete_resource()->allocate(bytes, align);
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    std::pmr::new_delete_resource()->deallocate(p, bytes, align);
  }
  bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
}  // namespace

TEST_CASE("growable: grows by whole chunks; reserved bytes equal the allocator's measurement") {
  CountingResource mr;
  const std::size_t H = 3, d = 20, chunk = 10;
  kv::Growable<float> c(H, d, chunk, &mr);
  CHECK(c.bytes_reserved() == 0);
  CHECK(mr.current() == 0);
  const auto k = test::random_vector(25 * H * d, 1), v = test::random_vector(25 * H * d, 2);
  const std::size_t tok = H * d;
  c.append(std::span<const float>(k).first(tok), std::span<const float>(v).first(tok));
  CHECK(c.n_chunks() == 1);
  CHECK(c.bytes_reserved() == chunk * 2 * H * d * sizeof(float));
  CHECK(mr.current() == c.bytes_reserved());
  c.append(std::span<const float>(k).subspan(tok, 24 * tok), std::span<const float>(v).subspan(tok, 24 * tok));
  CHECK(c.size() == 25);
  CHECK(c.n_chunks() == 3);
  CHECK(mr.current() == c.bytes_reserved());
  CHECK(c.bytes_used() == 25 * 2 * H * d * sizeof(float));
  std::size_t blocks = 0;
  c.for_each_block(2, [&](const kv::DenseBlock<float>& b) {
    CHECK(b.pos0 == blocks * chunk);
    CHECK(b.k[3 * b.stride + 1] == k[((b.pos0 + 3) * H + 2) * d + 1]);
    ++blocks;
  });
  CHECK(blocks == 3);
  c.truncate(4);
  CHECK(c.n_chunks() == 3);  // truncation keeps the chunks for reuse...
  c.shrink_to_fit();
  CHECK(c.n_chunks() == 1);  // ...until asked to give them back
  CHECK(mr.current() == c.bytes_reserved());
}

TEST_CASE("growable: a growth failure (limit or allocator) leaves the cache unchanged") {
  const std::size_t H = 2, d = 8, chunk = 4;
  FailingResource fail(2);  // room for one chunk (K and V buffers)
  kv::Growable<float> c(H, d, chunk, &fail);
  const auto k = test::random_vector(12 * H * d, 3);
  c.append(std::span<const float>(k).first(3 * H * d), std::span<const float>(k).first(3 * H * d));
  CHECK_THROWS_AS(c.append(std::span<const float>(k).first(2 * H * d), std::span<const float>(k).first(2 * H * d)),
                  std::bad_alloc);
  CHECK(c.size() == 3);
  CHECK(c.n_chunks() == 1);
  c.append(std::span<const float>(k).first(H * d), std::span<const float>(k).first(H * d));  // fits in chunk 0
  CHECK(c.size() == 4);

  kv::Growable<float> lim(kv::GrowableConfig{.n_kv_heads = H, .head_dim = d, .chunk_tokens = chunk, .max_tokens = 6});
  lim.append(std::span<const float>(k).first(5 * H * d), std::span<const float>(k).first(5 * H * d));
  CHECK_THROWS_AS(lim.append(std::span<const float>(k).first(2 * H * d), std::span<const float>(k).first(2 * H * d)),
                  capacity_error);
  CHECK(lim.size() == 5);
  CHECK(lim.n_chunks() == 2);
  CHECK_THROWS_AS(kv::Growable<float>(0, 8), shape_error);
}

TEST_CASE("growable: a chunk that cannot exist is a capacity_error at construction") {
  CHECK_THROWS_WITH_AS(barato::kv::Growable<float>(std::size_t{1} << 40, std::size_t{1} << 20, std::size_t{1} << 10),
                       doctest::Contains("overflows"), barato::capacity_error);
  const std::size_t phys = barato::physical_memory_bytes();
  if (phys != 0 && phys < (std::size_t{1} << 44))
    CHECK_THROWS_WITH_AS(barato::kv::Growable<float>(8, 128, std::size_t{1} << 31), doctest::Contains("kv::Growable chunk of 2147483648 tokens"),
                         barato::capacity_error);
}
