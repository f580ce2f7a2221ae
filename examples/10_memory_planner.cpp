// Tutorial 10 — how much context, for how many users?
//
// "Does the model fit?" is the wrong question. Memory holds the weights, a runtime reserve, and the
// KV cache of every token of every user; what is left after the first two decides how many tokens can
// be resident at once, and so how many users at a given context, or how long a context for a given
// number of users. barato::plan does that arithmetic:
//
//     total = weights + KV bytes/token · tokens + reserve
//     weights = parameters · bits per weight / 8,   KV bytes/token = layers · kv_heads · (K + V row bytes)
//
// with each refinement — paging, the quantized caches' scales, a sliding window, a shared prefix — a
// separate switch, exact for what barato's caches allocate.
//
//   Step 1  8, 16 and 24 GiB: 7B / 13B / 70B × fp16 / int8 / int4 weights, fp16 KV cache: weights,
//           KV bytes/token, max resident tokens, users at 4,096 tokens
//   Step 2  what paging (block 16), an int8 KV cache and a window change, on 7B with int8 weights
//   Step 3  the search: which weight × KV formats fit 8 users × 4,096 tokens of 7B in 16 GiB
//   Step 4  the planner against the allocator: a paged pool of the planned blocks for Qwen2.5-0.5B,
//           measured with a CountingResource and filled by its users
//
// Run:  tutorial_memory_planner     (no data needed; runs in well under a second)

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/paged.hpp"
#include "barato/plan/plan.hpp"
#include "tutorial_support.hpp"

namespace {

using namespace barato;
using namespace barato::plan;
using barato_examples::grouped;

void check(bool ok, const std::string& what) {
  if (!ok) throw barato::error("identity check failed: " + what);
}

/// "unlimited" or the number with thousands separators.
std::string limit(std::size_t n) { return n == kUnlimited ? "unlimited" : grouped(n); }

/// The floor properties every plan must have: max tokens fit and one more does not; likewise users.
void check_floors(const Plan& p, std::size_t context, const std::string& what) {
  if (!p.weights_fit()) {
    check(p.max_tokens() == 0 && p.max_users(context) == 0 && p.shortfall() > 0, what + ": no room when the weights do not fit");
    return;
  }
  // the unit of allocation: a token, or a whole block of B tokens when paged
  const std::size_t B = p.input().refine.block_tokens;
  const std::size_t units = B == 0 ? p.max_tokens() : p.max_tokens() / B;
  const std::size_t unit_bytes = B == 0 ? p.kv_bytes_per_token() : p.block_bytes();
  check(B == 0 || p.max_tokens() % B == 0, what + ": paged max tokens are whole blocks");
  check(units * unit_bytes <= p.kv_budget(), what + ": max tokens fit");
  check((units + 1) * unit_bytes > p.kv_budget(), what + ": one token (block) more does not fit");
  const std::size_t u = p.max_users(context);
  if (u != kUnlimited) {
    check(p.fits(context, u) && !p.fits(context, u + 1), what + ": max users fit, one more does not");
  }
}

int run() {
  const std::vector<ModelShape> shapes = {shape_7b(), shape_13b(), shape_70b()};
  const std::vector<WeightFormat> weights = {parse_weight_format("fp16"), parse_weight_format("int8"),
                                             parse_weight_format("int4")};
  constexpr std::size_t kContext = 4096;

  // ---------------------------------------------------------------------------------------------
  // Step 1 — the table
  // ---------------------------------------------------------------------------------------------
  std::printf("Step 1. Weights + fp16 KV cache + 1.5 GiB reserve (GB = GiB; int4 = 4.125 bits with its fp16\n"
              "        scales per group of 128)\n\n");
  std::printf("  %6s %-5s %-5s %12s %14s %12s %14s\n", "budget", "model", "wts", "weights", "KV B/token", "max tokens",
              "users @ 4096");
  for (const std::size_t gib : {8u, 16u, 24u}) {
    for (const ModelShape& s : shapes)
      for (const WeightFormat& w : weights) {
        const Plan p({.shape = s, .weights = w, .kv = {KvStorage::fp16}, .budget = gib * kGiB});
        check_floors(p, kContext, s.name + " " + w.name);
        check(p.kv_bytes_per_token() == kv::bytes_per_token(s.layers, s.kv_heads, s.head_dim, DType::f16),
              "the planner's fp16 bytes/token is kv::bytes_per_token");
        const std::string tokens = p.weights_fit() ? grouped(p.max_tokens()) : "-";
        const std::string users =
            p.weights_fit() ? limit(p.max_users(kContext)) : "short " + format_bytes(p.shortfall());
        std::printf("  %3zu GB %-5s %-5s %12s %14s %12s %14s\n", gib, s.name.c_str(), w.name.c_str(),
                    format_bytes(p.weight_bytes()).c_str(), grouped(p.kv_bytes_per_token()).c_str(), tokens.c_str(),
                    users.c_str());
      }
    std::printf("\n");
  }
  const Plan p7({.shape = shape_7b(), .weights = weights[2], .kv = {KvStorage::fp16}, .budget = 16 * kGiB});
  const Plan p13({.shape = shape_13b(), .weights = weights[2], .kv = {KvStorage::fp16}, .budget = 16 * kGiB});
  const double ratio = double(p13.kv_bytes_per_token()) / double(p7.kv_bytes_per_token());
  check(p13.kv_bytes_per_token() * shape_7b().layers * shape_7b().kv_heads ==
            p7.kv_bytes_per_token() * shape_13b().layers * shape_13b().kv_heads,
        "KV bytes/token scale with layers · KV heads");
  std::printf("What the 13B rows show: 13B is full multi-head attention (40 KV heads in each of 40 layers against\n"
              "7B's 8 in 32), so a token costs %.2f× the KV bytes of 7B's GQA (%.0f× per layer); with int4 weights\n"
              "in 16 GB, 13B holds %s tokens (%s users at 4,096) where 7B holds %s (%s users) — the cache, not\n"
              "the weights, is what 13B runs out of.\n\n",
              ratio, double(shape_13b().kv_heads) / double(shape_7b().kv_heads), grouped(p13.max_tokens()).c_str(),
              limit(p13.max_users(kContext)).c_str(), grouped(p7.max_tokens()).c_str(), limit(p7.max_users(kContext)).c_str());

  // ---------------------------------------------------------------------------------------------
  // Step 2 — the refinements, one at a time
  // ---------------------------------------------------------------------------------------------
  constexpr std::size_t kOddContext = 4100;  // not a multiple of 16: paging rounds it up to 4,112
  std::printf("Step 2. 7B, int8 weights, 16 GB: what paging, a quantized KV cache and a window change\n"
              "        (bytes per user at %zu tokens; users at that context; context for 4 users)\n\n", kOddContext);
  struct Variant {
    const char* name;
    KvStorage kv;
    Refinements r;
  };
  const std::vector<Variant> variants = {
      {"fp16, plain", KvStorage::fp16, {}},
      {"fp16, paged (block 16)", KvStorage::fp16, {.block_tokens = 16}},
      {"int8 codes only (plain)", KvStorage::int8, {}},
      {"int8 + fp32 scales", KvStorage::int8, {.kv_scales = true}},
      {"int8 + scales, paged 16", KvStorage::int8, {.kv_scales = true, .block_tokens = 16}},
      {"k8v4 + scales, paged 16", KvStorage::k8v4, {.kv_scales = true, .block_tokens = 16}},
      {"fp16, window 1024 + 4 sinks", KvStorage::fp16, {.window = 1024, .sinks = 4}},
      {"fp16, paged, 2,048 shared", KvStorage::fp16, {.block_tokens = 16, .shared_prefix_tokens = 2048}},
  };
  std::printf("  %-30s %12s %14s %10s %14s\n", "KV cache", "B/token", "bytes/user", "users", "ctx @ 4 users");
  std::size_t plain_users = 0;
  for (const Variant& v : variants) {
    const Plan p({.shape = shape_7b(), .weights = weights[1], .kv = {v.kv}, .budget = 16 * kGiB, .refine = v.r});
    check_floors(p, kOddContext, v.name);
    const std::size_t users = p.max_users(kOddContext);
    if (plain_users == 0) plain_users = users;
    std::printf("  %-30s %12s %14s %10s %14s\n", v.name, grouped(p.kv_bytes_per_token()).c_str(),
                format_bytes(p.kv_bytes(kOddContext, 1)).c_str(), limit(users).c_str(), limit(p.max_context(4)).c_str());
    if (v.r.block_tokens == 16 && v.r.shared_prefix_tokens == 0)
      check(p.kv_bytes(kOddContext, 1) == p.kv_bytes_per_token() * 4112, "paging rounds 4,100 tokens up to 4,112");
    if (v.r.window != 0) check(p.kv_bytes(kOddContext, 1) == p.kv_bytes(100 * kOddContext, 1), "a window's bytes do not grow");
  }
  const KvCacheFormat int8{KvStorage::int8};
  const std::size_t d = shape_7b().head_dim, rounded = (kOddContext + 15) / 16 * 16;
  std::printf("Paging costs at most B − 1 tokens per user (here %zu of %s); an int8 cache halves the bytes and\n"
              "its scales add %zu per %zu code bytes (%.1f %%); a window makes a user's bytes independent of the\n"
              "context; a shared prefix is paid once.\n\n",
              rounded - kOddContext, grouped(kOddContext).c_str(), int8.scale_bytes(), int8.code_bytes(d),
              100.0 * double(int8.scale_bytes()) / double(int8.code_bytes(d)));

  // ---------------------------------------------------------------------------------------------
  // Step 3 — the search
  // ---------------------------------------------------------------------------------------------
  SearchQuery q;
  q.shape = shape_7b();
  q.budget = 16 * kGiB;
  q.context = kContext;
  q.users = 8;
  q.refine = {.kv_scales = true, .block_tokens = 16};
  const std::vector<Candidate> found = search(q);
  std::printf("Step 3. Which weight × KV formats fit 8 users × 4,096 tokens of 7B in 16 GB (paged, scales counted)?\n\n");
  std::printf("  %-6s %-6s %12s %12s %16s\n", "wts", "KV", "total", "max users", "ctx @ 8 users");
  for (const Candidate& c : found) {
    std::printf("  %-6s %-6s %12s %12s %16s\n", c.weights.name.c_str(), std::string(c.kv.name()).c_str(),
                format_bytes(c.total_bytes).c_str(), limit(c.max_users).c_str(), limit(c.max_context).c_str());
    check(c.total_bytes <= q.budget, "every candidate fits");
  }
  check(!found.empty(), "something fits");
  std::printf("%zu of %zu combinations fit; the smallest first (a quality column appears when measured\n"
              "perplexity or KL figures are given, e.g. from tutorial_quant_quality).\n\n", found.size(),
              q.weights.size() * q.kv.size());

  // ---------------------------------------------------------------------------------------------
  // Step 4 — the planner against the allocator
  // ---------------------------------------------------------------------------------------------
  const ModelShape qwen = shape_qwen25_05b();
  constexpr std::size_t kUsers = 4, kTokens = 300, kB = 16;
  const Plan pq({.shape = qwen, .weights = weights[0], .kv = {KvStorage::fp16}, .budget = 4 * kGiB,
                 .refine = {.kv_scales = true, .block_tokens = kB}});
  const kv::PagedConfig cfg{.n_layers = qwen.layers, .n_kv_heads = qwen.kv_heads, .head_dim = qwen.head_dim,
                            .block_tokens = kB, .n_blocks = pq.blocks(kTokens, kUsers)};
  CountingResource counting;
  std::size_t at_construction = 0, used = 0;
  {
    kv::PagedPool<f16> pool(cfg, &counting);
    at_construction = counting.peak();
    const std::size_t row = qwen.kv_heads * qwen.head_dim;
    const std::vector<float> k(kTokens * row, 0.5f), v(kTokens * row, -0.25f);
    for (std::size_t u = 0; u < kUsers; ++u) {
      const kv::SeqId id = pool.add_sequence();
      for (std::size_t l = 0; l < qwen.layers; ++l) pool.append(id, l, k, v);
    }
    used = pool.used_blocks();
    check(pool.free_blocks() == 0, "the users fill the planned pool exactly");
  }
  std::printf("Step 4. Qwen2.5-0.5B, fp16 pages of 16, %zu users × %zu tokens: the planner against a CountingResource\n\n",
              kUsers, kTokens);
  std::printf("  planned blocks %s, used %s; planned page bytes %s + pool metadata %s = %s, allocated %s\n\n",
              grouped(cfg.n_blocks).c_str(), grouped(used).c_str(), grouped(pq.kv_bytes(kTokens, kUsers)).c_str(),
              grouped(paged_pool_metadata_bytes(cfg)).c_str(),
              grouped(pq.kv_bytes(kTokens, kUsers) + paged_pool_metadata_bytes(cfg)).c_str(), grouped(at_construction).c_str());
  check(used == cfg.n_blocks, "planned blocks == blocks the users take");
  check(at_construction == pq.kv_bytes(kTokens, kUsers) + paged_pool_metadata_bytes(cfg),
        "planned bytes == allocated bytes at construction");
  std::printf("The planner's bytes are the allocator's: the page store is exactly the planned KV bytes, the\n"
              "bookkeeping is named separately, and the users take exactly the planned blocks.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("usage: tutorial_memory_planner\n");
        return 0;
      }
      std::fprintf(stderr, "tutorial_memory_planner: unknown argument '%s' (try --help)\n", argv[i]);
      return 2;
    }
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
