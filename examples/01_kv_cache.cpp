// Tutorial 1 — the KV cache.
//
// A decoder-only transformer produces one token per step. At step n, attention lets the newest
// position look at all n positions so far: its query q_n is compared with every key k_1 … k_n,
// the scores go through a softmax, and the output is the probability-weighted sum of the values
// v_1 … v_n. The keys and values of old positions never change (a causal model does not let
// earlier positions see later ones), so a decoder can keep them: that store is the KV cache.
//
// Without it, a decoder recomputes everything at every step: the keys and values of all n
// positions, and attention for all n positions — an n×n causal score matrix per head per layer.
// With it, a step appends one key/value row and computes one 1×n row of scores. This chapter
// measures the difference for one attention head of dimension d = 64:
//
//   Step 1  a sequence of queries, keys and values (random: they stand in for a model's projections)
//   Step 2  the per-step table: time of one step at context n, recompute vs cached, score bytes
//   Step 3  the totals for generating T tokens from a cold start: O(T³) vs O(T²) multiply-adds
//   Step 4  the identity check: both paths compute the same attention outputs
//   Step 5  (with --plot FILE.svg) a log-log plot of step time against n
//
// The recompute path is attention::recompute (Eigen GEMMs over the causal triangle); the cached
// path is attention::decode over a kv::Contiguous<float> cache (a fused one-pass online-softmax
// kernel). Both run on one core. Costs come from barato/attention/cost.hpp.
//
// Run:  tutorial_kv_cache [--max-n N] [--plot FILE.svg]

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "barato/attention/attend.hpp"
#include "barato/attention/cost.hpp"
#include "barato/attention/recompute.hpp"
#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"
#include "tutorial_support.hpp"

namespace {

using namespace barato;
using barato_examples::grouped;

constexpr std::size_t kHeadDim = 64;
constexpr double kIdentityRelTol = 1e-5;  // fp32: cached vs recomputed, max relative difference

// ---- small helpers ---------------------------------------------------------------------------

/// Median wall-clock seconds of one call of `f`: calls are batched so a batch lasts ≥ 1 ms, and
/// the median of `batches` batches is returned (robust to the odd slow batch).
template <class F>
double median_seconds(F&& f, int batches = 7) {
  using Clock = std::chrono::steady_clock;
  std::size_t reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (std::size_t r = 0; r < reps; ++r) f();
    if (std::chrono::duration<double>(Clock::now() - t0).count() >= 1e-3) break;
    reps *= 2;
  }
  std::vector<double> t(static_cast<std::size_t>(batches));
  for (auto& x : t) {
    const auto t0 = Clock::now();
    for (std::size_t r = 0; r < reps; ++r) f();
    x = std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(reps);
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

/// Seconds in a readable unit.
std::string duration(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  else if (s < 1.0) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

struct Row {
  std::size_t n;
  double recompute_s, cached_s;
};

/// A hand-written log-log SVG of step time against n for both paths.
void write_plot(const std::string& path, const std::vector<Row>& rows) {
  const double w = 640, h = 420, left = 80, right = 20, top = 40, bottom = 60;
  double tmin = 1e300, tmax = 0;
  for (const Row& r : rows) {
    tmin = std::min({tmin, r.recompute_s, r.cached_s});
    tmax = std::max({tmax, r.recompute_s, r.cached_s});
  }
  const double x0 = std::floor(std::log10(static_cast<double>(rows.front().n)));
  const double x1 = std::ceil(std::log10(static_cast<double>(rows.back().n)));
  const double y0 = std::floor(std::log10(tmin)), y1 = std::ceil(std::log10(tmax));
  auto px = [&](double n) { return left + (std::log10(n) - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double t) { return h - bottom - (std::log10(t) - y0) / (y1 - y0) * (h - top - bottom); };
  std::ofstream f(path);
  if (!f) throw io_error("tutorial_kv_cache: cannot write " + path);
  f << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">One decode step, one head, d = "
    << kHeadDim << " (log-log)</text>\n";
  for (double e = x0; e <= x1; e += 1) {  // vertical grid + x labels, one per decade
    const double x = px(std::pow(10.0, e));
    f << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << h - bottom
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << x << "\" y=\"" << h - bottom + 18 << "\" text-anchor=\"middle\">1e"
      << e << "</text>\n";
  }
  for (double e = y0; e <= y1; e += 1) {  // horizontal grid + y labels
    const double y = py(std::pow(10.0, e));
    f << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << w - right << "\" y2=\"" << y
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">1e" << e
      << " s</text>\n";
  }
  f << "<text x=\"" << w / 2 << "\" y=\"" << h - 15 << "\" text-anchor=\"middle\">context length n</text>\n";
  const char* colors[2] = {"#c0392b", "#2471a3"};
  const char* names[2] = {"recompute (n x n scores)", "cached (1 x n scores)"};
  for (int s = 0; s < 2; ++s) {
    f << "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" << colors[s] << "\" points=\"";
    for (const Row& r : rows) f << px(static_cast<double>(r.n)) << "," << py(s == 0 ? r.recompute_s : r.cached_s) << " ";
    f << "\"/>\n";
    for (const Row& r : rows)
      f << "<circle r=\"3\" fill=\"" << colors[s] << "\" cx=\"" << px(static_cast<double>(r.n)) << "\" cy=\""
        << py(s == 0 ? r.recompute_s : r.cached_s) << "\"/>\n";
    f << "<rect x=\"" << left + 12 << "\" y=\"" << top + 8 + 18 * s << "\" width=\"14\" height=\"4\" fill=\""
      << colors[s] << "\"/>\n<text x=\"" << left + 32 << "\" y=\"" << top + 14 + 18 * s << "\">" << names[s]
      << "</text>\n";
  }
  f << "</svg>\n";
}

struct Options {
  std::size_t max_n = 4096;
  std::string plot;
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: tutorial_kv_cache [--max-n N] [--plot FILE.svg] [--help]\n"
               "  --max-n N        largest context of the per-step table (powers of 4 from 16; default 4096)\n"
               "  --plot FILE.svg  write a log-log plot of step time against n for both paths\n"
               "  --help           this text\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw value_error("tutorial_kv_cache: " + a + " expects a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--plot") {
      o.plot = value();
    } else if (a == "--max-n") {
      const std::string v = value();
      std::size_t pos = 0;
      long long x = -1;
      try {
        x = std::stoll(v, &pos);
      } catch (const std::exception&) {
      }
      if (pos != v.size() || x < 16 || x > 16384)
        throw value_error("tutorial_kv_cache: --max-n expects an integer in [16, 16384], got '" + v + "'");
      o.max_n = static_cast<std::size_t>(x);
    } else {
      throw value_error("tutorial_kv_cache: unknown flag '" + a + "' (see --help)");
    }
  }
  return o;
}

int run(const Options& opt) {
  Eigen::setNbThreads(1);  // both paths on one core
  // --plot's file is created now: an unwritable path fails before the measurements, not after them
  if (!opt.plot.empty() && !std::ofstream(opt.plot)) throw io_error("tutorial_kv_cache: cannot write " + opt.plot);
  const std::size_t d = kHeadDim;

  // Step 1 ─ one head's sequence ──────────────────────────────────────────────────────────────
  // Row i of q, k, v is what the model's projections would produce for position i.
  std::vector<std::size_t> contexts;
  for (std::size_t n = 16; n <= opt.max_n; n *= 4) contexts.push_back(n);
  const std::size_t max_n = contexts.back();
  std::mt19937 gen(2024);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(max_n * d), k(max_n * d), v(max_n * d);  // [max_n, d] each
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = dist(gen);
  const attention::Heads head{.n_q = 1, .n_kv = 1, .head_dim = d};

  // Step 2 ─ the per-step table ───────────────────────────────────────────────────────────────
  // Recompute at context n: attention for all n positions from q, k, v (a cache-less decoder also
  // recomputes the projections; we time attention only, which flatters it). Cached at context n:
  // the cache already holds n keys/values, and the newest query attends to them.
  Buffer<float> scores(max_n * max_n);                     // [n, n] — the recompute path's score matrix
  std::vector<float> all_out(max_n * d), step_out(d);      // [n, d], [d]
  std::vector<Row> rows;
  std::printf("Step 2: one decode step of one head (d = %zu), one core\n\n", d);
  std::printf("%8s %14s %14s %10s %20s %14s\n", "n", "recompute", "cached", "speedup", "recompute scores B",
              "cached scores B");
  for (const std::size_t n : contexts) {
    const auto ni = static_cast<Eigen::Index>(n), di = static_cast<Eigen::Index>(d);
    const Eigen::Map<const attention::RowMatrixXf> qn(q.data(), ni, di), kn(k.data(), ni, di), vn(v.data(), ni, di);
    Eigen::Map<attention::RowMatrixXf> on(all_out.data(), ni, di);
    const double t_re = median_seconds([&] { attention::recompute(qn, kn, vn, scores.span(), on); }, n >= 4096 ? 3 : 7);

    kv::Contiguous<float> cache(1, d, n);
    cache.append(std::span<const float>(k.data(), n * d), std::span<const float>(v.data(), n * d));
    const std::span<const float> q_new(q.data() + (n - 1) * d, d);
    const double t_ca = median_seconds([&] { attention::decode(q_new, cache, head, step_out); });

    rows.push_back({n, t_re, t_ca});
    std::printf("%8zu %14s %14s %9.0fx %20s %14s\n", n, duration(t_re).c_str(), duration(t_ca).c_str(), t_re / t_ca,
                grouped(attention::recompute_step_cost(n, d).score_bytes).c_str(),
                grouped(attention::cached_step_cost(n, d).score_bytes).c_str());
  }
  std::printf("\nThe cached step grows linearly with n and keeps a 1 x n score row; recompute grows "
              "quadratically and materialises n x n scores.\n\n");

  // Step 3 ─ a whole generation from a cold start ─────────────────────────────────────────────
  // Generating T tokens runs steps at context 1, 2, …, T. Summing the per-step costs gives closed
  // forms: cached d·T(T+1) multiply-adds, recompute d·T(T+1)(T+2)/3 (attention/cost.hpp).
  std::printf("Step 3: attention multiply-adds to generate T tokens from a cold start (one head, d = %zu)\n\n", d);
  std::printf("%8s %22s %26s %10s\n", "T", "cached MACs", "recompute MACs", "ratio");
  for (const std::uint64_t t : {48, 128, 512, 2048, 8192}) {
    const auto ca = attention::cached_generation_cost(t, d).macs;
    const auto re = attention::recompute_generation_cost(t, d).macs;
    std::printf("%8llu %22s %26s %9.1fx\n", static_cast<unsigned long long>(t), grouped(ca).c_str(),
                grouped(re).c_str(), static_cast<double>(re) / static_cast<double>(ca));
  }
  std::printf("\nWithout a cache, generation costs O(T^3) instead of O(T^2): the ratio is (T+2)/3, "
              "so every doubling of T doubles the waste.\n\n");

  // Step 4 ─ both paths compute the same thing ───────────────────────────────────────────────
  // Generate token by token: append position p's key/value, decode with its query, and compare
  // with row p of one recompute over the whole sequence.
  const std::size_t n_check = std::min<std::size_t>(max_n, 1024);
  {
    const auto ni = static_cast<Eigen::Index>(n_check), di = static_cast<Eigen::Index>(d);
    const Eigen::Map<const attention::RowMatrixXf> qn(q.data(), ni, di), kn(k.data(), ni, di), vn(v.data(), ni, di);
    Eigen::Map<attention::RowMatrixXf> on(all_out.data(), ni, di);
    attention::recompute(qn, kn, vn, scores.span(), on);
  }
  kv::Contiguous<float> cache(1, d, n_check);
  double max_abs = 0, max_ref = 0;
  for (std::size_t p = 0; p < n_check; ++p) {
    cache.append(std::span<const float>(k.data() + p * d, d), std::span<const float>(v.data() + p * d, d));
    attention::decode(std::span<const float>(q.data() + p * d, d), cache, head, step_out);
    for (std::size_t c = 0; c < d; ++c) {
      max_abs = std::max(max_abs, std::abs(double(step_out[c]) - double(all_out[p * d + c])));
      max_ref = std::max(max_ref, std::abs(double(all_out[p * d + c])));
    }
  }
  const double max_rel = max_abs / max_ref;
  const bool ok = max_rel <= kIdentityRelTol;
  std::printf("Step 4: identity check over %zu generated positions (cached step p vs row p of one recompute)\n\n",
              n_check);
  std::printf("%24s %14s\n%24.3e %14.3e   (tolerance %.0e: %s)\n", "max abs difference", "max rel diff", max_abs,
              max_rel, kIdentityRelTol, ok ? "identical up to fp32 rounding" : "MISMATCH");
  std::printf("\nThe cache changes the cost, not the result: both paths agree to fp32 rounding "
              "(relative difference vs the largest output).\n");

  // Step 5 ─ the plot ─────────────────────────────────────────────────────────────────────────
  if (!opt.plot.empty()) {
    write_plot(opt.plot, rows);
    std::printf("\nStep 5: wrote %s (log-log: the recompute line has slope ~2, the cached line ~1).\n",
                opt.plot.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const barato::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
