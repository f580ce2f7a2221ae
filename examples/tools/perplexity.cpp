// barato_perplexity: perplexity of a llama2.c checkpoint over a text file (protocol in --help and in
// examples/models/perplexity.hpp). Windows are fed through the decoder's block prefill.
//
//   barato_perplexity --model stories260K.bin --tokenizer tok512.bin --text tinystories-valid-sample.txt
//   barato_perplexity --text … --weights int8-row --kl-divergence   (compare with the fp32 model)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/quant/scheme.hpp"
#include "models/cli.hpp"
#include "models/json.hpp"
#include "models/kl_divergence.hpp"
#include "models/kv_policies.hpp"
#include "models/llama.hpp"
#include "models/model_file.hpp"
#include "models/perplexity.hpp"
#include "models/read_file.hpp"
#include "models/token_ids.hpp"
#include "models/tokenizer.hpp"

namespace {

using namespace barato_examples;
namespace fs = std::filesystem;

constexpr const char* kProtocol =
    "Protocol:\n"
    "  1. The whole file is encoded as one string the way llama2.c run.c encodes: the dummy-prefix\n"
    "     space piece first, no BOS, UTF-8 code points with byte fallback, greedy merges by score.\n"
    "  2. The token stream is cut into consecutive windows of seq_len - 1 tokens (the last one may be\n"
    "     shorter).\n"
    "  3. Each window is fed as BOS + window, positions restarting at 0 (the KV cache is emptied).\n"
    "  4. Every text token is scored: NLL = -log softmax(logits)[token], from the logits after BOS and\n"
    "     the window's earlier tokens.\n"
    "  5. perplexity = exp(mean NLL); bits per byte = total NLL / ln 2 / bytes of the file.\n"
    "Output: token count, mean NLL (nats), perplexity, bits per byte. --json prints one object with\n"
    "tokens, mean_nll, perplexity, bits_per_byte (plus windows, bytes, seconds, and weight_bytes: what the\n"
    "loaded weights hold, load_peak_bytes: their peak while loading). Progress goes to stderr.\n"
    "--kl-divergence also runs the fp32 model with a contiguous cache over the same windows and positions\n"
    "and compares the logits position by position (streaming: no logits are stored): KLD = KL(P_fp32 ||\n"
    "P_scheme) in nats (log-sum-exp in double; -inf logits allowed), its mean +- standard error, median,\n"
    "p90 / p99 / max, the share of positions where both argmaxes agree with a 95 % Wilson interval, and\n"
    "delta PPL = PPL(scheme) - PPL(fp32). JSON adds kld_mean, kld_stderr, kld_median, kld_p90, kld_p99,\n"
    "kld_max, same_top1, same_top1_lo, same_top1_hi, fp32_perplexity, delta_perplexity.";

int tool_main(int argc, const char* const* argv) {
  std::string model_path = (data_dir() / "stories260K/stories260K.bin").string();
  std::string tok_path;  // empty: the GGUF file's vocabulary, else stories260K/tok512.bin
  std::size_t context = 0;
  std::string text_path, ids_path;
  int threads = 1;
  bool json = false, quiet = false, kld = false;
  std::size_t max_tokens = 0;
  std::string weights = "file";
  std::string kv = "contiguous";
  Cli cli("barato_perplexity", "Perplexity of a llama2.c checkpoint over a text file.");
  cli.option("--model", model_path, "FILE", "llama2.c checkpoint or GGUF file (told apart by the magic)")
      .option("--tokenizer", tok_path, "FILE", "llama2.c tokenizer file (default: a GGUF file's own vocabulary, else tok512.bin)")
      .option("--context", context, "N", "model context in positions (0: the file's; GGUF llama.context_length)")
      .option("--text", text_path, "FILE", "text file to score (this or --ids)")
      .option("--ids", ids_path, "FILE", "token ids to score instead of a text: whitespace-separated, BOS (1) first,\n"
                                         "e.g. another engine's output; --json adds argmax_ids, argmax_agreement")
      .option("--threads", threads, "N", "threads for matrix products and attention")
      .option("--max-tokens", max_tokens, "N", "score only the first N tokens (0 = all)")
      .option("--weights", weights, "W", kModelWeightsHelp)
      .option("--kv", kv, "POLICY", std::string("KV cache policy: ") + std::string(kKvPolicies))
      .flag("--kl-divergence", kld, "compare with the fp32 model (contiguous cache): KLD, same top-1, delta PPL")
      .flag("--json", json, "print one JSON object")
      .flag("--quiet", quiet, "no progress on stderr")
      .epilog(std::string(kProtocol) + "\nDefaults for --model/--tokenizer come from $BARATO_DATA_DIR (else " +
              BARATO_DEFAULT_DATA_DIR + ").");
  if (!cli.parse(argc, argv)) return 0;
  if (text_path.empty() == ids_path.empty()) throw CliError("exactly one of --text FILE and --ids FILE is required");
  if (threads < 1) throw CliError("--threads must be >= 1, got " + std::to_string(threads));
  if (weights != "fp32" && weights != "file") {
    try {
      (void)barato::quant::parse_scheme(weights);
    } catch (const barato::value_error& e) {
      throw CliError(std::string("--weights: ") + e.what());
    }
  }

  // --weights: every projection (and the classifier) in the chosen format, held as nn::AnyLinear and
  // read without an fp32 model unless fp32 is asked for (`model_weights`, models/model_file.hpp).
  const ModelFile model = ModelFile::open(model_path, context);
  barato::CountingResource weight_mem;  // the weights' bytes: what they hold, and the peak while loading them
  const auto w = model_weights(model, weights, &weight_mem);
  // --kl-divergence: the reference, fp32 weights (and below a contiguous fp32 cache).
  std::optional<LlamaWeights<barato::nn::AnyLinear>> ref_w;
  if (kld) ref_w = model_weights(model, "fp32", std::pmr::get_default_resource());
  const Tokenizer tok = model.tokenizer(tok_path, data_dir() / "stories260K/tok512.bin");
  const std::string text = ids_path.empty() ? read_bounded(text_path, kMaxTextFileBytes, "text file")
                                            : read_bounded(ids_path, kMaxTextFileBytes, "token-id file");

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Token> ids;
  std::size_t bytes = 0;
  if (ids_path.empty()) {
    ids = tok.encode(text, /*bos=*/false);
    bytes = text.size();
  } else {
    ids = parse_token_ids(text, ids_path, w.config.vocab_size);
    ids.erase(ids.begin());  // the BOS is each window's own (the protocol feeds BOS + window)
    if (ids.empty()) throw barato::format_error(ids_path, text.size(), "expected at least one id after BOS, found none");
  }
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (max_tokens != 0 && max_tokens < ids.size()) {
    ids.resize(max_tokens);
    if (ids_path.empty())
      bytes = tok.decode_utf8([&] {  // bytes of the text the kept tokens spell (after the dummy prefix), as text.size() counts them
        std::vector<Token> with_bos{1};
        with_bos.insert(with_bos.end(), ids.begin(), ids.end());
        return with_bos;
      }()).size();
  }
  if (!quiet && ids_path.empty())
    std::fprintf(stderr, "encoded %zu bytes into %zu tokens in %.3f s\n", text.size(), ids.size(), encode_s);

  const std::size_t window = w.config.seq_len - 1;
  barato::require(window > 0, "barato_perplexity: seq_len must be >= 2");
  constexpr std::size_t kChunk = 128;  // prefill chunk (rows of logits per forward call)
  std::vector<float> scratch(kChunk * w.config.vocab_size);  // [chunk, vocab]
  const auto t1 = std::chrono::steady_clock::now();
  std::size_t next_report = 0;
  const bool tty = isatty(STDERR_FILENO) != 0;  // the progress line rewrites itself: on a terminal only
  const auto progress = [&](std::size_t done, std::size_t total) {
    if (quiet || !tty || done < next_report) return;
    next_report = done + total / 20 + 1;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::fprintf(stderr, "\r%zu / %zu tokens (%.0f tok/s)", done, total, s > 0 ? static_cast<double>(done) / s : 0.0);
    std::fflush(stderr);
  };
  // --kv: the decoder runs on the chosen cache policy (models/kv_policies.hpp).
  // --kl-divergence: the fp32 model runs beside it window by window (scratch for its logits too).
  std::vector<float> ref_scratch(kld ? scratch.size() : 0);
  std::vector<Token> argmax;  // the model's argmax at every scored position (reported with --ids)
  const auto score = [&](auto caches) {
    Llama<typename decltype(caches)::value_type, barato::nn::AnyLinear> model(w, std::move(caches),
                                                                             {.threads = threads, .max_chunk = kChunk});
    if (!kld) {
      ModelComparison c;
      c.test = perplexity(model, ids, window, scratch, bytes, progress, &argmax);
      return c;
    }
    Llama<barato::kv::Contiguous<float>, barato::nn::AnyLinear> ref(
        *ref_w, make_contiguous_caches<float>(ref_w->config, ref_w->config.seq_len), {.threads = threads, .max_chunk = kChunk});
    return compare_models(ref, model, ids, window, ref_scratch, scratch, bytes, progress, &argmax);
  };
  ModelComparison cmp;
  try {
    cmp = with_kv_policy(kv, w.config, w.config.seq_len, std::pmr::get_default_resource(), score, kChunk);
  } catch (const barato::value_error& e) {
    if (std::string_view(e.what()).starts_with("--kv")) throw CliError(e.what());
    throw;
  }
  const PerplexityResult& r = cmp.test;
  const KldSummary k = cmp.kld.summary();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::size_t agree = 0;  // --ids: positions where the argmax is the next given id
  for (std::size_t i = 0; i < argmax.size(); ++i) agree += argmax[i] == ids[i];
  const double agreement = argmax.empty() ? 0.0 : static_cast<double>(agree) / static_cast<double>(argmax.size());
  if (!quiet) std::fprintf(stderr, "%sscored %zu tokens in %zu windows in %.2f s (%.0f tok/s)\n", tty ? "\r" : "", r.tokens, r.windows, secs,
                           secs > 0 ? static_cast<double>(r.tokens) / secs : 0.0);
  if (json) {
    JsonObject o;
    o.add("tokens", r.tokens)
        .add("mean_nll", r.mean_nll())
        .add("perplexity", r.perplexity());
    if (ids_path.empty()) o.add("bits_per_byte", r.bits_per_byte());
    o
        .add("windows", r.windows)
        .add("weights", weights)
        .add("kv", kv)
        .add("bytes", bytes)
        .add("seconds", secs)
        .add("weight_bytes", weight_mem.current())
        .add("load_peak_bytes", weight_mem.peak());
    if (!ids_path.empty()) o.add("argmax_agreement", agreement).add("argmax_ids", std::span<const Token>(argmax));
    if (kld)
      o.add("kld_mean", k.mean)
          .add("kld_stderr", k.std_error)
          .add("kld_median", k.median)
          .add("kld_p90", k.p90)
          .add("kld_p99", k.p99)
          .add("kld_max", k.max)
          .add("same_top1", k.same_top1_share)
          .add("same_top1_lo", k.same_top1_lo)
          .add("same_top1_hi", k.same_top1_hi)
          .add("fp32_perplexity", cmp.reference.perplexity())
          .add("delta_perplexity", cmp.delta_perplexity());
    std::printf("%s\n", o.str().c_str());
  } else {
    if (ids_path.empty())
      std::printf("file:          %s\ntokens:        %zu\nbytes:         %zu\nmean NLL:      %.6f nats\n"
                  "perplexity:    %.4f\nbits per byte: %.6f\n",
                  text_path.c_str(), r.tokens, bytes, r.mean_nll(), r.perplexity(), r.bits_per_byte());
    else
      std::printf("file:          %s\ntokens:        %zu scored (after BOS)\nmean NLL:      %.6f nats\n"
                  "perplexity:    %.4f\nargmax agreement: %.4f (%zu of %zu positions: barato's argmax is the next id)\n",
                  ids_path.c_str(), r.tokens, r.mean_nll(), r.perplexity(), agreement, agree, argmax.size());
    if (kld)
      std::printf("KL divergence vs fp32 (reference: fp32 weights, contiguous cache; the same %zu positions)\n"
                  "mean KLD:      %.6g ± %.2g nats (± standard error)\nmedian KLD:    %.6g nats\n"
                  "p90 KLD:       %.6g nats\np99 KLD:       %.6g nats\nmax KLD:       %.6g nats\n"
                  "same top-1:    %.3f %% [%.3f, %.3f] (95 %% Wilson)\n"
                  "fp32 PPL:      %.4f\nΔPPL:          %+.4f (scheme − fp32)\n",
                  k.count, k.mean, k.std_error, k.median, k.p90, k.p99, k.max,
                  100 * k.same_top1_share, 100 * k.same_top1_lo, 100 * k.same_top1_hi, cmp.reference.perplexity(),
                  cmp.delta_perplexity());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("barato_perplexity", [&] { return tool_main(argc, argv); });
}
