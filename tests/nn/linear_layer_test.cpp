// nn/linear_layer.hpp: the LinearLayer concept and its rules, checked once over every model of it in
// barato (dense fp32 / fp16 / bf16, quantized, W8A8, LLM.int8, and AnyLinear holding one): sizes,
// y overwritten, results identical for any thread count, apply_batch rows equal to apply, bytes()
// equal to the weights' measured storage, no allocation per apply, shape_error on mismatched sizes.
#include "barato/nn/linear_layer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/activation.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/outliers.hpp"
#include "quant/reference.hpp"
#include "support/reference.hpp"

using namespace barato;

namespace {

/// How far every model's y may be from the fp32 product W x, relative to max |W x|: the coarsest
/// formats here (int4 groups of 128, NF4 blocks of 64) err by a few percent on N(0, 0.05) weights;
/// a kernel that reads the wrong rows or columns errs by ~100 %.
constexpr double kFormatSanityRelTol = 0.15;

/// Builds layer L from fp32 weights w [rows, cols] with memory from `mr`.
template <class L>
L make(std::size_t rows, std::size_t cols, std::span<const float> w, std::pmr::memory_resource* mr) {
  if constexpr (std::is_same_v<L, nn::AnyLinear>) return nn::AnyLinear(nn::Dense<float>(rows, cols, w, mr));
  else if constexpr (std::is_same_v<L, quant::MixedInt8Linear<>>) return L(rows, cols, w, quant::kOutlierThreshold, mr);
  else return L(rows, cols, w, mr);
}

/// The bytes the weights of L occupy (codes and scales; not a layer's activation scratch), measured.
template <class L>
std::size_t measured_weight_bytes(std::size_t rows, std::size_t cols, std::span<const float> w) {
  CountingResource mr;
  if constexpr (requires { typename L::format; }) {
    const quant::QuantizedMatrix<typename L::format> m(rows, cols, w, &mr);
    return mr.current();
  } else {
    const L l = make<L>(rows, cols, w, &mr);
    return mr.current();
  }
}

/// A layer without apply_batch, and one whose apply takes no thread hint: not LinearLayers.
struct NoBatch {
  std::size_t rows() const { return 1; }
  std::size_t cols() const { return 1; }
  std::size_t bytes() const { return 4; }
  void apply(std::span<const float>, std::span<float>, int) const {}
};
struct NoThreads {
  std::size_t rows() const { return 1; }
  std::size_t cols() const { return 1; }
  std::size_t bytes() const { return 4; }
  void apply(std::span<const float>, std::span<float>) const {}
  void apply_batch(std::span<const float>, std::span<float>, std::size_t) const {}
};
static_assert(!nn::LinearLayer<NoBatch> && !nn::LinearLayer<NoThreads>);

}  // namespace

TEST_CASE_TEMPLATE("LinearLayer contract over every model", L, nn::Dense<float>, nn::Dense<f16>, nn::Dense<bf16>,
                   quant::Linear<quant::Int8PerRow<>>, quant::Linear<quant::Int4Group<128>>, quant::Linear<quant::Nf4<64>>,
                   quant::W8A8Linear<>, quant::MixedInt8Linear<>, nn::AnyLinear) {
  static_assert(nn::LinearLayer<L>);
  const std::size_t rows = 70, cols = 300, n = 5;
  const auto w = test::quant_ref::normal_vector(rows * cols, 7, 0.05f);
  CountingResource mr;
  const L layer = make<L>(rows, cols, w, &mr);
  CHECK(layer.rows() == rows);
  CHECK(layer.cols() == cols);
  CHECK(layer.bytes() == measured_weight_bytes<L>(rows, cols, w));

  const auto x = test::random_vector(n * cols, 8, -2.f, 2.f);
  const auto x0 = std::span<const float>(x).first(cols);
  std::vector<float> y1(rows, std::numeric_limits<float>::quiet_NaN()), y2(rows, 123.0f);
  const std::size_t allocations = mr.allocations();
  layer.apply(x0, y1, 1);
  layer.apply(x0, y2, 2);
  CHECK(mr.allocations() == allocations);  // apply allocates nothing
  CHECK(y1 == y2);                         // identical for any thread count (and y overwritten)
  const auto exact = test::quant_ref::matvec(w, rows, cols, x0.data());
  double worst = 0, ymax = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    worst = std::max(worst, std::abs(double(y1[r]) - exact[r]));
    ymax = std::max(ymax, std::abs(exact[r]));
  }
  CHECK(worst <= kFormatSanityRelTol * ymax);

  std::vector<float> yb(n * rows, std::numeric_limits<float>::quiet_NaN()), yt(rows);
  layer.apply_batch(x, yb, n, 2);
  for (std::size_t t = 0; t < n; ++t) {
    CAPTURE(t);
    layer.apply(std::span<const float>(x).subspan(t * cols, cols), yt, 1);
    CHECK(std::equal(yt.begin(), yt.end(), yb.begin() + static_cast<std::ptrdiff_t>(t * rows)));
  }

  std::vector<float> y_short(rows - 1), yb_short(n * rows - 1);
  CHECK_THROWS_AS(layer.apply(std::span<const float>(x).first(cols - 1), y1, 1), shape_error);
  CHECK_THROWS_AS(layer.apply(x0, y_short, 1), shape_error);
  CHECK_THROWS_AS(layer.apply_batch(x, yb_short, n, 1), shape_error);
  CHECK_THROWS_AS(layer.apply_batch(x, yb, n + 1, 1), shape_error);
}
