#include "barato/nn/any_linear.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/nn/dense.hpp"
#include "support/nn_reference.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {
/// A minimal LinearLayer that is not a Dense: y[r] = scale · Σ x (checks that any model can be held).
struct SumLayer {
  std::size_t r, c;
  float scale;
  std::size_t rows() const { return r; }
  std::size_t cols() const { return c; }
  std::size_t bytes() const { return sizeof(float); }
  void apply(std::span<const float> x, std::span<float> y, int) const {
    require(x.size() == c && y.size() == r, "SumLayer: bad shape");
    float s = 0;
    for (float v : x) s += v;
    for (auto& v : y) v = scale * s;
  }
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int t) const {
    for (std::size_t j = 0; j < n; ++j) apply(x.subspan(j * c, c), y.subspan(j * r, r), t);
  }
};
static_assert(nn::LinearLayer<SumLayer>);
}  // namespace

TEST_CASE("AnyLinear forwards to the held layer bit for bit (run-time choice of format)") {
  const std::size_t rows = 172, cols = 17, n = 5;
  const auto w = test::random_vector(rows * cols, 41);
  const auto x = test::random_vector(n * cols, 42);
  for (const DType fmt : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(fmt));
    nn::AnyLinear any;
    std::vector<float> expect(n * rows), expect1(rows);
    const auto x1 = std::span<const float>(x).first(cols);
    auto fill = [&](auto layer) {
      layer.apply_batch(x, expect, n, 1);
      layer.apply(x1, expect1, 1);
      any = nn::AnyLinear(std::move(layer));
    };
    if (fmt == DType::f32) fill(nn::Dense<float>(rows, cols, w));
    if (fmt == DType::f16) fill(nn::Dense<f16>(rows, cols, w));
    if (fmt == DType::bf16) fill(nn::Dense<bf16>(rows, cols, w));
    CHECK(any.rows() == rows);
    CHECK(any.cols() == cols);
    CHECK(any.bytes() == rows * cols * dtype_size(fmt));
    std::vector<float> y(n * rows), y1(rows);
    any.apply_batch(x, y, n, 2);
    any.apply(x1, y1, 2);
    CHECK(y == expect);
    CHECK(y1 == expect1);
    CHECK((any.target<nn::Dense<float>>() != nullptr) == (fmt == DType::f32));
    CHECK((any.target<nn::Dense<f16>>() != nullptr) == (fmt == DType::f16));
  }
}

TEST_CASE("AnyLinear holds any LinearLayer, owns it, and reports errors") {
  CountingResource mr;
  {
    std::vector<nn::AnyLinear> layers;
    layers.emplace_back(SumLayer{3, 2, 2.0f});
    layers.emplace_back(nn::Dense<float>(2, 2, std::vector<float>{1, 0, 0, 1}, &mr));
    CHECK(mr.current() == 4 * sizeof(float));
    std::vector<float> x{1, 2}, y3(3), y2(2);
    layers[0].apply(x, y3);
    CHECK(y3 == std::vector<float>{6, 6, 6});
    layers[1].apply(x, y2);
    CHECK(y2 == x);
    CHECK_THROWS_AS(layers[1].apply(x, y3), shape_error);  // the held layer's own shape check
    nn::AnyLinear moved = std::move(layers[1]);
    CHECK(moved.rows() == 2);
  }
  CHECK(mr.current() == 0);  // the held Dense was destroyed with its owner

  nn::AnyLinear empty;
  CHECK(empty.empty());
  CHECK(empty.rows() == 0);
  CHECK(empty.bytes() == 0);
  std::vector<float> x(1), y(1);
  CHECK_THROWS_AS(empty.apply(x, y), value_error);
  CHECK_THROWS_AS(empty.apply_batch(x, y, 1), value_error);
}

namespace {
/// SumLayer with a `reserve(n)` that records its argument (as quant::Linear's grows its scratch).
struct ReservingLayer : SumLayer {
  std::size_t* reserved;
  void reserve(std::size_t n) const { *reserved = n; }
};
}  // namespace

TEST_CASE("AnyLinear::reserve forwards to a held layer that has reserve(n), and is a no-op otherwise") {
  std::size_t reserved = 0;
  const nn::AnyLinear a(ReservingLayer{{2, 3, 1.0f}, &reserved});
  a.reserve(17);
  CHECK(reserved == 17);
  const nn::AnyLinear b(SumLayer{2, 3, 1.0f});
  CHECK_NOTHROW(b.reserve(17));
  CHECK_NOTHROW(nn::AnyLinear{}.reserve(5));
}
