#include "barato/attention/eigen_baseline.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "support/reference.hpp"

using namespace barato;

TEST_CASE("the Eigen expression of a decode step equals the double reference; scores hold p") {
  for (const std::size_t d : {1, 7, 64, 128}) {
    for (const std::size_t n : {1, 2, 31, 1000}) {
      CAPTURE(d); CAPTURE(n);
      const auto k = test::random_vector(n * d, 1), v = test::random_vector(n * d, 2);
      const auto q = test::random_vector(d, 3, -3.f, 3.f);
      std::vector<float> scores(n), out(d);
      const auto ni = static_cast<Eigen::Index>(n), di = static_cast<Eigen::Index>(d);
      attention::decode_eigen(Eigen::Map<const attention::RowMatrixXf>(k.data(), ni, di),
                              Eigen::Map<const attention::RowMatrixXf>(v.data(), ni, di), q, scores, out);
      CHECK(test::max_rel_diff(out, test::attention_ref(q, k, v, 1, 1, d, n - 1, 1.0 / std::sqrt(double(d)))) <=
            test::kFp32RelTol);
      double sum = 0;
      for (float p : scores) sum += p;
      CHECK(sum == doctest::Approx(1.0).epsilon(test::kFp32RelTol));  // softmax rows sum to 1 up to fp32 summation
    }
  }
}

TEST_CASE("decode_eigen rejects bad shapes with shape_error") {
  attention::RowMatrixXf k = attention::RowMatrixXf::Random(5, 4), v = k, v_bad(5, 3), empty(0, 4);
  std::vector<float> q(4), scores(5), out(4), q_bad(3), scores_bad(4), out_bad(5);
  CHECK_NOTHROW(attention::decode_eigen(k, v, q, scores, out));
  CHECK_THROWS_AS(attention::decode_eigen(k, v_bad, q, scores, out), shape_error);
  CHECK_THROWS_AS(attention::decode_eigen(k, v, q_bad, scores, out), shape_error);
  CHECK_THROWS_AS(attention::decode_eigen(k, v, q, scores_bad, out), shape_error);
  CHECK_THROWS_AS(attention::decode_eigen(k, v, q, scores, out_bad), shape_error);
  CHECK_THROWS_AS(attention::decode_eigen(empty, empty, q, scores, out), shape_error);
}
