// Tutorial 6 — activation outliers in the residual stream.
//
// Weights are not the only thing one might quantize: W8A8 schemes also round the activations that
// enter each matrix product to int8, with one scale per token. Trained transformers make that hard:
// a few dimensions of the residual stream h carry values much larger than the rest (Dettmers et al.,
// LLM.int8(), 2022; Bondarenko et al., 2021), and a shared absmax scale set by them leaves only a
// handful of int8 levels for every other dimension. This chapter looks at that in stories260K:
//
//   Step 1  run the model on a prompt (held-out TinyStories text) and capture h after every layer
//           through the model's residual-stream observer
//   Step 2  per layer: per-dimension max |h|; the largest dimensions against the median one
//   Step 3  a text histogram (log2 bins) of those per-dimension maxima, all layers together
//   Step 4  with one int8 scale for a layer's whole tensor (all positions, all dimensions): how many
//           distinct levels each dimension actually uses; and again after excluding the top-k
//           outlier dimensions from the scale (what LLM.int8's mixed decomposition does)
//
// Run:  tutorial_outliers [--tokens N (default 256)] [--top-k K (default 4)]
//       data: $BARATO_DATA_DIR (stories260K/, text/), else the repository's ../shared/data

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "barato/kv/contiguous.hpp"
#include "barato/quant/metrics.hpp"
#include "barato/quant/outliers.hpp"
#include "models/cli.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"

namespace {

using namespace barato;
using namespace barato_examples;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// Distinct int8 levels round(h / s) of each dimension over all positions, for h [n, dim], scale s.
std::vector<std::size_t> distinct_levels(const std::vector<float>& h, std::size_t dim, float s) {
  std::vector<std::size_t> out(dim);
  for (std::size_t d = 0; d < dim; ++d) {
    std::set<int> levels;
    for (std::size_t t = 0; t < h.size() / dim; ++t)
      levels.insert(std::clamp(static_cast<int>(std::nearbyint(h[t * dim + d] / s)), -127, 127));
    out[d] = levels.size();
  }
  return out;
}

int tutorial_main(int argc, const char* const* argv) {
  const char* env = std::getenv("BARATO_DATA_DIR");
  const std::filesystem::path data = (env != nullptr && *env != '\0') ? env : BARATO_DEFAULT_DATA_DIR;
  std::size_t n_tokens = 256, top_k = 4;
  Cli cli("tutorial_outliers", "Activation outliers in stories260K's residual stream and what they do to int8 activation scales.");
  cli.option("--tokens", n_tokens, "N", "positions of held-out TinyStories text to run")
      .option("--top-k", top_k, "K", "outlier dimensions excluded from the int8 scale in step 4")
      .epilog("data: $BARATO_DATA_DIR (stories260K/, text/), else " BARATO_DEFAULT_DATA_DIR);
  if (!cli.parse(argc, argv)) return 0;

  // Step 1 — capture the residual stream ----------------------------------------------------------------
  const auto weights = load_llama2c(data / "stories260K" / "stories260K.bin");
  const Tokenizer tok = load_tokenizer(data / "stories260K" / "tok512.bin", weights.config.vocab_size);
  std::ifstream in(data / "text" / "tinystories-valid-sample.txt", std::ios::binary);
  require<io_error>(in.good(), "cannot open ", (data / "text" / "tinystories-valid-sample.txt").string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min<std::size_t>(text.size(), n_tokens * 8));
  std::vector<Token> ids = tok.encode(text, true);
  ids.resize(std::min({ids.size(), n_tokens, weights.config.seq_len}));
  const std::size_t L = weights.config.n_layers, D = weights.config.dim, N = ids.size();

  std::vector<std::vector<float>> h(L);  // per layer [N, D], in position order
  Llama<kv::Contiguous<float>> model(weights, make_contiguous_caches<float>(weights.config, N), {.threads = 1});
  model.set_observer([&](std::size_t layer, std::span<const float> x) { h[layer].insert(h[layer].end(), x.begin(), x.end()); });
  std::vector<float> logits(model.vocab_size());
  model.forward_last(ids, logits);
  std::printf("Step 1: stories260K (dim %zu, %zu layers) on the first %zu tokens of tinystories-valid-sample.txt;\n"
              "        captured h after every layer: %zu x [%zu positions, %zu dims]\n\n", D, L, N, L, N, D);

  // Step 2 — per-dimension max |h| per layer ------------------------------------------------------------
  std::vector<std::vector<double>> dmax(L, std::vector<double>(D, 0.0));  // [layer][dim]
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < N * D; ++i) dmax[l][i % D] = std::max(dmax[l][i % D], std::fabs(double(h[l][i])));
  std::printf("Step 2: per-dimension max |h| per layer\n");
  std::printf("  %-6s %10s %10s %9s %8s  %s\n", "layer", "median", "max", "max/med", "dims>6", "largest dimensions (dim: max|h|)");
  double ratio_lo = 1e30, ratio_hi = 0;
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<std::size_t> order(D);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return dmax[l][a] > dmax[l][b]; });
    const double med = median(dmax[l]);
    const auto beyond = std::count_if(dmax[l].begin(), dmax[l].end(), [](double m) { return m > quant::kOutlierThreshold; });
    std::printf("  %-6zu %10.3f %10.3f %9.1f %8td  ", l, med, dmax[l][order[0]], dmax[l][order[0]] / med, beyond);
    ratio_lo = std::min(ratio_lo, dmax[l][order[0]] / med);
    ratio_hi = std::max(ratio_hi, dmax[l][order[0]] / med);
    for (std::size_t k = 0; k < std::min<std::size_t>(4, D); ++k) std::printf("%zu: %.2f  ", order[k], dmax[l][order[k]]);
    const auto st = quant::outlier_stats(h[l], 6.0);
    std::printf("| values beyond 6σ: %zu (%.3f%%)\n", st.beyond, 100 * st.share_beyond);
  }
  std::printf("  -> the largest dimension is %.1f-%.1fx the median one; dims>6 counts dimensions past LLM.int8's threshold\n"
              "     (%.1f). A 260K-parameter model has mild outliers: LLM.int8 reports them growing with scale (6.7B+).\n\n",
              ratio_lo, ratio_hi, double(quant::kOutlierThreshold));

  // Step 3 — histogram of the per-dimension maxima ------------------------------------------------------
  std::printf("Step 3: histogram of per-dimension max |h| (all %zu layers x %zu dims), log2 bins\n", L, D);
  int lo_bin = 1000, hi_bin = -1000;
  for (const auto& v : dmax)
    for (double m : v) {
      const int b = static_cast<int>(std::floor(std::log2(std::max(m, 1e-30))));
      lo_bin = std::min(lo_bin, b);
      hi_bin = std::max(hi_bin, b);
    }
  std::vector<std::size_t> counts(static_cast<std::size_t>(hi_bin - lo_bin + 1), 0);
  for (const auto& v : dmax)
    for (double m : v) ++counts[static_cast<std::size_t>(static_cast<int>(std::floor(std::log2(std::max(m, 1e-30)))) - lo_bin)];
  const std::size_t peak = *std::max_element(counts.begin(), counts.end());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const int b = lo_bin + static_cast<int>(i);
    std::printf("  [%8.3f, %8.3f) %4zu %s\n", std::ldexp(1.0, b), std::ldexp(1.0, b + 1), counts[i],
                std::string(counts[i] * 50 / std::max<std::size_t>(peak, 1), '#').c_str());
  }
  std::printf("\n");

  // Step 4 — int8 levels under a tensor-wide scale ------------------------------------------------------
  std::printf("Step 4: distinct int8 levels per dimension with one scale per layer tensor (of 255 possible),\n"
              "        then with the top-%zu dimensions excluded from the scale (kept in floating point)\n", top_k);
  std::printf("  %-6s %10s %12s %12s   %10s %12s %12s\n", "layer", "scale", "median lv", "min lv", "scale-k", "median lv-k",
              "min lv-k");
  for (std::size_t l = 0; l < L; ++l) {
    std::vector<std::size_t> order(D);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return dmax[l][a] > dmax[l][b]; });
    const double all_max = dmax[l][order[0]];
    const double rest_max = top_k < D ? dmax[l][order[top_k]] : all_max;
    const float s_all = static_cast<float>(all_max / 127.0), s_rest = static_cast<float>(rest_max / 127.0);
    const auto lv_all = distinct_levels(h[l], D, s_all), lv_rest = distinct_levels(h[l], D, s_rest);
    std::vector<double> a, r;  // over the dimensions that stay int8 in both cases
    for (std::size_t k = top_k; k < D; ++k) {
      a.push_back(double(lv_all[order[k]]));
      r.push_back(double(lv_rest[order[k]]));
    }
    std::printf("  %-6zu %10.5f %12.0f %12.0f   %10.5f %12.0f %12.0f\n", l, double(s_all), median(a),
                *std::min_element(a.begin(), a.end()), double(s_rest), median(r), *std::min_element(r.begin(), r.end()));
  }
  std::printf("  -> (levels counted over the %zu dimensions that stay int8) excluding %zu outlier dimensions\n"
              "     shrinks the step and gives every other dimension more of the int8 grid.\n", D - std::min(top_k, D), top_k);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("tutorial_outliers", [&] { return tutorial_main(argc, argv); });
}
