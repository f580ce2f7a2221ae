// The memory planner (include/barato/plan): hand-computed plans for the named shapes, every
// refinement on its own, bad input, the search, and — the point of it — KV bytes equal to what
// barato's caches allocate from a CountingResource (contiguous, quantized, sliding-window caches and
// paged pools of every format, filled to the planned blocks).
#include "barato/plan/plan.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/kv/sliding_window.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/nf4.hpp"
#include "models/shapes.hpp"

using namespace barato;
using namespace barato::plan;

namespace {
constexpr std::size_t k16GiB = 16 * kGiB;

Plan plan_7b(const char* weights, const char* kv, Refinements r = {}) {
  return Plan({.shape = shape_7b(), .weights = parse_weight_format(weights), .kv = parse_kv_format(kv),
               .budget = k16GiB, .refine = r});
}

/// A small model, so that real caches of it are cheap: 3 layers, 4 query heads over 2 KV heads of 16.
ModelShape tiny() {
  return {.name = "tiny", .parameters = 1e6, .layers = 3, .q_heads = 4, .kv_heads = 2, .head_dim = 16, .vocab = 64};
}
Plan tiny_plan(KvStorage kv, Refinements r = Refinements::exact()) {
  return Plan({.shape = tiny(), .weights = {"fp16", 16}, .kv = {kv}, .budget = kGiB, .reserve = 0, .refine = r});
}
}  // namespace

TEST_CASE("plan: 7B with fp16 weights and an fp16 KV cache in 16 GiB, by hand") {
  const Plan p = plan_7b("fp16", "fp16");
  CHECK(p.weight_bytes() == 14'000'000'000u);                  // 7e9 · 2 bytes
  CHECK(p.kv_bytes_per_token() == 2u * 32 * 8 * 128 * 2);      // 131,072 = 128 KiB
  CHECK(p.kv_budget() == 17'179'869'184u - 14'000'000'000u - 1'610'612'736u);  // 1,569,256,448
  CHECK(p.max_tokens() == 11972);                              // 1,569,256,448 / 131,072 = 11,972.6
  CHECK(p.max_users(4096) == 2);
  CHECK(p.max_context(1) == 11972);
  CHECK(p.max_context(2) == 5986);
  CHECK(p.max_context(3) == 3990);                             // ⌊11,972.6 / 3⌋
  CHECK(p.fits(4096, 2));
  CHECK_FALSE(p.fits(4096, 3));
  CHECK(p.shortfall(4096, 3) == 14'000'000'000u + 3u * 4096 * 131072 + 1'610'612'736u - 17'179'869'184u);
  CHECK(p.total_bytes(4096, 2) == 14'000'000'000u + 2u * 4096 * 131072 + 1'610'612'736u);
}

TEST_CASE("plan: weights that do not fit give the shortfall and no tokens") {
  const Plan p = Plan({.shape = shape_13b(), .weights = {"fp16", 16}, .kv = {KvStorage::fp16}, .budget = k16GiB});
  CHECK_FALSE(p.weights_fit());
  CHECK(p.shortfall() == 26'000'000'000u + 1'610'612'736u - 17'179'869'184u);
  CHECK(p.kv_budget() == 0);
  CHECK(p.max_tokens() == 0);
  CHECK(p.max_users(1) == 0);
  CHECK(p.max_context(1) == 0);
  // 13B is full MHA: 40 KV heads in 40 layers against 7B's 8 in 32.
  CHECK(p.kv_bytes_per_token() == 2u * 40 * 40 * 128 * 2);
}

TEST_CASE("plan: weight formats — named, bits, quant format types") {
  CHECK(plan_7b("int8", "fp16").weight_bytes() == 7'000'000'000u);
  CHECK(plan_7b("int4", "fp16").weight_bytes() == 3'609'375'000u);  // 7e9 · 4.125 / 8
  CHECK(plan_7b("nf4", "fp16").weight_bytes() == 3'718'750'000u);   // 7e9 · 4.25 / 8
  CHECK(plan_7b("5.5", "fp16").weight_bytes() == 4'812'500'000u);
  CHECK(weight_format<quant::Nf4<>>().bits_per_weight == 4.25);
  CHECK(weight_format<quant::Nf4<64, float>>().bits_per_weight == 4.5);
  CHECK(weight_bytes(1001, {"x", 4}) == 501);  // rounded up to whole bytes
  // the named figures are the format types' facts
  CHECK(parse_weight_format("int4").bits_per_weight == quant::AbsMax<4, quant::PerGroup<128>>::kBitsPerWeight);
  CHECK(parse_weight_format("nf4").bits_per_weight == quant::Nf4<>::kBitsPerWeight);
  CHECK(parse_weight_format("int8").bits_per_weight == quant::AbsMax<8, quant::PerRow>::kBitsPerWeight);
  // the tools' scheme names
  CHECK(parse_weight_format("int4-g128").bits_per_weight == 4.125);
  CHECK(parse_weight_format("int4-g128").name == "int4-g128");
  CHECK(parse_weight_format("q4_0").bits_per_weight == 4.5);  // ggml's formats, by scheme name
  CHECK(parse_weight_format("q8_0").bits_per_weight == 8.5);
  CHECK(parse_weight_format("int8-row").bits_per_weight == 8);
  CHECK(parse_weight_format("int4-tensor").bits_per_weight == 4);
}

TEST_CASE("plan: KV formats — codes, and the scales as a separate line") {
  CHECK(plan_7b("int4", "fp32").kv_bytes_per_token() == 2u * 32 * 8 * 128 * 4);
  CHECK(plan_7b("int4", "bf16").kv_bytes_per_token() == 2u * 32 * 8 * 128 * 2);
  CHECK(plan_7b("int4", "int8").kv_bytes_per_token() == 32u * 8 * 256);               // codes only
  CHECK(plan_7b("int4", "int8", {.kv_scales = true}).kv_bytes_per_token() == 32u * 8 * (256 + 8));
  CHECK(plan_7b("int4", "int4", {.kv_scales = true}).kv_bytes_per_token() == 32u * 8 * (128 + 8));
  CHECK(plan_7b("int4", "k8v4", {.kv_scales = true}).kv_bytes_per_token() == 32u * 8 * (128 + 64 + 8));
  // scales are nothing for element caches
  CHECK(plan_7b("int4", "fp16", {.kv_scales = true}).kv_bytes_per_token() == plan_7b("int4", "fp16").kv_bytes_per_token());
}

TEST_CASE("plan: paging rounds each sequence up to whole blocks") {
  const Plan plain = plan_7b("int8", "fp16");
  const Plan paged = plan_7b("int8", "fp16", {.block_tokens = 16});
  CHECK(paged.block_bytes() == 16u * 131072);
  CHECK(paged.blocks(4000, 3) == 3 * 250);
  CHECK(paged.blocks(4001, 3) == 3 * 251);
  CHECK(paged.kv_bytes(4000, 3) == plain.kv_bytes(4000, 3));
  CHECK(paged.kv_bytes(4001, 3) == plain.kv_bytes(4001 + 15, 3));
  CHECK(paged.max_tokens() == plain.max_tokens() / 16 * 16);
  CHECK(paged.max_context(1) == paged.max_tokens());
  CHECK_THROWS_AS((void)plain.blocks(1, 1), value_error);
}

TEST_CASE("plan: a shared prefix is counted once (whole blocks when paged)") {
  const Plan flat = plan_7b("int8", "fp16", {.shared_prefix_tokens = 40});
  CHECK(flat.kv_bytes(100, 3) == (40u + 3 * 60) * 131072);
  CHECK(flat.kv_bytes(30, 3) == 30u * 131072);  // the whole context is the shared prefix
  CHECK(flat.max_users(30) == kUnlimited);
  const Plan paged = plan_7b("int8", "fp16", {.block_tokens = 16, .shared_prefix_tokens = 40});
  CHECK(paged.blocks(100, 3) == 2 + 3 * (7 - 2));  // 2 full shared blocks; the partial third one is each user's
  CHECK(paged.kv_bytes(100, 3) == 17u * 16 * 131072);
  // max users from the kv budget: (budget − shared) / own
  const std::size_t own = 5u * 16 * 131072, shared = 2u * 16 * 131072;
  CHECK(paged.max_users(100) == (paged.kv_budget() - shared) / own);
}

TEST_CASE("plan: a sliding window costs fixed bytes per sequence") {
  const Plan w = plan_7b("int8", "fp16", {.window = 512, .sinks = 4, .chunk = 8});
  CHECK(w.window_bytes() == (4u + 512 + 7) * 131072);
  CHECK(w.kv_bytes(100, 2) == w.kv_bytes(100'000, 2));
  CHECK(w.kv_bytes(1, 2) == 2 * w.window_bytes());
  CHECK(w.max_users(1'000'000) == w.kv_budget() / w.window_bytes());
  CHECK(w.max_context(1) == kUnlimited);
  CHECK(w.max_context(w.max_users(1) + 1) == 0);
}

TEST_CASE("plan: max_context and max_users agree with fits at their edges") {
  for (const Refinements r : {Refinements{}, Refinements{.block_tokens = 16}, Refinements{.block_tokens = 32, .shared_prefix_tokens = 1000}}) {
    const Plan p = plan_7b("int4", "k8v4", r);
    for (const std::size_t users : {1u, 2u, 7u, 50u}) {
      const std::size_t c = p.max_context(users);
      CHECK(p.fits(c, users));
      CHECK_FALSE(p.fits(c + 1, users));
    }
    for (const std::size_t ctx : {1u, 512u, 4096u, 32768u}) {
      const std::size_t u = p.max_users(ctx);
      if (u == kUnlimited) {  // the whole context is the shared prefix: users add nothing
        CHECK(ctx <= r.shared_prefix_tokens);
        CHECK(p.fits(ctx, 1'000'000));
        continue;
      }
      CHECK(p.fits(ctx, u));
      CHECK_FALSE(p.fits(ctx, u + 1));
    }
  }
}

TEST_CASE("plan: activation buffers for a given tokens per step, counted once") {
  // 7B, one token per step: 3 · 4096 + 2 · 4096 + 2 · 1024 + 2 · 11008 = 44,544 floats; RoPE 4096 × 64 × 2 floats
  CHECK(decoder_activation_bytes(shape_7b(), 1, 4096) == 4u * (44544 + 2 * 4096 * 64));
  CHECK(decoder_activation_bytes(shape_7b(), 128, 0) == 4u * 128 * 44544);
  const Plan base = plan_7b("int8", "fp16");
  const Plan act = plan_7b("int8", "fp16", {.step_tokens = 128, .rope_positions = 4096});
  CHECK(act.activation_bytes() == decoder_activation_bytes(shape_7b(), 128, 4096));
  CHECK(act.fixed_bytes() == base.fixed_bytes() + act.activation_bytes());
  CHECK(act.kv_budget() == base.kv_budget() - act.activation_bytes());
  CHECK(act.total_bytes(4096, 3) == base.total_bytes(4096, 3) + act.activation_bytes());
  CHECK(base.activation_bytes() == 0);
  CHECK_THROWS_WITH_AS(Plan({.shape = tiny(), .budget = kGiB, .refine = {.step_tokens = 1}}),
                       doctest::Contains("needs dim and hidden_dim"), value_error);
}

TEST_CASE("plan: bad input is a value_error with a clear message") {
  CHECK_THROWS_WITH_AS((void)named_shape("8b"), doctest::Contains("unknown shape '8b'"), value_error);
  CHECK(named_shape("Qwen2.5-0.5B").layers == 24);
  CHECK_THROWS_WITH_AS((void)parse_weight_format("int3"), doctest::Contains("unknown weight format 'int3'"), value_error);
  CHECK_THROWS_AS((void)parse_weight_format("0"), value_error);
  CHECK_THROWS_AS((void)parse_weight_format("-4"), value_error);
  CHECK_THROWS_WITH_AS((void)parse_kv_format("fp8"), doctest::Contains("unknown KV-cache format 'fp8'"), value_error);
  CHECK_THROWS_WITH_AS(Plan({.shape = shape_7b(), .budget = 0}), doctest::Contains("budget must be > 0"), value_error);
  CHECK_THROWS_AS(Plan({.shape = tiny(), .budget = kGiB, .refine = {.block_tokens = 16, .window = 8}}), value_error);
  CHECK_THROWS_AS(Plan({.shape = ModelShape{.name = "zero"}, .budget = kGiB}), value_error);
  CHECK_THROWS_AS((void)plan_7b("fp16", "fp16").max_context(0), value_error);
}

TEST_CASE("plan: parse_bytes accepts GiB / GB / MiB / bytes and rejects the rest") {
  CHECK(parse_bytes("16GiB") == 16 * kGiB);
  CHECK(parse_bytes("16 GB") == 16 * kGiB);
  CHECK(parse_bytes("1.5GiB") == 3 * kGiB / 2);
  CHECK(parse_bytes("512MiB") == 512 * kMiB);
  CHECK(parse_bytes("4096") == 4096);
  CHECK(parse_bytes("64KiB") == 64 * kKiB);
  CHECK_THROWS_WITH_AS((void)parse_bytes("-1GiB"), doctest::Contains("negative"), value_error);
  CHECK_THROWS_WITH_AS((void)parse_bytes("16XB"), doctest::Contains("unknown unit"), value_error);
  CHECK_THROWS_AS((void)parse_bytes("GiB"), value_error);
  CHECK_THROWS_AS((void)parse_bytes("nan"), value_error);
  CHECK(format_bytes(3 * kGiB / 2) == "1.50 GiB");
  CHECK(format_bytes(100) == "100 B");
}

TEST_CASE("plan: the named Qwen2.5-0.5B shape is the example model's") {
  const ModelShape s = shape_qwen25_05b();
  const barato_examples::LlamaConfig c = barato_examples::qwen25_05b_shape();
  CHECK(s.layers == c.n_layers);
  CHECK(s.q_heads == c.n_heads);
  CHECK(s.kv_heads == c.n_kv_heads);
  CHECK(s.head_dim == c.head_dim);
  CHECK(s.vocab == c.vocab_size);
  CHECK(s.dim == c.dim);
  CHECK(s.hidden_dim == c.hidden_dim);
  CHECK(s.parameters == doctest::Approx(494.0e6).epsilon(0.001));
}

TEST_CASE("plan: search lists the fitting combinations, smallest first, with quality") {
  SearchQuery q;
  q.shape = shape_7b();
  q.budget = 8 * kGiB;
  q.context = 4096;
  q.users = 4;
  q.quality = {{"int4", "int8", 6.1}, {"nf4", "fp16", 5.9}};
  const std::vector<Candidate> found = search(q);
  REQUIRE_FALSE(found.empty());
  for (std::size_t i = 0; i < found.size(); ++i) {
    const Plan p({.shape = q.shape, .weights = found[i].weights, .kv = found[i].kv, .budget = q.budget, .refine = q.refine});
    CHECK(p.fits(4096, 4));
    CHECK(found[i].total_bytes == p.total_bytes(4096, 4));
    if (i > 0) CHECK(found[i - 1].total_bytes <= found[i].total_bytes);
    CHECK(found[i].weights.name != "fp16");  // 14 GB of fp16 weights do not fit in 8 GiB
  }
  // 4 × 4096 tokens of fp32 KV (2 GiB) + int8 weights (6.5 GiB) + reserve do not fit, int4 weights with int4 KV do
  std::size_t with_quality = 0, int4_int4 = 0;
  for (const Candidate& c : found) {
    CHECK_FALSE((c.weights.name == "int8" && c.kv.name() == "fp32"));
    with_quality += c.quality.has_value() ? 1 : 0;
    int4_int4 += (c.weights.name == "int4" && c.kv.name() == "int4") ? 1 : 0;
    if (c.weights.name == "int4" && c.kv.name() == "int8") CHECK(*c.quality == 6.1);
  }
  CHECK(with_quality == 2);
  CHECK(int4_int4 == 1);
  CHECK(found.front().weights.name == "int4");
  CHECK(found.front().kv.name() == "int4");
}

// ---- exact for what barato allocates -------------------------------------------------------------

TEST_CASE_TEMPLATE("plan: KV bytes = the peak of L contiguous caches per user", T, float, f16, bf16) {
  const KvStorage kv = std::same_as<T, float> ? KvStorage::fp32 : (std::same_as<T, f16> ? KvStorage::fp16 : KvStorage::bf16);
  for (const std::size_t context : {1u, 37u, 256u})
    for (const std::size_t users : {1u, 3u}) {
      const Plan p = tiny_plan(kv);
      CountingResource res;
      {
        std::vector<kv::Contiguous<T>> caches;
        for (std::size_t i = 0; i < users * tiny().layers; ++i) caches.emplace_back(tiny().kv_heads, tiny().head_dim, context, &res);
        CHECK(res.peak() == p.kv_bytes(context, users));
      }
      CHECK(res.current() == 0);
    }
}

TEST_CASE("plan: KV bytes = the peak of quantized caches; without the scales line they fall short by exactly the scales") {
  const std::size_t context = 37, users = 3, L = tiny().layers, H = tiny().kv_heads, d = tiny().head_dim;
  const auto measure = [&]<class Cache>(std::type_identity<Cache>) {
    CountingResource res;
    std::vector<Cache> caches;
    for (std::size_t i = 0; i < users * L; ++i) caches.emplace_back(H, d, context, &res);
    return res.peak();
  };
  const std::size_t i8 = measure(std::type_identity<kv::Quantized<kv::Int8>>{});
  const std::size_t i4 = measure(std::type_identity<kv::Quantized<kv::Int4>>{});
  const std::size_t k8v4 = measure(std::type_identity<kv::Quantized<kv::Int8, kv::Int4>>{});
  CHECK(tiny_plan(KvStorage::int8).kv_bytes(context, users) == i8);
  CHECK(tiny_plan(KvStorage::int4).kv_bytes(context, users) == i4);
  CHECK(tiny_plan(KvStorage::k8v4).kv_bytes(context, users) == k8v4);
  const std::size_t scales = users * L * H * context * 2 * sizeof(float);
  CHECK(tiny_plan(KvStorage::int8, {}).kv_bytes(context, users) + scales == i8);
  CHECK(tiny_plan(KvStorage::k8v4, {}).kv_bytes(context, users) + scales == k8v4);
}

TEST_CASE("plan: KV bytes = the peak of sliding-window caches, whatever the context") {
  const Refinements r{.kv_scales = true, .window = 24, .sinks = 4, .chunk = 8};
  for (const std::size_t users : {1u, 4u}) {
    CountingResource res;
    std::vector<kv::SlidingWindow<f16>> caches;
    for (std::size_t i = 0; i < users * tiny().layers; ++i)
      caches.emplace_back(kv::SlidingWindowConfig{.n_kv_heads = tiny().kv_heads, .head_dim = tiny().head_dim, .window = 24,
                                                  .sinks = 4, .chunk = 8},
                          &res);
    CHECK(res.peak() == tiny_plan(KvStorage::fp16, r).kv_bytes(1000, users));
  }
}

namespace {
/// Builds a pool of `plan.blocks(context, users)` blocks from a counting resource, checks its bytes at
/// construction (page store = the plan's KV bytes, + the metadata), then fills `users` sequences of
/// `context` tokens in every layer — forks of one sequence after the shared prefix — and checks that
/// they take exactly the planned blocks, so one more sequence does not fit.
template <class Format>
void fill_planned_pool(KvStorage kv, std::size_t B, std::size_t context, std::size_t users, std::size_t prefix) {
  CAPTURE(B);
  CAPTURE(context);
  CAPTURE(users);
  CAPTURE(prefix);
  const Plan p = tiny_plan(kv, {.kv_scales = true, .block_tokens = B, .shared_prefix_tokens = prefix});
  const ModelShape s = tiny();
  const kv::PagedConfig cfg{.n_layers = s.layers, .n_kv_heads = s.kv_heads, .head_dim = s.head_dim, .block_tokens = B,
                            .n_blocks = p.blocks(context, users)};
  CountingResource res;
  kv::PagedPool<Format> pool(cfg, &res);
  CHECK(pool.bytes_reserved() == p.kv_bytes(context, users));
  CHECK(res.peak() == p.kv_bytes(context, users) + paged_pool_metadata_bytes(cfg));

  const std::size_t row = s.kv_heads * s.head_dim;
  const auto append = [&](kv::SeqId id, std::size_t n) {
    std::vector<float> k(n * row, 0.25f), v(n * row, -0.5f);
    for (std::size_t l = 0; l < s.layers; ++l) pool.append(id, l, k, v);
  };
  const std::size_t shared = std::min(prefix, context) / B * B;  // what forks share: whole blocks
  const kv::SeqId first = pool.add_sequence();
  append(first, shared);
  std::vector<kv::SeqId> seqs{first};
  for (std::size_t u = 1; u < users; ++u) seqs.push_back(pool.fork(first));
  for (const kv::SeqId id : seqs) append(id, context - shared);
  CHECK(pool.used_blocks() == p.blocks(context, users));
  CHECK(pool.free_blocks() == 0);
  const kv::SeqId extra = pool.add_sequence();
  std::vector<float> one(row, 1.0f);
  CHECK_THROWS_AS(pool.append(extra, 0, one, one), capacity_error);
}
}  // namespace

TEST_CASE("plan: paged pools of the planned blocks — page store = KV bytes, filled exactly") {
  for (const std::size_t B : {1u, 4u, 16u})
    for (const std::size_t context : {1u, 16u, 37u, 100u})
      for (const std::size_t users : {1u, 3u}) {
        fill_planned_pool<float>(KvStorage::fp32, B, context, users, 0);
        fill_planned_pool<f16>(KvStorage::fp16, B, context, users, 0);
      }
  fill_planned_pool<kv::QuantizedPages<kv::Int8>>(KvStorage::int8, 16, 100, 3, 0);
  fill_planned_pool<kv::QuantizedPages<kv::Int4>>(KvStorage::int4, 4, 37, 2, 0);
  fill_planned_pool<kv::QuantizedPages<kv::Int8, kv::Int4>>(KvStorage::k8v4, 16, 100, 3, 0);
  // a shared prefix: 40 tokens = 2 whole blocks of 16 shared, the partial third block copied on write
  fill_planned_pool<f16>(KvStorage::fp16, 16, 100, 3, 40);
  fill_planned_pool<f16>(KvStorage::fp16, 16, 100, 4, 48);
  fill_planned_pool<kv::QuantizedPages<kv::Int8>>(KvStorage::int8, 4, 37, 3, 20);
  fill_planned_pool<float>(KvStorage::fp32, 16, 30, 3, 40);  // prefix longer than the context
}
