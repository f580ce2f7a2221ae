#pragma once
/// \file
/// Speculative decoding for the example Llama decoder: the drafters `barato_generate --draft` offers,
/// built from a llama2.c checkpoint, and a run.c-semantics generation loop over `spec::Speculative`.
///
///   --draft ngram[:N]   prompt lookup (spec::NgramDrafter, suffixes of N…1 tokens; N = 3 by default)
///   --draft int8        the same model with int8 per-row weights as the draft model (= int8-row)
///   --draft int4-g128   … int4, one scale per 128 weights
///   --draft nf4         … NF4 (QLoRA 4-bit NormalFloat), blocks of 64
///   (and every other `quant::parse_scheme` name: int8-tensor, int4-tensor, int4-row)
///
/// Greedy (temperature 0) uses `spec::GreedyVerify`: the output is the plain greedy output token for
/// token. Temperature T > 0 uses `spec::StochasticVerify` with softmax(logits / T) for target and draft:
/// the output has the plain sampler's distribution (drawn from barato's xoshiro stream, so not the same
/// sample as run.c's xorshift for the same seed).

#include <chrono>
#include <cstdio>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "barato/kv/contiguous.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/scheme.hpp"
#include "barato/sample/chain.hpp"
#include "barato/sample/greedy.hpp"
#include "barato/spec/model_drafter.hpp"
#include "barato/spec/ngram_drafter.hpp"
#include "barato/spec/speculative.hpp"
#include "barato/spec/step_model.hpp"
#include "barato/spec/step_model_ref.hpp"
#include "barato/spec/verify.hpp"
#include "models/cli.hpp"
#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/weight_formats.hpp"

namespace barato_examples {

/// A parsed `--draft` value: the n-gram drafter, or the model itself with its weights quantized.
struct DraftChoice {
  bool ngram = true;                                                ///< prompt lookup, else a quantized model
  std::size_t ngram_n = 3;                                          ///< longest suffix for the n-gram drafter
  barato::quant::Scheme scheme = barato::quant::Scheme::int8_row;  ///< weight scheme of the draft model
  std::string name;                                                 ///< as given
};

/// Parses `ngram`, `ngram:N` (1 ≤ N ≤ 64), `int8` (= int8-row) or any `quant::parse_scheme` name
/// (int8-tensor, int8-row, q8_0, int4-tensor, int4-row, int4-g128, q4_0, nf4); anything else throws `CliError`.
[[nodiscard]] inline DraftChoice parse_draft(std::string_view s) {
  DraftChoice d;
  d.name = std::string(s);
  if (s == "ngram") return d;
  if (s.starts_with("ngram:")) {
    const std::string n(s.substr(6));
    std::size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(n, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (n.empty() || used != n.size() || v < 1 || v > 64) throw CliError("--draft ngram:N: N must be 1..64, got '" + n + "'");
    d.ngram_n = v;
    return d;
  }
  d.ngram = false;
  if (s == "int8") return d;
  try {
    d.scheme = barato::quant::parse_scheme(s);
  } catch (const barato::value_error&) {
    throw CliError("--draft: unknown drafter '" + std::string(s) +
                   "' (expected ngram, ngram:N, int8, int8-tensor, int8-row, int4-tensor, int4-row, int4-g128, nf4, q8_0 or q4_0)");
  }
  return d;
}

/// A Llama over copies of `dense`'s projections quantized to `scheme` (embedding and norms stay fp32),
/// owning its weights, with contiguous fp32 caches of `capacity` positions. The projections are held
/// as `nn::AnyLinear` (one virtual call per matrix product), so every scheme is the same draft-model
/// type: the speculative driver is instantiated once per target instead of once per scheme.
[[nodiscard]] inline auto make_quantized_llama(const LlamaWeights<barato::nn::DenseLinear>& dense,
                                               barato::quant::Scheme scheme, std::size_t capacity,
                                               const LlamaOptions& opt = {}) {
  using Q = barato::nn::AnyLinear;
  auto w = std::make_shared<const LlamaWeights<Q>>(quantize_weights(dense, scheme, opt.mr));
  auto caches = make_contiguous_caches<float>(dense.config, capacity, opt.mr);
  return Llama<barato::kv::Contiguous<float>, Q>(std::move(w), std::move(caches), opt);
}

/// What a speculative run measured (a copy of `spec::Stats`' summary).
struct SpecReport {
  std::size_t passes = 0, proposed = 0, accepted = 0, examined = 0, emitted = 0;
  double alpha = 0.0, tokens_per_pass = 0.0, draft_ms = 0.0, target_ms = 0.0;
  std::vector<std::size_t> examined_at, accepted_at;  // [γ] per draft position
};

namespace detail {

template <class Dec>
GenerateResult drive_speculative(Dec& dec, std::span<const Token> prompt, std::size_t n_gen, std::uint64_t seed,
                                 SpecReport* report) {
  using clock = std::chrono::steady_clock;
  GenerateResult r;
  barato::sample::Rng rng(seed);
  auto t0 = clock::now();
  dec.start(prompt);
  r.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  t0 = clock::now();
  const std::size_t end = prompt.size() + n_gen;
  while (dec.tokens().size() < end && !r.stopped_on_bos) {
    const auto out = dec.step(rng, end - dec.tokens().size());
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] == 1) {  // BOS ends the story (run.c)
        dec.rollback(dec.tokens().size() - out.size() + i + 1);
        r.stopped_on_bos = true;
        break;
      }
  }
  r.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  const auto all = dec.tokens();
  r.generated.assign(all.begin() + static_cast<std::ptrdiff_t>(prompt.size()), all.end());
  r.decode_steps = r.generated.size();  // decode_ms_per_token = time per generated token
  if (report != nullptr) {
    const auto& s = dec.stats();
    *report = {s.passes(), s.proposed(), s.accepted(), s.examined(), s.emitted(), s.alpha(), s.tokens_per_pass(),
               1e3 * s.draft_seconds(), 1e3 * s.target_seconds(), {}, {}};
    for (std::size_t i = 0; i < s.max_gamma(); ++i) {
      report->examined_at.push_back(s.examined_at(i));
      report->accepted_at.push_back(s.accepted_at(i));
    }
  }
  return r;
}

/// One speculative run of `target` with `drafter` under the verify rule `rule`.
template <barato::spec::Drafter D, barato::spec::VerifyRule R>
GenerateResult run_with(barato::spec::StepModelRef target, D& drafter, R rule, std::span<const Token> prompt,
                        const GenerateOptions& opt, std::size_t gamma, SpecReport* report) {
  const std::size_t n_gen = opt.steps - prompt.size() + 1;
  barato::spec::Speculative dec(target, drafter, std::move(rule), {.gamma = gamma, .stop_token = std::nullopt});
  return drive_speculative(dec, prompt, n_gen, opt.seed, report);
}

/// The drafter `choice` names, its sampler and the verify rule matching the temperature: greedy
/// drafts and `GreedyVerify` at temperature 0, else drafts sampled at the temperature (and top-p) and
/// `StochasticVerify` (only these two pairs are instantiated). The target is a `StepModelRef`, so
/// this is compiled once whatever the caller's model type (the tools' ten `--kv` caches).
inline GenerateResult generate_speculative_impl(barato::spec::StepModelRef target, const LlamaWeights<barato::nn::DenseLinear>* dense,
                                                const DraftChoice& choice, std::span<const Token> prompt,
                                                const GenerateOptions& opt, std::size_t gamma, int threads, SpecReport* report) {
  barato::require<barato::value_error>(!prompt.empty(), "generate_speculative: empty prompt");
  if (opt.steps < prompt.size()) return {};  // run.c: the prompt alone fills the steps, nothing sampled
  const std::size_t V = target.vocab_size();
  const bool greedy = opt.temperature == 0.0f;
  // run.c's sampling: temperature, then its top-p nucleus (TopP{1} keeps everything: one Chain type)
  const float top_p = opt.top_p > 0.0f && opt.top_p < 1.0f ? opt.top_p : 1.0f;
  const auto sampled = [&] {
    return barato::sample::Chain(V, barato::sample::Temperature{opt.temperature}, barato::sample::TopP{top_p});
  };
  const auto stochastic = [&] { return barato::spec::StochasticVerify(sampled()); };
  if (choice.ngram) {
    barato::spec::NgramDrafter drafter(V, {.max_n = choice.ngram_n, .min_n = 1});
    if (greedy) return run_with(target, drafter, barato::spec::GreedyVerify{}, prompt, opt, gamma, report);
    return run_with(target, drafter, stochastic(), prompt, opt, gamma, report);
  }
  auto draft = make_quantized_llama(*dense, choice.scheme, target.capacity(), {.threads = threads});
  if (greedy) {
    barato::spec::ModelDrafter drafter(draft, barato::sample::Greedy(V));
    return run_with(target, drafter, barato::spec::GreedyVerify{}, prompt, opt, gamma, report);
  }
  barato::spec::ModelDrafter drafter(draft, sampled());
  return run_with(target, drafter, stochastic(), prompt, opt, gamma, report);
}

}  // namespace detail

/// run.c's generation loop (see generate.hpp: `steps` counts the prompt, BOS stops) with speculative
/// decoding: `choice` names the drafter; the quantized drafters quantize the fp32 weights `dense`
/// (their caches hold target.capacity() positions). `gamma` drafts per pass. prefill_ms times the
/// prompt except its last token (which the first verify pass runs); decode_ms / decode_steps is the
/// time per generated token. Fills `report` with the acceptance statistics when given. `target` is
/// any `spec::StepModel`, taken by reference (`spec::StepModelRef`).
inline GenerateResult generate_speculative(barato::spec::StepModelRef target, const LlamaWeights<barato::nn::DenseLinear>& dense,
                                           const DraftChoice& choice, std::span<const Token> prompt, const GenerateOptions& opt,
                                           std::size_t gamma, int threads = 1, SpecReport* report = nullptr) {
  return detail::generate_speculative_impl(target, &dense, choice, prompt, opt, gamma, threads, report);
}

/// Same, loading the fp32 checkpoint from `checkpoint` only when the drafter is a quantized model.
inline GenerateResult generate_speculative(barato::spec::StepModelRef target, const std::filesystem::path& checkpoint,
                                           const DraftChoice& choice, std::span<const Token> prompt, const GenerateOptions& opt,
                                           std::size_t gamma, int threads = 1, SpecReport* report = nullptr) {
  if (choice.ngram)
    return detail::generate_speculative_impl(target, nullptr, choice, prompt, opt, gamma, threads, report);
  const auto dense = load_llama2c(checkpoint);
  return detail::generate_speculative_impl(target, &dense, choice, prompt, opt, gamma, threads, report);
}

/// One line of acceptance statistics on `f` (stderr in the tools).
inline void print_spec_report(std::FILE* f, const std::string& draft, std::size_t gamma, const SpecReport& r) {
  std::fprintf(f,
               "speculative (--draft %s, gamma %zu): %zu verify passes, alpha %.3f (%zu of %zu examined drafts accepted), "
               "%.2f tokens/pass; draft %.3f ms, target %.3f ms\n",
               draft.c_str(), gamma, r.passes, r.alpha, r.accepted, r.examined, r.tokens_per_pass, r.draft_ms, r.target_ms);
}

}  // namespace barato_examples
