// The example model on every KV cache policy (examples/models/kv_policies.hpp, the tools' --kv flag):
// greedy generation on stories260K gives identical tokens with contiguous, growable and paged
// caches (and equals run.c's reference ids); prefix sharing lets a second request skip prefill and
// still produce the same logits; a sliding window (window:W,S) prefilled in chunks equals feeding the
// same tokens one at a time bit for bit, and the windowed scalar reference to fp32 rounding; quantized pages decode like the quantized
// caches they page (their quality is measured by barato_perplexity).
#include "models/kv_policies.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/llama2c.hpp"
#include "models/speculative.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/llama_reference.hpp"
#include "support/reference.hpp"
#include "support/reference_file.hpp"

namespace fs = std::filesystem;
using namespace barato_examples;

namespace {
/// Logits of a windowed model vs token-by-token / the double-precision reference (relative to the
/// largest |logit|): fp32 summation-order differences through 5 layers, as for the full-cache model.
constexpr double kWindowLogitRelTol = 2e-5;
/// Logits after 200 positions of quantized pages vs the same codes in one block: the page-boundary
/// rescales of the online softmax change the fp32 summation order at every page, across 5 layers
/// and 200 steps; still far below the quantization error itself (~10⁻²).
constexpr double kQuantPageLogitRelTol = 1e-4;
/// Least difference between the windowed model and the full-cache model for the window test to mean
/// anything: two orders of magnitude above kWindowLogitRelTol.
constexpr double kWindowEffectMin = 1e-3;
}  // namespace

TEST_CASE("kv policies: greedy tokens on stories260K are identical across contiguous, growable and paged") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  std::vector<fs::path> refs;
  for (const auto& e : fs::directory_iterator(dir / "stories260K/reference"))
    if (e.path().extension() == ".txt") refs.push_back(e.path());
  std::sort(refs.begin(), refs.end());
  REQUIRE(!refs.empty());
  for (const auto& p : refs) {
    INFO("reference file " << p);
    const auto r = barato::test::read_reference_file(p);
    if (r.at("format") != "llama2c-greedy-v1" || std::stof(r.at("temperature")) != 0.0f) continue;
    const auto prompt_ids = tok.encode(barato::test::parse_json_string(r.at("prompt_json")), true);
    const std::size_t steps = std::stoul(r.at("steps"));
    const auto expected = r.ids("generated_ids");
    for (const std::string spec : {"contiguous", "growable:7", "paged", "paged:8"}) {
      INFO("--kv " << spec);
      const auto generated = with_kv_policy(spec, w.config, w.config.seq_len, std::pmr::get_default_resource(),
                                            [&](auto caches) {
                                              Llama<typename decltype(caches)::value_type> m(w, std::move(caches));
                                              std::vector<float> logits(m.vocab_size());
                                              return generate(m, prompt_ids, {.steps = steps}, logits).generated;
                                            });
      CHECK(std::vector<int>(generated.begin(), generated.end()) == expected);
    }
  }
}

TEST_CASE("kv policies: quantized pages (paged-int8, paged-k8v4) decode like the quantized caches they page") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  const auto prompt = tok.encode("Once upon a time, there was a little dog named Max. He", true);
  // The same codes and scales in pages of 16 (or 8) tokens as in one block: greedy tokens agree and
  // the logits of a 200-position continuation agree to fp32 rounding (page-boundary rescales).
  for (const auto& specs : {std::pair{"paged-int8", "int8"}, std::pair{"paged-k8v4:8", "k8v4"}}) {
    const std::string paged = specs.first, flat = specs.second;  // (clang 14: no structured bindings in INFO)
    INFO("--kv " << paged << " vs " << flat);
    auto run = [&](const std::string& spec) {
      return with_kv_policy(spec, w.config, w.config.seq_len, std::pmr::get_default_resource(), [&](auto caches) {
        Llama<typename decltype(caches)::value_type> m(w, std::move(caches));
        std::vector<float> logits(m.vocab_size());
        auto out = generate(m, prompt, {.steps = 200}, logits).generated;
        return std::pair{std::vector<int>(out.begin(), out.end()), logits};
      });
    };
    const auto on_pages = run(paged);
    const auto in_one_block = run(flat);
    CHECK(on_pages.first == in_one_block.first);
    CHECK(barato::test::max_rel_diff(on_pages.second, in_one_block.second) <= kQuantPageLogitRelTol);
  }
}

TEST_CASE("kv policies: a request admitted with a cached prefix skips its prefill and gets the same logits") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  const auto& c = w.config;
  barato::kv::PagedPool<float> pool(
      {.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = 16, .n_blocks = 64});
  using View = barato::kv::PagedView<float>;
  auto model_for = [&](barato::kv::SeqId seq) {
    std::vector<View> views;
    for (std::size_t l = 0; l < c.n_layers; ++l) views.push_back(pool.view(seq, l));
    return Llama<View>(w, std::move(views));
  };
  const std::string system = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her";
  const auto a = tok.encode(system + " dog.", true);
  const auto b = tok.encode(system + " friends and her mom.", true);
  REQUIRE(a.size() > 17);

  const auto ad_a = pool.admit(a);
  CHECK(ad_a.match.cached_tokens == 0);
  auto ma = model_for(ad_a.seq);
  std::vector<float> la(ma.vocab_size());
  ma.forward_last(a, la);

  const auto ad_b = pool.admit(b);
  const std::size_t cached = ad_b.match.cached_tokens;
  CHECK(cached >= 16);
  CHECK(cached % 16 == 0);
  auto mb = model_for(ad_b.seq);
  CHECK(mb.size() == cached);  // the model continues after the shared blocks
  std::vector<float> lb(mb.vocab_size());
  mb.forward_last(std::span<const Token>(b).subspan(cached), lb);  // prefill only the uncached tail

  // Same logits as a fresh contiguous model that prefills all of b.
  Llama<barato::kv::Contiguous<float>> fresh(w, make_contiguous_caches(c, c.seq_len));
  std::vector<float> lf(fresh.vocab_size());
  fresh.forward_last(b, lf);
  CHECK(lb == lf);
  CHECK(pool.prefix_stats().tokens_saved == cached);
}

TEST_CASE("kv policies: window:W,S prefilled in chunks equals token-by-token decoding and the windowed reference") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto w = load_llama2c(dir / "stories260K/stories260K.bin");
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", w.config.vocab_size);
  const std::size_t W = 16, S = 4, V = w.config.vocab_size;
  const std::string spec = "window:16,4";
  const auto prompt = tok.encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog, "
      "Max. One day, Lily and Max saw a big red ball under a tree. Lily wanted to take the ball home, but her "
      "mom said they should find who lost it first.",
      true);
  REQUIRE(prompt.size() > 4 * W);  // the window slides many times during the prefill
  struct Run {
    std::vector<float> logits;     // [prompt, vocab]: forward over the whole prompt
    std::vector<Token> generated;  // greedy continuation after a forward_last prefill
  };
  // `cache_chunk`: the appends the caches are built for; `model_chunk`: LlamaOptions::max_chunk.
  const auto run = [&](std::size_t cache_chunk, std::size_t model_chunk, std::size_t expect_chunk) {
    return with_kv_policy(
        spec, w.config, w.config.seq_len, std::pmr::get_default_resource(),
        [&](auto caches) {
          Llama<typename decltype(caches)::value_type> m(w, std::move(caches), {.max_chunk = model_chunk});
          CHECK(m.max_chunk() == expect_chunk);  // never more than one append of the window accepts
          Run r;
          r.logits.resize(prompt.size() * V);
          m.forward(prompt, r.logits);
          std::vector<float> logits(V);
          r.generated = generate(m, prompt, {.steps = prompt.size() + 60}, logits).generated;
          return r;
        },
        cache_chunk);
  };
  const Run one = run(1, 128, 1);  // built for single-token appends: the model feeds one token at a time
  REQUIRE(one.generated.size() > 1);

  // Oracle: the scalar reference with the StreamingLLM mask, one token at a time.
  barato::test::LlamaReference ref(w, S, W);
  std::vector<float> ref_logits;
  for (const Token t : prompt) {
    const auto l = ref.step(t);
    ref_logits.insert(ref_logits.end(), l.begin(), l.end());
  }
  CHECK(barato::test::max_rel_diff(one.logits, ref_logits) < kWindowLogitRelTol);
  // ... and it differs from full attention, so the window is really in effect
  barato::test::LlamaReference full(w);
  std::vector<float> full_logits;
  for (const Token t : prompt) {
    const auto l = full.step(t);
    full_logits.insert(full_logits.end(), l.begin(), l.end());
  }
  CHECK(barato::test::max_rel_diff(full_logits, ref_logits) > kWindowEffectMin);

  for (const auto& chunks : {std::pair<std::size_t, std::size_t>{128, 128}, {7, 7}, {5, 16}, {128, 13}}) {
    const std::size_t cache_chunk = chunks.first, model_chunk = chunks.second;  // (clang 14 cannot capture bindings)
    const std::size_t expect = std::min(cache_chunk, model_chunk);
    CAPTURE(cache_chunk);
    CAPTURE(model_chunk);
    const Run r = run(cache_chunk, model_chunk, expect);
    CHECK(barato::test::max_rel_diff(r.logits, ref_logits) < kWindowLogitRelTol);
    CHECK(barato::test::max_rel_diff(r.logits, one.logits) < kWindowLogitRelTol);  // another ring size
    CHECK(r.generated == one.generated);
    // the same caches fed one token at a time: bit for bit (attention::attend folds every query's
    // rows in the same ranges whatever chunk it comes in)
    const Run single = run(cache_chunk, 1, 1);
    CHECK(r.logits == single.logits);
    CHECK(r.generated == single.generated);
  }

  // Speculative decoding verifies γ + 1 tokens in one forward and rolls the rejected ones back: with
  // caches built for chunks ≥ γ + 1 the windows stay exact, so the output is plain greedy's.
  for (const std::size_t cache_chunk : {5, 128}) {
    CAPTURE(cache_chunk);
    const std::size_t gamma = 4;
    for (const std::string draft : {"ngram", "int8"}) {
      CAPTURE(draft);
      const auto spec_tokens = with_kv_policy(
          spec, w.config, w.config.seq_len, std::pmr::get_default_resource(),
          [&](auto caches) {
            Llama<typename decltype(caches)::value_type> m(w, std::move(caches));
            return generate_speculative(m, w, parse_draft(draft), prompt, {.steps = prompt.size() + 60}, gamma).generated;
          },
          cache_chunk);
      CHECK(spec_tokens == one.generated);
    }
  }
}

TEST_CASE("kv policies: window:W,0 is a window without sinks; malformed numbers are value_errors naming the spec") {
  LlamaConfig c;
  c.dim = 64, c.hidden_dim = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16;
  c.vocab_size = 32, c.seq_len = 64;
  const auto sinks = [&](std::string_view spec) {
    return with_kv_policy(spec, c, c.seq_len, std::pmr::get_default_resource(), [](auto caches) -> std::size_t {
      if constexpr (requires { caches.front().sinks(); }) return caches.front().sinks();
      else return 999;
    });
  };
  CHECK(sinks("window:16,0") == 0);
  CHECK(sinks("window:16,3") == 3);
  CHECK(sinks("window:16") == 4);
  for (const char* bad : {"window:0", "window:16,", "window:16,x", "window:,4", "window:16,-1", "paged:0", "growable:0"}) {
    CAPTURE(bad);
    const std::string needle = std::string("--kv '") + bad + "'";
    CHECK_THROWS_WITH_AS(sinks(bad), doctest::Contains(needle.c_str()), barato::value_error);
  }
}
