#include "barato/kv/quantized.hpp"

#include <doctest/doctest.h>

#include <cstdint>

#include <cmath>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/kernels/quantized.hpp"
#include "barato/core/memory.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// The row scale absmax / max_code computed in fp32 against the double reference: one or two
/// roundings (u ≈ 6·10⁻⁸ each).
constexpr double kScaleRelTol = 1e-6;

/// Scalar reference of one row's absmax quantisation, in double: (scale, codes).
std::pair<double, std::vector<int>> quantize_ref(const float* x, std::size_t d, int max_code) {
  double amax = 0;
  for (std::size_t c = 0; c < d; ++c) amax = std::max(amax, std::abs(double(x[c])));
  std::vector<int> q(d, 0);
  if (amax == 0) return {0.0, q};
  const double s = amax / max_code;
  for (std::size_t c = 0; c < d; ++c) q[c] = static_cast<int>(std::clamp(std::round(x[c] / s), -double(max_code), double(max_code)));
  return {s, q};
}
}  // namespace

TEST_CASE("quantized formats: packing layout, codes match the scalar reference, SIMD code loads match scalar") {
  // int4 layout: element 2i in the low nibble, 2i+1 in the high nibble, stored as code + 8.
  const float x[5] = {7.0f, -7.0f, 1.0f, 0.0f, -3.0f};
  std::uint8_t row[3];
  CHECK(kv::quantize_row<kv::Int4>(x, 5, row) == doctest::Approx(1.0f));
  CHECK(row[0] == ((8 - 7) << 4 | (8 + 7)));
  CHECK(row[1] == ((8 + 0) << 4 | (8 + 1)));
  CHECK((row[2] & 0x0F) == 8 - 3);
  std::uint8_t z[5];
  const float zeros[5] = {};
  CHECK(kv::quantize_row<kv::Int8>(zeros, 5, z) == 0.0f);

  for (const std::size_t d : {16, 40, 64, 67}) {
    const auto data = test::random_vector(d * 20, static_cast<unsigned>(d), -3.f, 3.f);
    for (std::size_t r = 0; r < 20; ++r) {
      const float* xr = data.data() + r * d;
      std::vector<std::uint8_t> p8(kv::Int8::row_bytes(d)), p4(kv::Int4::row_bytes(d));
      const float s8 = kv::quantize_row<kv::Int8>(xr, d, p8.data());
      const float s4 = kv::quantize_row<kv::Int4>(xr, d, p4.data());
      const auto [r8, q8] = quantize_ref(xr, d, 127);
      const auto [r4, q4] = quantize_ref(xr, d, 7);
      CHECK(s8 == doctest::Approx(r8).epsilon(kScaleRelTol));
      CHECK(s4 == doctest::Approx(r4).epsilon(kScaleRelTol));
      int off8 = 0, off4 = 0;
      for (std::size_t c = 0; c < d; ++c) {
        off8 = std::max(off8, std::abs(kv::Int8::code(p8.data(), c) - q8[c]));  // ±1 only at exact .5 ties
        off4 = std::max(off4, std::abs(kv::Int4::code(p4.data(), c) - q4[c]));
        CHECK(std::abs(s8 * kv::Int8::code(p8.data(), c) - xr[c]) <= 0.5 * s8 * (1 + test::kStepRoundingSlack));
        CHECK(std::abs(s4 * kv::Int4::code(p4.data(), c) - xr[c]) <= 0.5 * s4 * (1 + test::kStepRoundingSlack));
      }
      CHECK(off8 <= 1);
      CHECK(off4 <= 1);
      constexpr std::size_t W = simd::kFloatLanes<>;
      for (std::size_t c = 0; c + W <= d; c += W) {
        alignas(64) float a[W], b[W];
        attention::detail::load_codes<simd::DefaultArch, kv::Int8>(p8.data(), c).store_aligned(a);
        attention::detail::load_codes<simd::DefaultArch, kv::Int4>(p4.data(), c).store_aligned(b);
        for (std::size_t i = 0; i < W; ++i) {
          CHECK(a[i] == float(kv::Int8::code(p8.data(), c + i)));
          CHECK(b[i] == float(kv::Int4::code(p4.data(), c + i)));
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("quantized cache: bytes/token including scales equals the allocator's measurement", Q,
                   kv::Quantized<kv::Int8>, kv::Quantized<kv::Int4>, kv::Quantized<kv::Int8, kv::Int4>) {
  for (const std::size_t d : {64, 67}) {
    CountingResource mr;
    const std::size_t H = 4, cap = 1000;
    Q c(H, d, cap, &mr);
    CHECK(mr.current() == cap * Q::bytes_per_token(H, d));
    CHECK(c.bytes_reserved() == mr.current());
    const std::size_t per_tok = H * (Q::key_format::row_bytes(d) + Q::value_format::row_bytes(d) + 8);
    CHECK(Q::bytes_per_token(H, d) == per_tok);
  }
  // int8 keys + values at d = 64: 2·64 code bytes + 2·4 scale bytes per head = 136 vs 512 in fp32
  CHECK(kv::Quantized<kv::Int8>::bytes_per_token(1, 64) == 136);
  CHECK(kv::Quantized<kv::Int4>::bytes_per_token(1, 64) == 72);
  CHECK(kv::Quantized<kv::Int8, kv::Int4>::bytes_per_token(1, 64) == 104);
}

TEST_CASE_TEMPLATE("quantized attention equals double-precision attention over the dequantised rows", Q,
                   kv::Quantized<kv::Int8>, kv::Quantized<kv::Int4>, kv::Quantized<kv::Int8, kv::Int4>,
                   kv::Quantized<kv::Int4, kv::Int8>) {
  for (const std::size_t d : {16, 64, 67})
  for (const std::size_t hq : {2, 6}) {  // g = 1 reads codes in the kernel; g = 3 stages dequantised rows
    CAPTURE(d);
    CAPTURE(hq);
    const std::size_t H = 2, n = 133;
    const attention::Heads heads{.n_q = hq, .n_kv = H, .head_dim = d};
    Q c(H, d, n);
    const auto k = test::random_vector(n * H * d, 5, -2.f, 2.f), v = test::random_vector(n * H * d, 6, -2.f, 2.f);
    c.append(k, v);
    std::vector<float> kd(k.size()), vd(v.size());
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t x = 0; x < d; ++x) {
          kd[(p * H + h) * d + x] = c.key(h, p, x);
          vd[(p * H + h) * d + x] = c.value(h, p, x);
        }
    const auto q = test::random_vector(hq * d, 9, -2.f, 2.f);
    std::vector<float> out(q.size());
    attention::decode(q, c, heads, out);
    const auto ref = test::attention_ref(q, kd, vd, hq, H, d, n - 1, 1.0 / std::sqrt(double(d)));
    CHECK(test::max_rel_diff(out, ref) <= test::kFp32RelTol);
  }
}

TEST_CASE("quantized: a context that cannot exist is a capacity_error naming its size, before any allocation") {
  barato::CountingResource mem;
  const std::size_t phys = barato::physical_memory_bytes();
  // 2^36 tokens x 8 heads x (128 + 128 + 8) bytes = 2^39 · 264 bytes
  if (phys != 0 && phys < (std::size_t{1} << 45))
    CHECK_THROWS_WITH_AS(barato::kv::Quantized<barato::kv::Int8>(8, 128, std::size_t{1} << 36, &mem),
                         doctest::Contains("kv::Quantized of capacity 68719476736 tokens: 145135534866432 bytes requested"),
                         barato::capacity_error);
  CHECK_THROWS_WITH_AS(barato::kv::Quantized<barato::kv::Int4>(std::size_t{1} << 40, 64, std::size_t{1} << 40, &mem),
                       doctest::Contains("n_kv_heads x capacity = 1099511627776 x 1099511627776 overflows"), barato::capacity_error);
  CHECK(mem.allocations() == 0);
}
