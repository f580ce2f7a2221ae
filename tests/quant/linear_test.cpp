#include "barato/quant/linear.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/core/memory.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/nn/linear_layer.hpp"
#include "quant/reference.hpp"
#include "support/reference.hpp"

using namespace barato;
using namespace barato::quant;
namespace ref = barato::test::quant_ref;

TEST_CASE_TEMPLATE("quant::Linear is an nn::LinearLayer whose apply equals gemv over its matrix", F, Int8PerRow<>,
                   Int4Group<128>, Nf4<64>, Int4PerTensor<>, GgmlQ8_0, GgmlQ4_0, Q4_0F32) {
  static_assert(nn::LinearLayer<Linear<F>>);
  const std::size_t R = 96, C = 256;
  const auto w = ref::normal_vector(R * C, 3, 0.1f);
  CountingResource mr;
  const Linear<F> lin(R, C, w, &mr);
  CHECK(lin.rows() == R);
  CHECK(lin.cols() == C);
  CHECK(lin.bytes() == lin.matrix().bytes());
  CHECK(mr.current() == lin.bytes());
  const auto x = barato::test::random_vector(2 * C, 4);
  std::vector<float> y(R), y_ref(R), yb(2 * R);
  const std::size_t before = mr.allocations();
  lin.apply(std::span<const float>(x.data(), C), y, 2);
  CHECK(mr.allocations() == before);  // apply allocates nothing
  gemv(lin.matrix().view(), std::span<const float>(x.data(), C), y_ref, 1);
  for (std::size_t r = 0; r < R; ++r) CHECK(y[r] == y_ref[r]);
  lin.apply_batch(x, yb, 2, 1);
  for (std::size_t r = 0; r < R; ++r) CHECK(yb[r] == y[r]);
  const auto c = lin.copy();
  CHECK(c.bytes() == lin.bytes());
}
