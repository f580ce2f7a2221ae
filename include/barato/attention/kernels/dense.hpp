#pragma once
/// \file
/// `attention::accumulate` for a dense block (`kv::DenseBlock<T>`: rows at one stride). Picks the
/// kernel from the head dimension and the arch type:
///  1. d a multiple of 16 up to 128 (and of W) → attention/kernels/fixed_dim.hpp (q and o in registers
///     across chunks; 1.1–2.7× the generic routine's speed at d = 16 … 112, bench_attention `BM_head_dim`);
///  2. d < W with packed rows (d ∈ {1, 2, 4, 8} on AVX-512) → attention/kernels/small_dim.hpp;
///  3. d an odd multiple of 8 on AVX-512 → the generic routine on the 8-lane arch
///     (`simd::HalfWidthArch`): all of d vectorised instead of an 8-wide scalar tail (measured ~2×
///     faster at d = 24 and 40);
///  4. anything else → the generic routine (attention/kernels/generic.hpp).

#include <cstddef>
#include <type_traits>

#include "barato/attention/kernels/fixed_dim.hpp"
#include "barato/attention/kernels/generic.hpp"
#include "barato/attention/kernels/query_group.hpp"
#include "barato/attention/kernels/rows.hpp"
#include "barato/attention/kernels/small_dim.hpp"
#include "barato/core/dtype.hpp"
#include "barato/kv/block.hpp"
#include "barato/simd/arch.hpp"

namespace barato::attention {

/// Folds rows [r0, r1) of `blk` into the partial states of the query heads of `qg` (see
/// attention/kernels/accumulate.hpp for the contract). Complexity O(g·(r1 − r0)·d); allocates nothing.
template <class Arch = simd::DefaultArch, Element T>
void accumulate(const QueryGroup& qg, const kv::DenseBlock<T>& blk, std::size_t r0, std::size_t r1) noexcept {
  const detail::ContiguousRows<T> rows{blk.k, blk.v, blk.stride};
  if (detail::with_fixed_dim<Arch>(qg.d, [&]<std::size_t D>() { detail::accumulate_fixed_dim<D, Arch>(qg, rows, r0, r1); }))
    return;
  if constexpr (detail::kHasSmallDimKernel<Arch>) {
    if (detail::has_small_dim_kernel<Arch>(qg.d, blk.stride))
      return detail::accumulate_small_dim<Arch>(qg, blk, r0, r1);
  }
  if constexpr (!std::is_void_v<simd::HalfWidthArch<Arch>>) {
    if (qg.d % 16 == 8) return detail::accumulate_rows<simd::HalfWidthArch<Arch>>(qg, rows, r0, r1);
  }
  detail::accumulate_rows<Arch>(qg, rows, r0, r1);
}

}  // namespace barato::attention
