#pragma once
/// \file
/// What `barato_plan` does, as functions the tests call: options → a plain and a refined
/// `barato::plan::Plan`, and the report (text or one JSON object). A model shape comes from a named
/// shape or from a llama2.c checkpoint's header (parameters = every stored float but the unused
/// freq_cis table).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/plan/plan.hpp"
#include "models/cli.hpp"
#include "models/json.hpp"
#include "models/gguf.hpp"
#include "models/gguf_llama.hpp"
#include "models/llama2c.hpp"

namespace barato_examples {

/// The shape of a llama2.c checkpoint, from its header (validated as `read_llama2c` does, file size
/// included); the weights are not read. `io_error` / `format_error` for a missing or bad file.
[[nodiscard]] inline barato::plan::ModelShape llama2c_shape(const std::filesystem::path& path) {
  const Llama2cLayout L = read_llama2c_layout(path);
  const std::size_t freq_cis = L.tensors[Llama2cCheckpoint::kFreqCis].floats;  // version 0 only, never used by the model
  return {.name = path.filename().string(), .parameters = double(L.total_floats - freq_cis), .layers = L.n_layers,
          .q_heads = L.n_heads, .kv_heads = L.n_kv_heads, .head_dim = L.head_size, .vocab = L.vocab, .dim = L.dim,
          .hidden_dim = L.hidden_dim};
}

/// The shape of a model file: GGUF (by its magic; `llama.*` metadata and tensor dims, weights not
/// converted) or a llama2.c checkpoint (`llama2c_shape`).
[[nodiscard]] inline barato::plan::ModelShape model_file_shape(const std::filesystem::path& path) {
  if (!is_gguf_file(path)) return llama2c_shape(path);
  const GgufFile f = GgufFile::open(path);
  const LlamaConfig c = gguf_llama_config(f);
  return {.name = path.filename().string(),
          .parameters = barato::plan::llama_parameter_count(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                                                            c.head_dim, c.vocab_size, c.shared_classifier),
          .layers = c.n_layers, .q_heads = c.n_heads, .kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
          .vocab = c.vocab_size, .dim = c.dim, .hidden_dim = c.hidden_dim};
}

/// `--weights file`: the weights as the tools load a model file with `--weights file`, as the bits
/// per parameter of `shape` they average: a GGUF file's tensors in their loaded formats
/// (`gguf_llama_loaded_bytes`, from the tensor infos; e.g. Q4_K → 6 bits: 4-bit codes, fp32 scales and offsets;
/// Q6_K → 10), a llama2.c checkpoint fp32 (version 2: its matrices as int8 codes with fp32 scales
/// per 16 or 32, or fp32 where groups cross rows); either way a tied classifier is a second copy of the embedding, as the loaders
/// make it. `CliError` without --model.
[[nodiscard]] inline barato::plan::WeightFormat file_weight_format(const std::string& model, const barato::plan::ModelShape& shape) {
  if (model.empty()) throw CliError("--weights file needs --model FILE (the formats are the file's)");
  double bytes = 0;
  if (is_gguf_file(model)) {
    const GgufFile f = GgufFile::open(model);
    bytes = static_cast<double>(gguf_llama_loaded_bytes(f, gguf_llama_config(f)));
  } else {
    const Llama2cLayout L = read_llama2c_layout(model);
    if (L.version != 2) {
      bytes = 4.0 * (shape.parameters + (L.shared_classifier ? double(L.vocab * L.dim) : 0.0));
    } else {  // the matrices as llama2c_int8_weights keeps them; the embedding and gains fp32
      const std::size_t g = L.group_size, d = L.dim, h = L.hidden_dim, q = L.n_heads * L.head_size;
      const std::size_t per_layer = llama2c_int8_loaded_bytes(q, d, g) + 2 * llama2c_int8_loaded_bytes(L.kv_dim, d, g) +
                                    llama2c_int8_loaded_bytes(d, q, g) + 2 * llama2c_int8_loaded_bytes(h, d, g) +
                                    llama2c_int8_loaded_bytes(d, h, g);
      bytes = 4.0 * double(L.vocab * d + (2 * L.n_layers + 1) * d) + double(L.n_layers * per_layer) +
              double(llama2c_int8_loaded_bytes(L.vocab, d, g));
    }
  }
  return barato::plan::WeightFormat{.name = "file", .bits_per_weight = 8.0 * bytes / shape.parameters}.checked();
}

/// `barato_plan`'s options as given on the command line.
struct PlanOptions {
  std::string model;              ///< llama2.c checkpoint or GGUF file (overrides shape)
  std::string shape = "7b";       ///< named shape
  std::string budget = "16GiB";   ///< memory budget
  std::string reserve = "1.5GiB"; ///< runtime reserve
  std::string weights = "fp16";   ///< weight format name or bits per weight
  std::string kv = "fp16";        ///< KV-cache format
  std::size_t context = 4096;     ///< tokens per user
  std::size_t users = 1;          ///< users at once
  std::size_t block = 0;          ///< paging: tokens per block (0 = off)
  std::size_t window = 0;         ///< sliding window (0 = off)
  std::size_t sinks = 0;          ///< window sinks
  std::size_t prefix = 0;         ///< shared prefix tokens
  std::size_t step_tokens = 0;    ///< activation buffers of the example decoder for this many tokens per step
};

/// The two plans a report prints: the plain sum, and the one with the refinements barato's caches imply
/// (the activation buffers' RoPE table covers --context positions).
struct PlanPair {
  barato::plan::Plan plain;    ///< weights + KV codes · tokens + reserve
  barato::plan::Plan refined;  ///< + KV scales, paging, window, shared prefix as asked
};

/// Options → plans. Bad sizes, unknown names or a zero budget / user count become `CliError` (exit 2).
[[nodiscard]] inline PlanPair make_plans(const PlanOptions& o) {
  using namespace barato::plan;
  try {
    if (o.users == 0) throw CliError("--users must be >= 1, got 0");
    if (o.context == 0) throw CliError("--context must be >= 1, got 0");
    const ModelShape shape = o.model.empty() ? named_shape(o.shape) : model_file_shape(o.model);
    PlanInput in{.shape = shape, .weights = o.weights == "file" ? file_weight_format(o.model, shape) : parse_weight_format(o.weights),
                 .kv = parse_kv_format(o.kv), .budget = parse_bytes(o.budget), .reserve = parse_bytes(o.reserve), .refine = {}};
    const Plan plain(in);
    in.refine = {.kv_scales = true, .block_tokens = o.block, .window = o.window, .sinks = o.sinks,
                 .shared_prefix_tokens = o.prefix, .step_tokens = o.step_tokens, .rope_positions = o.context};
    return {plain, Plan(in)};
  } catch (const barato::value_error& e) {
    throw CliError(e.what());
  }
}

namespace detail {
inline std::string limit(std::size_t n) { return n == barato::plan::kUnlimited ? "unlimited" : std::to_string(n); }
}  // namespace detail

/// The text report: inputs, then one row per figure with the plain and the refined plan side by side.
[[nodiscard]] inline std::string plan_text(const PlanPair& p, std::size_t context, std::size_t users) {
  using barato::plan::format_bytes;
  const auto& in = p.refined.input();
  const auto& s = in.shape;
  const auto& r = in.refine;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "model    %s: %.4g parameters, %zu layers, %zu query heads, %zu KV heads x %zu\n"
                "formats  weights %s (%.4g bits/weight), KV cache %s\n"
                "memory   budget %s, reserve %s\n",
                s.name.c_str(), s.parameters, s.layers, s.q_heads, s.kv_heads, s.head_dim, in.weights.name.c_str(),
                in.weights.bits_per_weight, std::string(in.kv.name()).c_str(), format_bytes(in.budget).c_str(),
                format_bytes(in.reserve).c_str());
  out += buf;
  std::string refinements = "KV scales";
  if (r.block_tokens) refinements += ", paged (block " + std::to_string(r.block_tokens) + ")";
  if (r.window) refinements += ", window " + std::to_string(r.window) + " + " + std::to_string(r.sinks) + " sinks";
  if (r.shared_prefix_tokens) refinements += ", shared prefix " + std::to_string(r.shared_prefix_tokens);
  if (r.step_tokens) refinements += ", activations";
  out += "refined  plain + " + refinements + "\n";
  std::snprintf(buf, sizeof buf, "\n%-30s %18s %18s\n", "", "plain", "refined");
  out += buf;
  const auto row = [&](const char* what, const std::string& a, const std::string& b) {
    std::snprintf(buf, sizeof buf, "%-30s %18s %18s\n", what, a.c_str(), b.c_str());
    out += buf;
  };
  const auto both = [&](const char* what, auto f) { row(what, f(p.plain), f(p.refined)); };
  using barato::plan::Plan;
  both("weights", [](const Plan& q) { return format_bytes(q.weight_bytes()); });
  if (r.step_tokens)
    both(("activations, " + std::to_string(r.step_tokens) + " tokens/step").c_str(),
         [](const Plan& q) { return format_bytes(q.activation_bytes()); });
  both("KV bytes/token", [](const Plan& q) { return std::to_string(q.kv_bytes_per_token()) + " B"; });
  both("left for the KV cache", [](const Plan& q) { return format_bytes(q.kv_budget()); });
  both("max resident tokens", [](const Plan& q) { return std::to_string(q.max_tokens()); });
  both(("users at " + std::to_string(context) + " tokens").c_str(),
       [&](const Plan& q) { return detail::limit(q.max_users(context)); });
  both(("context for " + std::to_string(users) + " users").c_str(),
       [&](const Plan& q) { return detail::limit(q.max_context(users)); });
  both(("total for " + std::to_string(users) + " x " + std::to_string(context)).c_str(),
       [&](const Plan& q) { return format_bytes(q.total_bytes(context, users)); });
  both("fits", [&](const Plan& q) {
    return q.fits(context, users) ? std::string("yes") : "no, short " + format_bytes(q.shortfall(context, users));
  });
  if (!p.refined.weights_fit())
    out += "\ndoes not fit: weights + reserve exceed the budget by " + format_bytes(p.refined.shortfall()) + "\n";
  return out;
}

/// The JSON report: one flat object, the refined plan's figures plus the plain ones as plain_*.
[[nodiscard]] inline std::string plan_json(const PlanPair& p, std::size_t context, std::size_t users) {
  const auto& in = p.refined.input();
  const auto num = [](std::size_t n) { return n == barato::plan::kUnlimited ? std::int64_t{-1} : std::int64_t(n); };
  JsonObject j;
  j.add("model", in.shape.name)
      .add("parameters", in.shape.parameters)
      .add("weights", in.weights.name)
      .add("bits_per_weight", in.weights.bits_per_weight)
      .add("kv", std::string(in.kv.name()))
      .add("budget_bytes", num(in.budget))
      .add("reserve_bytes", num(in.reserve))
      .add("context", num(context))
      .add("users", num(users))
      .add("block_tokens", num(in.refine.block_tokens))
      .add("window", num(in.refine.window))
      .add("shared_prefix_tokens", num(in.refine.shared_prefix_tokens))
      .add("step_tokens", num(in.refine.step_tokens))
      .add("weight_bytes", num(p.refined.weight_bytes()))
      .add("activation_bytes", num(p.refined.activation_bytes()))
      .add("kv_bytes_per_token", num(p.refined.kv_bytes_per_token()))
      .add("kv_budget_bytes", num(p.refined.kv_budget()))
      .add("max_tokens", num(p.refined.max_tokens()))
      .add("max_users", num(p.refined.max_users(context)))
      .add("max_context", num(p.refined.max_context(users)))
      .add("total_bytes", num(p.refined.total_bytes(context, users)))
      .add("fits", p.refined.fits(context, users))
      .add("shortfall_bytes", num(p.refined.shortfall(context, users)))
      .add("weights_fit", p.refined.weights_fit())
      .add("plain_kv_bytes_per_token", num(p.plain.kv_bytes_per_token()))
      .add("plain_max_tokens", num(p.plain.max_tokens()))
      .add("plain_max_users", num(p.plain.max_users(context)))
      .add("plain_max_context", num(p.plain.max_context(users)))
      .add("plain_total_bytes", num(p.plain.total_bytes(context, users)));
  return j.str();
}

/// Quality figures as written on the command line: "int4/int8=6.12,nf4/fp16=5.9" (weights/kv=value,
/// comma-separated). `CliError` naming the bad entry otherwise.
[[nodiscard]] inline std::vector<barato::plan::QualityFigure> parse_quality(std::string_view list) {
  std::vector<barato::plan::QualityFigure> out;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    const std::size_t slash = item.find('/'), eq = item.find('=');
    const auto bad = [&] {
      return CliError("--quality: expected WEIGHTS/KV=VALUE (e.g. int4/int8=6.12), got '" + std::string(item) + "'");
    };
    if (slash == std::string_view::npos || eq == std::string_view::npos || slash == 0 || eq < slash + 2) throw bad();
    const std::string value(item.substr(eq + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v)) throw bad();
    out.push_back({std::string(item.substr(0, slash)), std::string(item.substr(slash + 1, eq - slash - 1)), v});
  }
  return out;
}

/// The search report: every weight × KV combination that fits `users` × `context` with the refinements
/// of `o` (KV scales always counted), smallest total first, with the quality column when figures are given.
[[nodiscard]] inline std::string search_text(const PlanOptions& o, const std::vector<barato::plan::QualityFigure>& quality) {
  using namespace barato::plan;
  const PlanPair p = make_plans(o);  // checks the options
  SearchQuery q;
  q.shape = p.refined.input().shape;
  q.budget = p.refined.input().budget;
  q.reserve = p.refined.input().reserve;
  q.context = o.context;
  q.users = o.users;
  q.refine = p.refined.input().refine;
  q.quality = quality;
  const std::vector<Candidate> found = search(q);
  std::string out = "search   " + q.shape.name + ", " + std::to_string(o.users) + " users x " + std::to_string(o.context) +
                    " tokens in " + format_bytes(q.budget) + ": " + std::to_string(found.size()) + " of " +
                    std::to_string(q.weights.size() * q.kv.size()) + " weight x KV combinations fit\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-8s %-6s %14s %12s %14s %10s\n", "weights", "kv", "total", "max users", "max context",
                quality.empty() ? "" : "quality");
  out += buf;
  for (const Candidate& c : found) {
    char qual[32] = "";
    if (c.quality) std::snprintf(qual, sizeof qual, "%.4g", *c.quality);
    else if (!quality.empty()) std::snprintf(qual, sizeof qual, "-");
    std::snprintf(buf, sizeof buf, "%-8s %-6s %14s %12s %14s %10s\n", c.weights.name.c_str(), std::string(c.kv.name()).c_str(),
                  format_bytes(c.total_bytes).c_str(), detail::limit(c.max_users).c_str(),
                  detail::limit(c.max_context).c_str(), qual);
    out += buf;
  }
  if (found.empty()) out += "nothing fits\n";
  return out;
}

}  // namespace barato_examples
