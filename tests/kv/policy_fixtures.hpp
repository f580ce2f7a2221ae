#pragma once
// Fixtures that build every KV cache policy behind one interface, for the contract suite
// (tests/kv/cache_policy_test.cpp) and the example-model policy test. Each fixture owns whatever the
// policy needs (a pool for paged views) and states the policy's facts the contract checks:
// bytes per token, whether it can be full, whether attention over it is bitwise equal to a
// contiguous copy, and the per-element storage error bound. Bitwise equality holds when the
// policy's blocks start at multiples of the kernel's row tile: W = float lanes for the generic
// kernel (the head_dim 40 used by the contract suite), 64 rows for the fixed-dimension kernel
// (head_dim 64 / 128, attention/kernels/fixed_dim.hpp); elsewhere the summation order differs and
// the results agree to kFp32RelTol.

#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>

#include "barato/kv/contiguous.hpp"
#include "barato/kv/growable.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/kv/sliding_window.hpp"
#include "barato/simd/arch.hpp"
#include "support/reference.hpp"

namespace barato::test {

/// Relative error bound of attention over a quantized cache vs the same cache in fp32, on the
/// contract suite's uniform [-1, 1) data (int8: max code error s/2 with s = absmax/127; int4: s/2 with /7).
inline constexpr double kInt8AttnRelTol = 2e-2;
inline constexpr double kInt4AttnRelTol = 2.5e-1;

struct ContiguousFixture {
  using Cache = kv::Contiguous<float>;
  static constexpr const char* kName = "contiguous";
  static constexpr bool kBounded = true;
  static constexpr bool kExactAttention = true;
  Cache c;
  ContiguousFixture(std::size_t h, std::size_t d, std::size_t cap) : c(h, d, cap) {}
  Cache& cache() { return c; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return 2 * h * d * sizeof(float); }
  static double element_error(double /*absmax*/) { return 0.0; }
  static double attn_tol() { return 0.0; }
};

template <std::size_t Chunk>
struct GrowableFixture {
  using Cache = kv::Growable<float>;
  static constexpr const char* kName = "growable";
  static constexpr bool kBounded = true;
  static constexpr bool kExactAttention = Chunk % simd::kFloatLanes<> == 0;
  Cache c;
  GrowableFixture(std::size_t h, std::size_t d, std::size_t cap)
      : c(kv::GrowableConfig{.n_kv_heads = h, .head_dim = d, .chunk_tokens = Chunk, .max_tokens = cap}) {}
  Cache& cache() { return c; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return 2 * h * d * sizeof(float); }
  static double element_error(double) { return 0.0; }
  static double attn_tol() { return kExactAttention ? 0.0 : kFp32RelTol; }
};

template <std::size_t Block>
struct PagedFixture {
  using Cache = kv::PagedView<float>;
  static constexpr const char* kName = "paged";
  static constexpr bool kBounded = true;
  static constexpr bool kExactAttention = Block % simd::kFloatLanes<> == 0;
  std::unique_ptr<kv::PagedPool<float>> pool;
  std::optional<Cache> view;
  // Two layers, so the view is one layer of a multi-layer pool; layer 1 is the one under test.
  PagedFixture(std::size_t h, std::size_t d, std::size_t cap)
      : pool(std::make_unique<kv::PagedPool<float>>(kv::PagedConfig{
            .n_layers = 2, .n_kv_heads = h, .head_dim = d, .block_tokens = Block, .n_blocks = (cap + Block - 1) / Block})) {
    view.emplace(pool->view(pool->add_sequence(), 1));
  }
  Cache& cache() { return *view; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return 2 * h * d * sizeof(float); }
  static double element_error(double) { return 0.0; }
  static double attn_tol() { return kExactAttention ? 0.0 : kFp32RelTol; }
};

/// A sliding window of W = Window positions and S = Sinks sinks; one append adds at most Chunk tokens
/// (Chunk = 0: the fixture's capacity, so no append is split). With W + Chunk − 1 < the positions the
/// contract appends (90), the ring wraps and positions are evicted: the contract then checks that the
/// cache keeps exactly the documented positions (kv/sliding_window.hpp) and that attention over it
/// equals the windowed double reference over the original rows.
template <std::size_t Window, std::size_t Sinks, std::size_t Chunk = 0>
struct WindowFixture {
  using Cache = kv::SlidingWindow<float>;
  static constexpr const char* kName = "window";
  static constexpr bool kBounded = false;  // never full: it evicts
  static constexpr bool kExactAttention = false;
  static constexpr std::size_t kWindow = Window, kSinks = Sinks;
  std::size_t chunk;
  Cache c;
  WindowFixture(std::size_t h, std::size_t d, std::size_t cap)
      : chunk(Chunk == 0 ? cap : Chunk), c(h, d, Window, Sinks, Chunk == 0 ? cap : Chunk) {}
  Cache& cache() { return c; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return 2 * h * d * sizeof(float); }
  static double element_error(double) { return 0.0; }
  static double attn_tol() { return kFp32RelTol; }
  /// Whether the cache still holds position p after positions 0 … n−1 were appended (no rollback):
  /// the sinks and the ring's last W + chunk − 1 positions.
  [[nodiscard]] bool keeps(std::size_t n, std::size_t p) const { return p < n && (p < Sinks || p + Window + chunk - 1 >= n); }
};

/// Whether fixture `fx` keeps position p after positions 0 … n−1 were appended: every position for a
/// policy that does not evict, the documented window for a sliding window.
template <class Fixture>
[[nodiscard]] bool keeps(const Fixture& fx, std::size_t n, std::size_t p) {
  if constexpr (requires { fx.keeps(n, p); }) return fx.keeps(n, p);
  else return p < n;
}

template <class KF, class VF>
struct QuantizedFixture {
  using Cache = kv::Quantized<KF, VF>;
  static constexpr const char* kName = "quantized";
  static constexpr bool kBounded = true;
  static constexpr bool kExactAttention = false;
  Cache c;
  QuantizedFixture(std::size_t h, std::size_t d, std::size_t cap) : c(h, d, cap) {}
  Cache& cache() { return c; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return Cache::bytes_per_token(h, d); }
  // Half a quantisation step of the coarser of the two formats (the step computed in fp32) + the
  // fp32 rounding of the dequantised value (|x| ≤ 1 in the contract suite).
  static double element_error(double absmax) {
    const int mc = KF::kMaxCode < VF::kMaxCode ? KF::kMaxCode : VF::kMaxCode;
    return 0.5 * absmax / mc * (1 + kStepRoundingSlack) + kFp32UnitRounding;
  }
  static double attn_tol() { return (KF::kBits == 4 || VF::kBits == 4) ? kInt4AttnRelTol : kInt8AttnRelTol; }
};

/// A paged pool of quantized pages (8-token pages, so a sequence spans many of them).
template <class KF, class VF>
struct PagedQuantizedFixture {
  using Format = kv::QuantizedPages<KF, VF>;
  using Cache = kv::PagedView<Format>;
  static constexpr const char* kName = "paged-quantized";
  static constexpr bool kBounded = true;
  static constexpr bool kExactAttention = false;
  static constexpr std::size_t kBlock = 8;
  std::unique_ptr<kv::PagedPool<Format>> pool;
  std::optional<Cache> view;
  PagedQuantizedFixture(std::size_t h, std::size_t d, std::size_t cap)
      : pool(std::make_unique<kv::PagedPool<Format>>(kv::PagedConfig{
            .n_layers = 2, .n_kv_heads = h, .head_dim = d, .block_tokens = kBlock, .n_blocks = (cap + kBlock - 1) / kBlock})) {
    view.emplace(pool->view(pool->add_sequence(), 1));
  }
  Cache& cache() { return *view; }
  static std::size_t token_bytes(std::size_t h, std::size_t d) { return kv::Quantized<KF, VF>::bytes_per_token(h, d); }
  static double element_error(double absmax) { return QuantizedFixture<KF, VF>::element_error(absmax); }
  static double attn_tol() { return QuantizedFixture<KF, VF>::attn_tol(); }
};

}  // namespace barato::test
