#pragma once
/// \file
/// Cost model of causal attention for one head: multiply-accumulates (MACs) and score-buffer bytes
/// of one decode step at context n, and of generating T tokens from a cold start (empty context),
/// for the two ways a decoder can produce the newest token's attention output.
///
/// *Recompute* (a cache-less decoder, `attention::recompute`): every step re-runs attention for all
/// n positions of the sequence, because without a cache the keys/values of earlier positions (and,
/// in a multi-layer model, the inputs of the next layer) are recomputed from scratch. Exactly:
///   - S = Q·Kᵀ over the causal triangle: row i holds i+1 dot products of length d → d·n(n+1)/2 MACs;
///   - O = P·V with P lower triangular:   row i sums i+1 value rows of length d → d·n(n+1)/2 MACs;
///   - the score matrix is an n×n fp32 buffer (the strict upper triangle holds zeros): 4·n² bytes.
/// *Cached* (`attention::decode` over a `kv::CachePolicy`): one query row against the n cached keys
/// and values: n·d MACs for the scores, n·d for the output, and a 1×n fp32 score row: 4·n bytes.
/// (That row is what a straightforward implementation materialises, `attention::decode_eigen`; the
/// fused kernel keeps only a tile of it in registers, so 4·n is an upper bound for it.)
///
/// A generation of T tokens from a cold start runs steps at context n = 1, 2, …, T:
///   cached total    Σ_{n=1..T} 2·d·n       = d·T(T+1)              — O(T²)
///   recompute total Σ_{n=1..T} d·n(n+1)    = d·T(T+1)(T+2)/3       — O(T³)
/// so recompute does (T+2)/3 times the attention work of the cached decoder.
///
/// The softmax (n or n(n+1)/2 exponentials) and the Q/K/V projections are not counted. For a model,
/// multiply by layers · H_q (attention MACs scale with query heads; K/V bytes with H_kv).

#include <cstdint>

#include "barato/core/dtype.hpp"

namespace barato::attention {

/// Cost of one decode step of one head.
struct StepCost {
  std::uint64_t macs = 0;         ///< multiply-accumulates of QKᵀ and PV
  std::uint64_t score_bytes = 0;  ///< bytes of the fp32 score buffer the step materialises
};

/// Cost of generating T tokens from a cold start (steps at context 1 … T) for one head.
struct GenerationCost {
  std::uint64_t macs = 0;              ///< Σ of the per-step MACs
  std::uint64_t peak_score_bytes = 0;  ///< largest score buffer (the last step's)
};

/// Recompute step at context n, head dimension d: d·n(n+1) MACs, 4·n² score bytes.
[[nodiscard]] constexpr StepCost recompute_step_cost(std::uint64_t n, std::uint64_t d) noexcept {
  return {d * n * (n + 1), sizeof(float) * n * n};
}

/// Cached step at context n, head dimension d: 2·n·d MACs, 4·n score bytes.
[[nodiscard]] constexpr StepCost cached_step_cost(std::uint64_t n, std::uint64_t d) noexcept {
  return {2 * n * d, sizeof(float) * n};
}

/// Recompute generation of T tokens: d·T(T+1)(T+2)/3 MACs (closed form of Σ d·n(n+1)), peak 4·T².
[[nodiscard]] constexpr GenerationCost recompute_generation_cost(std::uint64_t t, std::uint64_t d) noexcept {
  // T(T+1)(T+2) is a product of three consecutive integers, hence divisible by 3 (and 6).
  return {d * (t * (t + 1) * (t + 2) / 3), sizeof(float) * t * t};
}

/// Cached generation of T tokens: d·T(T+1) MACs (closed form of Σ 2·n·d), peak 4·T.
[[nodiscard]] constexpr GenerationCost cached_generation_cost(std::uint64_t t, std::uint64_t d) noexcept {
  return {d * t * (t + 1), sizeof(float) * t};
}

/// Bytes of K and V one cached decode step streams for one KV head: 2·n·d·sizeof(element).
[[nodiscard]] constexpr std::uint64_t cached_kv_bytes_read(std::uint64_t n, std::uint64_t d, DType dtype) noexcept {
  return 2 * n * d * dtype_size(dtype);
}

static_assert(recompute_generation_cost(3, 1).macs ==
              recompute_step_cost(1, 1).macs + recompute_step_cost(2, 1).macs + recompute_step_cost(3, 1).macs);
static_assert(cached_generation_cost(3, 1).macs ==
              cached_step_cost(1, 1).macs + cached_step_cost(2, 1).macs + cached_step_cost(3, 1).macs);

}  // namespace barato::attention
