// Tests of the example Llama decoder (examples/models/llama.hpp, generate.hpp): greedy generation on
// stories260K equals llama2.c run.c's reference token ids for every reference file (cached and
// uncached), prefill == token-by-token decode, agreement with the scalar reference forward pass,
// truncate/rollback, capacity errors, and converted weight formats.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <filesystem>
#include <memory>
#include <vector>

#include "barato/kv/growable.hpp"
#include "barato/kv/paged.hpp"
#include "barato/nn/any_linear.hpp"
#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/fault_injection.hpp"
#include "support/llama_reference.hpp"
#include "support/reference.hpp"
#include "support/reference_file.hpp"

namespace fs = std::filesystem;
using namespace barato_examples;
using Cache = barato::kv::Contiguous<float>;

namespace {

/// Logits of different summation orders (block vs single token, tiles vs scalar) agree to this,
/// relative to the largest |logit| of the row set.
constexpr double kLogitRelTol = 2e-5;

LlamaConfig small_config(RopeStyle style, bool shared) {
  LlamaConfig c;
  c.dim = 48;
  c.hidden_dim = 72;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;  // q_dim 48
  c.vocab_size = 67;
  c.seq_len = 96;
  c.rope_style = style;
  c.shared_classifier = shared;
  return c;
}

std::vector<Token> random_tokens(std::size_t n, std::size_t vocab, unsigned seed) {
  std::vector<Token> t(n);
  std::uint64_t s = seed * 2654435761u + 1;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<Token>((s >> 33) % vocab);
  }
  return t;
}

std::vector<float> forward_all(Llama<Cache>& m, const std::vector<Token>& toks) {
  std::vector<float> logits(toks.size() * m.vocab_size());
  m.forward(toks, logits);
  return logits;
}

}  // namespace

TEST_CASE("llama: block prefill, token-by-token decode and the scalar reference agree") {
  for (const auto style : {RopeStyle::adjacent, RopeStyle::half_split})
    for (const bool shared : {true, false}) {
      const auto w = random_llama_weights(small_config(style, shared), 7);
      const std::size_t V = w.config.vocab_size;
      const auto toks = random_tokens(70, V, 3);

      Llama<Cache> block(w, make_contiguous_caches(w.config, 96), {.threads = 1, .max_chunk = 16});
      const auto lb = forward_all(block, toks);  // 5 chunks of 16, last one partial
      CHECK(block.size() == toks.size());

      Llama<Cache> step(w, make_contiguous_caches(w.config, 96), {.threads = 1, .max_chunk = 1});
      std::vector<float> ls(toks.size() * V);
      for (std::size_t i = 0; i < toks.size(); ++i)
        step.forward(std::span<const Token>(&toks[i], 1), std::span<float>(ls).subspan(i * V, V));

      barato::test::LlamaReference ref(w);
      std::vector<float> lr;
      for (const Token t : toks) {
        const auto r = ref.step(t);
        lr.insert(lr.end(), r.begin(), r.end());
      }
      INFO("style " << int(style) << " shared " << shared);
      CHECK(barato::test::max_rel_diff(lb, lr) < kLogitRelTol);
      CHECK(barato::test::max_rel_diff(ls, lr) < kLogitRelTol);

      // forward_last equals the last row of forward.
      Llama<Cache> last(w, make_contiguous_caches(w.config, 96), {.max_chunk = 32});
      std::vector<float> ll(V);
      last.forward_last(toks, ll);
      const std::vector<float> tail(lb.end() - static_cast<std::ptrdiff_t>(V), lb.end());
      CHECK(barato::test::max_rel_diff(ll, tail) < kLogitRelTol);
    }
}

TEST_CASE("llama: truncate then re-forward equals a fresh forward; reset") {
  const auto w = random_llama_weights(small_config(RopeStyle::adjacent, true), 11);
  const std::size_t V = w.config.vocab_size;
  auto toks = random_tokens(40, V, 5);
  Llama<Cache> m(w, make_contiguous_caches(w.config, 64), {.max_chunk = 8});
  (void)forward_all(m, toks);
  m.truncate(25);
  CHECK(m.size() == 25);
  const std::vector<Token> other = random_tokens(10, V, 9);
  const auto after = forward_all(m, other);

  std::vector<Token> fresh_seq(toks.begin(), toks.begin() + 25);
  fresh_seq.insert(fresh_seq.end(), other.begin(), other.end());
  Llama<Cache> f(w, make_contiguous_caches(w.config, 64), {.max_chunk = 8});
  const auto fresh = forward_all(f, fresh_seq);
  const std::vector<float> fresh_tail(fresh.end() - static_cast<std::ptrdiff_t>(10 * V), fresh.end());
  CHECK(barato::test::max_rel_diff(after, fresh_tail) < kLogitRelTol);

  m.reset();
  CHECK(m.size() == 0);
  const auto again = forward_all(m, fresh_seq);
  CHECK(again == fresh);  // same chunking from position 0: bit-identical
  CHECK_THROWS_AS(m.truncate(1000), barato::shape_error);
}

TEST_CASE("llama: errors leave the model unchanged") {
  const auto w = random_llama_weights(small_config(RopeStyle::adjacent, true), 13);
  const std::size_t V = w.config.vocab_size;
  Llama<Cache> m(w, make_contiguous_caches(w.config, 20), {.max_chunk = 8});
  CHECK(m.capacity() == 20);
  const auto toks = random_tokens(15, V, 1);
  (void)forward_all(m, toks);
  std::vector<float> logits(10 * V);
  CHECK_THROWS_AS(m.forward(random_tokens(10, V, 2), logits), barato::capacity_error);
  CHECK(m.size() == 15);
  std::vector<Token> bad = {1, 2, static_cast<Token>(V)};
  std::vector<float> l3(3 * V);
  CHECK_THROWS_AS(m.forward(bad, l3), barato::value_error);
  CHECK(m.size() == 15);
  CHECK_THROWS_AS(m.forward(std::vector<Token>{1, 2}, l3), barato::shape_error);
  CHECK(m.size() == 15);
  // Wrong cache shapes / counts are rejected at construction.
  auto two = make_contiguous_caches(w.config, 8);
  two.pop_back();
  CHECK_THROWS_AS(Llama<Cache>(w, std::move(two)), barato::shape_error);
  std::vector<Cache> wrong;
  for (std::size_t i = 0; i < w.config.n_layers; ++i) wrong.emplace_back(w.config.n_kv_heads, 2 * w.config.head_dim, 8);
  CHECK_THROWS_AS(Llama<Cache>(w, std::move(wrong)), barato::shape_error);
}

TEST_CASE("llama: converted weights (AnyLinear) give identical logits; observer sees every layer") {
  const auto w = random_llama_weights(small_config(RopeStyle::half_split, false), 17);
  const auto any = convert_weights(w, [](const barato::nn::DenseLinear& d) { return barato::nn::AnyLinear(d.copy()); });
  CHECK(any.linear_bytes() == w.linear_bytes());
  const auto toks = random_tokens(12, w.config.vocab_size, 4);
  Llama<Cache> a(w, make_contiguous_caches(w.config, 16));
  Llama<Cache, barato::nn::AnyLinear> b(any, make_contiguous_caches(any.config, 16));
  std::vector<float> la(12 * w.config.vocab_size), lb(la.size());
  std::vector<std::size_t> seen;
  b.set_observer([&](std::size_t layer, std::span<const float> h) {
    seen.push_back(layer);
    CHECK(h.size() == 12 * w.config.dim);
  });
  a.forward(toks, la);
  b.forward(toks, lb);
  CHECK(la == lb);
  CHECK(seen == std::vector<std::size_t>{0, 1, 2});
  // Shared ownership of the weights.
  auto shared = std::make_shared<const LlamaWeights<>>(random_llama_weights(small_config(RopeStyle::adjacent, true), 1));
  Llama<Cache> s(shared, make_contiguous_caches(shared->config, 4));
  shared.reset();
  std::vector<float> l1(s.vocab_size());
  s.forward_last(std::vector<Token>{1, 5}, l1);
  CHECK(s.size() == 2);
}

TEST_CASE("llama: random weights are deterministic whatever the thread count") {
  const auto c = small_config(RopeStyle::adjacent, false);
  const auto a = random_llama_weights(c, 5, std::pmr::get_default_resource(), 1);
  const auto b = random_llama_weights(c, 5, std::pmr::get_default_resource(), 2);
  const auto d = random_llama_weights(c, 6);
  const auto wa = a.layers[1].w2.weights(), wb = b.layers[1].w2.weights(), wd = d.layers[1].w2.weights();
  CHECK(std::equal(wa.begin(), wa.end(), wb.begin()));
  CHECK_FALSE(std::equal(wa.begin(), wa.end(), wd.begin()));
  CHECK(*std::max_element(wa.begin(), wa.end()) <= std::sqrt(3.0f / 72.0f));
}

TEST_CASE("llama: a step's attention gives every segment the bits of its attend alone, for any threads and mix") {
  // detail::attend_segments shares the threads out by causal keys (a long chunk alone on all threads,
  // the rest one thread per segment in runs of equal keys): mixes where a chunk takes most of the work,
  // where none does, only decodes, and a subset through `only` (as the cascade path calls it).
  namespace att = barato::attention;
  const att::Heads heads{.n_q = 8, .n_kv = 4, .head_dim = 8};
  const std::size_t qd = heads.q_dim();
  struct Seg { std::size_t pos, rows; };
  const std::vector<std::vector<Seg>> mixes{
      {{200, 1}, {213, 1}, {90, 1}, {0, 64}, {301, 1}},              // the chunk is most of the keys
      {{200, 1}, {0, 32}, {213, 1}, {90, 1}, {301, 1}, {40, 20}},    // two chunks, neither alone
      {{500, 1}, {0, 7}, {17, 1}, {3, 1}, {250, 1}, {260, 1}, {1, 1}},  // decodes and a short chunk
      {{0, 150}, {150, 40}},                                          // two chunks, both alone-sized
      {{10, 1}, {20, 1}, {30, 1}, {40, 1}, {50, 1}, {60, 1}, {70, 1}, {80, 1}, {90, 1}}};
  for (std::size_t m = 0; m < mixes.size(); ++m) {
    CAPTURE(m);
    std::vector<barato::batch::Segment> segs;
    std::vector<Cache> caches;
    std::size_t rows = 0;
    std::uint64_t state = 99 + m;
    auto rnd = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>(static_cast<double>(state >> 40) / 16777216.0 - 0.5);
    };
    for (const Seg& g : mixes[m]) {
      segs.push_back({.chunk = segs.size(), .row0 = rows, .rows = g.rows, .pos = g.pos});
      rows += g.rows;
      caches.emplace_back(heads.n_kv, heads.head_dim, g.pos + g.rows);
      std::vector<float> k((g.pos + g.rows) * heads.kv_dim()), v(k.size());
      for (auto& x : k) x = rnd();
      for (auto& x : v) x = rnd();
      caches.back().append(k, v);
    }
    std::vector<float> q(rows * qd);
    for (auto& x : q) x = rnd();
    auto cache_of = [&](std::size_t i, std::size_t) -> const Cache& { return caches[i]; };
    std::vector<float> ref(rows * qd, 0.0f);  // each segment alone, one thread
    for (const auto& s : segs)
      att::attend(std::span<const float>(q).subspan(s.row0 * qd, s.rows * qd), caches[s.chunk], heads,
                  std::span<float>(ref).subspan(s.row0 * qd, s.rows * qd));
    const std::vector<std::size_t> only{4, 0, 2};  // a subset, out of order
    for (const int threads : {1, 2, 3, 4}) {
      CAPTURE(threads);
      std::vector<float> out(rows * qd, -1.0f);
      barato_examples::detail::attend_segments(0, segs, cache_of, q, out, threads, heads, 0, segs.size());
      CHECK(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0);
      if (segs.size() > 4) {
        std::fill(out.begin(), out.end(), -1.0f);
        barato_examples::detail::attend_segments(0, segs, cache_of, q, out, threads, heads, 0, only.size(), only.data());
        for (std::size_t i = 0; i < segs.size(); ++i) {
          const auto& s = segs[i];
          const bool attended = std::find(only.begin(), only.end(), i) != only.end();
          for (std::size_t e = s.row0 * qd; e < (s.row0 + s.rows) * qd; ++e)
            if (out[e] != (attended ? ref[e] : -1.0f)) {
              FAIL_CHECK("segment ", i, " (attended: ", attended, ") differs at float ", e);
              break;
            }
        }
      }
    }
  }
}

TEST_CASE("llama: on a paged pool the logits equal the contiguous model's bit for bit, every page size") {
  // head_dim 8 (the small-d kernel on AVX-512, generic elsewhere): pages of 1 … 16 tokens, prompts
  // within one page and across many, then a decode step
  auto c = small_config(RopeStyle::adjacent, false);
  c.seq_len = 128;
  const auto w = random_llama_weights(c, 5);
  using View = barato::kv::PagedView<float>;
  for (const std::size_t B : {1, 4, 8, 16})
    for (const std::size_t n : {3, 5, 8, 17, 40}) {
      CAPTURE(B);
      CAPTURE(n);
      barato::kv::PagedPool<float> pool(
          {.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = B,
           .n_blocks = 64});
      const auto seq = pool.add_sequence();
      std::vector<View> views;
      for (std::size_t l = 0; l < c.n_layers; ++l) views.push_back(pool.view(seq, l));
      Llama<View> paged(w, std::move(views));
      Llama<Cache> flat(w, make_contiguous_caches(c, 128));
      const auto toks = random_tokens(n + 1, c.vocab_size, 11);
      std::vector<float> lp(c.vocab_size), lf(c.vocab_size);
      paged.forward_last(std::span<const Token>(toks).first(n), lp);
      flat.forward_last(std::span<const Token>(toks).first(n), lf);
      CHECK(lp == lf);
      paged.forward_last(std::span<const Token>(toks).subspan(n), lp);
      flat.forward_last(std::span<const Token>(toks).subspan(n), lf);
      CHECK(lp == lf);
    }
}

TEST_CASE("llama: greedy generation on stories260K equals run.c's reference ids, with and without the cache") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  std::vector<fs::path> refs;
  for (const auto& e : fs::directory_iterator(dir / "stories260K/reference"))
    if (e.path().extension() == ".txt") refs.push_back(e.path());
  std::sort(refs.begin(), refs.end());
  REQUIRE(!refs.empty());
  std::size_t checked = 0;
  for (const auto& p : refs) {
    INFO("reference file " << p);
    const auto r = barato::test::read_reference_file(p);
    if (r.at("format") != "llama2c-greedy-v1" || std::stof(r.at("temperature")) != 0.0f) continue;
    ++checked;
    const std::string prompt = barato::test::parse_json_string(r.at("prompt_json"));
    const auto prompt_ids = tok.encode(prompt, true);
    CHECK(std::vector<int>(prompt_ids.begin(), prompt_ids.end()) == r.ids("prompt_ids"));
    const auto expected = r.ids("generated_ids");
    for (const bool cached : {true, false}) {
      Llama<Cache> m(w, make_contiguous_caches(w.config, w.config.seq_len), {.threads = 1});
      std::vector<float> logits(m.vocab_size());
      const auto g = generate(m, prompt_ids, {.steps = std::stoul(r.at("steps")), .use_cache = cached}, logits);
      INFO("cached " << cached);
      CHECK(std::vector<int>(g.generated.begin(), g.generated.end()) == expected);
      CHECK(g.stopped_on_bos == (r.at("stop") == "bos"));
      std::vector<Token> all(prompt_ids);
      all.insert(all.end(), g.generated.begin(), g.generated.end());
      if (g.stopped_on_bos) all.pop_back();
      CHECK(tok.decode_text(all) == barato::test::parse_json_string(r.at("text_json")));
      const std::vector<Token> gen_only(g.generated.begin(), g.generated.end() - (g.stopped_on_bos ? 1 : 0));
      std::vector<Token> with_prev{all[prompt_ids.size() - 1]};
      with_prev.insert(with_prev.end(), gen_only.begin(), gen_only.end());
      if (r.values.count("generated_text_json"))
        CHECK(tok.decode_text(with_prev) == barato::test::parse_json_string(r.at("generated_text_json")));
    }
  }
  CHECK(checked == refs.size());
}

TEST_CASE("llama: stories260K prefill logits match the scalar reference") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  CHECK(w.config.head_dim == 8);
  CHECK(w.bytes() == (260032 + 512 * 64) * 4);  // tied classifier stored once more as a Dense
  const auto toks = random_tokens(100, 512, 8);
  Llama<Cache> m(w, make_contiguous_caches(w.config, 128), {.threads = 1, .max_chunk = 64});
  const auto lb = forward_all(m, toks);
  barato::test::LlamaReference ref(w);
  std::vector<float> lr;
  for (const Token t : toks) {
    const auto r = ref.step(t);
    lr.insert(lr.end(), r.begin(), r.end());
  }
  CHECK(barato::test::max_rel_diff(lb, lr) < kLogitRelTol);
}

namespace {
template <class T>
void snap_block(barato::test::Snapshot& s, const barato::kv::DenseBlock<T>& b, std::size_t d) {
  s("pos0", b.pos0)("n", b.n);
  for (std::size_t r = 0; r < b.n; ++r)
    s.range("k", std::span<const T>(b.k + r * b.stride, d)).range("v", std::span<const T>(b.v + r * b.stride, d));
}
template <class T>
void snap_block(barato::test::Snapshot& s, const barato::kv::PagedBlock<T>& b, std::size_t d) {
  for (std::size_t i = 0; i < b.pages(); ++i) snap_block(s, b.page(i), d);
}
/// Every cache's size, reserved bytes (unless `with_reserved` is false) and stored K/V rows.
template <class M>
std::string model_snapshot(const M& m, bool with_reserved) {
  barato::test::Snapshot s;
  s("size", m.size());
  for (const auto& c : m.caches()) {
    s("len", c.size());
    if (with_reserved) s("reserved", c.bytes_reserved());
    for (std::size_t h = 0; h < c.n_kv_heads(); ++h) c.for_each_block(h, [&](const auto& b) { snap_block(s, b, c.head_dim()); });
  }
  return s.str();
}
std::string pool_snapshot(const barato::kv::PagedPool<float>& pool) {
  barato::test::Snapshot s;
  for (barato::kv::SeqId q = 0; q < 4; ++q)
    if (pool.is_live(q)) s("seq", q).range("table", pool.block_table(q));
  for (std::uint32_t b = 0; b < pool.n_blocks(); ++b) s("ref", pool.refcount(b))("cached", pool.is_cached(b));
  s.range("free", pool.free_list())("registered", pool.prefix_stats().blocks_registered);
  return s.str();
}
}  // namespace

TEST_CASE("llama: a forward whose k-th allocation fails leaves every cache as it was, for every k; then gives the same logits") {
  auto c = small_config(RopeStyle::adjacent, false);
  const auto w = random_llama_weights(c, 9);
  const auto prompt = random_tokens(12, c.vocab_size, 3), more = random_tokens(21, c.vocab_size, 4);
  // 21 tokens in chunks of 8: three appends per layer, the failure can come after earlier chunks
  std::vector<float> logits(more.size() * c.vocab_size);  // outside the op: the op's allocations are the model's
  auto run = [&](auto& m) {
    m.forward(more, logits);
    return std::span<const float>(logits);  // read (snapshot) right after each successful run
  };
  SUBCASE("contiguous: the forward allocates nothing") {
    auto make = [&] {
      auto m = std::make_unique<Llama<Cache>>(w, make_contiguous_caches(c, 64), LlamaOptions{.threads = 1, .max_chunk = 8});
      std::vector<float> l(c.vocab_size);
      m->forward_last(prompt, l);
      return m;
    };
    CHECK(barato::test::check_strong_guarantee(make, [&](auto& m) { return run(*m); },
                                               [](const auto& m) { return model_snapshot(*m, true); }) == 0);
  }
  SUBCASE("growable: every chunk is allocated before the first append") {
    using G = barato::kv::Growable<float>;
    auto make = [&] {
      std::vector<G> caches;
      for (std::size_t l = 0; l < c.n_layers; ++l) caches.emplace_back(c.n_kv_heads, c.head_dim, 8);
      auto m = std::make_unique<Llama<G>>(w, std::move(caches), LlamaOptions{.threads = 1, .max_chunk = 8});
      std::vector<float> l(c.vocab_size);
      m->forward_last(prompt, l);
      return m;
    };
    // reserved chunks may stay after a failure (documented); positions and K/V may not change
    CHECK(barato::test::check_strong_guarantee(make, [&](auto& m) { return run(*m); },
                                               [](const auto& m) { return model_snapshot(*m, false); }) > 0);
  }
  SUBCASE("paged, forked sequence: copy-on-write of the shared partial page") {
    using View = barato::kv::PagedView<float>;
    struct Scene {
      std::unique_ptr<barato::kv::PagedPool<float>> pool;
      std::unique_ptr<Llama<View>> m;
    };
    auto make = [&] {
      Scene sc;
      sc.pool = std::make_unique<barato::kv::PagedPool<float>>(barato::kv::PagedConfig{
          .n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = 8, .n_blocks = 16});
      const auto seq = sc.pool->admit(prompt).seq;
      std::vector<View> views;
      for (std::size_t l = 0; l < c.n_layers; ++l) views.push_back(sc.pool->view(seq, l));
      sc.m = std::make_unique<Llama<View>>(w, std::move(views), LlamaOptions{.threads = 1, .max_chunk = 8});
      std::vector<float> l(c.vocab_size);
      sc.m->forward_last(prompt, l);
      (void)sc.pool->fork(seq);  // pages 0 (full) and 1 (partial) are now shared
      return sc;
    };
    CHECK(barato::test::check_strong_guarantee(make, [&](auto& sc) { return run(*sc.m); },
                                               [](const auto& sc) { return model_snapshot(*sc.m, true) + pool_snapshot(*sc.pool); }) > 0);
  }
}

TEST_CASE("llama: absurd config sizes are capacity_errors naming them, before any allocation") {
  auto c = small_config(RopeStyle::adjacent, false);
  CHECK(c.parameters() == c.vocab_size * c.dim + c.n_layers * (2 * c.dim * c.q_dim() + 2 * c.dim * c.kv_dim() + 3 * c.dim * c.hidden_dim + 2 * c.dim) + c.dim);
  auto wide = c;
  wide.dim = std::size_t{1} << 33;
  wide.hidden_dim = std::size_t{1} << 33;
  CHECK_THROWS_WITH_AS(wide.validate(), doctest::Contains("LlamaConfig: dim x hidden_dim = 8589934592 x 8589934592 overflows"),
                       barato::capacity_error);
  auto deep = c;
  deep.n_layers = std::size_t{1} << 62;
  CHECK_THROWS_WITH_AS(deep.validate(), doctest::Contains("n_layers x per-layer weights"), barato::capacity_error);
  auto long_ctx = c;
  long_ctx.seq_len = std::size_t{1} << 62;
  CHECK_THROWS_WITH_AS(long_ctx.validate(), doctest::Contains("seq_len x head_dim (RoPE table)"), barato::capacity_error);
  // representable, but more weights than the machine holds: 2^20 vocab x 2^16 dim alone is 2^36 floats
  auto big = c;
  big.vocab_size = std::size_t{1} << 20;
  big.dim = std::size_t{1} << 16;
  big.n_heads = 512;
  big.n_kv_heads = 64;
  big.head_dim = 128;
  big.hidden_dim = std::size_t{1} << 18;
  const std::size_t phys = barato::physical_memory_bytes();
  if (phys != 0 && phys / 4 < big.parameters())
    CHECK_THROWS_WITH_AS((void)random_llama_weights(big, 1), doctest::Contains("bytes of physical memory"), barato::capacity_error);
}
