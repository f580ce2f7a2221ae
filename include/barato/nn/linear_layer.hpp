#pragma once
/// \file
/// The linear-layer concept: y = W x with W of shape [rows, cols] in some storage format (dense fp32,
/// fp16, or a packed quantized format). A user's decoder loop holds its projections as
/// `LinearLayer` types, so changing the weight format is one `using` line.
///
/// Rules a `requires` clause cannot express:
///  - `apply(x, y, threads)`: x.size() == cols(), y.size() == rows(); y is overwritten; allocates
///    nothing; `threads` ≥ 1 is a hint (results are identical for any thread count).
///  - `apply_batch(x, y, n, threads)`: x is [n, cols] row-major, y is [n, rows]; the weights are read
///    once for all n vectors (batched decode / prefill). Row j equals `apply` on vector j bit for bit,
///    so a decoder calls `apply_batch` for any n, a decode step (n = 1) included.
///  - `bytes()` is the exact storage of the weights including scales (what a decode step streams).
///  - Mismatched sizes throw `barato::shape_error`.

#include <concepts>
#include <cstddef>
#include <span>

namespace barato::nn {

template <class L>
concept LinearLayer = requires(const L& l, std::span<const float> x, std::span<float> y, std::size_t n, int threads) {
  { l.rows() } -> std::convertible_to<std::size_t>;
  { l.cols() } -> std::convertible_to<std::size_t>;
  { l.bytes() } -> std::convertible_to<std::size_t>;
  l.apply(x, y, threads);
  l.apply_batch(x, y, n, threads);
};

}  // namespace barato::nn
