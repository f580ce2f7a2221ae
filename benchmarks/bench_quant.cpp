// bench_quant: quantized GEMV (y = Ŵ x from packed weights) per scheme, against fp32 Eigen GEMV and a
// DRAM read probe measured in the same binary, on 1 and 2 threads.
//
//  - BM_probe:        streaming read of a 1 GiB buffer (the bandwidth a decode step cannot beat).
//  - BM_gemv_4096:    one 4096 × 4096 matrix per scheme (32–64 MiB in int8/fp32: partly cache-resident).
//  - BM_decode_0_5B:  one decode step's projections of a Qwen2.5-0.5B-shaped model: 24 layers × 7
//                     matrices (q 896×896, k 128×896, v 128×896, o 896×896, gate/up 4864×896,
//                     down 896×4864) = 168 matrices, 357.8 M weights with random values, each matrix
//                     a separate allocation (fp32: 1.43 GB, int8: 358 MB, int4: 185 MB ≫ 32 MiB LLC).
//
//  - BM_gemv_cached:  one 512 × 1024 matrix (cache-resident): the kernels' arithmetic throughput.
//
// Counters: weight_GBps (weight bytes streamed per second), Gweights_per_s, of_probe (weight_GBps /
// probe bandwidth on the same thread count), bits_per_weight; BM_decode_0_5B also of_probe_paired
// (the median over passes of the pass's bandwidth / a 256 MiB probe pass run just before it: robust
// to the host's bandwidth drifting during the run) and paired_probe_GBps (those probe passes' median).
// Schemes: fp32 (Eigen), absmax int8 / int4 per tensor / row / group, ggml's Q4_0 / Q8_0, NF4, and
// scale and offset per group of 32 over int8 codes (int8_g32_offset: how the examples hold GGUF's
// Q5_1 / Q5_K) or Q4_0F32's 4-bit codes (q4_f32_offset: GGUF's Q4_1 / Q4_K).
// JSON: --benchmark_format=json.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/nf4.hpp"
#include "barato/quant/offset_linear.hpp"
#include "dram_probe.hpp"
#include "timing.hpp"

namespace {

using namespace barato;

// ---- model shapes ------------------------------------------------------------------------------------

struct Shape {
  std::size_t rows, cols;
};
/// The 7 projections of one Qwen2.5-0.5B layer (hidden 896, 2 KV heads × 64, FFN 4864).
const std::vector<Shape> kQwen05BLayer = {{896, 896}, {128, 896}, {128, 896}, {896, 896},
                                          {4864, 896}, {4864, 896}, {896, 4864}};
constexpr std::size_t kQwen05BLayers = 24;

/// Cheap deterministic "normal-ish" weights (sum of 4 uniforms), scaled like trained weights.
std::vector<float> random_weights(std::size_t n, std::uint32_t seed) {
  std::vector<float> w(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
  for (auto& v : w) {
    float acc = 0;
    for (int k = 0; k < 4; ++k) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      acc += static_cast<float>(s >> 40) / static_cast<float>(1u << 24) - 0.5f;
    }
    v = 0.02f * acc;
  }
  return w;
}


// ---- DRAM read probe ---------------------------------------------------------------------------------

/// Best of 5 passes over 1 GiB on `threads` threads, in bytes/s; measured once per thread count (the
/// probe the other benchmarks use, benchmarks/dram_probe.hpp).
double probe_bandwidth(int threads) { return bench::dram_bandwidth(threads); }

void BM_probe(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const double bw = probe_bandwidth(threads);
  for (auto _ : state) benchmark::DoNotOptimize(bw);
  state.counters["probe_GBps"] = bw / 1e9;
}
BENCHMARK(BM_probe)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

// ---- a set of matrices in one format -----------------------------------------------------------------

/// fp32 dense matrix (the Eigen baseline): y = W x with a row-major Eigen map; rows split over threads.
struct DenseF32 {
  std::size_t r, c;
  Buffer<float> w;
  DenseF32(std::size_t rows, std::size_t cols, std::span<const float> v) : r(rows), c(cols), w(rows * cols) {
    std::copy(v.begin(), v.end(), w.begin());
  }
  [[nodiscard]] std::size_t bytes() const { return w.bytes(); }
  void apply(const float* x, float* y, int threads) const {
    using M = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
    parallel_for(
        r, threads,
        [&](std::size_t lo, std::size_t hi) {
          const M m(w.data() + lo * c, static_cast<Eigen::Index>(hi - lo), static_cast<Eigen::Index>(c));
          Eigen::Map<Eigen::VectorXf>(y + lo, static_cast<Eigen::Index>(hi - lo)).noalias() =
              m * Eigen::Map<const Eigen::VectorXf>(x, static_cast<Eigen::Index>(c));
        },
        16);
  }
};

template <class F>
struct QuantLayer {
  quant::Linear<F> lin;
  QuantLayer(std::size_t rows, std::size_t cols, std::span<const float> v) : lin(rows, cols, v) {}
  explicit QuantLayer(quant::Linear<F>&& l) : lin(std::move(l)) {}
  [[nodiscard]] std::size_t bytes() const { return lin.bytes(); }
  void apply(const float* x, float* y, int threads) const {
    lin.apply(std::span<const float>(x, lin.cols()), std::span<float>(y, lin.rows()), threads);
  }
};

/// Asymmetric groups of 32 as the examples load GGUF's offset types (quant::OffsetLinear): integers u
/// 0…15 with an fp32 scale and offset per group, w ≈ s·u + lo (lo = the group's min, s = range / 15),
/// held as F's codes: int8 codes u (Q5_1 / Q5_K's path; Q4_1 / Q4_K's before 2026-12-07) or Q4_0F32's
/// centred 4-bit codes with the offset lo + 8s (Q4_1 / Q4_K's). The offset is lo − s · level(code 0).
template <class F>
struct OffsetG32 {
  std::optional<quant::OffsetLinear<F>> lin;
  OffsetG32(std::size_t rows, std::size_t cols, std::span<const float> v) {
    using P = quant::packing_of<F>;
    const std::size_t groups = (cols + 31) / 32;
    Buffer<std::uint8_t> codes(rows * P::row_bytes(cols));
    std::fill(codes.data(), codes.data() + codes.size(), std::uint8_t{0});
    Buffer<float> scales(rows * groups);
    std::vector<float> offsets(rows * groups);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t g = 0; g < groups; ++g) {
        const std::size_t j0 = g * 32, j1 = std::min(cols, j0 + 32);
        const auto [lo, hi] = std::minmax_element(v.begin() + static_cast<std::ptrdiff_t>(r * cols + j0),
                                                  v.begin() + static_cast<std::ptrdiff_t>(r * cols + j1));
        const float s = (*hi - *lo) / 15.0f;
        scales[r * groups + g] = s;
        offsets[r * groups + g] = *lo - s * F::level(0);
        for (std::size_t j = j0; j < j1; ++j)
          P::set(codes.data() + r * P::row_bytes(cols), j, cols,
                 static_cast<std::uint8_t>(s > 0 ? std::min(15.0f, std::round((v[r * cols + j] - *lo) / s)) : 0.0f));
      }
    lin.emplace(quant::QuantizedMatrix<F>(rows, cols, std::move(codes), std::move(scales)), offsets);
  }
  [[nodiscard]] std::size_t bytes() const { return lin->bytes(); }
  void apply(const float* x, float* y, int threads) const {
    lin->apply(std::span<const float>(x, lin->cols()), std::span<float>(y, lin->rows()), threads);
  }
};

/// The 168 matrices of the 0.5B pass (or one 4096² matrix), built once per scheme; the previous
/// scheme's set is freed first so at most one set lives at a time.
template <class L>
struct MatrixSet {
  std::vector<std::unique_ptr<L>> mats;
  std::vector<Shape> shapes;
  std::size_t bytes = 0, weights = 0;
};

std::shared_ptr<void> g_current;  // the live set
std::string g_current_key;

template <class L>
MatrixSet<L>& matrix_set(const std::string& key, const std::vector<Shape>& layer, std::size_t layers) {
  if (g_current_key != key) {
    g_current.reset();
    auto set = std::make_shared<MatrixSet<L>>();
    for (std::size_t s = 0; s < layer.size(); ++s) {
      const auto w = random_weights(layer[s].rows * layer[s].cols, static_cast<std::uint32_t>(s + 1));
      for (std::size_t l = 0; l < layers; ++l) {
        // each layer quantizes a cheap perturbation of the same random matrix (distinct memory)
        set->mats.push_back(std::make_unique<L>(layer[s].rows, layer[s].cols, w));
        set->shapes.push_back(layer[s]);
        set->bytes += set->mats.back()->bytes();
        set->weights += layer[s].rows * layer[s].cols;
      }
    }
    g_current = set;
    g_current_key = key;
  }
  return *static_cast<MatrixSet<L>*>(g_current.get());
}

/// `paired`: the set streams from DRAM, so each pass also gets a probe pass just before it (untimed)
/// and `of_probe_paired` reports the median of the adjacent ratios (see bench::PairedProbe).
template <class L>
void run_set(benchmark::State& state, const std::string& key, const std::vector<Shape>& layer, std::size_t layers,
             bool paired = false) {
  const int threads = static_cast<int>(state.range(0));
  auto& set = matrix_set<L>(key, layer, layers);
  const double probe = probe_bandwidth(threads);
  std::size_t max_dim = 0;
  for (const auto& s : set.shapes) max_dim = std::max({max_dim, s.rows, s.cols});
  std::vector<float> x = random_weights(max_dim, 99), y(max_dim);
  std::optional<bench::PairedProbe> adjacent;
  if (paired) adjacent.emplace(threads);
  // thread_seconds() is a system call (CLOCK_THREAD_CPUTIME_ID: 1.3 µs on a 2026-12 VM), so it stays
  // out of the timed pass: inside it, its two calls added ≈ 2 µs to the cached set's 7–9 µs pass. The
  // CPU time is read around the whole loop, or around each pass when probe passes run between them.
  double seconds = 0, cpu_seconds = 0;
  const double c_loop = barato_examples::thread_seconds();
  for (auto _ : state) {
    if (adjacent) {
      state.PauseTiming();
      adjacent->probe();
      state.ResumeTiming();
    }
    const double c0 = adjacent ? barato_examples::thread_seconds() : 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& m : set.mats) m->apply(x.data(), y.data(), threads);
    benchmark::DoNotOptimize(y.data());
    const double pass = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (adjacent) cpu_seconds += barato_examples::thread_seconds() - c0;
    seconds += pass;
    if (adjacent) adjacent->record(double(set.bytes) / pass);
  }
  if (!adjacent) cpu_seconds = barato_examples::thread_seconds() - c_loop;
  if (adjacent) {
    state.counters["of_probe_paired"] = adjacent->median();
    state.counters["paired_probe_GBps"] = adjacent->probe_median() / 1e9;
  }
  const double it = static_cast<double>(state.iterations());
  const double gbps = double(set.bytes) * it / seconds / 1e9;
  state.counters["weight_GBps"] = gbps;
  state.counters["Gweights_per_s"] = double(set.weights) * it / seconds / 1e9;
  state.counters["of_probe"] = gbps * 1e9 / probe;
  state.counters["bits_per_weight"] = 8.0 * double(set.bytes) / double(set.weights);
  state.counters["ms_per_pass"] = 1e3 * seconds / it;
  // On a shared machine the wall clock includes time the thread was descheduled; on one thread the
  // thread's CPU time does not (it still includes memory stalls).
  if (threads == 1) state.counters["Gweights_per_cpu_s"] = double(set.weights) * it / cpu_seconds / 1e9;
  state.SetBytesProcessed(static_cast<std::int64_t>(double(set.bytes) * it));
}

template <class L>
void BM_decode_0_5B(benchmark::State& state, const char* name) {
  run_set<L>(state, std::string("0.5B/") + name, kQwen05BLayer, kQwen05BLayers, /*paired=*/true);
}
/// 512 × 1024: 0.25–2 MiB, resident in L2/L3 — the kernels' arithmetic speed without DRAM.
template <class L>
void BM_gemv_cached(benchmark::State& state, const char* name) {
  run_set<L>(state, std::string("cached/") + name, {{512, 1024}}, 1);
}
template <class L>
void BM_gemv_4096(benchmark::State& state, const char* name) {
  run_set<L>(state, std::string("4096/") + name, {{4096, 4096}}, 1);
}

using quant::AbsMax;
using quant::Nf4;
using quant::PerGroup;
using quant::PerRow;
using quant::PerTensor;

using Int8Tensor = QuantLayer<AbsMax<8, PerTensor>>;
using Int8Row = QuantLayer<AbsMax<8, PerRow>>;
using Int8G32 = QuantLayer<AbsMax<8, PerGroup<32>, float>>;  // llama2.c Q8_0 layout
using Int8G16 = QuantLayer<AbsMax<8, PerGroup<16>, float>>;  // GGUF Q6_K / Q3_K as the examples load them
using Int4Tensor = QuantLayer<AbsMax<4, PerTensor>>;
using Int4Row = QuantLayer<AbsMax<4, PerRow>>;
using Int4G128 = QuantLayer<AbsMax<4, PerGroup<128>>>;
using Nf4B64 = QuantLayer<Nf4<64>>;
using GgmlQ8 = QuantLayer<quant::GgmlQ8_0>;  // ggml's Q8_0: int8, fp16 scale per 32 (8.5 bits)
using GgmlQ4 = QuantLayer<quant::GgmlQ4_0>;  // ggml's Q4_0: 4-bit, fp16 scale per 32 (4.5 bits)

template <class L>
void register_scheme(const char* name) {
  benchmark::RegisterBenchmark((std::string("BM_gemv_cached/") + name).c_str(), BM_gemv_cached<L>, name)
      ->Arg(1)->Unit(benchmark::kMicrosecond)->MinTime(0.3);
  benchmark::RegisterBenchmark((std::string("BM_gemv_4096/") + name).c_str(), BM_gemv_4096<L>, name)
      ->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(0.5);
  benchmark::RegisterBenchmark((std::string("BM_decode_0_5B/") + name).c_str(), BM_decode_0_5B<L>, name)
      ->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(1.0);
}

}  // namespace

int main(int argc, char** argv) {
  register_scheme<DenseF32>("fp32_eigen");
  register_scheme<Int8Tensor>("int8_tensor");
  register_scheme<Int8Row>("int8_row");
  register_scheme<Int8G32>("int8_g32_fp32scale");
  register_scheme<Int8G16>("int8_g16_fp32scale");
  register_scheme<OffsetG32<AbsMax<8, PerGroup<32>, float>>>("int8_g32_offset");
  register_scheme<OffsetG32<quant::Q4_0F32>>("q4_f32_offset");
  register_scheme<Int4Tensor>("int4_tensor");
  register_scheme<Int4Row>("int4_row");
  register_scheme<Int4G128>("int4_g128");
  register_scheme<GgmlQ4>("q4_0");
  register_scheme<GgmlQ8>("q8_0");
  register_scheme<Nf4B64>("nf4");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
