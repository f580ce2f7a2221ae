#include "barato/nn/dense.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <vector>

#include "barato/core/memory.hpp"
#include "support/nn_reference.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

struct Shape {
  std::size_t rows, cols;
};
// Odd sizes hit every tail: rows not a multiple of the 4-row tile, cols not a multiple of the SIMD
// width, a single row / column, and a matrix large enough to be split between threads and row blocks.
const Shape kShapes[] = {{172, 17}, {17, 172}, {64, 64}, {1, 5}, {5, 1}, {33, 100}, {1000, 300}, {3, 1031}};

/// The weights as stored in T, back in float (the reference then sees exactly what the kernel reads).
template <class T>
std::vector<float> rounded(const std::vector<float>& w) {
  std::vector<float> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = static_cast<float>(static_cast<T>(w[i]));
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("Dense::apply matches the double reference for fp32, fp16 and bf16 storage", T, float, f16, bf16) {
  for (const Shape& shape : kShapes) {
    const std::size_t rows = shape.rows, cols = shape.cols;  // not a structured binding: clang 14 cannot capture those
    CAPTURE(rows);
    CAPTURE(cols);
    const auto w = test::random_vector(rows * cols, 11);
    const auto x = test::random_vector(cols, 12);
    const nn::Dense<T> layer(rows, cols, w);
    REQUIRE(layer.rows() == rows);
    REQUIRE(layer.cols() == cols);
    const auto ref = test::dense_ref(rounded<T>(w), rows, cols, x, 1);
    std::vector<float> y1(rows), y2(rows);
    layer.apply(x, y1, 1);
    layer.apply(x, y2, 2);
    CHECK(test::max_rel_diff(y1, ref) < test::kDenseFp32RelTol);
    CHECK(y1 == y2);  // bit-identical for any thread count
  }
}

TEST_CASE_TEMPLATE("Dense::apply_batch equals n GEMVs bit for bit and the double reference", T, float, f16, bf16) {
  for (const Shape& shape : kShapes) {
    const std::size_t rows = shape.rows, cols = shape.cols;
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{9}}) {
      CAPTURE(rows);
      CAPTURE(cols);
      CAPTURE(n);
      const auto w = test::random_vector(rows * cols, 21);
      const auto x = test::random_vector(n * cols, 22);
      const nn::Dense<T> layer(rows, cols, w);
      std::vector<float> y1(n * rows), y2(n * rows), single(n * rows);
      layer.apply_batch(x, y1, n, 1);
      layer.apply_batch(x, y2, n, 2);
      for (std::size_t j = 0; j < n; ++j)
        layer.apply(std::span<const float>(x).subspan(j * cols, cols), std::span<float>(single).subspan(j * rows, rows));
      CHECK(test::max_rel_diff(y1, test::dense_ref(rounded<T>(w), rows, cols, x, n)) < test::kDenseFp32RelTol);
      CHECK(y1 == y2);
      CHECK(y1 == single);
    }
  }
}

TEST_CASE("Dense<T, Arch> runs the kernels of the arch it names: the portable SSE2 path matches the reference") {
#if XSIMD_WITH_SSE2
  for (const Shape& shape : kShapes) {
    const std::size_t rows = shape.rows, cols = shape.cols;
    CAPTURE(rows);
    CAPTURE(cols);
    const auto w = test::random_vector(rows * cols, 31);
    const auto x = test::random_vector(3 * cols, 32);
    const nn::Dense<float, xsimd::sse2> sse(rows, cols, w);
    static_assert(std::is_same_v<nn::Dense<float, xsimd::sse2>::arch_type, xsimd::sse2>);
    static_assert(nn::LinearLayer<nn::Dense<float, xsimd::sse2>>);
    std::vector<float> y(3 * rows), one(rows);
    sse.apply_batch(x, y, 3);
    CHECK(test::max_rel_diff(y, test::dense_ref(w, rows, cols, x, 3)) < test::kDenseFp32RelTol);
    sse.apply(std::span<const float>(x).first(cols), one);
    CHECK(std::vector<float>(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(rows)) == one);
  }
#endif
  static_assert(std::is_same_v<nn::Dense<float>::arch_type, simd::DefaultArch>);
}

TEST_CASE_TEMPLATE("Dense storage: bytes, allocation through the memory resource, copy, weights()", T, float, f16, bf16) {
  CountingResource mr;
  {
    const auto w = test::random_vector(17 * 172, 3);
    nn::Dense<T> layer(17, 172, w, &mr);
    CHECK(layer.bytes() == 17 * 172 * sizeof(T));
    CHECK(mr.current() == layer.bytes());
    const auto view = layer.view();
    CHECK(view.rows == 17);
    CHECK(view.cols == 172);
    CHECK(static_cast<float>(view.row(2)[5]) == static_cast<float>(static_cast<T>(w[2 * 172 + 5])));

    auto copy = layer.copy();
    CHECK(mr.current() == 2 * layer.bytes());
    copy.weights()[0] = static_cast<T>(1000.0f);  // the copy is deep
    CHECK(static_cast<float>(layer.weights()[0]) == static_cast<float>(static_cast<T>(w[0])));

    nn::Dense<T> zero(4, 4, &mr);  // zero-initialised, filled through weights()
    for (std::size_t i = 0; i < 4; ++i) zero.weights()[i * 4 + i] = static_cast<T>(2.0f);
    std::vector<float> x{1, 2, 3, 4}, y(4);
    zero.apply(x, y);
    CHECK(y == std::vector<float>{2, 4, 6, 8});
  }
  CHECK(mr.current() == 0);
}

TEST_CASE("Dense rejects mismatched shapes with shape_error") {
  const auto w = test::random_vector(6, 1);
  CHECK_THROWS_AS(nn::Dense<float>(2, 4, w), shape_error);
  CHECK_THROWS_AS(nn::Dense<float>(0, 4), shape_error);
  CHECK_THROWS_AS(nn::Dense<float>(4, 0), shape_error);
  const nn::Dense<float> layer(2, 3, w);
  std::vector<float> x3(3), x4(4), y2(2), y3(3), x6(6), y4(4);
  CHECK_THROWS_AS(layer.apply(x4, y2), shape_error);
  CHECK_THROWS_AS(layer.apply(x3, y3), shape_error);
  CHECK_NOTHROW(layer.apply(x3, y2));
  CHECK_THROWS_AS(layer.apply_batch(x6, y2, 2), shape_error);
  CHECK_THROWS_AS(layer.apply_batch(x4, y4, 2), shape_error);
  CHECK_NOTHROW(layer.apply_batch(x6, y4, 2));
  CHECK_NOTHROW(layer.apply_batch({}, {}, 0));
}

static_assert(nn::LinearLayer<nn::DenseLinear>);

TEST_CASE_TEMPLATE("Dense::apply_batch rows equal apply bitwise for n = 1 … 70 and 1 or 2 threads", T, float, f16, bf16) {
  // 96 × 300: one row block; 700 × 300: several L2 row blocks (kRowBlockBytes / (300 · sizeof(T)) < 700)
  for (const auto& shape : {std::tuple<std::size_t, std::size_t, std::size_t>{96, 300, 1}, {700, 300, 11}}) {
    const auto [rows, cols, step] = shape;
    const std::size_t rows_ = rows;  // a plain name for CAPTURE (clang 14 cannot capture bindings)
    CAPTURE(rows_);
    const auto w = test::random_vector(rows * cols, 31);
    const nn::Dense<T> layer(rows, cols, w);
    constexpr std::size_t kMaxN = 70;
    const auto x = test::random_vector(kMaxN * cols, 32);
    std::vector<float> single(kMaxN * rows), yb(kMaxN * rows);
    for (std::size_t t = 0; t < kMaxN; ++t)
      layer.apply(std::span<const float>(x).subspan(t * cols, cols), std::span<float>(single).subspan(t * rows, rows));
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      for (std::size_t n = 1; n <= kMaxN; n += (n < 9 ? 1 : step)) {
        CAPTURE(n);
        layer.apply_batch(std::span<const float>(x).first(n * cols), std::span<float>(yb).first(n * rows), n, threads);
        for (std::size_t i = 0; i < n * rows; ++i)
          if (yb[i] != single[i]) REQUIRE(yb[i] == single[i]);
      }
    }
  }
}
