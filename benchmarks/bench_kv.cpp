// bench_kv: one decode-attention step (attention::decode of the newest query over the whole cache)
// on each KV cache policy, against kv::Contiguous<float> measured in the same process.
//
//   contiguous   kv::Contiguous<float>                         — the baseline (one block per head)
//   paged/B      kv::PagedView<float> of a kv::PagedPool, B ∈ {8, 16, 32} tokens per block; the
//                sequence grows block by block beside a second one, as sequences do in a serving
//                engine; the allocator gives each runs of consecutive pages (attention walks the
//                block table, no gather)
//   paged16-fragmented   the same sequence grown into a pool after churn (a random half of the
//                blocks free): pages scattered, runs of ~2 pages
//   int8 / int4 / k8v4   kv::Quantized<Int8>, <Int4>, <Int8, Int4> — codes + one fp32 scale per token
//                per head, dequantised inside the kernel
//   paged16-int8 kv::PagedView<QuantizedPages<Int8>>: the int8 codes and scales in 16-token pages
//
// Shapes (named): mha_d64 = 4 query heads over 4 KV heads of d = 64; gqa_qwen05b = 14 query heads
// over 2 KV heads of d = 64 (Qwen2.5-0.5B's attention). n ∈ {256, 1024, 4096, 16384}. One thread.
//
// A decode step of a real model visits every layer's cache once, so a layer's K/V are cold (in DRAM)
// when its attention runs. Each measured step therefore cycles over L layers whose caches together
// exceed kColdBytes (96 MiB, 3× this machine's L3), for the policy and for the baseline alike; the
// times reported are per layer. (A single cache re-read in a loop would sit in L3 at n = 4096 and
// measure a regime no model decodes in.)
//
// Counters (per layer): kv_bytes = bytes attention reads from one layer's cache (K, V and scales);
// GBps = kv_bytes / step time; policy_us and contig_us = step time of the policy and of the
// contiguous baseline; vs_contiguous = policy_us / contig_us (< 1 is faster). Both are medians of
// interleaved batches of thread CPU time measured in this process; `layers` = caches cycled.
// For fp32 policies, a read probe sums the same K/V bytes in the same order with no attention
// around them (prefetching ahead like the paged kernel): read_GBps, and read_vs_contiguous = probe
// time on this layout / on the contiguous one — what scattering alone costs one core's memory system.
// JSON: --benchmark_format=json or --benchmark_out=FILE --benchmark_out_format=json.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <memory_resource>
#include <new>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/simd/arch.hpp"
#include "support/reference.hpp"
#include "timing.hpp"

namespace {

using namespace barato;
using barato_examples::paired_medians;

struct Shape {
  const char* name;
  std::size_t hq, hkv, d;
};
const Shape kShapes[] = {{"mha_d64", 4, 4, 64}, {"gqa_qwen05b", 14, 2, 64}};
const std::vector<std::int64_t> kContexts = {256, 1024, 4096, 16384};
constexpr std::size_t kColdBytes = std::size_t{96} << 20;
constexpr std::size_t kMaxLayers = 64;

/// Memory for every cache of this benchmark: 2 MiB aligned and advised as transparent huge pages
/// (madvise), as a serving engine allocates its KV pool. Scattered pages then cost no TLB walk per
/// page; the contiguous baseline gets the same memory, so the comparison stays fair.
class HugePageResource final : public std::pmr::memory_resource {
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (bytes < kHuge) return std::pmr::new_delete_resource()->allocate(bytes, align);
    void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
    if (p == nullptr) throw std::bad_alloc();
    madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    if (bytes < kHuge) return std::pmr::new_delete_resource()->deallocate(p, bytes, align);
    std::free(p);
  }
  [[nodiscard]] bool do_is_equal(const std::pmr::memory_resource& o) const noexcept override { return this == &o; }
};
HugePageResource g_huge;

/// A shape's data: k, v [n, H_kv, d] (the same rows in every layer), the query [H_q, d], and the
/// contiguous baseline: `layers` caches, enough to exceed kColdBytes.
struct Case {
  Shape s;
  std::size_t n, layers;
  attention::Heads heads;
  std::vector<float> k, v, q, out;
  std::vector<kv::Contiguous<float>> contiguous;
  Case(const Shape& sh, std::size_t n_)
      : s(sh), n(n_), layers(std::clamp<std::size_t>(kColdBytes / (2 * n_ * sh.hkv * sh.d * sizeof(float)), 1, kMaxLayers)),
        heads{.n_q = sh.hq, .n_kv = sh.hkv, .head_dim = sh.d},
        k(test::random_vector(n_ * sh.hkv * sh.d, 1)), v(test::random_vector(n_ * sh.hkv * sh.d, 2)),
        q(test::random_vector(sh.hq * sh.d, 3, -2.f, 2.f)), out(sh.hq * sh.d) {
    for (std::size_t l = 0; l < layers; ++l) {
      contiguous.emplace_back(sh.hkv, sh.d, n, &g_huge);
      contiguous.back().append(k, v);
    }
  }
};

/// The K/V pieces attention reads, in its order: per layer and KV head, each block's (or, for a
/// paged block, each run of consecutive pages') key rows and value rows. Only for fp32 caches.
struct Piece {
  const float* k;
  const float* v;
  std::size_t bytes;
};
template <class Cache>
std::vector<Piece> pieces_of(const std::vector<Cache>& caches) {
  std::vector<Piece> out;
  auto add = [&](const kv::DenseBlock<float>& b) {
    const Piece p{b.k, b.v, (b.n - 1) * b.stride * sizeof(float) + caches.front().head_dim() * sizeof(float)};
    if (!out.empty() && b.stride == caches.front().head_dim()) {  // a page right after the last piece extends it
      Piece& last = out.back();
      if (reinterpret_cast<const char*>(last.k) + last.bytes == reinterpret_cast<const char*>(p.k) &&
          reinterpret_cast<const char*>(last.v) + last.bytes == reinterpret_cast<const char*>(p.v)) {
        last.bytes += p.bytes;
        return;
      }
    }
    out.push_back(p);
  };
  for (const auto& cache : caches)
    for (std::size_t h = 0; h < cache.n_kv_heads(); ++h)
      cache.for_each_block(h, [&](const auto& blk) {
        if constexpr (requires { blk.page(0); }) {
          for (std::size_t i = 0; i < blk.pages(); ++i) add(blk.page(i));
        } else {
          add(blk);
        }
      });
  return out;
}

/// Read probe: sums every float of the pieces (keys and values of a piece in step, as attention
/// streams them), prefetching 32 KiB ahead in that order, like the paged kernel, where the bytes
/// ahead lie in a short piece (< 64 KiB) or in the first 4 KiB of a long one (the hardware prefetchers
/// stream the rest). What one core's memory system gives for this layout with no arithmetic around it.
float read_pieces(const std::vector<Piece>& ps) {
  using B = simd::Batch<float>;
  constexpr std::size_t W = B::size;
  constexpr std::size_t kAhead = 32 * 1024, kHead = 4096, kShort = 64 * 1024, kLine = 64;
  std::size_t j = 0, off = 0;  // the position kAhead bytes ahead: piece j, byte off
  auto advance = [&](std::size_t bytes) {
    for (off += bytes; j < ps.size() && off >= ps[j].bytes; ++j) off -= ps[j].bytes;
  };
  advance(kAhead);
  B acc(0.0f);
  for (const Piece& p : ps) {
    const std::size_t n = p.bytes / sizeof(float);
    for (std::size_t e = 0; e + W <= n; e += W) {
      if (e * sizeof(float) % kLine == 0) {
        if (j < ps.size() && (off < kHead || ps[j].bytes < kShort)) {
          prefetch_l2(reinterpret_cast<const char*>(ps[j].k) + off, kLine);
          prefetch_l2(reinterpret_cast<const char*>(ps[j].v) + off, kLine);
        }
        advance(kLine);
      }
      acc += B::load_unaligned(p.k + e) + B::load_unaligned(p.v + e);
    }
  }
  return xsimd::hadd(acc);
}

/// Times one step over `caches` (all layers) against the baseline's and fills the per-layer counters.
template <class Cache>
void run(benchmark::State& state, Case& c, const std::vector<Cache>& caches) {
  auto step = [&] {
    for (const auto& cache : caches) {
      attention::decode(c.q, cache, c.heads, c.out);
      benchmark::DoNotOptimize(c.out.data());
    }
  };
  auto base = [&] {
    for (const auto& cache : c.contiguous) {
      attention::decode(c.q, cache, c.heads, c.out);
      benchmark::DoNotOptimize(c.out.data());
    }
  };
  const auto [t_policy, t_contig] = paired_medians(step, base, 11);
  for (auto _ : state) step();
  const double L = static_cast<double>(c.layers);
  const double kv_bytes = static_cast<double>(caches.front().bytes_used());
  state.counters["layers"] = L;
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["GBps"] = kv_bytes / (t_policy / L) * 1e-9;
  state.counters["vs_contiguous"] = t_policy / t_contig;
  state.counters["contig_us"] = t_contig / L * 1e6;
  state.counters["policy_us"] = t_policy / L * 1e6;
  constexpr bool fp32_rows = [] {
    if constexpr (requires { typename Cache::element_type; }) return std::is_same_v<typename Cache::element_type, float>;
    return false;
  }();
  if constexpr (fp32_rows) {
    // the same bytes read with no attention around them, this layout vs the contiguous one
    const auto mine = pieces_of(caches), base_pieces = pieces_of(c.contiguous);
    float sink = 0.0f;
    const auto [r_policy, r_contig] = paired_medians([&] { sink += read_pieces(mine); },
                                                          [&] { sink += read_pieces(base_pieces); }, 11);
    benchmark::DoNotOptimize(sink);
    state.counters["read_GBps"] = kv_bytes / (r_policy / L) * 1e-9;
    state.counters["read_vs_contiguous"] = r_policy / r_contig;
  }
}

void BM_Contiguous(benchmark::State& state, Shape sh) {
  Case c(sh, static_cast<std::size_t>(state.range(0)));
  run(state, c, c.contiguous);
}

/// Paged: the measured sequence grows block by block beside a second one (each gets runs of
/// consecutive pages from the allocator), or, `fragmented`, into a pool after churn: every block was
/// held by a one-block request and a random half of those were released, so the free blocks — and
/// the sequence's pages — are scattered (runs of ~2 pages at random places).
template <class Pages = float>
void BM_Paged(benchmark::State& state, Shape sh, std::size_t block, bool fragmented = false) {
  Case c(sh, static_cast<std::size_t>(state.range(0)));
  // a server's pool: room for both sequences and two allocation extents more
  kv::PagedConfig cfg{.n_layers = c.layers, .n_kv_heads = sh.hkv, .head_dim = sh.d, .block_tokens = block};
  const std::size_t need = (c.n + block - 1) / block, blocks = 2 * need + 2 * cfg.extent();
  cfg.n_blocks = blocks;
  kv::PagedPool<Pages> pool(cfg, &g_huge);
  const std::size_t row = sh.hkv * sh.d;
  auto grow = [&](kv::SeqId id, std::size_t p) {  // positions [p, p + block) in every layer
    const std::size_t m = std::min(block, c.n - p);
    const std::span<const float> kk(c.k.data() + p * row, m * row), vv(c.v.data() + p * row, m * row);
    for (std::size_t l = 0; l < c.layers; ++l) pool.append(id, l, kk, vv);
  };
  kv::SeqId a = 0;
  if (fragmented) {
    std::vector<kv::SeqId> held(blocks);
    for (kv::SeqId& id : held) {
      id = pool.add_sequence();
      grow(id, 0);
    }
    std::shuffle(held.begin(), held.end(), std::mt19937(7));
    for (std::size_t i = 0; i < need; ++i) pool.release(held[i]);
    a = pool.add_sequence();
    for (std::size_t p = 0; p < c.n; p += block) grow(a, p);
  } else {
    a = pool.add_sequence();
    const kv::SeqId other = pool.add_sequence();
    for (std::size_t p = 0; p < c.n; p += block) {  // the two sequences grow side by side
      grow(a, p);
      grow(other, p);
    }
  }
  std::vector<kv::PagedView<Pages>> views;
  for (std::size_t l = 0; l < c.layers; ++l) views.push_back(pool.view(a, l));
  run(state, c, views);
}

template <class Q>
void BM_Quantized(benchmark::State& state, Shape sh) {
  Case c(sh, static_cast<std::size_t>(state.range(0)));
  std::vector<Q> caches;
  for (std::size_t l = 0; l < c.layers; ++l) {
    caches.emplace_back(sh.hkv, sh.d, c.n, &g_huge);
    caches.back().append(c.k, c.v);
  }
  run(state, c, caches);
}

const int kRegistered = [] {
  for (const Shape& sh : kShapes) {
    const std::string s = sh.name;
    auto reg = [&](const std::string& name, auto fn) {
      benchmark::RegisterBenchmark(name.c_str(), fn)->ArgName("n")->ArgsProduct({kContexts})->Unit(benchmark::kMicrosecond)->Iterations(3);
    };
    reg("contiguous/" + s, [sh](benchmark::State& st) { BM_Contiguous(st, sh); });
    for (const std::size_t b : {8, 16, 32})
      reg("paged" + std::to_string(b) + "/" + s, [sh, b](benchmark::State& st) { BM_Paged(st, sh, b); });
    reg("paged16-fragmented/" + s, [sh](benchmark::State& st) { BM_Paged(st, sh, 16, true); });
    reg("paged16-int8/" + s, [sh](benchmark::State& st) { BM_Paged<kv::QuantizedPages<kv::Int8>>(st, sh, 16); });
    reg("int8/" + s, [sh](benchmark::State& st) { BM_Quantized<kv::Quantized<kv::Int8>>(st, sh); });
    reg("int4/" + s, [sh](benchmark::State& st) { BM_Quantized<kv::Quantized<kv::Int4>>(st, sh); });
    reg("k8v4/" + s, [sh](benchmark::State& st) { BM_Quantized<kv::Quantized<kv::Int8, kv::Int4>>(st, sh); });
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
