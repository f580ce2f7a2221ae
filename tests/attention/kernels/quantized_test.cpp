#include "barato/attention/kernels/quantized.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "barato/kv/kv_format.hpp"
#include "barato/kv/quant_block.hpp"
#include "support/reference.hpp"

using namespace barato;
using attention::PartialStats;

namespace {

template <class Arch, class F>
void check_load_codes() {
  constexpr std::size_t W = simd::kFloatLanes<Arch>, d = 4 * W;
  const auto x = test::random_vector(d, 3, -2.f, 2.f);
  std::vector<std::uint8_t> row(F::row_bytes(d));
  (void)kv::quantize_row<F>(x.data(), d, row.data());
  for (std::size_t c = 0; c < d; c += W) {
    alignas(64) float got[W];
    attention::detail::load_codes<Arch, F>(row.data(), c).store_aligned(got);
    for (std::size_t i = 0; i < W; ++i) CHECK(got[i] == float(F::code(row.data(), c + i)));
  }
}

/// Quantized rows of one KV head: n rows of d codes, copied into pages of B rows in the physical order
/// `table` (logical page i → physical page table[i]).
template <class KF, class VF>
struct QuantRowsFixture {
  std::size_t n, d, B;
  std::vector<std::uint8_t> k, v, pk, pv;  // contiguous / paged codes
  std::vector<float> ks, vs, pks, pvs;     // contiguous / paged scales
  std::vector<std::uint32_t> table;
  QuantRowsFixture(std::size_t n_, std::size_t d_, std::size_t B_, std::vector<std::uint32_t> t)
      : n(n_), d(d_), B(B_), k(n_ * KF::row_bytes(d_)), v(n_ * VF::row_bytes(d_)), pk(t.size() * B_ * KF::row_bytes(d_)),
        pv(t.size() * B_ * VF::row_bytes(d_)), ks(n_), vs(n_), pks(t.size() * B_), pvs(t.size() * B_), table(std::move(t)) {
    const auto kx = test::random_vector(n * d, 7, -2.f, 2.f), vx = test::random_vector(n * d, 8, -2.f, 2.f);
    const std::size_t kb = KF::row_bytes(d), vb = VF::row_bytes(d);
    for (std::size_t r = 0; r < n; ++r) {
      ks[r] = kv::quantize_row<KF>(kx.data() + r * d, d, k.data() + r * kb);
      vs[r] = kv::quantize_row<VF>(vx.data() + r * d, d, v.data() + r * vb);
      const std::size_t p = table[r / B] * B + r % B;
      std::memcpy(pk.data() + p * kb, k.data() + r * kb, kb);
      std::memcpy(pv.data() + p * vb, v.data() + r * vb, vb);
      pks[p] = ks[r];
      pvs[p] = vs[r];
    }
  }
  [[nodiscard]] kv::QuantBlock<KF, VF> dense() const {
    return {k.data(), ks.data(), v.data(), vs.data(), n, KF::row_bytes(d), VF::row_bytes(d), 0};
  }
  [[nodiscard]] kv::PagedQuantBlock<KF, VF> paged() const {
    return {pk.data(), pks.data(), pv.data(), pvs.data(), table.data(), B, B, n, KF::row_bytes(d), VF::row_bytes(d), 0,
            kv::PagedQuantBlock<KF, VF>::shift_for(B)};
  }
};

}  // namespace

TEST_CASE("load_codes: the AVX-512 and the portable kernels equal the scalar codes") {
  check_load_codes<simd::DefaultArch, kv::Int8>();
  check_load_codes<simd::DefaultArch, kv::Int4>();
#if XSIMD_WITH_SSE2
  check_load_codes<xsimd::sse2, kv::Int8>();  // the portable primary
  check_load_codes<xsimd::sse2, kv::Int4>();
#endif
}

TEST_CASE("quantized kernel over scattered pages is bitwise the kernel over one contiguous block (MHA and GQA)") {
  // pages of 16 / 32 rows divide the 32-row GQA stages; scattered, consecutive and a partial last page
  for (const std::size_t B : {16, 32})
    for (const std::size_t g : {1, 3})
      for (const std::size_t d : {64, 40}) {
        CAPTURE(B); CAPTURE(g); CAPTURE(d);
        const std::vector<std::uint32_t> table = {4, 0, 1, 2, 6, 3, 5};
        const std::size_t n = table.size() * B - 5;
        const QuantRowsFixture<kv::Int8, kv::Int4> fx(n, d, B, table);
        const auto q = test::random_vector(g * d, 9, -2.f, 2.f);
        std::vector<float> o1(g * d, 0.0f), o2(g * d, 0.0f);
        std::vector<PartialStats> s1(g), s2(g);
        const attention::QueryGroup q1{.q = q.data(), .g = g, .d = d, .scale = 0.125f, .o = o1.data(), .st = s1.data()};
        const attention::QueryGroup q2{.q = q.data(), .g = g, .d = d, .scale = 0.125f, .o = o2.data(), .st = s2.data()};
        const std::size_t cuts[] = {0, 2 * B, n};  // two ranges, as split-K would call it
        for (std::size_t i = 0; i + 1 < 3; ++i) {
          attention::accumulate(q1, fx.dense(), cuts[i], cuts[i + 1]);
          attention::accumulate(q2, fx.paged(), cuts[i], cuts[i + 1]);
        }
        CHECK(o1 == o2);
        for (std::size_t h = 0; h < g; ++h) {
          CHECK(s1[h].m == s2[h].m);
          CHECK(s1[h].l == s2[h].l);
        }
      }
}
