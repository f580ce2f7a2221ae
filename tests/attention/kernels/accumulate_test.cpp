#include "barato/attention/kernels/accumulate.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/split_k.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/contiguous.hpp"
#include "support/reference.hpp"

using namespace barato;

// The extension point of the kernel seam: a cache whose block type is its own, with its own
// `accumulate` overload in the block's namespace, found by argument-dependent lookup from `attend`.
namespace user_cache {

/// Stores keys halved (a stand-in for a format of one's own); its blocks know how to undo it.
struct HalfKeyBlock {
  barato::kv::DenseBlock<float> rows;  // keys / 2, values as given
  std::size_t n = 0;
  std::size_t pos0 = 0;
};

inline int g_calls = 0;  // accumulate calls, to prove the overload was the one used

/// The block's kernel: q·(k/2)·(2·scale) — bitwise q·k·scale, since halving and doubling are exact.
template <class Arch>
void accumulate(const barato::attention::QueryGroup& qg, const HalfKeyBlock& blk, std::size_t r0, std::size_t r1) noexcept {
  ++g_calls;
  barato::attention::QueryGroup doubled = qg;
  doubled.scale = 2.0f * qg.scale;
  barato::attention::accumulate<Arch>(doubled, blk.rows, r0, r1);
}

class HalfKeyCache {
 public:
  HalfKeyCache(std::size_t n_kv_heads, std::size_t head_dim, std::size_t capacity)
      : inner_(n_kv_heads, head_dim, capacity) {}
  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return inner_.n_kv_heads(); }
  [[nodiscard]] std::size_t head_dim() const noexcept { return inner_.head_dim(); }
  [[nodiscard]] std::size_t size() const noexcept { return inner_.size(); }
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return inner_.bytes_reserved(); }
  [[nodiscard]] std::size_t bytes_used() const noexcept { return inner_.bytes_used(); }
  void append(std::span<const float> k, std::span<const float> v) {
    std::vector<float> half(k.begin(), k.end());
    for (float& x : half) x *= 0.5f;
    inner_.append(half, v);
  }
  void truncate(std::size_t n) { inner_.truncate(n); }
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    inner_.for_each_block(h, [&](const barato::kv::DenseBlock<float>& b) { f(HalfKeyBlock{b, b.n, b.pos0}); });
  }

 private:
  barato::kv::Contiguous<float> inner_;
};

static_assert(barato::kv::CachePolicy<HalfKeyCache>);

}  // namespace user_cache

TEST_CASE("a cache with its own block type brings its own accumulate (found by ADL): attend, decode, split-K") {
  for (const std::size_t d : {64, 40}) {  // the fixed-dimension kernel and the generic one behind it
    CAPTURE(d);
    const attention::Heads heads{.n_q = 4, .n_kv = 2, .head_dim = d};
    const std::size_t n = 150, prompt = 20;
    const auto k = test::random_vector(n * heads.kv_dim(), 1), v = test::random_vector(n * heads.kv_dim(), 2);
    user_cache::HalfKeyCache mine(heads.n_kv, d, n);
    kv::Contiguous<float> ref(heads.n_kv, d, n);
    mine.append(k, v);
    ref.append(k, v);

    const auto q = test::random_vector(prompt * heads.q_dim(), 3, -2.f, 2.f);
    std::vector<float> got(q.size()), want(q.size());
    user_cache::g_calls = 0;
    attention::attend(q, mine, heads, got);  // the newest `prompt` positions
    CHECK(user_cache::g_calls > 0);
    attention::attend(q, ref, heads, want);  // the newest `prompt` positions
    CHECK(got == want);

    const std::vector<float> q1(q.end() - static_cast<std::ptrdiff_t>(heads.q_dim()), q.end());
    std::vector<float> got1(q1.size()), want1(q1.size());
    user_cache::g_calls = 0;
    attention::decode(q1, mine, heads, got1);
    CHECK(user_cache::g_calls == static_cast<int>(heads.n_kv));
    attention::decode(q1, ref, heads, want1);
    CHECK(got1 == want1);

    attention::SplitKWorkspace ws(heads, 3);
    user_cache::g_calls = 0;
    attention::decode_split_k(q1, mine, heads, got1, ws);
    CHECK(user_cache::g_calls > 0);
    attention::decode_split_k(q1, ref, heads, want1, ws);
    CHECK(got1 == want1);
  }
}
