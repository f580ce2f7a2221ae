// Tutorial 7 — what weight quantization does to a real model's predictions.
//
// Tutorial 5 measured the error of each quantized matrix in isolation. What matters is the model:
// the errors of 35 matrices (and the classifier) compound through 5 layers, RMSNorm and softmax.
// This chapter runs stories260K (a 260 K-parameter Llama trained on TinyStories) with every
// projection and the tied classifier in each weight scheme, and compares it with the fp32 model:
//
//   Step 1  the fp32 model, the tokenizer and a held-out text (TinyStories validation stories,
//           which the model never trained on), cut into windows of 255 tokens, each fed as BOS + its
//           earlier tokens from position 0 (the protocol of barato_perplexity, models/perplexity.hpp)
//   Step 2  per scheme: bits/weight, perplexity, the mean KL divergence KL(P_fp32 ‖ P_scheme) over
//           every scored position (nats, ± its standard error) and teacher-forced token agreement with
//           fp32 — the share of positions where the quantized model's argmax equals the fp32 model's —
//           with a 95 % Wilson interval (positions of one story are correlated, so read both intervals
//           as a guide). The fp32 model runs beside each variant window by window
//           (models/kl_divergence.hpp, compare_models): no logits are stored.
//   Step 3  greedy generations side by side from one prompt, and where each leaves the fp32 text
//
// Every model is the same `Llama<kv::Contiguous<float>, nn::AnyLinear>`: the weight format is chosen
// at run time (`quantize_weights`, models/weight_formats.hpp), the decoder is compiled once.
//
// Run:  tutorial_quant_quality [--tokens N (default 4096)] [--prompt TEXT] [--steps N (default 80)]
//       data: $BARATO_DATA_DIR (stories260K/, text/), else the repository's ../shared/data

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "barato/kv/contiguous.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/scheme.hpp"
#include "models/cli.hpp"
#include "models/generate.hpp"
#include "models/kl_divergence.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"
#include "models/weight_formats.hpp"

namespace {

using namespace barato;
using namespace barato_examples;

constexpr std::size_t kWindow = 255;  // text tokens scored per evaluation window (fed as BOS + the first 254)

using Model = Llama<kv::Contiguous<float>, nn::AnyLinear>;

/// One model variant: a name and its weights.
struct Variant {
  std::string name;
  LlamaWeights<nn::AnyLinear> weights;
};

std::string one_line(std::string s, std::size_t max_len) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > max_len) s = s.substr(0, max_len - 3) + "...";
  return s;
}

int tutorial_main(int argc, const char* const* argv) {
  const char* env = std::getenv("BARATO_DATA_DIR");
  const std::filesystem::path data = (env != nullptr && *env != '\0') ? env : BARATO_DEFAULT_DATA_DIR;
  std::size_t n_tokens = 4096, steps = 80;
  std::string prompt = "Once upon a time";
  Cli cli("tutorial_quant_quality", "stories260K with every weight scheme against fp32: perplexity, token agreement, greedy text.");
  cli.option("--tokens", n_tokens, "N", "held-out TinyStories tokens to score")
      .option("--prompt", prompt, "TEXT", "prompt of the greedy generations in step 3")
      .option("--steps", steps, "N", "greedy generation steps in step 3")
      .epilog("data: $BARATO_DATA_DIR (stories260K/, text/), else " BARATO_DEFAULT_DATA_DIR);
  if (!cli.parse(argc, argv)) return 0;

  // Step 1 — model, tokenizer, held-out windows ----------------------------------------------------------
  const auto dense = load_llama2c(data / "stories260K" / "stories260K.bin");
  const Tokenizer tok = load_tokenizer(data / "stories260K" / "tok512.bin", dense.config.vocab_size);
  std::ifstream in(data / "text" / "tinystories-valid-sample.txt", std::ios::binary);
  require<io_error>(in.good(), "cannot open ", (data / "text" / "tinystories-valid-sample.txt").string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min<std::size_t>(text.size(), n_tokens * 8));  // enough bytes for n_tokens (≈ 2 bytes/token)
  std::vector<Token> ids = tok.encode(text, false);
  if (ids.size() > n_tokens) ids.resize(n_tokens);
  const std::size_t n_windows = (ids.size() + kWindow - 1) / kWindow;
  std::printf("Step 1: stories260K; held-out text: the first %zu tokens of tinystories-valid-sample.txt\n"
              "        in %zu windows of up to %zu tokens (each fed as BOS + its earlier tokens), %zu predicted tokens\n\n",
              ids.size(), n_windows, kWindow, ids.size());

  // Step 2 — perplexity and agreement per scheme ---------------------------------------------------------
  std::vector<Variant> variants;
  variants.push_back({"fp32", convert_weights(dense, [](const nn::DenseLinear& d) { return nn::AnyLinear(d.copy()); })});
  for (quant::Scheme s : quant::kSchemes)
    variants.push_back({std::string(quant::scheme_name(s)), quantize_weights(dense, s)});
  std::printf("Step 2: teacher-forced evaluation (all projections and the tied classifier quantized)\n");
  std::printf("  %-12s %8s %10s %12s %10s %22s   %s\n", "weights", "bits/w", "KiB", "perplexity", "Δppl",
              "mean KLD vs fp32 (nats)", "argmax agreement with fp32 [95% CI]");
  const std::size_t V = dense.config.vocab_size;
  std::vector<float> ref_logits(kWindow * V), logits(kWindow * V);  // [window, vocab]: one forward call per window
  Model ref(variants[0].weights, make_contiguous_caches<float>(dense.config, kWindow), {.threads = 1});
  std::vector<double> ppls, klds;
  for (const auto& v : variants) {
    Model model(v.weights, make_contiguous_caches<float>(v.weights.config, kWindow), {.threads = 1});
    const ModelComparison c = compare_models(ref, model, ids, kWindow, ref_logits, logits);
    const KldSummary k = c.kld.summary();
    if (v.name == "fp32")  // identity check: the same weights on the same positions give the same logits
      require(k.mean == 0.0 && k.max == 0.0 && k.same_top1 == k.count && c.delta_perplexity() == 0.0,
              "fp32 vs fp32: KLD ", k.mean, ", same top-1 ", k.same_top1, " / ", k.count);
    std::size_t bytes = v.weights.classifier.bytes(), weights = v.weights.classifier.rows() * v.weights.classifier.cols();
    for (const auto& l : v.weights.layers)
      for (const nn::AnyLinear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) {
        bytes += m->bytes();
        weights += m->rows() * m->cols();
      }
    const double ppl = c.test.perplexity();
    ppls.push_back(ppl);
    klds.push_back(k.mean);
    std::printf("  %-12s %8.3f %10.1f %12.4f %+10.4f %12.6f ± %-8.6f   %6.2f%% [%6.2f%%, %6.2f%%]\n", v.name.c_str(),
                8.0 * double(bytes) / double(weights), double(bytes) / 1024.0, ppl, c.delta_perplexity(), k.mean,
                k.std_error, 100.0 * k.same_top1_share, 100 * k.same_top1_lo, 100 * k.same_top1_hi);
  }
  std::size_t best4 = 0;  // the best of the 4-bit schemes (variant i + 1 is kSchemes[i])
  for (std::size_t i = 0; i < quant::kSchemes.size(); ++i) {
    const unsigned bits = quant::visit_scheme(quant::kSchemes[i], [](auto f) { return decltype(f)::kBits; });
    if (bits == 4 && (best4 == 0 || ppls[i + 1] < ppls[best4])) best4 = i + 1;
  }
  std::printf("  -> int8 costs %+.4f (per-tensor) and %+.4f (per-row) perplexity; the best 4-bit scheme here is %s (%+.4f).\n"
              "     Mean KLD from fp32: %.5f (int8 per-tensor) and %.5f (per-row) nats, %.4f for %s.\n"
              "     stories260K's rows have 64 columns, so int4-g128's group is a whole row (w2's 172 columns: 128 + 44).\n\n",
              ppls[1] - ppls[0], ppls[2] - ppls[0], variants[best4].name.c_str(), ppls[best4] - ppls[0], klds[1], klds[2],
              klds[best4], variants[best4].name.c_str());

  // Step 3 — greedy generations side by side ---------------------------------------------------------
  const std::vector<Token> prompt_ids = tok.encode(prompt, true);
  std::printf("Step 3: greedy generation, prompt \"%s\", %zu positions\n", prompt.c_str(), steps);
  std::vector<Token> ref_gen;
  for (const auto& v : variants) {
    Model model(v.weights, make_contiguous_caches<float>(v.weights.config, steps), {.threads = 1});
    std::vector<float> logits(model.vocab_size());
    const auto g = generate(model, prompt_ids, {.steps = steps}, logits);
    if (ref_gen.empty()) ref_gen = g.generated;
    std::size_t same = 0;
    while (same < g.generated.size() && same < ref_gen.size() && g.generated[same] == ref_gen[same]) ++same;
    const std::string diverge =
        same == g.generated.size() && same == ref_gen.size() ? "= fp32" : "leaves fp32 at token " + std::to_string(same + 1);
    std::vector<Token> all = prompt_ids;
    all.insert(all.end(), g.generated.begin(), g.generated.end());
    std::printf("  %-12s %s\n      %s\n", v.name.c_str(), diverge.c_str(), one_line(tok.decode_text(all), 1000).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("tutorial_quant_quality", [&] { return tutorial_main(argc, argv); });
}
