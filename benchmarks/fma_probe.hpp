#pragma once
// fp32 multiply-add probe: the rate at which one core of this machine retires fp32 multiply-adds
// when nothing else limits it (no memory operands, enough independent chains to hide the FMA
// latency). A kernel that must perform M multiply-adds cannot take less than M / fma_rate() seconds;
// benchmarks report that floor beside their times (bench_batching's cascade rows: fp32 attention
// performs the same multiply-adds per sequence and in a cascade, so this floor, not K/V bytes, bounds
// how far a cascade can go below per-sequence decode).

#include <algorithm>
#include <cstddef>
#include <utility>

#include "barato/simd/arch.hpp"
#include "timing.hpp"

namespace barato::bench {

namespace detail {
/// Independent FMA chains of the probe: latency × throughput of current cores is ≤ 8 vectors in
/// flight (4 cycles × 2 per cycle); 12 chains plus two constants fit AVX2's 16 registers.
inline constexpr std::size_t kFmaChains = 12;

template <std::size_t... I>
float fma_chains(std::size_t iters, std::index_sequence<I...>) noexcept {
  using B = simd::Batch<float>;
  B a[sizeof...(I)] = {B(1.0f + 1e-3f * static_cast<float>(I))...};
  const B m(0.999999f), c(1e-7f);  // a ← a·m + c stays near c / (1 − m): no overflow, no subnormals
  for (std::size_t n = 0; n < iters; ++n) ((a[I] = simd::fma(a[I], m, c)), ...);
  B s(0.0f);
  ((s += a[I]), ...);
  return simd::reduce_add<float, simd::DefaultArch>(s);
}
}  // namespace detail

/// Scalar fp32 multiply-adds per thread-CPU second of the calling thread: `kFmaChains` independent
/// chains of vector FMAs, best of `passes` runs of `iters` rounds. Measured anew on every call.
inline double measure_fma_rate(int passes = 7, std::size_t iters = std::size_t{1} << 22) {
  using B = simd::Batch<float>;
  double best = 0.0;
  volatile float sink = 0.0f;  // keeps the chains observable
  for (int p = 0; p < passes; ++p) {
    const double t0 = barato_examples::thread_seconds();
    sink = sink + detail::fma_chains(iters, std::make_index_sequence<detail::kFmaChains>{});
    const double s = barato_examples::thread_seconds() - t0;
    if (s > 0) best = std::max(best, static_cast<double>(iters * detail::kFmaChains * B::size) / s);
  }
  return best;
}

/// `measure_fma_rate()`, measured once per process.
inline double fma_rate() {
  static const double rate = measure_fma_rate();
  return rate;
}

}  // namespace barato::bench
