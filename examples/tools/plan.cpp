// barato_plan: how much context, for how many users — the memory plan of a model shape, a weight
// format and a KV-cache format in a budget (barato/plan; the arithmetic is in examples/models/plan_report.hpp).
//
//   barato_plan --shape 7b --budget 16GiB --weights int8 --kv fp16 --context 4096 --users 4 [--block 16] [--json]
#include <cstdio>
#include <string>

#include "models/cli.hpp"
#include "models/plan_report.hpp"

namespace {

using namespace barato_examples;

constexpr const char* kEpilog =
    "The plain plan is weights + KV bytes/token x tokens + reserve (weights = parameters x bits / 8; KV\n"
    "bytes/token = 2 x layers x KV heads x head_dim x element bytes, codes only for int8/int4/k8v4). The\n"
    "second column adds the refinements barato's caches imply: the fp32 scales of the quantized caches\n"
    "(one per token, KV head and layer, for K and for V), and as asked whole blocks per sequence\n"
    "(--block), a sliding window of fixed bytes per sequence (--window, --sinks) and a prefix shared by\n"
    "every user counted once (--prefix), the example decoder's activation buffers (--step-tokens). Sizes: 16GiB, 16GB (= GiB), 1.5GiB, 512MiB, or bytes.\n"
    "--json prints one object (unlimited = -1). Bad sizes or names exit with status 2.";

int tool_main(int argc, const char* const* argv) {
  PlanOptions o;
  bool json = false, search = false;
  std::string quality;
  Cli cli("barato_plan", "Memory plan: weights, KV bytes per token, max tokens, users and context in a budget.");
  cli.option("--model", o.model, "FILE", "llama2.c checkpoint or GGUF file (its header / metadata gives the shape; overrides --shape)")
      .option("--shape", o.shape, "NAME", "named shape: 7b | 13b | 70b | qwen2.5-0.5b")
      .option("--budget", o.budget, "SIZE", "memory budget")
      .option("--reserve", o.reserve, "SIZE", "runtime reserve")
      .option("--weights", o.weights, "W",
              "fp32 | fp16 | bf16 | int8 | int4 (g128, 4.125 bits) | nf4 (4.25) | a --weights scheme of the\nother tools (int8-tensor, int8-row, int4-tensor, int4-row, int4-g128, q8_0, q4_0) | <bits> |\nfile (with --model: the file's tensors as the tools load them with --weights file)")
      .option("--kv", o.kv, "KV", "fp32 | fp16 | bf16 | int8 | int4 | k8v4")
      .option("--context", o.context, "N", "tokens per user")
      .option("--users", o.users, "N", "users at once")
      .option("--block", o.block, "N", "paged KV cache: tokens per block (0 = not paged)")
      .option("--window", o.window, "N", "sliding-window KV cache of N recent positions (0 = none)")
      .option("--sinks", o.sinks, "N", "sliding window: first positions kept")
      .option("--prefix", o.prefix, "N", "tokens of a prefix every user shares")
      .option("--step-tokens", o.step_tokens, "N", "count the example decoder's activation buffers for N tokens per step")
      .flag("--search", search, "list every weight x KV format pair that fits --users x --context, smallest first")
      .option("--quality", quality, "LIST", "with --search: measured figures per pair, e.g. int4/int8=6.12,nf4/fp16=5.9")
      .flag("--json", json, "print one JSON object")
      .epilog(kEpilog);
  if (!cli.parse(argc, argv)) return 0;
  if (search) {
    if (json) throw CliError("--search prints a table; --json is for a single plan");
    std::fputs(search_text(o, parse_quality(quality)).c_str(), stdout);
    return 0;
  }
  if (!quality.empty()) throw CliError("--quality needs --search");
  const PlanPair plans = make_plans(o);
  const std::string out = json ? plan_json(plans, o.context, o.users) + "\n" : plan_text(plans, o.context, o.users);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("barato_plan", [&] { return tool_main(argc, argv); });
}
