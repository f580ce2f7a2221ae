// barato_plan's arithmetic (examples/models/plan_report.hpp) through the library functions it calls:
// options → plans equal to plans built directly, hand-computed figures in the report, the shape of a
// real llama2.c checkpoint, and bad input as a usage error (exit 2).
#include "models/plan_report.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "barato/core/memory.hpp"
#include "barato/kv/paged.hpp"
#include "models/llama.hpp"
#include "models/llama2c.hpp"
#include "models/llama_weights.hpp"
#include "models/model_file.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/ggml_pack.hpp"
#include "support/scratch_dir.hpp"

using namespace barato_examples;
using namespace barato::plan;

namespace {
/// The plans of model file `path` with `--weights weights --budget budget --reserve 0`.
PlanPair model_plans(const std::filesystem::path& path, const std::string& weights, const std::string& budget) {
  // built, not assigned field by field: g++ 12 -O3 on Sapphire Rapids (-march=native) reported a
  // false -Wstringop-overflow in the inlined assignment of "0" over the default reserve
  return make_plans(PlanOptions{.model = path.string(), .budget = budget, .reserve = "0", .weights = weights});
}
}  // namespace

TEST_CASE("plan report: the options give the plans the library gives") {
  PlanOptions o;
  o.shape = "7b";
  o.budget = "24GB";
  o.weights = "int8";
  o.kv = "int8";
  o.block = 16;
  o.context = 4096;
  o.users = 5;
  const PlanPair p = make_plans(o);
  const Plan direct({.shape = shape_7b(), .weights = {"int8", 8}, .kv = {KvStorage::int8}, .budget = 24 * kGiB,
                     .refine = {.kv_scales = true, .block_tokens = 16}});
  CHECK(p.refined.weight_bytes() == 7'000'000'000u);
  CHECK(p.refined.kv_bytes_per_token() == 32u * 8 * (256 + 8));
  CHECK(p.plain.kv_bytes_per_token() == 32u * 8 * 256);
  CHECK(p.refined.max_tokens() == direct.max_tokens());
  CHECK(p.refined.max_users(4096) == direct.max_users(4096));
  // (24 GiB − 7e9 − 1.5 GiB) / (4096 · 67,584) users of whole blocks (4096 is a multiple of 16)
  const std::size_t kv_budget = 24 * kGiB - 7'000'000'000u - 3 * kGiB / 2;
  CHECK(p.refined.max_users(4096) == kv_budget / (4096u * 67584));
  CHECK(p.plain.max_users(4096) == kv_budget / (4096u * 65536));

  const std::string text = plan_text(p, o.context, o.users);
  CHECK(text.find("67584 B") != std::string::npos);
  CHECK(text.find("65536 B") != std::string::npos);
  CHECK(text.find(std::to_string(direct.max_tokens())) != std::string::npos);
  const std::string json = plan_json(p, o.context, o.users);
  CHECK(json.find("\"kv_bytes_per_token\": 67584") != std::string::npos);
  CHECK(json.find("\"max_users\": " + std::to_string(direct.max_users(4096))) != std::string::npos);
  CHECK(json.find("\"fits\": true") != std::string::npos);

  o.step_tokens = 64;  // + the activation buffers, RoPE table of --context positions
  const PlanPair a = make_plans(o);
  CHECK(a.refined.activation_bytes() == decoder_activation_bytes(shape_7b(), 64, 4096));
  CHECK(a.plain.activation_bytes() == 0);
  CHECK(a.refined.kv_budget() == kv_budget - a.refined.activation_bytes());
  CHECK(plan_text(a, o.context, o.users).find("activations, 64 tokens/step") != std::string::npos);
}

TEST_CASE("plan report: weights that do not fit say so, with the shortfall") {
  PlanOptions o;
  o.shape = "70b";
  o.budget = "24GiB";
  o.weights = "int4";
  const PlanPair p = make_plans(o);
  const std::size_t short_by = 36'093'750'000u + 3 * kGiB / 2 - 24 * kGiB;  // 70e9 · 4.125 / 8 + reserve − budget
  CHECK(p.refined.shortfall() == short_by);
  const std::string text = plan_text(p, o.context, o.users);
  CHECK(text.find("does not fit: weights + reserve exceed the budget by " + format_bytes(short_by)) != std::string::npos);
}

TEST_CASE("plan report: bad sizes and unknown names are usage errors") {
  const auto bad = [](auto edit) {
    PlanOptions o;
    edit(o);
    CHECK_THROWS_AS((void)make_plans(o), CliError);
  };
  bad([](PlanOptions& o) { o.budget = "-16GiB"; });
  bad([](PlanOptions& o) { o.budget = "0"; });
  bad([](PlanOptions& o) { o.budget = "16 parsecs"; });
  bad([](PlanOptions& o) { o.reserve = "lots"; });
  bad([](PlanOptions& o) { o.shape = "65b"; });
  bad([](PlanOptions& o) { o.weights = "int3"; });
  bad([](PlanOptions& o) { o.kv = "fp8"; });
  bad([](PlanOptions& o) { o.users = 0; });
  bad([](PlanOptions& o) { o.block = 16, o.window = 64; });
}

TEST_CASE("plan report: the shape of stories260K from its header") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto path = dir / "stories260K/stories260K.bin";
  const ModelShape s = llama2c_shape(path);
  const Llama2cCheckpoint ck = read_llama2c(path);
  const Llama2cLayout& L = ck.layout();
  CHECK(s.layers == L.n_layers);
  CHECK(s.q_heads == L.n_heads);
  CHECK(s.kv_heads == L.n_kv_heads);
  CHECK(s.head_dim == L.head_size);
  CHECK(s.vocab == L.vocab);
  // every float of the file but the header and freq_cis
  CHECK(s.parameters == double((std::filesystem::file_size(path) - kLlama2cHeaderBytes) / 4 - L.seq_len * L.head_size));
  const PlanPair p = model_plans(path, "fp32", "1MiB");
  CHECK(p.refined.weight_bytes() == std::size_t(s.parameters) * 4);
  CHECK(p.refined.kv_bytes_per_token() == 2 * L.n_layers * L.n_kv_heads * L.head_size * 2);
}

TEST_CASE("plan report: a file that is not a checkpoint is a format error") {
  const auto path = barato::test::scratch_dir() / "plan_report_test.bin";
  { std::ofstream(path, std::ios::binary) << "not a checkpoint at all, only text"; }
  CHECK_THROWS_AS((void)llama2c_shape(path), barato::format_error);
  std::filesystem::remove(path);
  CHECK_THROWS_AS((void)llama2c_shape(path), barato::io_error);
}

TEST_CASE("plan: the example model's activation buffers = decoder_activation_bytes (CountingResource)") {
  LlamaConfig c;
  c.dim = 48;
  c.hidden_dim = 112;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 40;
  c.seq_len = 96;
  const auto w = random_llama_weights(c, 3);
  const ModelShape s{.name = "test", .parameters = 1, .layers = c.n_layers, .q_heads = c.n_heads, .kv_heads = c.n_kv_heads,
                     .head_dim = c.head_dim, .vocab = c.vocab_size, .dim = c.dim, .hidden_dim = c.hidden_dim};
  for (const std::size_t chunk : {1u, 16u, 128u})
    for (const std::size_t positions : {0u, 64u}) {
      CAPTURE(chunk);
      CAPTURE(positions);
      barato::CountingResource counting;
      {
        const Llama<barato::kv::Contiguous<float>> model(
            w, make_contiguous_caches(c, 32), {.max_chunk = chunk, .max_positions = positions, .mr = &counting});
        const std::size_t rope = positions != 0 ? positions : c.seq_len;  // 0 = the config's seq_len
        CHECK(counting.peak() == decoder_activation_bytes(s, chunk, rope));
        const Plan p({.shape = s, .budget = barato::plan::kGiB, .reserve = 0,
                      .refine = {.step_tokens = chunk, .rope_positions = rope}});
        CHECK(p.activation_bytes() == counting.peak());
      }
      CHECK(counting.current() == 0);
    }
}

TEST_CASE("plan report: --search lists what search() finds, with the quality column") {
  PlanOptions o;
  o.shape = "7b";
  o.budget = "8GiB";
  o.users = 4;
  o.block = 16;
  const auto quality = parse_quality("int4/int8=6.12,nf4/fp16=5.9");
  REQUIRE(quality.size() == 2);
  CHECK(quality[0].weights == "int4");
  CHECK(quality[0].kv == "int8");
  CHECK(quality[0].value == 6.12);
  const std::string text = search_text(o, quality);
  SearchQuery q;
  q.shape = shape_7b();
  q.budget = 8 * kGiB;
  q.users = 4;
  q.refine = {.kv_scales = true, .block_tokens = 16};
  const auto found = search(q);
  CHECK(text.find(std::to_string(found.size()) + " of 24 weight x KV combinations fit") != std::string::npos);
  CHECK(text.find("6.12") != std::string::npos);
  CHECK(text.find(format_bytes(found.front().total_bytes)) != std::string::npos);
  CHECK_THROWS_AS((void)parse_quality("int4=6"), CliError);
  CHECK_THROWS_AS((void)parse_quality("int4/int8=x"), CliError);
  CHECK_THROWS_AS((void)parse_quality("/int8=1"), CliError);
}

TEST_CASE("plan: the example model over a paged pool of the planned blocks — bytes at construction, blocks when filled") {
  LlamaConfig c;
  c.dim = 48;
  c.hidden_dim = 112;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 40;
  c.seq_len = 128;
  const auto w = random_llama_weights(c, 5);
  const ModelShape s{.name = "test", .parameters = 1, .layers = c.n_layers, .q_heads = c.n_heads, .kv_heads = c.n_kv_heads,
                     .head_dim = c.head_dim, .vocab = c.vocab_size, .dim = c.dim, .hidden_dim = c.hidden_dim};
  struct Case {
    std::size_t block, context, users, chunk;
  };
  for (const Case k : {Case{16, 100, 3, 32}, Case{4, 37, 2, 8}, Case{8, 64, 4, 64}}) {
    CAPTURE(k.block);
    CAPTURE(k.context);
    CAPTURE(k.users);
    const Plan p({.shape = s, .kv = {KvStorage::fp32}, .budget = barato::plan::kGiB, .reserve = 0,
                  .refine = {.kv_scales = true, .block_tokens = k.block, .step_tokens = k.chunk, .rope_positions = c.seq_len}});
    const barato::kv::PagedConfig cfg{.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
                                      .block_tokens = k.block, .n_blocks = p.blocks(k.context, k.users)};
    barato::CountingResource counting;
    barato::kv::PagedPool<float> pool(cfg, &counting);
    CHECK(counting.current() == p.kv_bytes(k.context, k.users) + paged_pool_metadata_bytes(cfg));  // pages + bookkeeping
    std::vector<Token> prompt(k.context);
    for (std::size_t i = 0; i < k.context; ++i) prompt[i] = Token((7 * i + 3) % c.vocab_size);
    std::vector<float> logits(k.context * c.vocab_size);
    for (std::size_t u = 0; u < k.users; ++u) {
      const barato::kv::SeqId id = pool.add_sequence();
      std::vector<barato::kv::PagedView<float>> views;
      for (std::size_t l = 0; l < c.n_layers; ++l) views.push_back(pool.view(id, l));
      const std::size_t before = counting.current();  // + the sequence's slot (its block table comes with its tokens)
      Llama<barato::kv::PagedView<float>> model(w, std::move(views), {.max_chunk = k.chunk, .mr = &counting});
      CHECK(counting.current() - before == p.activation_bytes());  // one model's activation buffers and RoPE table
      model.forward(prompt, logits);
    }
    CHECK(pool.used_blocks() == p.blocks(k.context, k.users));
    CHECK(pool.free_blocks() == 0);
  }
}

TEST_CASE("plan report: the shape of a GGUF file from its metadata (told apart by the magic)") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-f32.gguf");
  if (dir.empty()) return;
  const ModelShape g = model_file_shape(dir / "stories260K/stories260K-f32.gguf");
  const ModelShape b = model_file_shape(dir / "stories260K/stories260K.bin");
  CHECK(g.layers == b.layers);
  CHECK(g.q_heads == b.q_heads);
  CHECK(g.kv_heads == b.kv_heads);
  CHECK(g.head_dim == b.head_dim);
  CHECK(g.vocab == b.vocab);
  CHECK(g.dim == b.dim);
  CHECK(g.hidden_dim == b.hidden_dim);
  // The GGUF conversion stores the classifier untied: vocab x dim more parameters than the tied checkpoint.
  CHECK(g.parameters == b.parameters + double(b.vocab * b.dim));
}

TEST_CASE("plan report: --weights file is the weights as the tools load the file, from its tensor infos") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-h192-q4_0.gguf");
  if (dir.empty()) return;
  // the loaded bytes, type by type: every block type (a random model in each of them) and the shared files
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", 512);
  const barato::test::BlockTypeModel model = barato::test::block_type_model(tok, 3);
  const GgufFile blocks = GgufFile::from_bytes("blocks.gguf", model.blocks);
  const LlamaConfig bc = gguf_llama_config(blocks, 0);
  CHECK(gguf_llama_loaded_bytes(blocks, bc) == load_gguf_llama(blocks, bc).bytes());
  for (const char* name : {"stories260K-f32.gguf", "stories260K-h192-f32.gguf", "stories260K-h192-q8_0.gguf",
                           "stories260K-h192-q4_0.gguf", "stories260K.bin", "stories260K_q80.bin"}) {
    INFO(name);
    const auto path = dir / "stories260K" / name;
    std::size_t loaded = 0;
    if (is_gguf_file(path)) {
      const GgufFile f = GgufFile::open(path);
      const LlamaConfig c = gguf_llama_config(f);
      loaded = load_gguf_llama(f, c).bytes();
      CHECK(gguf_llama_loaded_bytes(f, c) == loaded);
    } else if (read_llama2c_layout(path).version == 2) {
      loaded = llama2c_int8_weights(ModelFile::open(path), std::pmr::get_default_resource()).bytes();
    } else {
      loaded = load_llama2c(path).bytes();  // fp32, the tied classifier a copy of the embedding
    }
    const PlanPair p = model_plans(path, "file", "1GiB");
    CHECK(p.refined.input().weights.name == "file");
    // bits = 8 · bytes / parameters, and back: the plan's bytes are the loaded bytes (±1 for rounding)
    CHECK(p.refined.weight_bytes() + 1 >= loaded);
    CHECK(p.refined.weight_bytes() <= loaded + 1);
  }
  PlanOptions o;
  o.weights = "file";  // a named shape has no file
  CHECK_THROWS_AS((void)make_plans(o), CliError);
}
