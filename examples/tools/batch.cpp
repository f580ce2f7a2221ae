// barato_batch: serve a file of requests with batched steps — the scheduler of barato/batch (static or
// continuous batching, chunked prefill, prefix sharing, preemption by recompute) driving the example
// Llama decoder over one paged KV pool.
//
//   barato_batch --requests reqs.jsonl --policy continuous --slots 8 --token-budget 256
//
// Request file: JSON Lines (models/requests.hpp), e.g.
//   {"id": "r1", "prompt": "Once upon a time", "max_tokens": 64, "temperature": 0, "seed": 7, "arrival": 0}
// `max_tokens` = tokens to generate; a request stops there, at BOS (id 1, as run.c does; like
// barato_generate the BOS is the last of generated_ids), or at the model's context. With temperature 0
// every request's generated_ids equal `barato_generate --prompt P --steps len(prompt_ids)+max_tokens−1`'s,
// for any policy, slot count, token budget, pool size and thread count.
//
// stdout: one JSON line per request as it finishes: id, prompt_ids, generated_ids, text, finish_reason
// ("length": max_tokens generated; "bos"; "stop": a token of the request's "stop" list, named by
// stop_token and not output; "context": the model's context is full), queue_ms, ttft_ms, latency_ms,
// tokens, preemptions, prefix_hit_tokens (times are the measured step times
// summed on the scheduler's clock; a request's clock starts at the beginning of its arrival step).
// stderr: a summary (and, with --summary-json FILE, the same as JSON); a progress line on a terminal.
// A request that can never fit gets {"id": …, "error": "…"}; the others proceed.
// Exit status: 0 ok, 1 runtime error, 2 usage error (incl. a malformed request file, FILE:LINE named).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <memory_resource>
#include <string>
#include <string_view>
#include <vector>

#include "barato/batch/executor.hpp"
#include "barato/batch/policy.hpp"
#include "barato/batch/request.hpp"
#include "barato/batch/scheduler.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/paged.hpp"
#include "barato/sample/chain.hpp"
#include "models/cli.hpp"
#include "models/json.hpp"
#include "models/llama.hpp"
#include "models/llama_batch.hpp"
#include "models/model_file.hpp"
#include "models/requests.hpp"
#include "models/tokenizer.hpp"
#include "models/weight_formats.hpp"

namespace {

using namespace barato_examples;
namespace fs = std::filesystem;
namespace batch = barato::batch;
namespace kv = barato::kv;

struct Args {
  std::string model = (data_dir() / "stories260K/stories260K.bin").string();
  std::string tokenizer;  // empty: the GGUF file's vocabulary, else stories260K/tok512.bin
  std::size_t context = 0;  // 0: the model file's context
  std::string requests;
  std::string policy = "continuous";
  std::size_t slots = 8;
  std::size_t token_budget = 256;
  std::size_t prefill_chunk = 64;
  std::string kv = "paged:16";
  std::size_t pool_tokens = 0;  // 0 = slots × context
  std::string weights = "file";
  int threads = 1;
  bool cascade = false;
  std::string summary_json;
};

void add_flags(Cli& cli, Args& a) {
  cli.option("--requests", a.requests, "FILE", "JSON Lines request file (required)")
      .option("--policy", a.policy, "P", "static | continuous")
      .option("--slots", a.slots, "N", "sequences in flight at most")
      .option("--token-budget", a.token_budget, "T", "tokens per step (decodes + prefill chunks), >= slots")
      .option("--prefill-chunk", a.prefill_chunk, "C", "prompt tokens per prefill chunk at most")
      .option("--kv", a.kv, "POLICY", "paged[:B] | paged-int8[:B] | paged-int4[:B] | paged-k8v4[:B] | contiguous")
      .option("--pool-tokens", a.pool_tokens, "N", "paged pool capacity in tokens (small values force preemption);\n"
                                                   "default slots × context")
      .option("--weights", a.weights, "W", kModelWeightsHelp)
      .option("--threads", a.threads, "N", "threads for matrix products and attention")
      .flag("--cascade", a.cascade, "shared-prefix (cascade) attention for decodes that share pages (paged pools)")
      .option("--model", a.model, "FILE", "llama2.c checkpoint or GGUF file (told apart by the magic)")
      .option("--tokenizer", a.tokenizer, "FILE", "llama2.c tokenizer file (default: a GGUF file's own vocabulary, else tok512.bin)")
      .option("--context", a.context, "N", "model context in positions (0: the file's; GGUF llama.context_length)")
      .option("--summary-json", a.summary_json, "FILE", "also write the summary as one JSON object to FILE");
  cli.epilog("Defaults for --model/--tokenizer come from $BARATO_DATA_DIR (else " BARATO_DEFAULT_DATA_DIR ").\n"
             "Exit status: 0 ok, 1 runtime error, 2 usage error (malformed flags or request file).");
}

/// The sampler of a request: greedy at temperature 0, else top-k → top-p → min-p → temperature.
batch::Sampler make_sampler(const RequestSpec& r, std::size_t vocab) {
  if (r.temperature == 0.0f) return {};
  using barato::sample::Chain, barato::sample::TopK, barato::sample::TopP, barato::sample::MinP, barato::sample::Temperature;
  auto chain = std::make_shared<Chain<TopK, TopP, MinP, Temperature>>(vocab, TopK(r.top_k == 0 ? vocab : r.top_k), TopP(r.top_p),
                                                                      MinP(r.min_p), Temperature(r.temperature));
  return [chain](std::span<const float> logits, std::span<const barato::Token> history, barato::sample::Rng& rng) {
    return chain->sample(logits, history, rng).token;
  };
}

/// One tokenized request (or the reason it cannot run).
struct Prepared {
  RequestSpec spec;
  std::vector<barato::Token> prompt;
  std::string error;  // non-empty: rejected before submission
};

struct Run {
  const Args& args;
  const Tokenizer& tok;
  std::vector<Prepared>& reqs;
  std::size_t context;  // model positions
};

/// The serving loop for one executor / pool / policy: submit, step until done, print as requests finish.
template <class Pool, class Policy, class Exec>
int serve(const Run& run, Pool& pool, Policy policy, Exec& exec) {
  const Args& a = run.args;
  std::ofstream summary_out;  // opened before anything runs: an unwritable path must not cost the run
  if (!a.summary_json.empty()) {
    summary_out.open(a.summary_json);
    barato::require<barato::io_error>(static_cast<bool>(summary_out), "cannot write ", a.summary_json);
  }
  batch::Scheduler<Pool, Policy> sched(pool, {.max_slots = a.slots, .token_budget = a.token_budget,
                                              .prefill_chunk = a.prefill_chunk, .max_context = run.context + 1},
                                       policy);
  constexpr barato::Token kBos = 1;
  std::vector<std::ptrdiff_t> id_of(run.reqs.size(), -1);  // request index → scheduler id
  std::vector<std::size_t> index_of;                       // scheduler id → request index
  for (std::size_t i = 0; i < run.reqs.size(); ++i) {
    auto& r = run.reqs[i];
    if (!r.error.empty()) {
      JsonObject o;
      o.add("id", r.spec.id).add("error", r.error);
      std::printf("%s\n", o.str().c_str());
      continue;
    }
    std::vector<barato::Token> stop = r.spec.stop;
    stop.push_back(kBos);
    id_of[i] = static_cast<std::ptrdiff_t>(sched.submit({.prompt = r.prompt, .max_tokens = r.spec.max_tokens, .stop_tokens = stop,
                                                         .sampler = make_sampler(r.spec, exec.vocab_size()), .seed = r.spec.seed,
                                                         .arrival = r.spec.arrival, .priority = r.spec.priority}));
    index_of.push_back(i);
  }
  std::vector<bool> printed(index_of.size(), false);
  auto emit = [&](batch::RequestId id) {
    const Prepared& r = run.reqs[index_of[id]];
    if (sched.finish_reason(id) == batch::FinishReason::rejected) {
      const std::string why = r.prompt.size() + 1 > run.context + 1
                                  ? "the prompt's " + std::to_string(r.prompt.size()) + " tokens do not fit the model's context of " +
                                        std::to_string(run.context) + " positions"
                                  : "the request needs more KV blocks than the whole pool holds (" + std::to_string(pool.n_blocks()) +
                                        " blocks of " + std::to_string(pool.block_tokens()) + " tokens); raise --pool-tokens";
      JsonObject o;
      o.add("id", r.spec.id).add("error", why);
      std::printf("%s\n", o.str().c_str());
      return;
    }
    std::vector<barato::Token> gen(sched.output(id).begin(), sched.output(id).end());
    std::vector<barato::Token> all = r.prompt;
    all.insert(all.end(), gen.begin(), gen.end());
    const batch::FinishReason why = sched.finish_reason(id);
    const bool at_bos = why == batch::FinishReason::stop && sched.stop_token(id) == kBos;
    if (at_bos) gen.push_back(kBos);
    const batch::RequestMetrics& m = sched.metrics(id);
    JsonObject o;
    o.add("id", r.spec.id)
        .add("prompt_ids", std::span<const barato::Token>(r.prompt))
        .add("generated_ids", std::span<const barato::Token>(gen))
        .add("text", run.tok.decode_utf8(all))
        .add("finish_reason", at_bos                                     ? "bos"
                              : why == batch::FinishReason::stop         ? "stop"
                              : why == batch::FinishReason::context      ? "context"
                                                                          : "length");
    if (why == batch::FinishReason::stop && !at_bos) o.add("stop_token", sched.stop_token(id));
    o.add("queue_ms", m.queue_seconds() * 1e3)
        .add("ttft_ms", m.first_token_seconds * 1e3)
        .add("latency_ms", m.finish_seconds * 1e3)
        .add("tokens", m.generated)
        .add("preemptions", m.preemptions)
        .add("prefix_hit_tokens", m.prefix_hit_tokens);
    std::printf("%s\n", o.str().c_str());
    std::fflush(stdout);
  };
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<float> logits(a.slots * exec.vocab_size());
  std::size_t finished = 0;
  while (!sched.done()) {
    const batch::StepPlan plan = sched.schedule();
    const std::span<float> rows(logits.data(), plan.logits_rows * exec.vocab_size());
    sched.complete(rows, exec.run(plan, rows));
    for (batch::RequestId id = 0; id < index_of.size(); ++id)
      if (!printed[id] && (sched.status(id) == batch::RequestStatus::finished || sched.status(id) == batch::RequestStatus::rejected)) {
        printed[id] = true;
        ++finished;
        emit(id);
      }
    if (tty)
      std::fprintf(stderr, "\rstep %zu: %zu running, %zu queued, %zu/%zu finished   ", sched.steps(), sched.running(),
                   sched.queued(), finished, index_of.size());
  }
  if (tty) std::fprintf(stderr, "\n");
  const batch::Summary s = sched.summary();
  if (a.cascade) std::fprintf(stderr, "cascade attention: %zu sequence-layers of decodes read shared pages once\n", exec.cascaded());
  std::fprintf(stderr,
               "%s batching, %zu slots, budget %zu, chunk %zu: %zu requests (%zu rejected) in %zu steps, %.1f ms; %zu tokens, "
               "%.1f tokens/s, %.2f tokens/step; latency mean %.1f / p50 %.1f / p99 %.1f ms; TTFT mean %.1f / p50 %.1f / p99 "
               "%.1f ms; %zu preemptions, %zu prefix-hit tokens\n",
               a.policy.c_str(), a.slots, a.token_budget, a.prefill_chunk, s.requests, s.rejected + (run.reqs.size() - index_of.size()),
               s.steps, s.seconds * 1e3, s.tokens, s.tokens_per_second, s.tokens_per_step, s.latency_seconds.mean * 1e3, s.latency_seconds.p50 * 1e3,
               s.latency_seconds.p99 * 1e3, s.ttft_seconds.mean * 1e3, s.ttft_seconds.p50 * 1e3, s.ttft_seconds.p99 * 1e3, s.preemptions, s.prefix_hit_tokens);
  if (!a.summary_json.empty()) {
    JsonObject o;
    o.add("policy", a.policy).add("slots", a.slots).add("token_budget", a.token_budget).add("prefill_chunk", a.prefill_chunk)
        .add("requests", s.requests).add("rejected", s.rejected + (run.reqs.size() - index_of.size())).add("steps", s.steps)
        .add("seconds", s.seconds).add("tokens", s.tokens).add("tokens_per_second", s.tokens_per_second)
        .add("tokens_per_step", s.tokens_per_step).add("latency_mean_ms", s.latency_seconds.mean * 1e3)
        .add("latency_p50_ms", s.latency_seconds.p50 * 1e3).add("latency_p99_ms", s.latency_seconds.p99 * 1e3)
        .add("ttft_mean_ms", s.ttft_seconds.mean * 1e3).add("ttft_p50_ms", s.ttft_seconds.p50 * 1e3).add("ttft_p99_ms", s.ttft_seconds.p99 * 1e3)
        .add("preemptions", s.preemptions).add("prefix_hit_tokens", s.prefix_hit_tokens);
    if (a.cascade) o.add("cascade_sequence_layers", exec.cascaded());
    summary_out << o.str() << "\n";
    summary_out.flush();
    barato::require<barato::io_error>(static_cast<bool>(summary_out), "cannot write ", a.summary_json);
  }
  return 0;
}

/// Parses "name[:B]" of --kv: the block size (default 16).
std::size_t block_of(std::string_view spec) {
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos) return 16;
  std::size_t b = 0;
  const std::string_view s = spec.substr(colon + 1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), b);
  if (ec != std::errc{} || p != s.data() + s.size() || b == 0) throw CliError("--kv '" + std::string(spec) + "': expected a block size >= 1");
  return b;
}

template <class Linear, class Policy>
int with_caches(const Run& run, const LlamaWeights<Linear>& w, Policy policy) {
  const Args& a = run.args;
  const LlamaConfig& c = w.config;
  const std::string name(a.kv.substr(0, a.kv.find(':')));
  BatchedLlamaOptions mopt{.threads = a.threads, .max_tokens = a.token_budget, .max_chunks = a.slots, .max_positions = run.context};
  if (name == "contiguous") {
    if (a.kv != "contiguous") throw CliError("--kv contiguous takes no parameter");
    if (a.cascade) throw CliError("--cascade needs a paged pool (--kv paged…): contiguous caches share no pages");
    // one contiguous cache per layer per slot; the scheduler's pool is then only an accountant of
    // slots × context positions (no K/V in it, so no prefix hits and no preemption)
    kv::PagedPool<float> ledger({.n_layers = 1, .n_kv_heads = 1, .head_dim = 1, .block_tokens = 16,
                                 .n_blocks = a.slots * ((run.context + 1 + 15) / 16), .prefix_caching = false});
    SlotCaches<kv::Contiguous<float>> slots;
    for (std::size_t s = 0; s < a.slots; ++s) slots.slots.push_back(make_contiguous_caches(c, run.context));
    BatchedLlama<SlotCaches<kv::Contiguous<float>>, Linear> model(w, std::move(slots), mopt);
    return serve(run, ledger, policy, model);
  }
  const std::size_t B = block_of(a.kv);
  const std::size_t tokens = a.pool_tokens != 0 ? a.pool_tokens : a.slots * run.context;
  auto paged = [&]<class Pages>() {
    kv::PagedPool<Pages> pool({.n_layers = c.n_layers, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .block_tokens = B,
                               .n_blocks = std::max<std::size_t>((tokens + B - 1) / B, 1)});
    mopt.cascade = a.cascade;
    BatchedLlama<PoolCaches<Pages>, Linear> model(w, PoolCaches<Pages>{&pool}, mopt);
    return serve(run, pool, policy, model);
  };
  if (name == "paged") return paged.template operator()<float>();
  if (name == "paged-int8") return paged.template operator()<kv::QuantizedPages<kv::Int8>>();
  if (name == "paged-int4") return paged.template operator()<kv::QuantizedPages<kv::Int4>>();
  if (name == "paged-k8v4") return paged.template operator()<kv::QuantizedPages<kv::Int8, kv::Int4>>();
  throw CliError("--kv: unknown cache '" + a.kv + "' (expected paged[:B] | paged-int8[:B] | paged-int4[:B] | paged-k8v4[:B] | contiguous)");
}

template <class Linear>
int with_policy(const Run& run, const LlamaWeights<Linear>& w) {
  if (run.args.policy == "continuous") return with_caches(run, w, batch::Continuous{});
  if (run.args.policy == "static") return with_caches(run, w, batch::Static{});
  throw CliError("--policy: expected static or continuous, got '" + run.args.policy + "'");
}

int tool_main(int argc, const char* const* argv) {
  Args args;
  Cli cli("barato_batch", "Serve a JSON Lines file of requests with batched steps (static or continuous batching over a\n"
                          "paged KV pool: chunked prefill, prefix sharing, preemption by recompute).");
  add_flags(cli, args);
  if (!cli.parse(argc, argv)) return 0;
  if (args.requests.empty()) throw CliError("--requests FILE is required");
  if (args.threads < 1) throw CliError("--threads must be >= 1, got " + std::to_string(args.threads));
  if (args.slots < 1) throw CliError("--slots must be >= 1");
  if (args.token_budget < args.slots) throw CliError("--token-budget must be >= --slots (every decode needs a token)");
  if (args.prefill_chunk < 1) throw CliError("--prefill-chunk must be >= 1");
  if (args.policy != "static" && args.policy != "continuous") throw CliError("--policy: expected static or continuous, got '" + args.policy + "'");
  (void)block_of(args.kv);
  if (args.weights != "fp32" && args.weights != "file") {
    try {
      (void)weight_scheme(args.weights);
    } catch (const barato::value_error& e) {
      throw CliError(e.what());
    }
  }
  std::vector<RequestSpec> specs;
  try {
    specs = load_requests(args.requests);  // the whole file is validated before anything runs
  } catch (const RequestFileError& e) {
    throw CliError(e.what());
  }

  barato::CountingResource mem;
  const ModelFile model = ModelFile::open(args.model, args.context);
  const LlamaConfig& config = model.config();
  const Tokenizer tok = model.tokenizer(args.tokenizer, data_dir() / "stories260K/tok512.bin");
  const std::size_t context = config.seq_len;
  std::vector<Prepared> reqs;
  for (auto& s : specs) {
    Prepared p{s, {}, {}};
    if (s.prompt) p.prompt = tok.encode_prompt(*s.prompt);
    else p.prompt = *s.prompt_ids;
    for (const barato::Token t : p.prompt)
      if (static_cast<std::size_t>(t) >= config.vocab_size)
        p.error = "prompt token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")";
    if (p.error.empty() && p.prompt.size() > context)
      p.error = "the prompt's " + std::to_string(p.prompt.size()) + " tokens do not fit the model's context of " +
                std::to_string(context) + " positions";
    reqs.push_back(std::move(p));
  }
  const Run run{args, tok, reqs, context};
  return with_model_weights(model, args.weights, &mem, [&](const auto& w) { return with_policy(run, w); });
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("barato_batch", [&] { return tool_main(argc, argv); });
}
