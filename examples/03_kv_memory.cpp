// Tutorial 3 — how much memory the KV cache takes.
//
// Every layer keeps one key row and one value row per KV head for every position of every
// sequence it serves. So one token costs
//
//     bytes/token = 2 (K and V) · layers · kv_heads · head_dim · bytes per element
//
// and a batch of B sequences of T tokens costs B · T · bytes/token. The formula is
// barato::kv::bytes_per_token; this chapter checks it against real allocations. Every cache below
// is a real kv::Contiguous<T> (one per layer per sequence) allocated through a CountingResource,
// and every "measured" figure is what that resource saw — then the caches are freed.
//
//   Step 1  bytes/token for real model shapes: formula vs allocator (stories260K from its file,
//           Qwen2.5-0.5B's shape with GQA and its multi-head equivalent, a 7B-class shape)
//   Step 2  batch × context at a fixed budget: 32 × 2048, 64 × 1024, 128 × 512 on the 0.5B shape
//   Step 3  when the cache outgrows the weights: the context at which one user's cache is larger
//           than the model itself
//
// Run:  tutorial_kv_memory [--model stories260K.bin]
//       (default: $BARATO_DATA_DIR/stories260K/stories260K.bin, else BARATO_DEFAULT_DATA_DIR)

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/memory.hpp"
#include "models/llama2c.hpp"
#include "tutorial_support.hpp"

namespace {

using namespace barato;
using barato_examples::grouped;

constexpr std::size_t KiB = std::size_t{1} << 10, MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;

/// The part of a model's shape that decides its KV cache.
struct KvShape {
  std::string name;
  std::size_t layers, kv_heads, head_dim;
};

/// Bytes in the largest binary unit that keeps the number ≥ 1.
std::string human(double bytes) {
  char buf[32];
  if (bytes >= static_cast<double>(GiB)) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / static_cast<double>(GiB));
  else if (bytes >= static_cast<double>(MiB)) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / static_cast<double>(MiB));
  else if (bytes >= static_cast<double>(KiB)) std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / static_cast<double>(KiB));
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

/// Fails the tutorial (non-zero exit) when an identity does not hold.
void check(bool ok, const std::string& what) {
  if (!ok) throw barato::error("identity check failed: " + what);
}

/// Peak bytes a CountingResource sees while `batch` sequences of `tokens` positions each get one
/// kv::Contiguous<T> per layer (all alive at once), and the number of allocations. Freed on return.
struct Measured {
  std::size_t bytes, allocations;
};
template <Element T>
Measured allocate_caches(const KvShape& s, std::size_t tokens, std::size_t batch) {
  CountingResource counting;
  {
    std::vector<kv::Contiguous<T>> caches;  // [batch · layers]
    caches.reserve(batch * s.layers);
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t l = 0; l < s.layers; ++l) caches.emplace_back(s.kv_heads, s.head_dim, tokens, &counting);
    check(counting.current() == counting.peak(), "caches are only ever added while measuring");
  }
  check(counting.current() == 0, "every cache byte is returned when the caches are destroyed");
  return {counting.peak(), counting.allocations()};
}

std::filesystem::path default_model() {
  std::filesystem::path dir = BARATO_DEFAULT_DATA_DIR;
  if (const char* env = std::getenv("BARATO_DATA_DIR"); env != nullptr && *env != '\0') dir = env;
  return dir / "stories260K" / "stories260K.bin";
}

int run(const std::filesystem::path& model_path) {
  // ---------------------------------------------------------------------------------------------
  // Step 1 — bytes per token, formula vs allocator
  // ---------------------------------------------------------------------------------------------
  // stories260K's shape comes from its file header; the others are the published shapes.
  const auto ck = barato_examples::read_llama2c(model_path);
  const auto& L = ck.layout();
  const KvShape stories{"stories260K", L.n_layers, L.n_kv_heads, L.head_size};
  const KvShape qwen{"Qwen2.5-0.5B shape (GQA)", 24, 2, 64};
  const std::size_t qwen_q_heads = 14;
  const KvShape qwen_mha{"same, multi-head (MHA)", 24, qwen_q_heads, 64};
  const KvShape seven_b{"7B class (GQA)", 32, 8, 128};

  std::printf("Tutorial 3 — KV-cache memory\n\n");
  std::printf("Step 1. bytes/token = 2 · layers · kv_heads · head_dim · element bytes, vs the allocator\n");
  std::printf("        (the allocator column: real kv::Contiguous caches for every layer, %d tokens, / %d)\n\n", 1024, 1024);
  std::printf("  %-26s %6s %8s %8s %5s %14s %14s\n", "model", "layers", "kv_heads", "head_dim", "type", "formula B/tok",
              "measured B/tok");
  struct Case {
    const KvShape* shape;
    DType dtype;
  };
  const Case cases[] = {{&stories, DType::f32}, {&stories, DType::f16}, {&qwen, DType::f16},
                        {&qwen_mha, DType::f16}, {&seven_b, DType::f16}};
  constexpr std::size_t kProbeTokens = 1024;
  std::size_t qwen_bpt = 0, mha_bpt = 0, seven_bpt = 0;
  for (const Case& c : cases) {
    const KvShape& s = *c.shape;
    const std::size_t formula = kv::bytes_per_token(s.layers, s.kv_heads, s.head_dim, c.dtype);
    const std::size_t measured = c.dtype == DType::f32 ? allocate_caches<float>(s, kProbeTokens, 1).bytes
                                                       : allocate_caches<f16>(s, kProbeTokens, 1).bytes;
    check(measured == formula * kProbeTokens, s.name + ": allocated bytes == formula · tokens");
    std::printf("  %-26s %6zu %8zu %8zu %5s %14s %14s\n", s.name.c_str(), s.layers, s.kv_heads, s.head_dim,
                std::string(dtype_name(c.dtype)).c_str(), grouped(formula).c_str(), grouped(measured / kProbeTokens).c_str());
    if (&s == &qwen) qwen_bpt = formula;
    if (&s == &qwen_mha) mha_bpt = formula;
    if (&s == &seven_b) seven_bpt = formula;
  }
  check(mha_bpt == qwen_bpt * (qwen_q_heads / qwen.kv_heads), "MHA / GQA = q_heads / kv_heads");
  std::printf("\n  The allocator agrees with the formula to the byte. Sharing each KV head between %zu query heads\n"
              "  (GQA) makes the 0.5B shape's cache %zu× smaller than multi-head attention (%s vs %s bytes/token);\n"
              "  the 7B-class shape costs %s per token.\n\n",
              qwen_q_heads / qwen.kv_heads, mha_bpt / qwen_bpt, grouped(qwen_bpt).c_str(), grouped(mha_bpt).c_str(),
              human(static_cast<double>(seven_bpt)).c_str());

  // ---------------------------------------------------------------------------------------------
  // Step 2 — batch × context: the same budget, three ways
  // ---------------------------------------------------------------------------------------------
  std::printf("Step 2. Batch × context on the Qwen2.5-0.5B shape, fp16 (real allocations: batch · %zu caches)\n\n",
              qwen.layers);
  std::printf("  %6s %8s %10s %16s %16s %12s %14s\n", "batch", "context", "tokens", "formula bytes", "measured bytes",
              "measured", "MHA (formula)");
  const std::size_t shapes[][2] = {{32, 2048}, {64, 1024}, {128, 512}};
  std::size_t first = 0;
  for (const auto& bc : shapes) {
    const std::size_t batch = bc[0], context = bc[1];
    const std::size_t formula = kv::kv_bytes(qwen.layers, qwen.kv_heads, qwen.head_dim, DType::f16, context, batch);
    const Measured m = allocate_caches<f16>(qwen, context, batch);
    check(m.bytes == formula, "batch × context: allocated bytes == formula");
    check(m.allocations == 2 * batch * qwen.layers, "one K and one V buffer per layer per sequence");
    if (first == 0) first = m.bytes;
    check(m.bytes == first, "equal batch · context gives equal memory");
    std::printf("  %6zu %8zu %10s %16s %16s %12s %14s\n", batch, context, grouped(batch * context).c_str(),
                grouped(formula).c_str(), grouped(m.bytes).c_str(), human(static_cast<double>(m.bytes)).c_str(),
                human(static_cast<double>(mha_bpt * batch * context)).c_str());
  }
  std::printf("\n  Only batch · context matters: each row holds %s tokens and takes %s; a server can trade\n"
              "  users for context length one for one. Without GQA the same rows would need %zu× the memory.\n\n",
              grouped(shapes[0][0] * shapes[0][1]).c_str(), human(static_cast<double>(first)).c_str(), mha_bpt / qwen_bpt);

  // ---------------------------------------------------------------------------------------------
  // Step 3 — when one user's cache outgrows the weights
  // ---------------------------------------------------------------------------------------------
  // 7B class: 13.0 GiB of fp16 weights (the figure this chapter takes as given). The 0.5B shape's
  // weights are computed from its shape: per layer q/o [896×896], k/v [128×896], gate/up/down
  // [4864×896], plus a tied 151,936 × 896 embedding, in fp16.
  const double weights_7b = 13.0 * static_cast<double>(GiB);
  const std::size_t qd = 896, qkv = 128, ffn = 4864, vocab = 151936;
  const std::size_t qwen_params = qwen.layers * (2 * qd * qd + 2 * qkv * qd + 3 * ffn * qd) + vocab * qd;
  const double weights_qwen = static_cast<double>(qwen_params * dtype_size(DType::f16));
  std::printf("Step 3. The context at which one sequence's fp16 cache outgrows the fp16 weights\n\n");
  std::printf("  %-26s %14s %12s %22s\n", "model", "weights", "cache/token", "cache > weights from");
  struct Crossing {
    const KvShape* shape;
    std::size_t bpt;
    double weights;
  };
  for (const Crossing& c : {Crossing{&seven_b, seven_bpt, weights_7b}, Crossing{&qwen, qwen_bpt, weights_qwen},
                            Crossing{&qwen_mha, mha_bpt, weights_qwen}}) {
    // Smallest T with T · bytes/token > weights.
    const auto t = static_cast<std::size_t>(c.weights / static_cast<double>(c.bpt)) + 1;
    check(static_cast<double>(t * c.bpt) > c.weights && static_cast<double>((t - 1) * c.bpt) <= c.weights,
          "crossing context is the first one past the weights");
    std::printf("  %-26s %14s %12s %15s tokens\n", c.shape->name.c_str(), human(c.weights).c_str(),
                human(static_cast<double>(c.bpt)).c_str(), grouped(t).c_str());
  }
  const std::size_t contexts[] = {4096, 32768, 131072};
  std::printf("\n  %-26s %10s %14s %12s\n", "7B class, one sequence", "context", "cache", "of weights");
  for (const std::size_t t : contexts)
    std::printf("  %-26s %10s %14s %11.0f%%\n", "", grouped(t).c_str(), human(static_cast<double>(t * seven_bpt)).c_str(),
                100.0 * static_cast<double>(t * seven_bpt) / weights_7b);
  std::printf("\n  At long contexts the cache, not the model, is what fills memory — and what every decode step\n"
              "  has to read; GQA (and a quantized cache) move the crossing point further out.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::filesystem::path model = default_model();
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "--model" && i + 1 < argc) {
        model = argv[++i];
      } else if (a == "--help" || a == "-h") {
        std::printf("usage: tutorial_kv_memory [--model stories260K.bin]\n");
        return 0;
      } else {
        std::fprintf(stderr, "tutorial_kv_memory: unknown or incomplete argument '%s' (try --help)\n", argv[i]);
        return 2;
      }
    }
    return run(model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
