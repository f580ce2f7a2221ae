// bench_batching — the batched model step (examples/models/llama_batch.hpp) on the Qwen2.5-0.5B
// shape (random weights, fixed seed), one thread unless stated:
//
//   BM_step/<format>/B:<B>   one decode step for B sequences, each holding a 64-token cache in one
//                            kv::PagedPool (decode_batch.hpp): the weights are read once per step.
//     tokens_per_second        B / step time (throughput)
//     step_ms                  per-request latency of the step
//     weight_bytes             bytes of the matrices one step streams (constant in B)
//     x_vs_B1                  throughput ÷ the same format's B = 1 throughput (measured in this run)
//     vs_bandwidth_bound       (weight_bytes / DRAM probe) ÷ step time: 1.0 is the roofline of a
//                              memory-bound step (the B = 1 target is ≥ 0.85)
//     vs_bound_paired          B = 1: the same ratio per step against a 256 MiB probe pass run just
//                              before it, median over steps (bench::PairedProbe: robust to drift)
//   BM_prefill_0_5B/<format>   P = 256 prompt tokens as one step (tokens/s; int8-row ≥ 2× fp32 is the target)
//   BM_step_w8a8, BM_prefill_0_5B_w8a8: the same with W8A8 (int8 activations per token), the
//                            8-bit-activation reference for the integer rows
//   BM_step_q8_0, BM_step_q4_0: ggml's formats (int8 activations per 32 columns, quant/vnni_ggml.hpp)
//
// Weights: fp32 (1.98 GB of matrices), int8-row and W8A8 (0.50 GB), q8_0 (0.53 GB), int4-g128 and q4_0
// (0.28 GB), built once per process.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "barato/quant/activation.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/linear.hpp"
#include "dram_probe.hpp"
#include "models/decode_batch.hpp"
#include "models/llama_batch.hpp"
#include "models/shapes.hpp"

namespace {

namespace bx = barato_examples;
namespace quant = barato::quant;
using Clock = std::chrono::steady_clock;

const bx::LlamaWeights<barato::nn::DenseLinear>& fp32_weights() {
  static const auto w = bx::random_llama_weights(bx::qwen25_05b_shape(4096), 42);
  return w;
}
template <class F>
const bx::LlamaWeights<quant::Linear<F>>& quant_weights() {
  static const auto w = bx::convert_weights(fp32_weights(), [](const barato::nn::DenseLinear& d) {
    return quant::Linear<F>(d.rows(), d.cols(), d.weights());
  });
  return w;
}

/// W8A8 (int8-row weights × int8 activations per token, quant/activation.hpp): the 8-bit-activation
/// reference point for the integer formats' compute-bound rows.
const bx::LlamaWeights<quant::W8A8Linear<>>& w8a8_weights() {
  static const auto w = bx::convert_weights(fp32_weights(), [](const barato::nn::DenseLinear& d) {
    return quant::W8A8Linear<>(d.rows(), d.cols(), d.weights());
  });
  return w;
}

std::map<std::string, double>& b1_throughput() {
  static std::map<std::string, double> m;
  return m;
}

template <class Linear>
void decode_step(benchmark::State& state, const bx::LlamaWeights<Linear>& w, const std::string& name) {
  const auto B = static_cast<std::size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  constexpr std::size_t kContext = 64;
  bx::DecodeBatch<float> batch(w.config, B, kContext);
  bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&batch.pool()},
                                                        {.threads = threads, .max_tokens = B, .max_chunks = B, .max_positions = kContext + 1});
  std::vector<float> logits(B * w.config.vocab_size);
  const auto plan = batch.plan();
  const double dram = barato::bench::dram_bandwidth(threads);
  model.step(plan, logits);  // warm-up
  batch.rewind();
  const double wbytes = static_cast<double>(bx::matrix_bytes(w));
  std::optional<barato::bench::PairedProbe> adjacent;  // B = 1 streams its weights: a probe pass before each step
  if (B == 1) adjacent.emplace(threads);
  double timed = 0.0;
  std::size_t steps = 0;
  for (auto _ : state) {
    if (adjacent) adjacent->probe();  // outside the manual timing
    const auto t0 = Clock::now();
    model.step(plan, logits);
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(el);
    timed += el;
    ++steps;
    if (adjacent) adjacent->record(wbytes / el);
    batch.rewind();
  }
  const double per_step = timed / static_cast<double>(steps);
  const double tps = static_cast<double>(B) / per_step;
  const std::string key = name + "/" + std::to_string(threads);
  if (B == 1) b1_throughput()[key] = tps;
  state.counters["tokens_per_second"] = tps;
  state.counters["step_ms"] = per_step * 1e3;
  state.counters["weight_bytes"] = wbytes;
  state.counters["dram_GBps"] = dram / 1e9;
  state.counters["vs_bandwidth_bound"] = (wbytes / dram) / per_step;
  if (adjacent) state.counters["vs_bound_paired"] = adjacent->median();
  if (auto it = b1_throughput().find(key); it != b1_throughput().end()) state.counters["x_vs_B1"] = tps / it->second;
}

template <class Linear>
void prefill(benchmark::State& state, const bx::LlamaWeights<Linear>& w) {
  constexpr std::size_t P = 256;
  barato::kv::PagedPool<float> pool({.n_layers = w.config.n_layers, .n_kv_heads = w.config.n_kv_heads,
                                     .head_dim = w.config.head_dim, .block_tokens = 16, .n_blocks = P / 16});
  const barato::kv::SeqId s = pool.add_sequence();
  bx::BatchedLlama<bx::PoolCaches<float>, Linear> model(w, bx::PoolCaches<float>{&pool},
                                                        {.threads = 1, .max_tokens = P, .max_chunks = 1, .max_positions = P});
  std::vector<barato::Token> tokens(P);
  for (std::size_t i = 0; i < P; ++i) tokens[i] = static_cast<barato::Token>((i * 7919) % w.config.vocab_size);
  const barato::batch::SeqChunk chunk{.seq = s, .pos = 0, .tokens = tokens, .wants_logits = true};
  const barato::batch::StepPlan plan{.chunks = {&chunk, 1}, .prefill_tokens = P, .logits_rows = 1};
  std::vector<float> logits(w.config.vocab_size);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    model.step(plan, logits);
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    pool.truncate(s, 0);
  }
  state.counters["tokens_per_second"] = benchmark::Counter(static_cast<double>(P * state.iterations()), benchmark::Counter::kIsRate);
}

void BM_step_fp32(benchmark::State& s) { decode_step(s, fp32_weights(), "fp32"); }
void BM_step_int8_row(benchmark::State& s) { decode_step(s, quant_weights<quant::Int8PerRow<>>(), "int8_row"); }
void BM_step_int4_g128(benchmark::State& s) { decode_step(s, quant_weights<quant::Int4Group<128>>(), "int4_g128"); }
void BM_step_q8_0(benchmark::State& s) { decode_step(s, quant_weights<quant::GgmlQ8_0>(), "q8_0"); }
void BM_step_q4_0(benchmark::State& s) { decode_step(s, quant_weights<quant::GgmlQ4_0>(), "q4_0"); }
void BM_step_w8a8(benchmark::State& s) { decode_step(s, w8a8_weights(), "w8a8"); }
void BM_prefill_0_5B_fp32(benchmark::State& s) { prefill(s, fp32_weights()); }
void BM_prefill_0_5B_int8_row(benchmark::State& s) { prefill(s, quant_weights<quant::Int8PerRow<>>()); }
void BM_prefill_0_5B_w8a8(benchmark::State& s) { prefill(s, w8a8_weights()); }

void batch_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "threads"})->UseManualTime()->Unit(benchmark::kMillisecond);
  for (const int B : {1, 2, 4, 8, 16, 32, 64}) b->Args({B, 1});
}

}  // namespace

BENCHMARK(BM_step_fp32)->Apply(batch_sizes);
BENCHMARK(BM_step_int8_row)->Apply(batch_sizes);
BENCHMARK(BM_step_int4_g128)->Apply(batch_sizes);
BENCHMARK(BM_step_q8_0)->Apply(batch_sizes);
BENCHMARK(BM_step_q4_0)->Apply(batch_sizes);
BENCHMARK(BM_step_w8a8)->Apply(batch_sizes);
BENCHMARK(BM_prefill_0_5B_fp32)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prefill_0_5B_int8_row)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_prefill_0_5B_w8a8)->UseManualTime()->Unit(benchmark::kMillisecond);
