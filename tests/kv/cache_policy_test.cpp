// The KV cache contract, written once and run over every policy (doctest TEST_CASE_TEMPLATE):
// append / truncate / size / bytes, typed errors that leave the cache unchanged, blocks visited in
// position order with their true pos0, and attention over the policy equal to attention over a
// kv::Contiguous copy of what it stores (bitwise where the policy's blocks are tile-aligned). Sliding
// windows that wrap keep exactly their documented positions, and attention over them equals the
// windowed double reference over the original rows.
#include "barato/kv/cache_policy.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "barato/attention/attend.hpp"
#include "kv/policy_fixtures.hpp"
#include "support/fault_injection.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

/// What a cache stores for one head, read back through for_each_block (dequantised for quantized blocks).
struct Stored {
  std::vector<std::size_t> pos;   // true position of each row
  std::vector<float> k, v;        // [rows, d]
  std::size_t blocks = 0;
  bool ordered = true;            // rows strictly increasing in position
};

template <Element T>
void read_block(const kv::DenseBlock<T>& b, std::size_t d, Stored& s) {
  for (std::size_t r = 0; r < b.n; ++r) {
    s.pos.push_back(b.pos0 + r);
    for (std::size_t c = 0; c < d; ++c) {
      s.k.push_back(static_cast<float>(b.k[r * b.stride + c]));
      s.v.push_back(static_cast<float>(b.v[r * b.stride + c]));
    }
  }
}
template <Element T>
void read_block(const kv::PagedBlock<T>& b, std::size_t d, Stored& s) {
  for (std::size_t i = 0; i < b.pages(); ++i) read_block(b.page(i), d, s);
}
template <class KF, class VF>
void read_block(const kv::QuantBlock<KF, VF>& b, std::size_t d, Stored& s) {
  for (std::size_t r = 0; r < b.n; ++r) {
    s.pos.push_back(b.pos0 + r);
    for (std::size_t c = 0; c < d; ++c) {
      s.k.push_back(b.k_scale[r] * static_cast<float>(KF::code(b.k + r * b.k_stride, c)));
      s.v.push_back(b.v_scale[r] * static_cast<float>(VF::code(b.v + r * b.v_stride, c)));
    }
  }
}

template <class KF, class VF>
void read_block(const kv::PagedQuantBlock<KF, VF>& b, std::size_t d, Stored& s) {
  std::size_t rows = 0;
  for (std::size_t i = 0; i < b.pages(); ++i) {
    const kv::QuantBlock<KF, VF> pg = b.page(i);
    for (std::size_t r = 0; r < pg.n; ++r) {  // the page view and the row interface agree
      REQUIRE(pg.k_row(r) == b.k_row(rows + r));
      REQUIRE(pg.v_scale_at(r) == b.v_scale_at(rows + r));
    }
    rows += pg.n;
    read_block(pg, d, s);
  }
}

template <class Cache>
Stored stored(const Cache& c, std::size_t h) {
  Stored s;
  c.for_each_block(h, [&](const auto& b) {
    if (!s.pos.empty() && b.pos0 <= s.pos.back()) s.ordered = false;
    ++s.blocks;
    read_block(b, c.head_dim(), s);
  });
  return s;
}

/// Rows of token t, head h from an input buffer [n, H, d].
std::vector<float> head_rows(const std::vector<float>& x, std::size_t H, std::size_t d, std::size_t h,
                             const std::vector<std::size_t>& pos) {
  std::vector<float> out;
  for (const std::size_t p : pos)
    for (std::size_t c = 0; c < d; ++c) out.push_back(x[(p * H + h) * d + c]);
  return out;
}

/// A contiguous fp32 cache holding exactly the rows `cache` stores (same order), for attention comparisons.
template <class Cache>
kv::Contiguous<float> contiguous_copy(const Cache& cache) {
  const std::size_t H = cache.n_kv_heads(), d = cache.head_dim();
  std::vector<Stored> heads;
  for (std::size_t h = 0; h < H; ++h) heads.push_back(stored(cache, h));
  const std::size_t n = heads[0].pos.size();
  kv::Contiguous<float> out(H, d, n + 1);
  std::vector<float> k(n * H * d), v(n * H * d);
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < d; ++c) {
        k[(r * H + h) * d + c] = heads[h].k[r * d + c];
        v[(r * H + h) * d + c] = heads[h].v[r * d + c];
      }
  out.append(k, v);
  return out;
}

constexpr std::size_t kHeads = 2, kDim = 40, kCap = 96;  // d = 40: a vector part and a scalar tail

/// Appends tokens [t0, t0 + n) of k / v ([tokens, kHeads, kDim]) to `c`, in pieces of at most
/// `max_append()` tokens for a cache that bounds one append (as decoders split their blocks).
template <class Cache>
void append_tokens(Cache& c, const std::vector<float>& k, const std::vector<float>& v, std::size_t t0, std::size_t n) {
  std::size_t piece = n;
  if constexpr (requires { c.max_append(); }) piece = c.max_append();
  for (std::size_t t = t0; t < t0 + n; t += piece) {
    const std::size_t m = std::min(piece, t0 + n - t), off = t * kHeads * kDim;
    c.append(std::span<const float>(k).subspan(off, m * kHeads * kDim), std::span<const float>(v).subspan(off, m * kHeads * kDim));
  }
}

/// The positions a fixture's cache must hold after positions 0 … n−1 were appended.
template <class F>
std::vector<std::size_t> kept_positions(const F& fx, std::size_t n) {
  std::vector<std::size_t> pos;
  for (std::size_t p = 0; p < n; ++p)
    if (test::keeps(fx, n, p)) pos.push_back(p);
  return pos;
}

/// Index of position p in s.pos (REQUIREs that it is there).
inline std::size_t row_of(const Stored& s, std::size_t p) {
  const auto it = std::find(s.pos.begin(), s.pos.end(), p);
  REQUIRE(it != s.pos.end());
  return static_cast<std::size_t>(it - s.pos.begin());
}

}  // namespace

// The window fixtures <16, 0, 8>, <20, 4, 12> and <24, 2, 1> keep fewer positions (sinks + W + chunk − 1)
// than the contract appends: their rings wrap, so the contract exercises eviction.
#define BARATO_POLICIES                                                                                          \
  test::ContiguousFixture, test::GrowableFixture<16>, test::GrowableFixture<7>, test::PagedFixture<16>,          \
      test::PagedFixture<8>, test::PagedFixture<32>, test::WindowFixture<200, 0>, test::WindowFixture<150, 4>, \
      test::WindowFixture<16, 0, 8>, test::WindowFixture<20, 4, 12>, test::WindowFixture<24, 2, 1>,             \
      test::QuantizedFixture<kv::Int8, kv::Int8>, test::QuantizedFixture<kv::Int4, kv::Int4>,                   \
      test::QuantizedFixture<kv::Int8, kv::Int4>, test::PagedQuantizedFixture<kv::Int8, kv::Int8>,               \
      test::PagedQuantizedFixture<kv::Int8, kv::Int4>

TEST_CASE_TEMPLATE("cache contract: append, read back, truncate, bytes", F, BARATO_POLICIES) {
  static_assert(kv::CachePolicy<typename F::Cache>);
  CAPTURE(F::kName);
  F fx(kHeads, kDim, kCap);
  auto& c = fx.cache();
  CHECK(c.size() == 0);
  CHECK(c.n_kv_heads() == kHeads);
  CHECK(c.head_dim() == kDim);
  CHECK(stored(c, 0).blocks == 0);
  CHECK(c.bytes_used() == 0);

  const std::size_t n = 90;
  const auto k = test::random_vector(n * kHeads * kDim, 11);
  const auto v = test::random_vector(n * kHeads * kDim, 12);
  std::size_t done = 0;
  for (std::size_t chunk : {1, 3, 17, 1, 30, 38}) {
    append_tokens(c, k, v, done, chunk);
    done += chunk;
    CHECK(c.size() == done);
  }
  REQUIRE(done == n);
  const std::vector<std::size_t> kept = kept_positions(fx, n);  // all 90, or a window's sinks + ring
  CHECK(c.bytes_used() == kept.size() * F::token_bytes(kHeads, kDim));
  CHECK(c.bytes_reserved() >= c.bytes_used());

  for (std::size_t h = 0; h < kHeads; ++h) {
    const Stored s = stored(c, h);
    CHECK(s.ordered);
    REQUIRE(s.pos == kept);  // true positions, evicted ones gone
    const auto kr = head_rows(k, kHeads, kDim, h, s.pos), vr = head_rows(v, kHeads, kDim, h, s.pos);
    double worst = 0;
    for (std::size_t i = 0; i < kr.size(); ++i) {
      worst = std::max(worst, std::abs(double(s.k[i]) - kr[i]) - F::element_error(1.0));
      worst = std::max(worst, std::abs(double(s.v[i]) - vr[i]) - F::element_error(1.0));
    }
    CHECK(worst <= 0.0);
  }

  // truncate (rollback) and re-append different content: the kept positions below 50 stay, evicted
  // positions are not restored
  const Stored before = stored(c, 1);
  c.truncate(50);
  CHECK(c.size() == 50);
  std::vector<std::size_t> below;
  for (const std::size_t p : before.pos)
    if (p < 50) below.push_back(p);
  CHECK(stored(c, 1).pos == below);
  CHECK(c.bytes_used() == below.size() * F::token_bytes(kHeads, kDim));
  const auto k2 = test::random_vector(5 * kHeads * kDim, 13), v2 = test::random_vector(5 * kHeads * kDim, 14);
  append_tokens(c, k2, v2, 0, 5);
  CHECK(c.size() == 55);
  const Stored s = stored(c, 1);
  REQUIRE(s.pos.size() == below.size() + 5);
  CHECK(std::abs(s.k[row_of(s, 52) * kDim + 3] - k2[(2 * kHeads + 1) * kDim + 3]) <= F::element_error(1.0));
  CHECK_THROWS_AS(c.truncate(56), shape_error);
  c.truncate(0);
  CHECK(c.size() == 0);
  CHECK(stored(c, 0).blocks == 0);
}

TEST_CASE_TEMPLATE("cache contract: bad input and capacity errors leave the cache unchanged", F, BARATO_POLICIES) {
  CAPTURE(F::kName);
  F fx(kHeads, kDim, kCap);
  auto& c = fx.cache();
  const auto k = test::random_vector(40 * kHeads * kDim, 21), v = test::random_vector(40 * kHeads * kDim, 22);
  append_tokens(c, k, v, 0, 40);
  const Stored before = stored(c, 1);
  const std::size_t used = c.bytes_used(), reserved = c.bytes_reserved();
  auto unchanged = [&] {
    const Stored now = stored(c, 1);
    CHECK(c.size() == 40);
    CHECK(now.pos == before.pos);
    CHECK(now.k == before.k);
    CHECK(now.v == before.v);
    CHECK(c.bytes_used() == used);
    CHECK(c.bytes_reserved() == reserved);
  };
  CHECK_THROWS_AS(c.append(std::span<const float>(k).first(kDim * kHeads), std::span<const float>(v).first(kDim)),
                  shape_error);
  unchanged();
  CHECK_THROWS_AS(c.append(std::span<const float>(k).first(kDim + 1), std::span<const float>(v).first(kDim + 1)),
                  shape_error);
  unchanged();
  if constexpr (F::kBounded) {
    const auto big = test::random_vector(60 * kHeads * kDim, 23);
    CHECK_THROWS_AS(c.append(big, big), capacity_error);  // 40 + 60 > 96
    unchanged();
  }
  if constexpr (requires { c.max_append(); }) {  // optional member: more than max_append() tokens at once
    const auto big = test::random_vector((c.max_append() + 1) * kHeads * kDim, 24);
    CHECK_THROWS_AS(c.append(big, big), shape_error);
    unchanged();
  }
}

TEST_CASE_TEMPLATE("cache contract: an append whose k-th allocation fails leaves the cache exactly as it was, for every k",
                   F, BARATO_POLICIES) {
  CAPTURE(F::kName);
  const auto k = test::random_vector(70 * kHeads * kDim, 31), v = test::random_vector(70 * kHeads * kDim, 32);
  auto make = [&] {
    auto fx = std::make_unique<F>(kHeads, kDim, kCap);
    append_tokens(fx->cache(), k, v, 0, 40);
    return fx;
  };
  std::size_t n = 30;  // one append: crosses a chunk / page boundary where the policy allocates
  if constexpr (requires(typename F::Cache& c) { c.max_append(); }) n = std::min(n, make()->cache().max_append());
  const std::size_t off = 40 * kHeads * kDim, len = n * kHeads * kDim;
  auto op = [&](auto& fx) { fx->cache().append(std::span<const float>(k).subspan(off, len), std::span<const float>(v).subspan(off, len)); };
  auto snap = [&](const auto& fx) {
    const auto& c = fx->cache();
    test::Snapshot s;
    s("size", c.size())("used", c.bytes_used())("reserved", c.bytes_reserved());
    for (std::size_t h = 0; h < kHeads; ++h) {
      const Stored st = stored(c, h);
      s.range("pos", st.pos).range("k", st.k).range("v", st.v)("blocks", st.blocks);
    }
    return s.str();
  };
  const std::size_t faults = test::check_strong_guarantee(make, op, snap);
  // Growable chunks and paged block tables allocate here; the pre-allocated policies never do.
  const std::string name = F::kName;
  if (name == "growable" || name.starts_with("paged")) CHECK(faults > 0);
  else CHECK(faults == 0);
}

TEST_CASE("AttentionWindow::visible_rows: the sub-ranges are exactly the rows the mask lets through") {
  // Brute force over small blocks: row r of a block at pos0 is visible to the query at p (p ≥ every
  // row) iff pos0 + r < S or p − (pos0 + r) < W; the callback ranges must cover exactly those rows,
  // in increasing disjoint order.
  std::size_t cases = 0;
  for (std::size_t S : {0, 1, 3})
    for (std::size_t W : {1, 2, 5})
      for (std::size_t pos0 = 0; pos0 < 8; ++pos0)
        for (std::size_t a = 0; a < 6; ++a)
          for (std::size_t b = a; b <= 6; ++b)
            for (std::size_t p = pos0 + (b == 0 ? 0 : b - 1); p < pos0 + 14; ++p) {
              const kv::AttentionWindow win{.sinks = S, .window = W};
              std::vector<std::size_t> got, want;
              std::size_t last_end = 0;
              bool ordered = true;
              win.visible_rows(p, pos0, a, b, [&](std::size_t lo, std::size_t hi) {
                ordered = ordered && lo < hi && lo >= last_end && lo >= a && hi <= b;
                last_end = hi;
                for (std::size_t r = lo; r < hi; ++r) got.push_back(r);
              });
              for (std::size_t r = a; r < b; ++r)
                if (pos0 + r < S || p - (pos0 + r) < W) want.push_back(r);
              CHECK(ordered);
              CHECK(got == want);
              ++cases;
            }
  CHECK(cases > 1000);
}

TEST_CASE_TEMPLATE("cache contract: attention over the policy equals attention over a contiguous copy (windows: the windowed reference)", F,
                   BARATO_POLICIES) {
  CAPTURE(F::kName);
  const std::size_t hq = 6, n = 87;
  const attention::Heads heads{.n_q = hq, .n_kv = kHeads, .head_dim = kDim};
  F fx(kHeads, kDim, kCap);
  auto& c = fx.cache();
  const auto k = test::random_vector(n * kHeads * kDim, 31), v = test::random_vector(n * kHeads * kDim, 32);
  const double scale = 1.0 / std::sqrt(double(kDim));
  // The expected output of queries q at positions p0 … over the policy: for a sliding window, the
  // windowed double reference over the original rows (it fails if the cache kept, evicted or showed
  // the wrong positions); otherwise attention over a contiguous copy of what the policy stores.
  auto check_against = [&](const std::vector<float>& q, std::size_t p0, const std::vector<float>& a) {
    if constexpr (requires { F::kWindow; }) {
      const auto ref = test::windowed_attention_ref(q, k, v, hq, kHeads, kDim, p0, scale, F::kSinks, F::kWindow);
      CHECK(test::max_rel_diff(a, ref) <= test::kFp32RelTol);
    } else {
      std::vector<float> b(q.size());
      attention::attend(q, contiguous_copy(c), heads, b);
      if constexpr (F::kExactAttention) CHECK(a == b);
      else CHECK(test::max_rel_diff(a, b) <= test::kFp32RelTol);
    }
  };
  // prefill check: 60 queries at positions 0..59, in one block or in blocks of max_append()
  const std::size_t prompt = 60;
  std::size_t piece = prompt;
  if constexpr (requires { c.max_append(); }) piece = std::min(prompt, c.max_append());
  for (std::size_t p0 = 0; p0 < prompt; p0 += piece) {
    const std::size_t m = std::min(piece, prompt - p0);
    CAPTURE(p0);
    append_tokens(c, k, v, p0, m);
    const auto q = test::random_vector(m * hq * kDim, 33 + static_cast<unsigned>(p0), -2.f, 2.f);
    std::vector<float> a(q.size());
    attention::attend(q, c, heads, a);
    check_against(q, p0, a);
  }
  // decode steps, one token at a time
  for (std::size_t t = prompt; t < n; ++t) {
    CAPTURE(t);
    append_tokens(c, k, v, t, 1);
    const auto q = test::random_vector(hq * kDim, 100 + static_cast<unsigned>(t), -2.f, 2.f);
    std::vector<float> a(q.size());
    attention::decode(q, c, heads, a);
    check_against(q, t, a);
    // and against the unquantised fp32 rows (the policy's storage error, within its named tolerance),
    // for the policies whose storage rounds (quantized: attn_tol above fp32 summation noise)
    if (F::attn_tol() > test::kFp32RelTol) {
      const Stored s = stored(c, 0);
      std::vector<float> kk, vv;
      for (const std::size_t p : s.pos)
        for (std::size_t i = 0; i < kHeads * kDim; ++i) {
          kk.push_back(k[p * kHeads * kDim + i]);
          vv.push_back(v[p * kHeads * kDim + i]);
        }
      const auto ref = test::attention_ref(q, kk, vv, hq, kHeads, kDim, s.pos.size() - 1, scale);
      CHECK(test::max_rel_diff(a, ref) <= F::attn_tol());
    }
  }
}
