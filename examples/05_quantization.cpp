// Tutorial 5 — weight quantization: how many bits a weight needs, and where the error comes from.
//
// A decode step reads every weight matrix once to multiply it with one vector, so its time is the
// bytes of the weights divided by the memory bandwidth. Storing a weight in 8 or 4 bits instead of 32
// makes the step 4–8× cheaper — if the rounding error stays small. Symmetric absmax quantization
// stores w ≈ s · q with integers q in [−2^(b−1), 2^(b−1)−1] and one scale s = max|w| / (2^(b−1)−1) per
// *group* of weights: the whole tensor, one output row, or G consecutive weights of a row. NF4
// (QLoRA) replaces the evenly spaced integers by 16 levels at the quantiles of a normal distribution,
// per block of 64 weights. The scale is stored too (fp16 here), so a group of 128 int4 weights costs
// 64 + 2 bytes: 4.125 bits per weight.
//
// The one thing that ruins a shared scale is an outlier: a single |w| = 25σ stretches the step
// s to 25σ/7 for int4, and every ordinary weight of the group rounds to 0 or ±1 step. Smaller groups
// confine the damage to the group that holds the outlier.
//
//   Step 1  load stories260K (llama2.c checkpoint) and list its 35 projection matrices
//   Step 2  per scheme: bits/weight, bytes, mean and worst relative error ‖W − Ŵ‖ / ‖W‖
//   Step 3  the outlier report of the matrix with the worst per-tensor int4 error
//   Step 4  what the schemes mean for a 0.5 B-parameter model (Qwen2.5-0.5B-shaped projections)
//   Step 5  the same error table on synthetic heavy-tailed matrices (Student-t + a few 25σ outliers)
//
// Run:  tutorial_quantization [--model PATH/stories260K.bin]
//       (default: $BARATO_DATA_DIR/stories260K/stories260K.bin, else the repository's ../shared/data)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "barato/quant/absmax.hpp"
#include "barato/quant/metrics.hpp"
#include "barato/quant/nf4.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/simd/ops.hpp"
#include "models/llama2c.hpp"

namespace {

using namespace barato;
using namespace barato::quant;

/// One weight matrix by name and shape (a view into the checkpoint or a synthetic buffer).
struct Matrix {
  std::string name;
  std::size_t rows, cols;
  std::span<const float> w;  // [rows, cols]
};

/// Error summary of one scheme over a set of matrices.
struct SchemeRow {
  std::string scheme;
  std::size_t bytes = 0, weights = 0;
  double mean_err = 0, worst_err = 0;
  std::string worst_name;
  std::vector<double> errors;  // per matrix
};

/// Quantizes every matrix with format F, dequantizes, and measures the relative error.
template <Format F>
SchemeRow evaluate(const std::string& scheme, const std::vector<Matrix>& mats) {
  SchemeRow row;
  row.scheme = scheme;
  std::vector<float> w_hat;
  for (const auto& m : mats) {
    const QuantizedMatrix<F> q(m.rows, m.cols, m.w);
    w_hat.resize(m.rows * m.cols);
    q.dequantize(w_hat);
    const double e = relative_error(m.w, w_hat);
    row.errors.push_back(e);
    row.bytes += q.bytes();
    row.weights += m.rows * m.cols;
    row.mean_err += e / double(mats.size());
    if (e > row.worst_err) {
      row.worst_err = e;
      row.worst_name = m.name;
    }
  }
  return row;
}

/// The six schemes of the tables (fp16 scales), in order of decreasing bits.
std::vector<SchemeRow> all_schemes(const std::vector<Matrix>& mats) {
  return {evaluate<AbsMax<8, PerTensor>>("int8 per-tensor", mats), evaluate<AbsMax<8, PerRow>>("int8 per-row", mats),
          evaluate<AbsMax<4, PerTensor>>("int4 per-tensor", mats), evaluate<AbsMax<4, PerRow>>("int4 per-row", mats),
          evaluate<AbsMax<4, PerGroup<128>>>("int4 group-128", mats), evaluate<Nf4<64>>("nf4 block-64", mats)};
}

void print_table(const std::vector<SchemeRow>& rows) {
  std::printf("  %-16s %10s %12s %12s %12s  %s\n", "scheme", "bits/w", "bytes", "mean err", "worst err", "worst matrix");
  for (const auto& r : rows)
    std::printf("  %-16s %10.3f %12zu %11.3f%% %11.3f%%  %s\n", r.scheme.c_str(), 8.0 * double(r.bytes) / double(r.weights),
                r.bytes, 100 * r.mean_err, 100 * r.worst_err, r.worst_name.c_str());
}

void print_outliers(const Matrix& m) {
  const auto s = outlier_stats(m.w, 6.0);
  std::printf("  %s [%zu x %zu]: mean|w| %.4f  std %.4f  max|w| %.4f  max/std %.1f  beyond 6σ: %zu (%.3f%%)\n",
              m.name.c_str(), m.rows, m.cols, s.mean_abs, s.std, s.max_abs, s.max_over_std, s.beyond, 100 * s.share_beyond);
  const auto s3 = outlier_stats(m.w, 3.0);
  std::printf("  %*s beyond 3σ: %zu (%.3f%%; a normal distribution has 0.27%%)\n", int(m.name.size()), "", s3.beyond,
              100 * s3.share_beyond);
}

/// Bytes of a [rows, cols] matrix in format F (codes + scales), without quantizing anything.
template <Format F>
std::size_t format_bytes(std::size_t rows, std::size_t cols) {
  return rows * CodePacking<F::kCodeBits>::row_bytes(cols) +
         F::granularity::scale_count(rows, cols) * sizeof(typename F::scale_type);
}

/// Read bandwidth of this machine in bytes/s: best of 3 streaming passes over 512 MiB (≫ LLC), 1 thread.
double read_bandwidth() {
  std::vector<float> buf(std::size_t{1} << 27, 1.0f);
  double best = 0;
  float sink = 0;
  for (int p = 0; p < 3; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    sink += simd::dot<float>(buf.data(), buf.data() + buf.size() / 2, buf.size() / 2);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(buf.size() * sizeof(float)) / s);
  }
  return sink > 0 ? best : 0.0;  // the sum keeps the reads observable
}

std::filesystem::path model_path(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string_view(argv[i]) == "--model") return argv[i + 1];
  const char* env = std::getenv("BARATO_DATA_DIR");
  const std::filesystem::path dir = (env != nullptr && *env != '\0') ? env : BARATO_DEFAULT_DATA_DIR;
  return dir / "stories260K" / "stories260K.bin";
}

}  // namespace

int main(int argc, char** argv) try {
  using barato_examples::Llama2cCheckpoint;

  // Step 1 — the model's projection matrices ----------------------------------------------------------
  const auto path = model_path(argc, argv);
  const auto ck = barato_examples::read_llama2c(path);
  const auto& L = ck.layout();
  std::printf("Step 1: %s: dim %zu, FFN %zu, %zu layers, %zu KV dims\n", path.filename().string().c_str(), L.dim,
              L.hidden_dim, L.n_layers, L.kv_dim);
  std::vector<Matrix> mats;
  const struct {
    Llama2cCheckpoint::TensorId id;
    const char* name;
    std::size_t rows, cols;
  } kinds[] = {{Llama2cCheckpoint::kWq, "wq", L.dim, L.dim},        {Llama2cCheckpoint::kWk, "wk", L.kv_dim, L.dim},
               {Llama2cCheckpoint::kWv, "wv", L.kv_dim, L.dim},     {Llama2cCheckpoint::kWo, "wo", L.dim, L.dim},
               {Llama2cCheckpoint::kW1, "w1", L.hidden_dim, L.dim}, {Llama2cCheckpoint::kW2, "w2", L.dim, L.hidden_dim},
               {Llama2cCheckpoint::kW3, "w3", L.hidden_dim, L.dim}};
  std::size_t n_weights = 0;
  for (std::size_t l = 0; l < L.n_layers; ++l)
    for (const auto& k : kinds) {
      mats.push_back({"layer" + std::to_string(l) + "." + k.name, k.rows, k.cols, ck.layer(k.id, l)});
      n_weights += k.rows * k.cols;
    }
  std::printf("        %zu projection matrices, %zu weights, %zu bytes in fp32\n", mats.size(), n_weights, 4 * n_weights);
  std::printf("        (groups restart at every row: with 64 columns a group of 128 is the whole row, and w2's\n"
              "        172 columns hold one group of 128 plus a tail group of 44 with its own scale)\n\n");

  // Step 2 — error per scheme ----------------------------------------------------------------------
  std::printf("Step 2: relative error ‖W − Ŵ‖/‖W‖ over the %zu matrices of stories260K (fp16 scales)\n", mats.size());
  const auto rows = all_schemes(mats);
  print_table(rows);
  std::printf("  -> every halving of the group shrinks the error; at 4 bits a per-tensor scale costs ~%.1fx the error of\n"
              "     group-128, for 0.125 fewer bits per weight.\n\n",
              rows[2].mean_err / rows[4].mean_err);

  // Step 3 — why the worst matrix is the worst -----------------------------------------------------------
  const auto& pt4 = rows[2];
  const auto worst = std::max_element(pt4.errors.begin(), pt4.errors.end()) - pt4.errors.begin();
  const auto best = std::min_element(pt4.errors.begin(), pt4.errors.end()) - pt4.errors.begin();
  std::printf("Step 3: outlier report of the worst matrix under int4 per-tensor (error %.2f%%) and, for contrast,\n"
              "        the best (error %.2f%%)\n",
              100 * pt4.errors[std::size_t(worst)], 100 * pt4.errors[std::size_t(best)]);
  print_outliers(mats[std::size_t(worst)]);
  print_outliers(mats[std::size_t(best)]);
  std::printf("  -> the larger max/std, the more of the int4 grid lies beyond where ordinary weights are.\n\n");

  // Step 4 — model sizes --------------------------------------------------------------------------------
  std::printf("Step 4: a 0.5 B-parameter model (bits/weight measured on Qwen2.5-0.5B-shaped projections:\n"
              "        24 x {896x896, 128x896, 128x896, 896x896, 4864x896, 4864x896, 896x4864})\n");
  const std::size_t shapes[7][2] = {{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}};
  const auto bits = [&](auto f) {
    using F = decltype(f);
    std::size_t b = 0, n = 0;
    for (const auto& s : shapes) {
      b += format_bytes<F>(s[0], s[1]);
      n += s[0] * s[1];
    }
    return 8.0 * double(b) / double(n);
  };
  const struct {
    const char* name;
    double bits;
  } sizes[] = {{"fp32", 32.0},
               {"fp16 / bf16", 16.0},
               {"int8 per-row", bits(AbsMax<8, PerRow>{})},
               {"int4 per-row", bits(AbsMax<4, PerRow>{})},
               {"int4 group-128", bits(AbsMax<4, PerGroup<128>>{})},
               {"int4 group-32", bits(AbsMax<4, PerGroup<32>>{})},
               {"nf4 block-64", bits(Nf4<64>{})}};
  constexpr double kParams = 0.5e9;
  const double bw = read_bandwidth();
  std::printf("  %-16s %10s %12s   %s\n", "format", "bits/w", "MB", "ceiling on decode steps/s");
  for (const auto& s : sizes) {
    const double mb = kParams * s.bits / 8.0 / 1e6;
    std::printf("  %-16s %10.4f %12.1f   %8.1f\n", s.name, s.bits, mb, bw / (mb * 1e6));
  }
  std::printf("  -> the ceiling is this machine's measured read bandwidth (%.1f GB/s, one thread) divided by the\n"
              "     bytes one step streams.\n\n", bw / 1e9);

  // Step 5 — heavy tails -------------------------------------------------------------------------------
  constexpr std::size_t kSynthMats = 8, kR = 256, kC = 1024, kOutliers = 4;
  constexpr double kNu = 4.0, kOutlierSigma = 25.0;
  std::vector<std::vector<float>> store(kSynthMats, std::vector<float>(kR * kC));
  std::vector<Matrix> synth;
  std::mt19937 gen(2024);
  std::student_t_distribution<float> t(kNu);
  std::uniform_int_distribution<std::size_t> pos(0, kR * kC - 1);
  for (std::size_t i = 0; i < kSynthMats; ++i) {
    auto& w = store[i];
    for (auto& v : w) v = 0.02f * t(gen);
    const double sd = outlier_stats(w).std;
    for (std::size_t k = 0; k < kOutliers; ++k) w[pos(gen)] = static_cast<float>((k % 2 ? -1 : 1) * kOutlierSigma * sd);
    synth.push_back({"synthetic" + std::to_string(i), kR, kC, w});
  }
  std::printf("Step 5: %zu synthetic %zux%zu matrices, Student-t (nu = %.0f) weights with %zu outliers at ±%.0fσ each\n",
              kSynthMats, kR, kC, kNu, kOutliers, kOutlierSigma);
  print_outliers(synth[0]);
  const auto srows = all_schemes(synth);
  print_table(srows);
  std::printf("  -> int4 per-tensor collapses (%.0f%% error: the step is %.1fσ, so most weights round to 0); per-row\n"
              "     and per-group scales keep the outliers' damage inside their own row or group.\n",
              100 * srows[2].mean_err, kOutlierSigma / 7.0);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tutorial_quantization: %s\n", e.what());
  return 1;
}
