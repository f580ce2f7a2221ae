#pragma once
/// \file
/// `attention::QueryGroup`: the query side of the kernel seam `attention::accumulate`
/// (attention/kernels/accumulate.hpp) — the G query heads that share one KV head, with their softmax
/// scale and the partial states they fold into. Kernels take it instead of six positional arguments.

#include <cstddef>

#include "barato/attention/partial.hpp"

namespace barato::attention {

/// The G query heads of one KV head that fold a block together (G = 1 for MHA; H_q / H_kv for GQA).
/// Query head i reads q + i·d and accumulates into (o + i·d, st[i]); scores are scaled by `scale`.
/// A view: the caller owns the buffers.
struct QueryGroup {
  const float* q = nullptr;     ///< [g, d] queries
  std::size_t g = 0;            ///< query heads in the group
  std::size_t d = 0;            ///< head dimension
  float scale = 0.0f;           ///< softmax scale applied to every score (e.g. 1/√d)
  float* o = nullptr;           ///< [g, d] un-normalised outputs (partial states)
  PartialStats* st = nullptr;   ///< [g] running (m, l) of each query head
};

}  // namespace barato::attention
