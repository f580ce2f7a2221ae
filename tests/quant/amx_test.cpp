// quant/amx.hpp: the AMX int8 tiles of the batched int8 row-step product (and of W8A8's, one plane;
// its gemv_batch bits are checked in activation_test.cpp). The packed B tiles hold
// the planes where `tdpbssd` expects them, the tile sums equal integer sums taken element by element,
// and gemv_batch through the tiles gives the VNNI kernel's single-vector bits (rows past the last
// 32, tail columns, partial groups of 16 vectors, one and two threads). On a host or build without
// AMX the tile tests are skipped with a message.
#include "barato/quant/amx.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "barato/quant/gemv.hpp"
#include "quant/kernel_check.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

TEST_CASE("amx_pack_bytes: two planes of whole 16-vector tiles over the full 128-column blocks") {
  CHECK(amx_pack_bytes(1, 300) == 2 * 16 * 256);
  CHECK(amx_pack_bytes(16, 128) == 2 * 16 * 128);
  CHECK(amx_pack_bytes(17, 1024) == 2 * 32 * 1024);
  CHECK(amx_pack_bytes(5, 127) == 0);
  CHECK(amx_pack_bytes(17, 5, 1) == 32 * 5 * 64);  // W8A8's one plane over 5 chunks
}

#if defined(BARATO_AMX_COMPILED)

namespace {

/// 64-byte aligned bytes for the tests' planes and packs.
struct Aligned {
  explicit Aligned(std::size_t n) : p(static_cast<std::byte*>(::operator new(n, std::align_val_t{64}))) {}
  ~Aligned() { ::operator delete(p, std::align_val_t{64}); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  std::byte* p;
};

using F = Int8PerRow<>;
using K = RowKernel<simd::DefaultArch, F>;

/// n vectors of `cols` columns prepared by the VNNI row-step kernel into one buffer, `per` bytes apart.
struct Prepared {
  Prepared(const std::vector<float>& x, std::size_t n, std::size_t cols)
      : per(K::activation_bytes(cols)), buf(n * per), acts(n) {
    for (std::size_t t = 0; t < n; ++t) K::prepare(x.data() + t * cols, cols, acts[t], buf.p + t * per);
  }
  std::size_t per;
  Aligned buf;
  std::vector<K::Activation> acts;
};

/// n random vectors (seed) prepared, and their planes packed by `amx_pack`.
struct Packed {
  Packed(std::size_t n, std::size_t cols, unsigned seed)
      : x(barato::test::random_vector(n * cols, seed, -3.0f, 3.0f)), p(x, n, cols), pack(amx_pack_bytes(n, cols)) {
    amx_pack(p.acts.data(), n, static_cast<std::ptrdiff_t>(p.per), tiles());
  }
  [[nodiscard]] std::int8_t* tiles() const noexcept { return reinterpret_cast<std::int8_t*>(pack.p); }
  std::vector<float> x;
  Prepared p;
  Aligned pack;
};

}  // namespace

TEST_CASE("AMX: packed B tiles, tile sums and gemv_batch through the tiles") {
  static_assert(K::kAmx, "int8-row takes the tiles when AMX is compiled");
  if (!amx_available()) {
    MESSAGE("skipped: this Linux does not grant the process AMX tile data (arch_prctl)");
    return;
  }
  const std::size_t cols = 384 + 77, rows = 262;  // 3 full blocks + a tail; 8 passes of 32 rows + 6 (two
                                                   // threads' worth of rows: quant/gemv.hpp useful_threads)
  const std::size_t chunks = 384 / kAmxChunk;

  SUBCASE("amx_pack: row i of chunk c's tile holds columns 64c + 4i … + 3 of each vector, zero past n") {
    const std::size_t n = 19;
    const Packed packed(n, cols, 5);
    const Prepared& p = packed.p;
    const std::int8_t* bytes = packed.tiles();
    for (std::size_t g = 0; g < 2; ++g)
      for (std::size_t c = 0; c < chunks; ++c)
        for (std::size_t plane = 0; plane < 2; ++plane)
          for (std::size_t i = 0; i < 16; ++i)
            for (std::size_t v = 0; v < 16; ++v)
              for (std::size_t b = 0; b < 4; ++b) {
                const std::size_t t = 16 * g + v, col = 64 * c + 4 * i + b;
                const std::int8_t want = t < n ? (plane == 0 ? p.acts[t].hi : p.acts[t].lo)[col] : 0;
                const std::int8_t got = bytes[((g * chunks + c) * 2 + plane) * 1024 + 64 * i + 4 * v + b];
                if (got != want) REQUIRE(int(got) == int(want));
              }
  }

  SUBCASE("amx_rows<2>: the tiles' sums are the element-by-element integer sums") {
    const Packed packed(16, cols, 6);
    const Prepared& p = packed.p;
    const auto m = ref::test_matrix<F>(rows, cols, 7);
    const auto w = m.view();
    const std::size_t r0 = 32;
    const quant::detail::AmxConfig config;
    _tile_loadconfig(&config);
    alignas(64) std::int32_t sums[4][16][16];
    amx_rows<2>(w.row(r0), w.row_bytes, packed.tiles(), 0, chunks, sums);
    _tile_release();
    for (std::size_t i = 0; i < 32; ++i)
      for (std::size_t v = 0; v < 16; ++v) {
        const auto* q = reinterpret_cast<const std::int8_t*>(w.row(r0 + i));
        std::int64_t hi = 0, lo = 0;
        for (std::size_t c = 0; c < 384; ++c) {
          hi += std::int64_t{q[c]} * p.acts[v].hi[c];
          lo += std::int64_t{q[c]} * p.acts[v].lo[c];
        }
        CHECK(sums[2 * (i / 16)][i % 16][v] == hi);
        CHECK(sums[2 * (i / 16) + 1][i % 16][v] == lo);
      }
  }

  SUBCASE("amx_pack_planes<1> + amx_rows<1> (W8A8's one plane): the element-by-element integer sums") {
    const std::size_t n = 21, stride = 512, chunks = 384 / kAmxChunk;
    Aligned codes(n * stride);
    auto* xq = reinterpret_cast<std::int8_t*>(codes.p);
    const auto r = barato::test::random_vector(n * stride, 11, -127.5f, 127.5f);
    for (std::size_t i = 0; i < n * stride; ++i) xq[i] = static_cast<std::int8_t>(static_cast<int>(r[i]));
    Aligned pack(amx_pack_bytes(n, chunks, 1));
    const std::int8_t* first[1] = {xq};
    amx_pack_planes<1>(first, static_cast<std::ptrdiff_t>(stride), n, chunks, reinterpret_cast<std::int8_t*>(pack.p));
    const auto m = ref::test_matrix<F>(rows, cols, 12);
    const auto w = m.view();
    const quant::detail::AmxConfig config;
    _tile_loadconfig(&config);
    alignas(64) std::int32_t sums[2][16][16];
    amx_rows<1>(w.row(0), w.row_bytes, reinterpret_cast<const std::int8_t*>(pack.p), 1, chunks, sums);
    _tile_release();
    for (std::size_t i = 0; i < 32; ++i)
      for (std::size_t v = 0; v < 16; ++v) {
        const auto* q = reinterpret_cast<const std::int8_t*>(w.row(i));
        std::int64_t d = 0;
        if (16 + v < n)
          for (std::size_t c = 0; c < 384; ++c) d += std::int64_t{q[c]} * xq[(16 + v) * stride + c];
        CHECK(sums[i / 16][i % 16][v] == d);  // vectors 21 … 31 of group 1 are zero
      }
  }

  SUBCASE("gemv_batch through the tiles equals the VNNI kernel's single-vector product bit for bit") {
    const auto m = ref::test_matrix<F>(rows, cols, 8);
    const auto mt = ref::test_matrix<Int8PerTensor<>>(rows, cols, 9);
    REQUIRE(quant::detail::useful_threads(rows, cols, 40, m.view().row_bytes, 2) == 2);  // n = 40 splits
    for (const std::size_t n : {quant::detail::kAmxMinVectors, std::size_t{16}, std::size_t{17}, std::size_t{40}}) {
      CAPTURE(n);
      const auto x = barato::test::random_vector(n * cols, 10 + unsigned(n), -2.0f, 2.0f);
      Prepared p(x, n, cols);
      using KT = RowKernel<simd::DefaultArch, Int8PerTensor<>>;
      std::vector<float> want(n * rows), want_t(n * rows);
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t r = 0; r < rows; ++r) {
          want[t * rows + r] = K::dot(m.view(), r, p.acts[t]);
          KT::Activation at;
          Aligned s(KT::activation_bytes(cols));
          KT::prepare(x.data() + t * cols, cols, at, s.p);
          want_t[t * rows + r] = KT::dot(mt.view(), r, at);
        }
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        std::vector<float> y(n * rows, -1.0f), yt(n * rows, -1.0f);
        gemv_batch(m.view(), x, y, n, threads);
        gemv_batch(mt.view(), x, yt, n, threads);
        for (std::size_t i = 0; i < n * rows; ++i) {
          if (y[i] != want[i]) REQUIRE(y[i] == want[i]);
          if (yt[i] != want_t[i]) REQUIRE(yt[i] == want_t[i]);
        }
      }
    }
  }
}

#else

TEST_CASE("AMX: not compiled in this build") {
  static_assert(!kAmxCompiled);
  CHECK_FALSE(amx_available());
  MESSAGE("skipped: this translation unit does not enable AMX-TILE / AMX-INT8 (no tile tests)");
}

#endif
