// quant/vnni_ggml.hpp: the VNNI kernel of ggml's Q8_0 / Q4_0 product, through the explicit
// xsimd::avx512bw arch: equal to the scalar reference (quant/ggml_dot.hpp) up to fp32 summation order
// (the integer block sums are the same), within the int8-activation bound of Ŵx, on every branch
// (full chunks, 32-column tail blocks, a partial block), and the same for every batch size N.
#include "barato/quant/vnni_ggml.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <bit>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "barato/quant/ggml.hpp"
#include "quant/kernel_check.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

#if XSIMD_WITH_AVX512BW && defined(__AVX512VNNI__) && defined(__AVX512VL__)

namespace {
/// x quantized twice: by the scalar rule (codes q by column, steps D) and by K::prepare (act, a view
/// into the thread's arena: valid until its next use).
template <class K>
struct Prepared {
  std::vector<std::int8_t> q;
  std::vector<float> D;
  typename K::Activation act;
  explicit Prepared(const std::vector<float>& x) : q(x.size()), D((x.size() + 31) / 32) {
    ggml_q8_activation(x.data(), x.size(), q.data(), D.data());
    K::prepare(x.data(), x.size(), act, ActivationArena::local().get(K::activation_bytes(x.size())));
  }
};
}  // namespace

TEST_CASE_TEMPLATE("avx512-vnni-q8 kernel equals the double reference within the int8-activation bound", F, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  using K = RowKernel<xsimd::avx512bw, F>;
  static_assert(std::string_view(K::kName) == "avx512-vnni-q8");
  ref::check_row_kernel_shapes<K, F>(171);
}

TEST_CASE_TEMPLATE("avx512-vnni-q8 kernel equals the scalar ggml reference up to fp32 summation order", F, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {32u, 64u, 96u, 128u, 192u, 172u, 256u, 320u, 384u, 512u, 640u, 896u, 1000u, 1024u, 1152u, 4864u}) {
    CAPTURE(cols);
    const std::size_t rows = 9;
    const auto m = ref::test_matrix<F>(rows, cols, 300 + unsigned(cols));
    auto x = barato::test::random_vector(cols, 301 + unsigned(cols), -4.0f, 4.0f);
    for (std::size_t c = 0; c < cols; c += 97) x[c] = 0.0f;
    if (cols >= 64)
      for (std::size_t c = 32; c < 64; ++c) x[c] = 0.0f;  // an all-zero block
    const Prepared<K> p(x);
    const auto& q = p.q;
    const auto& D = p.D;
    const auto& act = p.act;
    for (std::size_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      double mag = 0;  // Σ_b |scale_b · D_b · sum_b|
      const auto* s = m.view().row_scales(r);
      for (std::size_t c = 0, b = 0; c < cols; c += 32, ++b)
        mag += std::fabs(double(to_float(s[b])) * D[b] *
                         ggml_block_sum<F>(m.view().row(r), cols, c, std::min(cols, c + 32), q.data()));
      const float expect = ggml_dot_reference(m.view(), r, q.data(), D.data());
      REQUIRE(std::fabs(double(K::dot(m.view(), r, act)) - double(expect)) <= 2e-6 * mag + 1e-30);
    }
  }
}

TEST_CASE_TEMPLATE("avx512-vnni-q8 dot_n<N>: every vector's result is bitwise its dot_n<1> result", F, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {64u, 172u, 320u, 384u, 512u, 1000u, 1152u}) {
    CAPTURE(cols);
    const auto m = ref::test_matrix<F>(5, cols, 400 + unsigned(cols));
    constexpr std::size_t N = 4;
    std::vector<std::vector<float>> xs;
    typename K::Activation act[N];
    std::vector<std::vector<std::byte>> store(N);
    for (std::size_t j = 0; j < N; ++j) {
      xs.push_back(barato::test::random_vector(cols, 500 + unsigned(j), -1.0f, 1.0f));
      store[j].resize(K::activation_bytes(cols) + 64);
      void* p = store[j].data();
      std::size_t space = store[j].size();
      K::prepare(xs[j].data(), cols, act[j], static_cast<std::byte*>(std::align(64, K::activation_bytes(cols), p, space)));
    }
    for (std::size_t r = 0; r < 5; ++r) {
      float batched[N];
      K::template dot_n<N>(m.view(), r, act, batched);
      for (std::size_t j = 0; j < N; ++j) {
        float one;
        K::template dot_n<1>(m.view(), r, &act[j], &one);
        REQUIRE(std::bit_cast<std::uint32_t>(one) == std::bit_cast<std::uint32_t>(batched[j]));
      }
    }
  }
}

TEST_CASE_TEMPLATE("avx512-vnni-q8 dot_rows_tails<N>: 16 rows' lane sums and tail blocks at once, bitwise dot_n<1>", F,
                   GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  ref::check_dot_rows_tails<RowKernel<xsimd::avx512bw, F>, F>(77);
}

TEST_CASE_TEMPLATE("avx512-vnni-q8 prepare: ggml_q8_activation's codes and steps in the kernel's order, lane corrections", F,
                   GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  using K = RowKernel<xsimd::avx512bw, F>;
  for (const std::size_t cols : {32u, 64u, 128u, 200u, 1000u, 4864u}) {
    CAPTURE(cols);
    auto x = barato::test::random_vector(cols, 600 + unsigned(cols), -5.0f, 5.0f);
    if (cols >= 64) {  // a block with exact ties: amax = 127 makes x · id = x
      for (std::size_t c = 32; c < 64; ++c) x[c] = float(int(c) - 48) + 0.5f;
      x[40] = 127.0f;
    }
    if (cols >= 128)
      for (std::size_t c = 64; c < 96; ++c) x[c] = 0.0f;  // an all-zero block
    const Prepared<K> p(x);
    const auto& q = p.q;
    const auto& D = p.D;
    const auto& a = p.act;
    REQUIRE(a.chunks == cols / K::kChunk);
    for (std::size_t b = 0; b < D.size(); ++b) REQUIRE(a.step[b] == D[b]);
    const std::size_t full = a.chunks * K::kChunk;
    for (std::size_t c = 0; c < cols; ++c) {
      CAPTURE(c);
      const std::size_t in = c % K::kChunk;
      const std::size_t pos = c < full ? c / K::kChunk * K::kChunk + K::slot(in / 32, in % 32) : c;
      REQUIRE(int(a.q[pos]) == int(q[c]));
    }
    // lane vector t (a group of chunks), lane i: −offset · Σ q over block K::lane_block(t, i) and its
    // step (0 for the lanes of chunks past the last full one); lane_of inverts lane_block
    for (std::size_t t = 0; t < K::lane_vectors(a.chunks); ++t)
      for (std::size_t lane = 0; lane < 16; ++lane) {
        CAPTURE(t);
        CAPTURE(lane);
        const std::size_t b = K::lane_block(t, lane), k = b / K::kBlocksPerChunk;
        std::int32_t expect = 0;
        float step = 0.0f;
        if (k < a.chunks) {
          step = D[b];
          for (std::size_t j = 0; j < 32; ++j) expect -= K::kOffset * a.q[k * K::kChunk + K::slot(b % K::kBlocksPerChunk, j)];
          REQUIRE(K::lane_of(k, b % K::kBlocksPerChunk) == lane);
        }
        REQUIRE(a.corr[t * 16 + lane] == expect);
        REQUIRE(a.lane_step[t * 16 + lane] == step);
      }
  }
}

#else
TEST_CASE("quant/vnni_ggml.hpp: not compiled (the translation unit does not enable AVX-512 VNNI, BW and VL)") {
  MESSAGE("AVX-512 VNNI not enabled: the ggml VNNI row kernel is not built, nothing to test");
}
#endif
