// Tests of the tools' model loader (examples/models/model_file.hpp): `--weights SCHEME` re-quantizes
// tensor by tensor — the same weights, bit for bit, as quantizing the whole fp32 model, without
// holding that model beside the quantized one (peak bytes checked) — and every --weights name loads
// without holding more than its result needs.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "barato/core/memory.hpp"
#include "models/gguf_export.hpp"
#include "models/model_file.hpp"
#include "models/weight_formats.hpp"
#include "support/data.hpp"
#include "support/greedy.hpp"
#include "support/scratch_dir.hpp"

using namespace barato_examples;

namespace {

/// Every projection and the classifier of a and b give the same outputs, bit for bit, on a random input.
bool same_linears(const LlamaWeights<barato::nn::AnyLinear>& a, const LlamaWeights<barato::nn::AnyLinear>& b) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const auto same = [&](const barato::nn::AnyLinear& x, const barato::nn::AnyLinear& y) {
    if (x.rows() != y.rows() || x.cols() != y.cols()) return false;
    std::vector<float> in(x.cols()), ox(x.rows()), oy(y.rows());
    for (auto& v : in) v = u(rng);
    x.apply(in, ox);
    y.apply(in, oy);
    return std::equal(ox.begin(), ox.end(), oy.begin(), oy.end(),
                      [](float p, float q) { return std::bit_cast<std::uint32_t>(p) == std::bit_cast<std::uint32_t>(q); });
  };
  bool ok = same(a.classifier, b.classifier);
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const auto& p = a.layers[i];
    const auto& q = b.layers[i];
    ok = ok && same(p.wq, q.wq) && same(p.wk, q.wk) && same(p.wv, q.wv) && same(p.wo, q.wo) && same(p.w1, q.w1) &&
         same(p.w2, q.w2) && same(p.w3, q.w3);
  }
  return ok;
}

}  // namespace

TEST_CASE("model file: --weights SCHEME on a GGUF re-quantizes tensor by tensor: the whole-model weights, a lower peak") {
  const char* kFile = "stories260K/stories260K-h192-q4_0.gguf";
  const auto dir = barato::test::data_dir_or_skip(kFile);
  if (dir.empty()) return;
  const ModelFile m = ModelFile::open(dir / kFile, 512);
  const std::size_t fp32_projections = m.fp32_weights().linear_bytes();
  for (const char* name : {"int8-row", "int4-g128", "q8_0", "nf4"}) {
    INFO(std::string(name));
    barato::CountingResource mem;
    const auto whole = quantize_weights(m.fp32_weights(), weight_scheme(name));
    const bool same = with_model_weights(m, name, &mem, [&](const auto& w) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(w)>, LlamaWeights<barato::nn::AnyLinear>>)
        return same_linears(w, whole);
      else
        return false;
    });
    CHECK(same);
    // The old path held every fp32 projection and the quantized copies at once.
    CHECK(mem.peak() < fp32_projections);
  }
  CHECK_THROWS_AS(with_model_weights(m, "int3", nullptr, [](const auto&) { return 0; }), barato::value_error);
}

TEST_CASE("model file: a llama2.c checkpoint is read matrix by matrix, and --weights SCHEME quantizes each as it is read") {
  const char* kFile = "stories260K/stories260K.bin";
  const auto dir = barato::test::data_dir_or_skip(kFile);
  if (dir.empty()) return;
  const ModelFile m = ModelFile::open(dir / kFile, 300);
  barato::CountingResource fp32_mem;
  const std::size_t fp32_bytes = [&] {
    const auto w = m.fp32_weights(&fp32_mem);
    CHECK(w.config.seq_len == 300);
    // read matrix by matrix through one scratch matrix (the largest, w1's [hidden, dim]), never the
    // whole checkpoint beside the weights
    CHECK(fp32_mem.peak() - fp32_mem.current() == w.config.hidden_dim * w.config.dim * sizeof(float));
    return fp32_mem.current();
  }();
  for (const char* name : {"int8-row", "q4_0"}) {
    INFO(std::string(name));
    const auto whole = quantize_weights(m.fp32_weights(), weight_scheme(name));
    barato::CountingResource mem;
    const auto w = model_weights(m, name, &mem);
    CHECK(w.config.seq_len == 300);
    CHECK(same_linears(w, whole));
    // The quantized matrices, the fp32 embedding and one fp32 scratch matrix: below the fp32 model.
    CHECK(mem.peak() < fp32_bytes);
  }
}

TEST_CASE("model file: a llama2.c version-2 file keeps its int8 codes with --weights file: runq.c's values, greedy as fp32") {
  const char* kFile = "stories260K/stories260K_q80.bin";
  const auto dir = barato::test::data_dir_or_skip(kFile);
  if (dir.empty()) return;
  const ModelFile m = ModelFile::open(dir / kFile);
  CHECK(m.llama2c_version() == 2);
  CHECK(ModelFile::open(dir / "stories260K/stories260K.bin").llama2c_version() == 0);
  const auto file = model_weights(m, "file", std::pmr::get_default_resource());
  const auto fp32 = model_weights(m, "fp32", std::pmr::get_default_resource());
  const LlamaConfig& c = file.config;
  // Rows of 64 hold whole groups of 32: int8 codes and an fp32 scale per 32 (9 bits per weight);
  // w2's rows of 172 do not (the file's groups cross rows): exact fp32.
  CHECK(file.layers[0].wq.bytes() == c.dim * c.dim * 9 / 8);
  CHECK(file.layers[0].w1.bytes() == c.hidden_dim * c.dim * 9 / 8);
  CHECK(file.layers[0].w2.bytes() == c.dim * c.hidden_dim * 4);
  CHECK(file.classifier.bytes() == c.vocab_size * c.dim * 9 / 8);
  // The same values as the dequantized (fp32) weights: a matrix product agrees to the integer
  // kernel's activation rounding (2⁻¹⁵ of the input's largest magnitude per term).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(c.dim), a(c.hidden_dim), b(c.hidden_dim);
  for (auto& v : x) v = u(rng);
  file.layers[3].w1.apply(x, a);
  fp32.layers[3].w1.apply(x, b);
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  CHECK(worst <= 1e-3f);  // inputs in [-1, 1], rows of 64 weights below 1 in magnitude
  // Greedy decoding from the int8 codes follows the dequantized weights' path (measured: all 196
  // tokens of both reference prompts; asserted for the first 64).
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", c.vocab_size);
  for (const char* prompt : {"Once upon a time", "Lily wanted to"}) {
    INFO(prompt);
    const auto ids = tok.encode(prompt);
    const auto g_file = barato::test::greedy_ids(file, ids, 200), g_fp32 = barato::test::greedy_ids(fp32, ids, 200);
    REQUIRE(g_file.size() >= 64);
    REQUIRE(g_fp32.size() >= 64);
    CHECK(std::equal(g_file.begin(), g_file.begin() + 64, g_fp32.begin()));
  }
}

TEST_CASE("model file: --weights file and fp32 hold no more than their result at any point of the load") {
  const char* kQ4 = "stories260K/stories260K-h192-q4_0.gguf";
  const auto dir = barato::test::data_dir_or_skip(kQ4);
  if (dir.empty()) return;
  // An F16 copy of the F32 file (barato's GGUF writer), for the half-precision path.
  const auto f32_path = dir / "stories260K/stories260K-h192-f32.gguf";
  const auto f16_path = barato::test::scratch_dir() / "model_file_f16.gguf";
  {
    const GgufFile src = GgufFile::open(f32_path);
    export_gguf_llama_streamed(src, gguf_llama_config(src, 512), gguf_tokenizer(src), GgmlType::f16, &src).writer.write(f16_path);
  }
  for (const auto& path : {dir / kQ4, f32_path, f16_path}) {
    INFO(path.string());
    const ModelFile m = ModelFile::open(path, 512);
    for (const char* name : {"file", "fp32"}) {
      INFO(std::string(name));
      barato::CountingResource mem;
      const auto w = model_weights(m, name, &mem);
      // each tensor is converted into its layer's own storage: nothing allocated but what is kept
      CHECK(mem.total() == mem.current());
      CHECK(mem.peak() == mem.current());
      CHECK(w.linear_bytes() > 0);
      if (path == f16_path && std::string_view(name) == "file")
        CHECK(w.layers[0].w1.target<barato::nn::Dense<barato::f16>>() != nullptr);  // the file's precision
    }
  }
  // The Q4_0 file in its own format holds its blocks, not fp32 values.
  const ModelFile q4 = ModelFile::open(dir / kQ4, 512);
  barato::CountingResource file_mem, fp32_mem;
  const auto file = model_weights(q4, "file", &file_mem);
  const auto fp32 = model_weights(q4, "fp32", &fp32_mem);
  CHECK(file.linear_bytes() * 5 < fp32.linear_bytes());
}

TEST_CASE("model file: a missing model or a directory is an io_error naming it, not a llama2.c read error") {
  const auto& tmp = barato::test::scratch_dir();
  const auto missing = tmp / "no_such_model.gguf";
  CHECK_THROWS_WITH_AS((void)ModelFile::open(missing),
                       (missing.string() + ": cannot open model file (a llama2.c checkpoint or a GGUF file): no such file").c_str(),
                       barato::io_error);
  CHECK_THROWS_WITH_AS((void)ModelFile::open(tmp), doctest::Contains("not a readable regular file"), barato::io_error);
}
