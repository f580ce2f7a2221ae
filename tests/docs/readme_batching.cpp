#include <barato/batch/batch.hpp>
#include <barato/kv/paged.hpp>
#include <cstdio>
#include <span>

namespace batch = barato::batch;

// Your engine's side of the contract: run a plan (append each chunk's K/V at chunk.pos… of
// chunk.seq through pool.view(seq, layer), return logits for the chunks that want them) and say
// how long it took. Here: a stand-in that appends zeros and prefers token (last + 1) % vocab.
struct MyModel {
  barato::kv::PagedPool<float>& pool;
  std::size_t vocab_size() const { return 32; }
  double run(const batch::StepPlan& plan, std::span<float> logits) {
    std::size_t row = 0;
    for (const batch::SeqChunk& c : plan.chunks) {
      const std::vector<float> kv(c.tokens.size() * pool.n_kv_heads() * pool.head_dim(), 0.0f);
      for (std::size_t l = 0; l < pool.n_layers(); ++l) pool.view(c.seq, l).append(kv, kv);
      if (!c.wants_logits) continue;
      std::span<float> out = logits.subspan(row++ * vocab_size(), vocab_size());
      for (float& x : out) x = 0.0f;
      out[static_cast<std::size_t>(c.tokens.back() + 1) % vocab_size()] = 1.0f;
    }
    return 1e-3;  // seconds this step took
  }
};

int main() {
  barato::kv::PagedPool<float> pool({.n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .block_tokens = 16, .n_blocks = 64});
  batch::Scheduler<barato::kv::PagedPool<float>, batch::Continuous> sched(
      pool, {.max_slots = 4, .token_budget = 64, .prefill_chunk = 32, .max_context = 256});
  for (int i = 0; i < 6; ++i)
    sched.submit({.prompt = {1, 2, 3, static_cast<barato::Token>(4 + i)}, .max_tokens = 8, .arrival = static_cast<std::size_t>(i)});
  MyModel model{pool};
  batch::run(sched, model);  // schedule → model.run → complete, until every request is done
  const batch::Summary s = sched.summary();
  std::printf("%zu requests, %zu steps, %.1f tokens/step, mean latency %.1f ms\n", s.requests, s.steps, s.tokens_per_step,
              s.latency_seconds.mean * 1e3);
  return s.requests == 6 && sched.output(0).size() == 8 ? 0 : 1;
}
