// barato_generate: text generation with a llama2.c checkpoint through barato's example Llama decoder.
//
//   barato_generate --model stories260K.bin --tokenizer tok512.bin --prompt "Once upon a time" --steps 200
//
// The structure is meant to be extended with small edits:
//   * `Args` + `add_flags`           — every flag (one line each);
//   * `main`, section "Weight format" — the LinearLayer type the projections are held in;
//   * `dispatch_cache`               — the KV cache policy, by name (`--kv`), one `if` per policy;
//   * `run<Cache>`, section "Generation" — the generation loop (a drafter plugs in there).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory_resource>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/scheme.hpp"
#include "models/cli.hpp"
#include "models/generate.hpp"
#include "models/json.hpp"
#include "models/kv_policies.hpp"
#include "models/llama.hpp"
#include "models/model_file.hpp"
#include "models/speculative.hpp"
#include "models/tokenizer.hpp"
#include "models/weight_formats.hpp"

namespace {

using namespace barato_examples;
namespace fs = std::filesystem;

/// Data directory: $BARATO_DATA_DIR, else the compile-time default (<repo>/../shared/data).
struct Args {
  std::string model = (data_dir() / "stories260K/stories260K.bin").string();
  std::string tokenizer;  // empty: the GGUF file's vocabulary, else stories260K/tok512.bin (ModelFile::tokenizer)
  std::size_t context = 0;  // 0: the model file's context
  std::string prompt;
  std::size_t steps = 256;
  float temperature = 0.0f;
  float top_p = 0.9f;  // run.c's -p default
  std::uint64_t seed = 0;
  int threads = 1;
  bool no_cache = false;
  bool json = false;
  std::string kv = "contiguous";  // cache policy name, see dispatch_cache
  std::string draft;              // speculative decoding drafter (empty: plain decoding)
  std::size_t gamma = 4;          // drafts per verify pass
  std::string weights = "file";   // weight format of the projections, see "Weight format"
};

void add_flags(Cli& cli, Args& a) {
  cli.option("--model", a.model, "FILE", "llama2.c checkpoint or GGUF file (told apart by the magic)")
      .option("--tokenizer", a.tokenizer, "FILE", "llama2.c tokenizer file (default: a GGUF file's own vocabulary, else tok512.bin)")
      .option("--context", a.context, "N", "model context in positions (0: the file's; GGUF llama.context_length)")
      .option("--prompt", a.prompt, "TEXT", "prompt text (BOS and the dummy prefix are added as run.c does)")
      .option("--steps", a.steps, "N", "total positions including the prompt, like run.c -n (0 or > seq_len: seq_len)")
      .option("--temperature", a.temperature, "T", "sampling temperature; 0 = greedy")
      .option("--top-p", a.top_p, "P", "nucleus (top-p) mass when sampling, as run.c's -p; 0 or 1: the whole distribution")
      .option("--seed", a.seed, "S", "sampling seed")
      .option("--threads", a.threads, "N", "threads for matrix products and attention")
      .flag("--no-cache", a.no_cache, "recompute the whole sequence at every step (no KV reuse)")
      .flag("--json", a.json, "print one JSON object instead of the text")
      .option("--kv", a.kv, "POLICY", std::string("KV cache policy: ") + std::string(kKvPolicies))
      .option("--draft", a.draft, "D", "speculative decoding drafter: int8 | int4-g128 | nf4 | ngram[:N] (default: none)")
      .option("--gamma", a.gamma, "G", "drafts per speculative verify pass")
      .option("--weights", a.weights, "W", kModelWeightsHelp);
  cli.epilog(
      "Defaults for --model/--tokenizer come from $BARATO_DATA_DIR (else " BARATO_DEFAULT_DATA_DIR ").\n"
      "--json fields: prompt_ids, generated_ids, text, prefill_ms, decode_ms_per_token, kv_cache_bytes\n"
      "(bytes reserved by the KV caches), peak_bytes (peak of all allocations: weights, caches, buffers).\n"
      "Exit status: 0 ok, 1 runtime error (bad file, ...), 2 usage error.");
}

/// Everything `run` needs besides the weights and caches.
struct Context {
  const Args& args;
  const ModelFile& file;
  const Tokenizer& tok;
  const std::vector<Token>& prompt_ids;
  barato::CountingResource& mem;
  std::size_t steps;  // clamped to seq_len
};

/// Generates with caches of type `Cache` and prints the result.
template <barato::kv::CachePolicy Cache, class Linear>
int run(const Context& cx, const LlamaWeights<Linear>& weights, std::vector<Cache> caches) {
  Llama<Cache, Linear> model(weights, std::move(caches), {.threads = cx.args.threads, .mr = &cx.mem});
  barato::Buffer<float> logits(model.vocab_size(), &cx.mem);  // [vocab]

  // ---- Generation -------------------------------------------------------------------------------
  const GenerateOptions gopt{.steps = cx.steps, .temperature = cx.args.temperature, .top_p = cx.args.top_p,
                             .seed = cx.args.seed, .use_cache = !cx.args.no_cache};
  SpecReport spec;  // --draft: speculative decoding (models/speculative.hpp), same output as plain greedy
  const auto speculative = [&] {  // a quantized drafter is made from the fp32 weights of the model file
    const DraftChoice choice = parse_draft(cx.args.draft);
    if (choice.ngram)
      return generate_speculative(model, fs::path(cx.args.model), choice, cx.prompt_ids, gopt, cx.args.gamma, cx.args.threads, &spec);
    return generate_speculative(model, cx.file.fp32_weights(), choice, cx.prompt_ids, gopt, cx.args.gamma, cx.args.threads, &spec);
  };
  const GenerateResult g = cx.args.draft.empty() ? generate(model, cx.prompt_ids, gopt, logits.span()) : speculative();
  if (!cx.args.draft.empty()) print_spec_report(stderr, cx.args.draft, cx.args.gamma, spec);

  // ---- Output -----------------------------------------------------------------------------------
  // run.c prints the token after each forwarded position: with --steps below the prompt's length only
  // the prompt's first steps + 1 tokens (BOS and steps pieces) are shown
  const std::size_t shown = std::min(cx.prompt_ids.size(), cx.steps + 1);
  std::vector<Token> all(cx.prompt_ids.begin(), cx.prompt_ids.begin() + static_cast<std::ptrdiff_t>(shown));
  all.insert(all.end(), g.generated.begin(), g.generated.end() - (g.stopped_on_bos ? 1 : 0));
  const std::string text = cx.tok.decode_text(all);
  if (cx.args.json) {
    JsonObject o;
    o.add("prompt_ids", std::span<const Token>(cx.prompt_ids))
        .add("generated_ids", std::span<const Token>(g.generated))
        .add("text", cx.tok.decode_utf8(all))
        .add("prefill_ms", g.prefill_ms)
        .add("decode_ms_per_token", g.decode_ms_per_token())
        .add("kv_cache_bytes", model.kv_bytes_reserved())
        .add("peak_bytes", cx.mem.peak());
    std::printf("%s\n", o.str().c_str());
  } else {
    std::printf("%s\n", text.c_str());
    const double total_ms = g.prefill_ms + g.decode_ms;
    std::fprintf(stderr, "prompt %zu tokens, generated %zu; prefill %.3f ms, decode %.4f ms/token (%.0f tok/s), total %.1f ms\n",
                 cx.prompt_ids.size(), g.generated.size(), g.prefill_ms, g.decode_ms_per_token(),
                 g.decode_ms_per_token() > 0 ? 1000.0 / g.decode_ms_per_token() : 0.0, total_ms);
  }
  return 0;
}

/// ---- KV cache policy ----------------------------------------------------------------------------
/// One branch per `--kv` value: build one cache per layer (policies have different constructors)
/// and instantiate `run` for that cache type.
template <class Linear>
int dispatch_cache(const Context& cx, const LlamaWeights<Linear>& w) {
  // --kv: models/kv_policies.hpp builds the per-layer caches of each policy (a paged pool lives
  // for the duration of `run`). A window cache keeps room for chunks of max(prefill chunk, γ + 1)
  // tokens, so a speculative rollback of up to γ positions leaves every window exact.
  const std::size_t chunk = std::max<std::size_t>(LlamaOptions{}.max_chunk, cx.args.draft.empty() ? 1 : cx.args.gamma + 1);
  try {
    return with_kv_policy(cx.args.kv, w.config, cx.steps, &cx.mem, [&](auto caches) { return run(cx, w, std::move(caches)); },
                          chunk);
  } catch (const barato::value_error& e) {
    if (std::string_view(e.what()).starts_with("--kv")) throw CliError(e.what());
    throw;
  }
}

int tool_main(int argc, const char* const* argv) {
  Args args;
  Cli cli("barato_generate", "Generate text from a llama2.c checkpoint with barato's example Llama decoder\n"
                             "(run.c semantics: BOS + dummy prefix, --steps counts the prompt, stop on BOS).");
  add_flags(cli, args);
  if (!cli.parse(argc, argv)) return 0;
  if (args.threads < 1) throw CliError("--threads must be >= 1, got " + std::to_string(args.threads));
  if (!(args.temperature >= 0.0f) || !std::isfinite(args.temperature)) throw CliError("--temperature must be a finite number >= 0");
  if (!(args.top_p >= 0.0f && args.top_p <= 1.0f)) throw CliError("--top-p must be in [0, 1] (0 or 1: no nucleus)");
  if (!args.draft.empty() && (args.no_cache || args.gamma < 1)) throw CliError("--draft needs the KV cache and --gamma >= 1");

  barato::CountingResource mem;
  // ---- Weight format ------------------------------------------------------------------------------
  // The model file (llama2.c or GGUF, models/model_file.hpp); --weights picks the projections' format
  // at run time (the file's, fp32, or quantized: nn::AnyLinear; models/weight_formats.hpp).
  const ModelFile model = ModelFile::open(args.model, args.context);
  const Tokenizer tok = model.tokenizer(args.tokenizer, data_dir() / "stories260K/tok512.bin");
  const std::vector<Token> prompt_ids = tok.encode_prompt(args.prompt);
  std::size_t steps = args.steps;
  if (steps == 0 || steps > model.config().seq_len) steps = model.config().seq_len;  // as run.c
  const Context cx{args, model, tok, prompt_ids, mem, steps};
  try {
    return with_model_weights(model, args.weights, &mem, [&](const auto& w) { return dispatch_cache(cx, w); });
  } catch (const barato::value_error& e) {
    if (std::string_view(e.what()).starts_with("--weights")) throw CliError(e.what());
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("barato_generate", [&] { return tool_main(argc, argv); });
}
