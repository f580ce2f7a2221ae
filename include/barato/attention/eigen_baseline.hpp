#pragma once
/// \file
/// The cached decode step written as the straightforward Eigen expression — three passes over
/// materialised intermediates:
///   s = c·K·q            (GEMV, [n])
///   p = softmax(s)       (two more passes over s)
///   o = Vᵀ·p             (GEMV, [d])
/// It computes what `attention::decode` computes for one head, reading K and V once each but with
/// a 1×n score row in memory between the passes. `bench_attention` uses it as the baseline the
/// fused one-pass kernels (attention/kernels/) must beat.

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>

#include "barato/core/error.hpp"

namespace barato::attention {

/// A dynamic row-major fp32 matrix (rows = positions, columns = head dims).
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One decode step of one head with Eigen: k, v [n, d]; q [d]; `scores` ≥ n floats of caller
/// scratch (holds the probabilities p on return); `out` [d]. `scale` unset means 1/√d.
/// Throws `shape_error` on mismatched shapes or n = 0. Complexity: 2·n·d MACs, 4·n score bytes.
inline void decode_eigen(const Eigen::Ref<const RowMatrixXf>& k, const Eigen::Ref<const RowMatrixXf>& v,
                         std::span<const float> q, std::span<float> scores, std::span<float> out,
                         std::optional<float> scale = std::nullopt) {
  const auto n = static_cast<std::size_t>(k.rows());
  const auto d = static_cast<std::size_t>(k.cols());
  require(n > 0, "attention::decode_eigen: no cached positions (n = 0)");
  require(d > 0, "attention::decode_eigen: head_dim must be > 0, got 0");
  require(static_cast<std::size_t>(v.rows()) == n && static_cast<std::size_t>(v.cols()) == d,
          "attention::decode_eigen: v is ", v.rows(), " x ", v.cols(), ", expected ", n, " x ", d);
  require(q.size() == d, "attention::decode_eigen: q has ", q.size(), " floats, expected ", d);
  require(out.size() == d, "attention::decode_eigen: out has ", out.size(), " floats, expected ", d);
  require(scores.size() >= n, "attention::decode_eigen: scores has ", scores.size(), " floats, expected ", n);
  const float c = scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  const auto ni = static_cast<Eigen::Index>(n);
  const auto di = static_cast<Eigen::Index>(d);

  const Eigen::Map<const Eigen::VectorXf> qv(q.data(), di);
  Eigen::Map<Eigen::VectorXf> s(scores.data(), ni);
  Eigen::Map<Eigen::VectorXf> o(out.data(), di);
  s.noalias() = c * (k * qv);
  s = (s.array() - s.maxCoeff()).exp();
  s /= s.sum();
  o.noalias() = v.transpose() * s;
}

}  // namespace barato::attention
