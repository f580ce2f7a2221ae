// Tutorial 4 — the paged KV cache.
//
// A server holds the KV caches of many requests at once, and it does not know in advance how long
// each request will run. The simple layout gives every request a slot of the maximum context
// (kv::Contiguous, capacity = max context): most of it is never touched, because most requests are
// short. PagedAttention (Kwon et al. 2023) manages the cache like virtual memory instead: one pool
// of fixed-size blocks of B tokens, a block table per request mapping its logical blocks to
// physical ones, blocks handed out as tokens arrive. A request wastes at most one partly filled
// block. Because blocks are reference counted, requests that start with the same prompt can share
// its blocks (prefix caching), and a forked request shares all of its parent's blocks until one of
// them writes (copy-on-write).
//
//   Step 1  fragmentation: 64 requests with skewed lengths, max-context slots vs a paged pool —
//           bytes reserved (measured by a counting allocator), bytes held, bytes used, waste
//   Step 2  prefix sharing: 16 requests that share a 200-token system prompt — blocks and bytes
//           with and without sharing, and the prefill positions the model skips
//   Step 3  the price: one decode-attention step over pages vs one contiguous block — pages in
//           runs of consecutive blocks (what the allocator gives growing requests) and pages
//           scattered through a fragmented pool
//
// The model shape is stories260K's (5 layers, 4 KV heads of 8, max context 512, fp32) for Steps 1
// and 2, and Qwen2.5-0.5B's attention (14 query heads over 2 KV heads of 64) for Step 3. K/V rows
// are random numbers standing in for a model's projections: the memory and the attention cost do
// not depend on their values.
//
// Run:  tutorial_paged_cache [--seed S]

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "timing.hpp"

namespace {

using namespace barato;

// stories260K's cache shape (Steps 1, 2)
constexpr std::size_t kLayers = 5, kKvHeads = 4, kHeadDim = 8, kMaxContext = 512;
constexpr std::size_t kBlock = 16;  // tokens per page (the usual choice)

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

/// `n` rows [n, H, d] of uniform random numbers.
std::vector<float> rows(std::size_t n, std::size_t h, std::size_t d, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(n * h * d);
  for (auto& e : x) e = u(rng);
  return x;
}

}  // namespace

int main(int argc, char** argv) try {
  unsigned seed = 2024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) {
      seed = static_cast<unsigned>(std::stoul(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--seed S]\n", argv[0]);
      return 2;
    }
  }
  std::mt19937 rng(seed);
  const std::size_t token_bytes = 2 * kLayers * kKvHeads * kHeadDim * sizeof(float);

  // ---------------------------------------------------------------------------------------------
  // Step 1 — fragmentation
  // ---------------------------------------------------------------------------------------------
  // Request lengths (prompt + generated) are log-normal: median ≈ 60 tokens, a long tail, clipped to
  // the model's 512. Real traffic looks like this: many short chats, a few long documents.
  constexpr std::size_t kRequests = 64;
  std::lognormal_distribution<double> len_dist(std::log(60.0), 0.9);
  std::vector<std::size_t> lengths(kRequests);
  for (auto& n : lengths) n = std::clamp<std::size_t>(static_cast<std::size_t>(len_dist(rng)), 4, kMaxContext);
  std::size_t total_tokens = 0;
  for (const auto n : lengths) total_tokens += n;
  const auto sorted = [&] {
    auto s = lengths;
    std::sort(s.begin(), s.end());
    return s;
  }();

  // (a) one max-context slot per request and layer, allocated for real through a counting resource
  CountingResource slot_mem;
  std::size_t slot_used = 0;
  {
    std::vector<kv::Contiguous<float>> slots;
    slots.reserve(kRequests * kLayers);
    for (std::size_t r = 0; r < kRequests; ++r)
      for (std::size_t l = 0; l < kLayers; ++l) {
        slots.emplace_back(kKvHeads, kHeadDim, kMaxContext, &slot_mem);
        const auto x = rows(lengths[r], kKvHeads, kHeadDim, rng);
        slots.back().append(x, x);
        slot_used += slots.back().bytes_used();
      }
  }
  const std::size_t slot_reserved = slot_mem.peak();

  // (b) a paged pool with the same memory budget; each request takes blocks as its tokens arrive
  CountingResource pool_mem;
  const std::size_t budget_blocks = slot_reserved / (kBlock * token_bytes);
  std::size_t paged_held = 0, paged_used = 0, pool_reserved = 0, requests_that_fit = 0;
  {
    kv::PagedPool<float> pool({.n_layers = kLayers, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .block_tokens = kBlock,
                               .n_blocks = budget_blocks},
                              &pool_mem);
    pool_reserved = pool.bytes_reserved();
    for (std::size_t r = 0; r < kRequests; ++r) {
      const kv::SeqId id = pool.add_sequence();
      const auto x = rows(lengths[r], kKvHeads, kHeadDim, rng);
      for (std::size_t l = 0; l < kLayers; ++l) pool.append(id, l, x, x);
    }
    paged_held = pool.bytes_in_use();
    paged_used = pool.bytes_used();
    // How many requests of this length mix would the same memory hold? Keep admitting the same 64
    // lengths again until the pool is full (the first one that does not fit throws capacity_error).
    requests_that_fit = kRequests;
    try {
      for (std::size_t r = 0;; ++r) {
        const kv::SeqId id = pool.add_sequence();
        const auto x = rows(lengths[r % kRequests], kKvHeads, kHeadDim, rng);
        for (std::size_t l = 0; l < kLayers; ++l) pool.append(id, l, x, x);
        ++requests_that_fit;
      }
    } catch (const capacity_error&) {
    }
  }

  std::printf("Step 1 - fragmentation: %zu requests, %zu tokens in all, lengths %zu..%zu (median %zu, seed %u),\n"
              "         max context %zu,",
              kRequests, total_tokens, sorted.front(), sorted.back(), sorted[kRequests / 2], seed, kMaxContext);
  std::printf(" %zu bytes/token (stories260K shape, fp32), pages of %zu tokens\n\n", token_bytes, kBlock);
  std::printf("| layout              | reserved (allocator) | held by requests | used by tokens | wasted (of held) |\n");
  std::printf("|---------------------|---------------------:|-----------------:|---------------:|-----------------:|\n");
  std::printf("| max-context slots   | %16.2f MiB | %12.2f MiB | %10.2f MiB | %15.1f %% |\n", mib(slot_reserved),
              mib(slot_reserved), mib(slot_used), 100.0 * (1.0 - double(slot_used) / double(slot_reserved)));
  std::printf("| paged, B = %-2zu       | %16.2f MiB | %12.2f MiB | %10.2f MiB | %15.1f %% |\n", kBlock,
              mib(pool_mem.peak()), mib(paged_held), mib(paged_used),
              100.0 * (1.0 - double(paged_used) / double(paged_held)));
  std::printf("\nThe slots waste %.0f %% of their memory on context no request reached; pages waste only the partly\n"
              "filled last block (%.1f %%), so the same %.2f MiB holds %zu requests of this mix instead of %zu.\n\n",
              100.0 * (1.0 - double(slot_used) / double(slot_reserved)), 100.0 * (1.0 - double(paged_used) / double(paged_held)),
              mib(pool_reserved), requests_that_fit, kRequests);

  // ---------------------------------------------------------------------------------------------
  // Step 2 — prefix sharing
  // ---------------------------------------------------------------------------------------------
  // 16 requests = one 200-token system prompt + a 20..60-token user question each. With prefix
  // caching, the first request's full blocks are registered under hash(prefix, tokens); later
  // requests reuse them and the model prefills only what is not cached.
  constexpr std::size_t kShared = 16, kSystem = 200;
  std::vector<Token> system(kSystem);
  std::uniform_int_distribution<Token> tok(3, 511);
  for (auto& t : system) t = tok(rng);
  std::vector<std::vector<Token>> prompts(kShared);
  std::uniform_int_distribution<std::size_t> tail_len(20, 60);
  for (auto& p : prompts) {
    p = system;
    const std::size_t n = tail_len(rng);
    for (std::size_t i = 0; i < n; ++i) p.push_back(tok(rng));
  }
  struct SharingResult {
    std::size_t blocks = 0, bytes = 0, prefilled = 0, saved = 0;
    kv::PrefixCacheStats stats;
  };
  auto serve = [&](bool sharing) {
    kv::PagedPool<float> pool({.n_layers = kLayers, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .block_tokens = kBlock,
                               .n_blocks = 1024, .prefix_caching = sharing});
    SharingResult r;
    for (const auto& p : prompts) {
      const auto ad = pool.admit(p);  // "these are the prompt tokens: how many positions are cached?"
      const std::size_t todo = p.size() - ad.match.cached_tokens;
      const auto x = rows(todo, kKvHeads, kHeadDim, rng);  // the model's prefill of the uncached part
      for (std::size_t l = 0; l < kLayers; ++l) pool.append(ad.seq, l, x, x);
      r.prefilled += todo;
    }
    r.blocks = pool.used_blocks();
    r.bytes = pool.bytes_in_use();
    r.stats = pool.prefix_stats();
    r.saved = r.stats.tokens_saved;
    return r;
  };
  const SharingResult without = serve(false), with = serve(true);
  std::size_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += p.size();
  std::printf("Step 2 - prefix sharing: %zu requests, a %zu-token system prompt + 20..60 tokens each (%zu prompt tokens)\n\n",
              kShared, kSystem, prompt_tokens);
  std::printf("| prefix caching | blocks held | bytes held  | prefill positions computed | prefill positions saved |\n");
  std::printf("|----------------|------------:|------------:|---------------------------:|------------------------:|\n");
  std::printf("| off            | %11zu | %7.2f MiB | %26zu | %23zu |\n", without.blocks, mib(without.bytes), without.prefilled,
              without.saved);
  std::printf("| on             | %11zu | %7.2f MiB | %26zu | %23zu |\n", with.blocks, mib(with.bytes), with.prefilled, with.saved);
  std::printf("\nprefix-cache statistics: %zu lookups, %zu with a hit, %zu blocks hit; stops: %zu at a differing block, "
              "%zu evicted, %zu too short, %zu fully cached\n",
              with.stats.lookups, with.stats.lookups_with_hit, with.stats.blocks_hit, with.stats.miss_differs,
              with.stats.miss_evicted, with.stats.miss_too_short, with.stats.stop_full);
  std::printf("Sharing stores the system prompt's %zu full blocks once instead of %zu times (%.1fx fewer blocks) and skips\n"
              "%.0f %% of the prefill; the %zu tokens past the last full block are recomputed by every request.\n\n",
              kSystem / kBlock, kShared, double(without.blocks) / double(with.blocks),
              100.0 * double(with.saved) / double(prompt_tokens), kSystem % kBlock);

  // ---------------------------------------------------------------------------------------------
  // Step 3 — what reading pages costs
  // ---------------------------------------------------------------------------------------------
  // One decode step of attention (Qwen2.5-0.5B's 14 query heads over 2 KV heads of 64) over one
  // layer's cache: a contiguous block vs pages of 16 tokens. Attention reads the pages in place: one
  // block per head spanning all its pages, one kernel call. Two pools:
  //  - "runs": the request grows block by block beside another one. The allocator gives each growing
  //    request the block after its last one, starting new runs at wholly free extents of 2048 tokens,
  //    so its pages come in runs of consecutive blocks, which attention reads like contiguous rows.
  //  - "fragmented": the pool has churned (every block was held by a one-block request and a random
  //    half of them left), so the free blocks, and the request's pages, are scattered: the kernel
  //    follows the page table and prefetches rows ahead across page boundaries.
  // As in a real decode step, each measured step visits several layers' caches (so a layer's K/V are
  // not still in cache from the previous repetition); times are per layer.
  const attention::Heads heads{.n_q = 14, .n_kv = 2, .head_dim = 64};
  constexpr std::size_t kStepLayers = 8;
  std::printf("Step 3 - one decode-attention step, 14 query heads over 2 KV heads of d = 64, per layer (%zu layers\n"
              "         visited per step), one thread, thread CPU time; pages of B = 16 tokens; each ratio is against\n"
              "         the contiguous step timed interleaved with it\n\n", kStepLayers);
  std::printf("| context n | contiguous | paged, runs | / contiguous | paged, fragmented pool | / contiguous |\n");
  std::printf("|----------:|-----------:|------------:|-------------:|-----------------------:|-------------:|\n");
  double worst_runs = 0, worst_frag = 0;
  for (const std::size_t n : {256, 1024, 4096}) {
    const auto k = rows(n, heads.n_kv, heads.head_dim, rng), v = rows(n, heads.n_kv, heads.head_dim, rng);
    const auto q = rows(1, heads.n_q, heads.head_dim, rng);
    std::vector<float> out(q.size());
    std::vector<kv::Contiguous<float>> flat;
    for (std::size_t l = 0; l < kStepLayers; ++l) {
      flat.emplace_back(heads.n_kv, heads.head_dim, n);
      flat.back().append(k, v);
    }
    // a server's pool: room for two requests of this length and two allocation extents more
    kv::PagedConfig cfg{.n_layers = kStepLayers, .n_kv_heads = heads.n_kv, .head_dim = heads.head_dim,
                        .block_tokens = kBlock};
    const std::size_t need = n / kBlock, n_blocks = 2 * need + 2 * cfg.extent();
    cfg.n_blocks = n_blocks;
    const std::size_t row = heads.kv_dim();
    auto grow = [&](kv::PagedPool<float>& pool, kv::SeqId id, std::size_t p) {  // positions [p, p + B)
      const std::span<const float> kk(k.data() + p * row, kBlock * row), vv(v.data() + p * row, kBlock * row);
      for (std::size_t l = 0; l < kStepLayers; ++l) pool.append(id, l, kk, vv);
    };
    kv::PagedPool<float> runs(cfg), frag(cfg);
    const kv::SeqId a = runs.add_sequence(), b = runs.add_sequence();
    for (std::size_t p = 0; p < n; p += kBlock) {  // two requests growing side by side
      grow(runs, a, p);
      grow(runs, b, p);
    }
    std::vector<kv::SeqId> held(n_blocks);
    for (auto& id : held) {
      id = frag.add_sequence();
      grow(frag, id, 0);
    }
    std::shuffle(held.begin(), held.end(), rng);
    for (std::size_t i = 0; i < need; ++i) frag.release(held[i]);
    const kv::SeqId f = frag.add_sequence();
    for (std::size_t p = 0; p < n; p += kBlock) grow(frag, f, p);

    auto contiguous = [&] {
      for (const auto& c : flat) attention::decode(q, c, heads, out);
    };
    auto paged = [&](kv::PagedPool<float>& pool, kv::SeqId id) {
      return [&pool, id, &q, &heads, &out] {
        for (std::size_t l = 0; l < kStepLayers; ++l) attention::decode(q, pool.view(id, l), heads, out);
      };
    };
    const auto [tr_all, tc_all] = barato_examples::paired_medians(paged(runs, a), contiguous);
    const auto [tf_all, tc2_all] = barato_examples::paired_medians(paged(frag, f), contiguous);
    const double tc = tc_all / kStepLayers, tr = tr_all / kStepLayers;
    const double tc2 = tc2_all / kStepLayers, tf = tf_all / kStepLayers;
    worst_runs = std::max(worst_runs, tr / tc);
    worst_frag = std::max(worst_frag, tf / tc2);
    std::printf("| %9zu | %7.1f us | %8.1f us | %11.2fx | %19.1f us | %11.2fx |\n", n, tc * 1e6, tr * 1e6, tr / tc,
                tf * 1e6, tf / tc2);
  }
  std::printf("\nPages in runs of consecutive blocks cost at most %.2fx the contiguous step here; pages scattered\n"
              "through a fragmented pool up to %.2fx (4 KiB of K or V per head and page: one core's hardware\n"
              "prefetchers do not follow a jump to another page, software prefetching recovers only part of it).\n"
              "bench_kv measures B = 8, 16, 32 on cold caches, with a read probe of the same layout.\n",
              worst_runs, worst_frag);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutorial_paged_cache: %s\n", e.what());
  return 1;
}
