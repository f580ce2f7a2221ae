#include "barato/quant/offset_linear.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/nn/linear_layer.hpp"
#include "support/alloc_counter.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;

namespace {

/// Random asymmetric group weights, as a k-quant holds them: codes 0…levels−1 (int8), a positive
/// scale and a signed offset per group (a short last group when cols % G != 0).
template <class F>
struct OffsetWeights {
  std::size_t rows, cols, groups;
  std::vector<std::int8_t> q;
  std::vector<float> scales, offsets;

  OffsetWeights(std::size_t r, std::size_t c, int levels, unsigned seed)
      : rows(r), cols(c), groups((c + F::granularity::kGroup - 1) / F::granularity::kGroup), q(r * c), scales(r * groups),
        offsets(r * groups) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> code(0, levels - 1);
    std::uniform_real_distribution<float> scale(0.001f, 0.02f), offset(-0.15f, 0.05f);
    for (auto& v : q) v = static_cast<std::int8_t>(code(gen));
    for (auto& s : scales) s = scale(gen);
    for (auto& o : offsets) o = offset(gen);
  }
  [[nodiscard]] OffsetLinear<F> layer(std::pmr::memory_resource* mr = std::pmr::get_default_resource()) const {
    Buffer<std::uint8_t> codes(q.size(), mr);
    std::copy(q.begin(), q.end(), reinterpret_cast<std::int8_t*>(codes.data()));
    Buffer<float> s(scales.size(), mr);
    std::copy(scales.begin(), scales.end(), s.data());
    return OffsetLinear<F>(QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(s)), offsets, mr);
  }
  /// w_rj = s·q + o, in double.
  [[nodiscard]] double weight(std::size_t r, std::size_t j) const {
    const std::size_t g = r * groups + j / F::granularity::kGroup;
    return double(scales[g]) * q[r * cols + j] + double(offsets[g]);
  }
};

}  // namespace

TEST_CASE_TEMPLATE("quant::OffsetLinear: y = Σ (s·q + o) x within the activation quantization's bound", F, Int8Group<32, float>,
                   Int8Group<16, float>) {
  static_assert(nn::LinearLayer<OffsetLinear<F>>);
  for (const std::size_t cols : {std::size_t{256}, std::size_t{100}, std::size_t{32}, std::size_t{7}}) {
    CAPTURE(cols);
    const std::size_t rows = 67;
    const OffsetWeights<F> w(rows, cols, 32, 11 + static_cast<unsigned>(cols));
    CountingResource mr;
    const auto lin = w.layer(&mr);
    CHECK(lin.rows() == rows);
    CHECK(lin.cols() == cols);
    CHECK(lin.groups() == w.groups);
    CHECK(lin.bytes() == lin.codes().bytes() + rows * w.groups * sizeof(float));
    CHECK(mr.current() == lin.bytes());
    CHECK(lin.offset(5, w.groups - 1) == w.offsets[5 * w.groups + w.groups - 1]);
    const auto x = barato::test::random_vector(cols, 3, -1.0f, 1.0f);
    std::vector<float> y(rows);
    lin.apply(x, y, 1);
    double xmax = 0;
    for (const float v : x) xmax = std::max(xmax, double(std::fabs(v)));
    for (std::size_t r = 0; r < rows; ++r) {
      double exact = 0, code_mass = 0, mass = 0;
      for (std::size_t j = 0; j < cols; ++j) {
        exact += w.weight(r, j) * x[j];
        code_mass += std::fabs(double(w.scales[r * w.groups + j / F::granularity::kGroup]) * w.q[r * cols + j]);
        mass += std::fabs(w.weight(r, j) * x[j]) + std::fabs(double(w.offsets[r * w.groups + j / F::granularity::kGroup]) * x[j]);
      }
      // 15-bit activations: |Δx| ≤ max|x| / 2^14 per element, over the uncentred codes; fp32 sums.
      const double bound = code_mass * xmax / 16384.0 + 1e-6 * mass + 1e-7;
      CAPTURE(r);
      CHECK(std::fabs(double(y[r]) - exact) <= bound);
    }
  }
}

TEST_CASE("quant::OffsetLinear: zero offsets give the codes' product; the offset term alone is Σ_g o_g Σ_{j∈g} x_j") {
  using F = Int8Group<32, float>;
  const std::size_t rows = 40, cols = 96;
  OffsetWeights<F> w(rows, cols, 16, 5);
  std::fill(w.offsets.begin(), w.offsets.end(), 0.0f);
  const auto x = barato::test::random_vector(cols, 6, -1.0f, 1.0f);
  std::vector<float> y(rows), y_codes(rows);
  w.layer().apply(x, y, 1);
  const auto lin = w.layer();
  lin.codes().apply(x, y_codes, 1);
  for (std::size_t r = 0; r < rows; ++r) CHECK(y[r] == y_codes[r]);
  // all codes 0: only the offsets speak, y_r = Σ_g o_rg · u_g (fp32 group sums, fused in group order)
  OffsetWeights<F> o(rows, cols, 1, 8);
  const auto lo = o.layer();
  lo.apply(x, y, 1);
  for (std::size_t r = 0; r < rows; ++r) {
    float acc = 0.0f;
    for (std::size_t g = 0; g < o.groups; ++g) {
      float u = 0.0f;
      for (std::size_t j = g * 32; j < std::min(cols, (g + 1) * 32); ++j) u += x[j];
      acc = std::fma(o.offsets[r * o.groups + g], u, acc);
    }
    CHECK(y[r] == acc);
  }
}

TEST_CASE("quant::OffsetLinear: batch invariance — row t of apply_batch is apply(x_t) bit for bit, any n and threads") {
  using F = Int8Group<32, float>;
  const std::size_t rows = 200, cols = 160;  // 4 tiles of the offset term, the last short
  const OffsetWeights<F> w(rows, cols, 16, 21);
  const auto lin = w.layer();
  const std::size_t n_max = 70;
  const auto x = barato::test::random_vector(n_max * cols, 22, -2.0f, 2.0f);
  std::vector<float> alone(n_max * rows);
  for (std::size_t t = 0; t < n_max; ++t)
    lin.apply(std::span<const float>(x.data() + t * cols, cols), std::span<float>(alone.data() + t * rows, rows), 1);
  for (const int threads : {1, 2}) {
    for (const std::size_t n : {1, 2, 3, 4, 5, 8, 16, 17, 64, 70}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<float> y(n * rows);
      lin.apply_batch(std::span<const float>(x.data(), n * cols), y, n, threads);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < n * rows; ++i) differ += y[i] != alone[i];
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("quant::OffsetLinear: nothing allocated after reserve; sizes checked") {
  using F = Int8Group<16, float>;
  const std::size_t rows = 64, cols = 128, n = 16;
  const OffsetWeights<F> w(rows, cols, 4, 31);
  const auto lin = w.layer();
  lin.reserve(n);
  const auto x = barato::test::random_vector(n * cols, 32, -1.0f, 1.0f);
  std::vector<float> y(n * rows);
  {
    barato::test::CountAllocations count;
    lin.apply_batch(x, y, n, 1);
    lin.apply(std::span<const float>(x.data(), cols), std::span<float>(y.data(), rows), 1);
    CHECK(count.count() == 0);
  }
  std::vector<float> short_y(rows - 1), short_x(cols - 1);
  CHECK_THROWS_AS(lin.apply(std::span<const float>(x.data(), cols), short_y, 1), shape_error);
  CHECK_THROWS_AS(lin.apply(short_x, std::span<float>(y.data(), rows), 1), shape_error);
  // offsets of the wrong size: a shape_error naming both counts
  Buffer<std::uint8_t> codes(rows * cols);
  Buffer<float> scales(rows * cols / 16);
  const std::vector<float> offsets(rows * cols / 16 - 1);
  QuantizedMatrix<F> m(rows, cols, std::move(codes), std::move(scales));
  CHECK_THROWS_WITH_AS(OffsetLinear<F>(std::move(m), offsets), doctest::Contains("expected 64 x 8 = 512 offsets"), shape_error);
  CHECK(m.rows() == rows);  // a failed construction leaves the matrix with its owner
  CHECK(m.bytes() == rows * cols + rows * cols / 16 * sizeof(float));
}

TEST_CASE("quant::OffsetLinear over Q4_0F32: s·u + o held as s·(u − 8) + (o + 8s), ggml's int8-activation bound, batch invariant") {
  // How the examples' GGUF loader holds Q4_1 / Q4_K: 4-bit integers u (0…15) centred as Q4_0F32 codes.
  using F = Q4_0F32;
  using P = packing_of<F>;
  for (const std::size_t cols : {std::size_t{512}, std::size_t{160}, std::size_t{45}}) {  // chunks, a short group, a tail
    CAPTURE(cols);
    const std::size_t rows = 37, groups = (cols + 31) / 32;
    OffsetWeights<F> w(rows, cols, 16, 41 + static_cast<unsigned>(cols));
    Buffer<std::uint8_t> codes(rows * P::row_bytes(cols));
    std::fill(codes.data(), codes.data() + codes.size(), std::uint8_t{0});
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j)
        P::set(codes.data() + r * P::row_bytes(cols), j, cols, static_cast<std::uint8_t>(w.q[r * cols + j]));
    Buffer<float> scales(rows * groups);
    std::copy(w.scales.begin(), w.scales.end(), scales.data());
    std::vector<float> moved(w.offsets.size());
    for (std::size_t g = 0; g < moved.size(); ++g) moved[g] = w.offsets[g] + 8.0f * w.scales[g];
    const OffsetLinear<F> lin(QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales)), moved);
    CHECK(lin.bytes() == rows * P::row_bytes(cols) + 2 * rows * groups * sizeof(float));
    const std::size_t n_max = 9;
    const auto x = barato::test::random_vector(n_max * cols, 43, -1.0f, 1.0f);
    std::vector<float> alone(n_max * rows);
    for (std::size_t t = 0; t < n_max; ++t)
      lin.apply(std::span<const float>(x.data() + t * cols, cols), std::span<float>(alone.data() + t * rows, rows), 1);
    for (std::size_t t = 0; t < n_max; ++t) {
      const float* xt = x.data() + t * cols;
      for (std::size_t r = 0; r < rows; ++r) {
        double exact = 0, bound = 1e-7;
        for (std::size_t j = 0; j < cols; ++j) {
          const std::size_t g = r * groups + j / 32;
          exact += w.weight(r, j) * xt[j];
          double amax = 0;  // ggml's activation block of column j
          for (std::size_t i = j / 32 * 32; i < std::min(cols, j / 32 * 32 + 32); ++i) amax = std::max(amax, double(std::fabs(xt[i])));
          // |Δx_j| ≤ half a step amax / 127 plus the fp16 step's 2⁻¹¹, over the centred codes; fp32 sums and the
          // offset's one rounding
          bound += std::fabs(double(w.scales[g]) * (w.q[r * cols + j] - 8)) * amax * (0.5 / 127 + std::ldexp(1.0, -10)) +
                   1e-6 * (std::fabs(w.weight(r, j) * xt[j]) + std::fabs(double(moved[g]) * xt[j]));
        }
        CAPTURE(t);
        CAPTURE(r);
        CHECK(std::fabs(double(alone[t * rows + r]) - exact) <= bound);
      }
    }
    for (const int threads : {1, 2})
      for (const std::size_t n : {std::size_t{2}, std::size_t{4}, std::size_t{5}, n_max}) {
        CAPTURE(threads);
        CAPTURE(n);
        std::vector<float> y(n * rows);
        lin.apply_batch(std::span<const float>(x.data(), n * cols), y, n, threads);
        CHECK(std::equal(y.begin(), y.end(), alone.begin()));
      }
  }
}
