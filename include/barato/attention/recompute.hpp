#pragma once
/// \file
/// The *recompute* path: causal attention of a whole sequence with its n×n score matrix
/// materialised, as a decoder without a KV cache runs it at every step. It is the baseline the
/// cached path (`attention::decode`) is measured against; its costs are in attention/cost.hpp.
///
/// What it computes, exactly (and what `recompute_step_cost` counts), for one head with q, k, v
/// of shape [n, d] and scale c:
///   1. S = Q·Kᵀ over the causal triangle (row i: keys 0 … i);
///   2. P = row-wise softmax of c·S over the triangle; the strict upper triangle is set to 0, so on
///      return the caller's n×n buffer holds the lower-triangular probability matrix P;
///   3. O = P·V over the same triangle.
/// Steps 1–3 run in row blocks of kRecomputeRowBlock rows, each a pair of Eigen GEMMs (Eigen's
/// triangular products are slower than plain GEMMs at d = 64).
/// Row n−1 of O is the decode output for the newest position; rows 0 … n−2 are what a cache-less
/// decoder recomputes (and, in a multi-layer model, needs as the next layer's input).
/// The score buffer is the caller's (so its bytes are visible to the caller's allocator); Eigen's
/// GEMM may allocate its own packing workspace and, when compiled with OpenMP, use several threads
/// (`Eigen::setNbThreads(1)` to measure one core).

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>

#include "barato/attention/heads.hpp"
#include "barato/core/error.hpp"
#include "barato/simd/ops.hpp"

namespace barato::attention {

/// Rows per block of the recompute GEMMs. Row block [i0, i0+B) computes scores against keys
/// [0, i0+B) with one GEMM, so the future entries inside the diagonal B×B block are computed and
/// then masked: at most n·(B−1)·d/2 multiply-adds beyond the causal triangle (`recompute_step_cost`
/// counts the triangle only — the work a causal recompute needs).
inline constexpr std::size_t kRecomputeRowBlock = 128;

/// A dynamic row-major fp32 matrix (rows = positions, columns = head dims).
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Single-head causal attention over the whole sequence with a materialised n×n score matrix.
/// q, k, v: [n, d] (row stride may exceed d); `scores`: ≥ n·n floats, row-major [n, n], holds P on
/// return; `out`: [n, d]. `scale` unset means 1/√d. Throws `shape_error` on mismatched shapes or n = 0.
/// Complexity: d·n(n+1) MACs, 4·n² bytes of scores.
inline void recompute(const Eigen::Ref<const RowMatrixXf>& q, const Eigen::Ref<const RowMatrixXf>& k,
                      const Eigen::Ref<const RowMatrixXf>& v, std::span<float> scores, Eigen::Ref<RowMatrixXf> out,
                      std::optional<float> scale = std::nullopt) {
  const auto n = static_cast<std::size_t>(q.rows());
  const auto d = static_cast<std::size_t>(q.cols());
  require(n > 0, "attention::recompute: no positions (n = 0)");
  require(d > 0, "attention::recompute: head_dim must be > 0, got 0");
  require(static_cast<std::size_t>(k.rows()) == n && static_cast<std::size_t>(v.rows()) == n,
          "attention::recompute: q has ", n, " rows, expected the same for k and v, got ", k.rows(), " and ", v.rows());
  require(static_cast<std::size_t>(k.cols()) == d && static_cast<std::size_t>(v.cols()) == d,
          "attention::recompute: q has ", d, " columns, expected the same for k and v, got ", k.cols(), " and ",
          v.cols());
  require(static_cast<std::size_t>(out.rows()) == n && static_cast<std::size_t>(out.cols()) == d,
          "attention::recompute: out is ", out.rows(), " x ", out.cols(), ", expected ", n, " x ", d);
  require(scores.size() >= n * n, "attention::recompute: scores has ", scores.size(), " floats, expected n*n = ",
          n * n);
  const float c = scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  const auto ni = static_cast<Eigen::Index>(n);

  Eigen::Map<RowMatrixXf> s(scores.data(), ni, ni);  // [n, n]
  for (std::size_t i0 = 0; i0 < n; i0 += kRecomputeRowBlock) {
    const std::size_t i1 = std::min(n, i0 + kRecomputeRowBlock);  // rows [i0, i1) see keys [0, i1)
    const auto b = static_cast<Eigen::Index>(i1 - i0), w = static_cast<Eigen::Index>(i1);
    auto sb = s.block(static_cast<Eigen::Index>(i0), 0, b, w);
    sb.noalias() = q.middleRows(static_cast<Eigen::Index>(i0), b) * k.topRows(w).transpose();
    for (std::size_t i = i0; i < i1; ++i) {
      float* row = scores.data() + i * n;
      simd::scale(c, row, i + 1);
      simd::softmax(row, i + 1);
      std::fill(row + i + 1, row + n, 0.0f);  // the future: masked out
    }
    out.middleRows(static_cast<Eigen::Index>(i0), b).noalias() = sb * v.topRows(w);
  }
}

/// Multi-head recompute: q [n, H_q, d], k and v [n, H_kv, d] (token-major, as a decoder produces
/// them), out [n, H_q, d]; query head j reads KV head j / G. The one n×n `scores` buffer is reused
/// head after head (on return it holds the last head's P). Throws `shape_error` on bad heads or
/// mismatched spans. Complexity: H_q·d·n(n+1) MACs.
inline void recompute(std::span<const float> q, std::span<const float> k, std::span<const float> v, const Heads& heads,
                      std::span<float> scores, std::span<float> out, std::optional<float> scale = std::nullopt) {
  heads.validate();
  require(q.size() % heads.q_dim() == 0, "attention::recompute: q has ", q.size(),
          " floats, expected a multiple of H_q*d = ", heads.q_dim());
  const std::size_t n = q.size() / heads.q_dim();
  require(n > 0, "attention::recompute: no positions (n = 0)");
  require(k.size() == n * heads.kv_dim() && v.size() == k.size(), "attention::recompute: k and v have ", k.size(),
          " and ", v.size(), " floats, expected ", n, " x ", heads.kv_dim());
  require(out.size() == q.size(), "attention::recompute: out has ", out.size(), " floats, expected ", q.size());
  using Strided = Eigen::Map<const RowMatrixXf, Eigen::Unaligned, Eigen::OuterStride<>>;
  using StridedOut = Eigen::Map<RowMatrixXf, Eigen::Unaligned, Eigen::OuterStride<>>;
  const auto ni = static_cast<Eigen::Index>(n);
  const auto di = static_cast<Eigen::Index>(heads.head_dim);
  const Eigen::OuterStride<> q_stride(static_cast<Eigen::Index>(heads.q_dim()));
  const Eigen::OuterStride<> kv_stride(static_cast<Eigen::Index>(heads.kv_dim()));
  for (std::size_t j = 0; j < heads.n_q; ++j) {
    const std::size_t h = j / heads.group();
    const Strided qh(q.data() + j * heads.head_dim, ni, di, q_stride);
    const Strided kh(k.data() + h * heads.head_dim, ni, di, kv_stride);
    const Strided vh(v.data() + h * heads.head_dim, ni, di, kv_stride);
    StridedOut oh(out.data() + j * heads.head_dim, ni, di, q_stride);
    recompute(qh, kh, vh, scores, oh, scale);
  }
}

}  // namespace barato::attention
