// Tests of the batched model step (examples/models/llama_batch.hpp, batch/token_batch.hpp): a step
// over several sequences — decodes and prefill chunks of different lengths in one product — gives,
// bit for bit, the logits of running each sequence alone through the same chunks, for fp32 and
// quantized weights, paged-pool and per-slot caches, 1 and 2 threads; errors roll every cache back;
// a step with per-slot caches allocates nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <span>
#include <vector>

#include "barato/batch/token_batch.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "barato/quant/linear.hpp"
#include "models/llama.hpp"
#include "models/llama_batch.hpp"
#include "support/fault_injection.hpp"

using namespace barato_examples;
namespace batch = barato::batch;
namespace kv = barato::kv;

namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.dim = 48;
  c.hidden_dim = 72;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 67;
  c.seq_len = 128;
  return c;
}

std::vector<Token> tokens_of(std::size_t n, std::size_t vocab, unsigned seed) {
  std::vector<Token> t(n);
  std::uint64_t s = seed * 2654435761u + 7;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<Token>((s >> 33) % vocab);
  }
  return t;
}

/// A scripted workload: per sequence its chunk lengths step by step (0 = not in that step).
struct Script {
  std::vector<std::vector<Token>> seqs;              // every token each sequence will run
  std::vector<std::vector<std::size_t>> chunk_len;   // [step][seq] tokens run in that step
};

Script make_script(std::size_t vocab) {
  Script s;
  s.chunk_len = {{5, 3, 0, 0}, {1, 4, 7, 0}, {1, 1, 1, 12}, {1, 1, 9, 1}, {1, 2, 1, 1}, {0, 1, 1, 1}};
  std::vector<std::size_t> total(4, 0);
  for (const auto& st : s.chunk_len)
    for (std::size_t i = 0; i < 4; ++i) total[i] += st[i];
  for (std::size_t i = 0; i < 4; ++i) s.seqs.push_back(tokens_of(total[i], vocab, 11 + static_cast<unsigned>(i)));
  return s;
}

/// Logits of running each sequence alone through its chunks: [step][seq] → vocab floats (empty when
/// the sequence is not in the step).
template <class Linear>
std::vector<std::vector<std::vector<float>>> alone(const LlamaWeights<Linear>& w, const Script& s) {
  const std::size_t V = w.config.vocab_size;
  std::vector<std::vector<std::vector<float>>> out(s.chunk_len.size(), std::vector<std::vector<float>>(s.seqs.size()));
  for (std::size_t q = 0; q < s.seqs.size(); ++q) {
    Llama<kv::Contiguous<float>, Linear> m(w, make_contiguous_caches(w.config, 128), {.threads = 1});
    std::size_t p = 0;
    for (std::size_t st = 0; st < s.chunk_len.size(); ++st) {
      const std::size_t n = s.chunk_len[st][q];
      if (n == 0) continue;
      out[st][q].resize(V);
      m.forward_last(std::span<const Token>(s.seqs[q]).subspan(p, n), out[st][q]);
      p += n;
    }
  }
  return out;
}

/// Runs the script through `model` (one plan per step); checks every returned row bitwise against `ref`.
template <class Model>
void run_batched(Model& model, const Script& s, const std::vector<kv::SeqId>& seq_ids,
                 const std::vector<std::vector<std::vector<float>>>& ref) {
  const std::size_t V = model.vocab_size();
  std::vector<std::size_t> pos(s.seqs.size(), 0);
  for (std::size_t st = 0; st < s.chunk_len.size(); ++st) {
    std::vector<batch::SeqChunk> chunks;
    // decodes (one token) first, then prefill chunks, as a scheduler orders them
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t q = 0; q < s.seqs.size(); ++q) {
        const std::size_t n = s.chunk_len[st][q];
        if (n == 0 || (pass == 0) != (n == 1)) continue;
        chunks.push_back({.request = q, .slot = q, .seq = seq_ids[q], .pos = pos[q],
                          .tokens = std::span<const Token>(s.seqs[q]).subspan(pos[q], n), .wants_logits = true,
                          .decode = n == 1});
      }
    batch::StepPlan plan{.step = st, .chunks = chunks};
    plan.logits_rows = chunks.size();
    std::vector<float> logits(chunks.size() * V);
    model.step(plan, logits);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const std::size_t q = chunks[i].request;
      CAPTURE(st);
      CAPTURE(q);
      REQUIRE(ref[st][q].size() == V);
      CHECK(std::memcmp(logits.data() + i * V, ref[st][q].data(), V * sizeof(float)) == 0);
      pos[q] += chunks[i].tokens.size();
    }
  }
}

template <class Linear>
void check_invariance(const LlamaWeights<Linear>& w) {
  const Script s = make_script(w.config.vocab_size);
  const auto ref = alone(w, s);
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    for (const std::size_t B : {4, 16}) {  // paged pool (pages smaller and larger than a kernel chunk)
      const std::string caches = "paged:" + std::to_string(B);
      CAPTURE(caches);
      kv::PagedPool<float> pool({.n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads,
                                 .head_dim = w.config.head_dim, .block_tokens = B, .n_blocks = 64});
      std::vector<kv::SeqId> ids;
      for (std::size_t q = 0; q < s.seqs.size(); ++q) ids.push_back(pool.add_sequence());
      BatchedLlama<PoolCaches<float>, Linear> model(w, PoolCaches<float>{&pool}, {.threads = threads, .max_tokens = 32, .max_chunks = 8});
      run_batched(model, s, ids, ref);
    }
    {  // one contiguous cache per layer per slot
      const std::string caches = "contiguous slots";
      CAPTURE(caches);
      SlotCaches<kv::Contiguous<float>> slots;
      for (std::size_t q = 0; q < s.seqs.size(); ++q) slots.slots.push_back(make_contiguous_caches(w.config, 64));
      BatchedLlama<SlotCaches<kv::Contiguous<float>>, Linear> model(w, std::move(slots),
                                                                   {.threads = threads, .max_tokens = 32, .max_chunks = 8});
      run_batched(model, s, std::vector<kv::SeqId>(s.seqs.size(), 0), ref);
    }
  }
}

}  // namespace

TEST_CASE("batched step == each sequence alone through the same chunks, bitwise (fp32 weights)") {
  check_invariance(random_llama_weights(small_config(), 5));
}

TEST_CASE("batched step == each sequence alone, bitwise (int8-row and int4-g128 weights)") {
  LlamaConfig c = small_config();
  c.dim = 128;  // int4-g128 needs 128-column groups
  c.n_heads = 8;
  c.head_dim = 16;
  c.hidden_dim = 256;
  const auto w = random_llama_weights(c, 9);
  namespace quant = barato::quant;
  check_invariance(convert_weights(w, [](const barato::nn::DenseLinear& d) {
    return quant::Linear<quant::Int8PerRow<>>(d.rows(), d.cols(), d.weights());
  }));
  check_invariance(convert_weights(w, [](const barato::nn::DenseLinear& d) {
    return quant::Linear<quant::Int4Group<128>>(d.rows(), d.cols(), d.weights());
  }));
}

TEST_CASE("a failing step leaves every cache as it was; a step with slot caches allocates nothing") {
  const auto w = random_llama_weights(small_config(), 3);
  const std::size_t V = w.config.vocab_size;
  SlotCaches<kv::Contiguous<float>> slots;
  for (int q = 0; q < 2; ++q) slots.slots.push_back(make_contiguous_caches(w.config, 32));
  BatchedLlama<SlotCaches<kv::Contiguous<float>>> model(w, std::move(slots), {.max_tokens = 16, .max_chunks = 4});
  const auto a = tokens_of(6, V, 1), b = tokens_of(6, V, 2);
  std::vector<batch::SeqChunk> chunks{{.request = 0, .slot = 0, .pos = 0, .tokens = a, .wants_logits = true},
                                      {.request = 1, .slot = 1, .pos = 0, .tokens = b, .wants_logits = true}};
  std::vector<float> logits(2 * V);
  model.step({.chunks = chunks, .logits_rows = 2}, logits);
  CHECK(model.caches().slots[0][0].size() == 6);

  SUBCASE("a cache not at the plan's position") {
    chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = std::span<const Token>(a).first(1), .wants_logits = true, .decode = true};
    chunks[1] = {.request = 1, .slot = 1, .pos = 5, .tokens = std::span<const Token>(b).first(1), .wants_logits = true, .decode = true};
    CHECK_THROWS_AS(model.step({.chunks = chunks}, logits), barato::shape_error);
  }
  SUBCASE("a token outside the vocabulary") {
    const std::vector<Token> bad{static_cast<Token>(V)};
    chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = std::span<const Token>(a).first(1), .wants_logits = true, .decode = true};
    chunks[1] = {.request = 1, .slot = 1, .pos = 6, .tokens = bad, .wants_logits = true, .decode = true};
    CHECK_THROWS_AS(model.step({.chunks = chunks}, logits), barato::value_error);
  }
  SUBCASE("more tokens than the model was built for") {
    const auto big = tokens_of(17, V, 3);
    chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = big, .wants_logits = true};
    chunks.resize(1);
    CHECK_THROWS_AS(model.step({.chunks = chunks}, std::span<float>(logits).first(V)), barato::capacity_error);
  }
  SUBCASE("a wrong logits size") {
    chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = std::span<const Token>(a).first(1), .wants_logits = true, .decode = true};
    chunks[1] = {.request = 1, .slot = 1, .pos = 6, .tokens = std::span<const Token>(b).first(1), .wants_logits = true, .decode = true};
    CHECK_THROWS_AS(model.step({.chunks = chunks}, std::span<float>(logits).first(V)), barato::shape_error);
  }
  SUBCASE("a later chunk's failure rolls back the earlier chunks' appends") {
    // the second chunk's cache is full: its append throws capacity_error after the first chunk's K/V
    // went into layer 0; every layer of both slots must be back at 6 positions
    const auto long_b = tokens_of(16, V, 4);
    std::vector<batch::SeqChunk> c2{{.request = 1, .slot = 1, .pos = 6, .tokens = long_b, .wants_logits = true}};
    std::vector<float> l1(V);
    model.step({.chunks = c2}, l1);  // slot 1 now at 22 of 32
    chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = std::span<const Token>(a).first(1), .wants_logits = true, .decode = true};
    chunks[1] = {.request = 1, .slot = 1, .pos = 22, .tokens = long_b.data() == nullptr ? a : std::span<const Token>(long_b).first(11), .wants_logits = true};
    CHECK_THROWS_AS(model.step({.chunks = chunks}, logits), barato::capacity_error);
    for (std::size_t l = 0; l < w.config.n_layers; ++l) {
      CHECK(model.caches().slots[0][l].size() == 6);
      CHECK(model.caches().slots[1][l].size() == 22);
    }
  }
  // after any failure the model still runs, and a decode step allocates nothing
  chunks.resize(2);
  const std::size_t p1 = model.caches().slots[1][0].size();
  chunks[0] = {.request = 0, .slot = 0, .pos = 6, .tokens = std::span<const Token>(a).first(1), .wants_logits = true, .decode = true};
  chunks[1] = {.request = 1, .slot = 1, .pos = p1, .tokens = std::span<const Token>(b).first(1), .wants_logits = true, .decode = true};
  barato::test::CountAllocations count;
  model.step({.chunks = chunks}, logits);
  CHECK(count.count() == 0);
}

TEST_CASE("TokenBatch lays a plan out as rows and rejects what does not fit, unchanged") {
  const std::vector<Token> a{1, 2, 3}, b{4}, c{5, 6};
  std::vector<batch::SeqChunk> chunks{{.request = 0, .pos = 9, .tokens = b, .wants_logits = true, .decode = true},
                                      {.request = 1, .pos = 0, .tokens = a, .wants_logits = false},
                                      {.request = 2, .pos = 4, .tokens = c, .wants_logits = true}};
  batch::TokenBatch tb(6, 3);
  tb.assign({.chunks = chunks});
  CHECK(tb.size() == 6);
  CHECK(std::vector<Token>(tb.tokens().begin(), tb.tokens().end()) == std::vector<Token>{4, 1, 2, 3, 5, 6});
  REQUIRE(tb.segments().size() == 3);
  CHECK(tb.segments()[1].row0 == 1);
  CHECK(tb.segments()[1].rows == 3);
  CHECK(tb.segments()[2].pos == 4);
  CHECK(std::vector<std::size_t>(tb.logits_rows().begin(), tb.logits_rows().end()) == std::vector<std::size_t>{0, 5});
  batch::TokenBatch small(5, 3);
  CHECK_THROWS_AS(small.assign({.chunks = chunks}), barato::capacity_error);
  CHECK(small.size() == 0);
  const std::vector<Token> none;
  chunks[1].tokens = none;
  CHECK_THROWS_AS(tb.assign({.chunks = chunks}), barato::shape_error);
  CHECK(tb.size() == 6);
}


TEST_CASE("cascade attention in the batched step: forked sequences share pages; logits within tolerance, same argmax") {
  const auto w = random_llama_weights(small_config(), 21);
  const std::size_t V = w.config.vocab_size;
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    std::vector<std::vector<float>> by_mode[2];
    std::size_t cascaded = 0;
    for (const bool cascade : {false, true}) {
      kv::PagedPool<float> pool({.n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads, .head_dim = w.config.head_dim,
                                 .block_tokens = 16, .n_blocks = 32});
      const kv::SeqId a = pool.add_sequence();
      BatchedLlama<PoolCaches<float>> model(w, PoolCaches<float>{&pool},
                                            {.threads = threads, .max_tokens = 48, .max_chunks = 6, .cascade = cascade});
      const auto prompt = tokens_of(40, V, 5);
      std::vector<batch::SeqChunk> chunks{{.seq = a, .pos = 0, .tokens = prompt, .wants_logits = true}};
      std::vector<float> logits(6 * V);
      model.step({.chunks = chunks}, std::span<float>(logits).first(V));
      std::vector<kv::SeqId> seqs{a, pool.fork(a), pool.fork(a), pool.fork(a), pool.add_sequence()};
      const auto other = tokens_of(20, V, 9);
      chunks = {{.request = 4, .seq = seqs[4], .pos = 0, .tokens = other, .wants_logits = true}};
      model.step({.chunks = chunks}, std::span<float>(logits).first(V));
      std::vector<std::vector<Token>> next(5);
      for (std::size_t st = 0; st < 6; ++st) {
        chunks.clear();
        for (std::size_t i = 0; i < 5; ++i) {
          next[i].push_back(static_cast<Token>((st * 7 + i * 13) % V));
          chunks.push_back({.request = i, .seq = seqs[i], .pos = (i == 4 ? 20 : 40) + st,
                            .tokens = std::span<const Token>(next[i]).last(1), .wants_logits = true, .decode = true});
        }
        model.step({.chunks = chunks, .logits_rows = 5}, std::span<float>(logits).first(5 * V));
        by_mode[cascade].emplace_back(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(5 * V));
      }
      if (cascade) cascaded = model.cascaded();
    }
    CHECK(cascaded == 6 * w.config.n_layers * 4);  // the four forks, every step and layer; the fifth alone
    for (std::size_t st = 0; st < by_mode[0].size(); ++st)
      for (std::size_t r = 0; r < 5; ++r) {
        const float* p = by_mode[0][st].data() + r * V;
        const float* c = by_mode[1][st].data() + r * V;
        float scale = 0, diff = 0;
        std::size_t am0 = 0, am1 = 0;
        for (std::size_t v = 0; v < V; ++v) {
          scale = std::max(scale, std::abs(p[v]));
          diff = std::max(diff, std::abs(p[v] - c[v]));
          am0 = p[v] > p[am0] ? v : am0;
          am1 = c[v] > c[am1] ? v : am1;
        }
        CAPTURE(st);
        CAPTURE(r);
        CHECK(diff <= 1e-4f * scale);
        CHECK(am0 == am1);
        if (r == 4) CHECK(diff == 0.0f);  // the unshared sequence takes plain attention: bitwise
      }
  }
}

namespace {
std::string pool_state(const kv::PagedPool<float>& pool) {
  barato::test::Snapshot s;
  for (kv::SeqId q = 0; q < 8; ++q) {
    if (!pool.is_live(q)) continue;
    s("seq", q).range("table", pool.block_table(q));
    for (std::size_t l = 0; l < pool.n_layers(); ++l) {
      s("len", pool.size(q, l));
      for (std::size_t h = 0; h < pool.n_kv_heads(); ++h)
        for (std::size_t p = 0; p < pool.size(q, l); ++p) s.range("k", pool.key(q, l, h, p)).range("v", pool.value(q, l, h, p));
    }
  }
  for (std::uint32_t b = 0; b < pool.n_blocks(); ++b) s("ref", pool.refcount(b))("cached", pool.is_cached(b));
  s.range("free", pool.free_list())("registered", pool.prefix_stats().blocks_registered);
  return s.str();
}
}  // namespace

TEST_CASE("batched step over a pool whose k-th allocation fails leaves the pool exactly as it was, for every k") {
  const auto w = random_llama_weights(small_config(), 13);
  const std::size_t V = w.config.vocab_size;
  const auto prompt = tokens_of(10, V, 1), more_a = tokens_of(12, V, 2), more_b = tokens_of(1, V, 3), fresh = tokens_of(9, V, 4);
  struct Scene {
    std::unique_ptr<kv::PagedPool<float>> pool;
    std::unique_ptr<BatchedLlama<PoolCaches<float>>> model;
  };
  auto make = [&] {
    Scene sc;
    sc.pool = std::make_unique<kv::PagedPool<float>>(kv::PagedConfig{
        .n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads, .head_dim = w.config.head_dim, .block_tokens = 4, .n_blocks = 24});
    const kv::SeqId a = sc.pool->add_sequence();
    sc.model = std::make_unique<BatchedLlama<PoolCaches<float>>>(w, PoolCaches<float>{sc.pool.get()},
                                                                 BatchedLlamaOptions{.threads = 1, .max_tokens = 32, .max_chunks = 4});
    std::vector<batch::SeqChunk> c{{.seq = a, .pos = 0, .tokens = prompt, .wants_logits = true}};
    std::vector<float> l(V);
    sc.model->step({.chunks = c, .logits_rows = 1}, l);
    (void)sc.pool->fork(a);           // seq 1 shares a's pages, the partial third one included
    (void)sc.pool->add_sequence();    // seq 2: empty
    return sc;
  };
  // a: 12 tokens (copy-on-write of page 2, then new pages); b (the fork): a decode into the shared
  // partial page; c: a first chunk into an empty sequence
  const std::vector<batch::SeqChunk> chunks{{.request = 0, .seq = 0, .pos = 10, .tokens = more_a, .wants_logits = true},
                                            {.request = 1, .seq = 1, .pos = 10, .tokens = more_b, .wants_logits = true, .decode = true},
                                            {.request = 2, .seq = 2, .pos = 0, .tokens = fresh, .wants_logits = true}};
  std::vector<float> logits(3 * V);
  auto op = [&](Scene& sc) {
    sc.model->step({.chunks = chunks, .logits_rows = 3}, logits);
    return std::span<const float>(logits);
  };
  auto snap = [](const Scene& sc) { return pool_state(*sc.pool); };
  CHECK(barato::test::check_strong_guarantee(make, op, snap) > 0);

  SUBCASE("a pool without the blocks for the whole step: capacity_error before any change") {
    Scene sc = make();
    const kv::SeqId hog = sc.pool->add_sequence();
    std::vector<float> k(sc.pool->free_blocks() * 4 * w.config.n_kv_heads * w.config.head_dim - w.config.n_kv_heads * w.config.head_dim);
    for (std::size_t l = 0; l < w.config.n_layers; ++l) sc.pool->append(hog, l, k, k);  // one token's room left
    const std::string before = pool_state(*sc.pool);
    CHECK_THROWS_AS(sc.model->step({.chunks = chunks, .logits_rows = 3}, logits), barato::capacity_error);
    CHECK(pool_state(*sc.pool) == before);
  }
}
