// The example model on every KV cache policy (examples/models/kv_policies.hpp, the tools' --kv flag):
// greedy generation on stories260K gives identical tokens with contiguous, growable and paged
// caches (and equals run.c's reference ids); prefix sharing lets a second request skip prefill and
// still produce the same logits; quantized and windowed caches run and are measured elsewhere.
#include "models/kv_policies.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/llama2c.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/reference_file.hpp"

namespace fs = std::filesystem;
using namespace barato_examples;

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
