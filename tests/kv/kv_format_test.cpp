#include "barato/kv/kv_format.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace barato;

TEST_CASE_TEMPLATE("KV code formats: every code survives put / code in every position", F, kv::Int8, kv::Int4) {
  static_assert(kv::KvFormat<F>);
  constexpr std::size_t d = 7;
  std::vector<std::uint8_t> row(F::row_bytes(d), 0xAB);
  for (int q = -F::kMaxCode; q <= F::kMaxCode; ++q)
    for (std::size_t c = 0; c < d; ++c) {
      F::put(row.data(), c, q);
      CHECK(F::code(row.data(), c) == q);
      if (c > 0) F::put(row.data(), c - 1, -q);  // the neighbour (same byte for int4) is independent
      CHECK(F::code(row.data(), c) == q);
    }
  CHECK(F::row_bytes(64) * 8 == 64 * F::kBits);
}

TEST_CASE_TEMPLATE("quantize_row: the largest magnitude gets kMaxCode, codes clamp, bad rows become zeros", F, kv::Int8,
                   kv::Int4) {
  const float x[6] = {-4.0f, 1.0f, 0.0f, 2.0f, 4.0f, -0.5f};
  std::vector<std::uint8_t> out(F::row_bytes(6));
  const float s = kv::quantize_row<F>(x, 6, out.data());
  CHECK(s == 4.0f / F::kMaxCode);
  CHECK(kv::quantize_row<F>(x, 6, out.data()) == s);  // deterministic
  CHECK(F::code(out.data(), 0) == -F::kMaxCode);
  CHECK(F::code(out.data(), 4) == F::kMaxCode);
  CHECK(F::code(out.data(), 2) == 0);
  constexpr float kProductSlack = 1e-6f;  // s · code is itself rounded to fp32 (relative, ≫ 2^-24)
  for (std::size_t c = 0; c < 6; ++c) CHECK(std::abs(s * F::code(out.data(), c) - x[c]) <= 0.5f * s * (1 + kProductSlack));

  const float inf[3] = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  std::vector<std::uint8_t> z(F::row_bytes(3), 0xFF);
  CHECK(kv::quantize_row<F>(inf, 3, z.data()) == 0.0f);
  for (std::size_t c = 0; c < 3; ++c) CHECK(F::code(z.data(), c) == 0);
}

TEST_CASE_TEMPLATE("quantize_row edge cases: NaN anywhere, -inf, all zeros, -0 and subnormals never give a NaN scale", F,
                   kv::Int8, kv::Int4) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const float tiny = std::numeric_limits<float>::denorm_min();
  auto zeros = [](const std::vector<float>& x) {
    std::vector<std::uint8_t> out(F::row_bytes(x.size()), 0xFF);
    const float s = kv::quantize_row<F>(x.data(), x.size(), out.data());
    bool all_zero = true;
    for (std::size_t c = 0; c < x.size(); ++c) all_zero = all_zero && F::code(out.data(), c) == 0;
    return s == 0.0f && all_zero;
  };
  // a NaN is invisible to max(): it must still turn the row into zeros, wherever it is
  CHECK(zeros({kNaN, 1.0f, 2.0f}));
  CHECK(zeros({1.0f, 2.0f, kNaN}));
  CHECK(zeros({3.0f, -kInf, 1.0f}));
  CHECK(zeros({0.0f, 0.0f, 0.0f, 0.0f}));
  CHECK(zeros({-0.0f, -0.0f, 0.0f}));
  std::vector<std::uint8_t> out(F::row_bytes(3));
  const float s = kv::quantize_row<F>(std::vector<float>{tiny, -tiny, 0.0f}.data(), 3, out.data());
  CHECK(std::isfinite(s));
  CHECK(s >= 0.0f);
  CHECK(std::abs(s * static_cast<float>(F::code(out.data(), 0)) - tiny) <= tiny);  // within one subnormal step
}
