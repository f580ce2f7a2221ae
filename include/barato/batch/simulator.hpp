#pragma once
/// \file
/// `batch::SimExecutor`: an executor (batch/executor.hpp) that runs step plans without a model, so the
/// real scheduler can be measured and tested in milliseconds. It does everything a model executor
/// does to the pool — appends one K/V row per token, head and layer through `pool.view(seq, layer)` —
/// and returns logits from a deterministic fake model, and charges each step what a cost model
/// (batch/cost.hpp) says.
///
/// The fake model: the state after the tokens t_0 … t_p of a sequence is the chain hash
/// h_p = mix(h_{p−1}, t_p) (h_{−1} = a constant), so the next-token logits depend on the whole
/// history. h_p is **stored in the K row of position p** (three 21-bit pieces as exact floats), and
/// a chunk starting at pos reads h_{pos−1} back from the pool: a prefix hit on the wrong block, a
/// lost or misplaced append, or a wrong recompute changes every later token. A pool with a tiny head
/// dim (≥ 3) and the real block count and block size is enough.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "barato/batch/cost.hpp"
#include "barato/batch/executor.hpp"
#include "barato/batch/step_plan.hpp"
#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/paged.hpp"

namespace barato::batch {

/// The fake model's state after one more token (63 bits).
[[nodiscard]] constexpr std::uint64_t sim_chain(std::uint64_t h, Token t) noexcept {
  std::uint64_t z = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(static_cast<std::uint32_t>(t)) + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 1;
}
/// The fake model's state before any token.
inline constexpr std::uint64_t kSimRoot = 0x2545F4914F6CDD1DULL >> 1;

/// The fake model's next-token logits [vocab] in state h: values in [0, 1), a hash of (h, token).
inline void sim_logits(std::uint64_t h, std::span<float> logits) noexcept {
  for (std::size_t v = 0; v < logits.size(); ++v) {
    std::uint64_t z = h ^ (static_cast<std::uint64_t>(v) * 0xD1B54A32D192ED03ULL);
    z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDULL;
    z = (z ^ (z >> 33)) * 0xC4CEB9FE1A85EC53ULL;
    logits[v] = static_cast<float>((z ^ (z >> 33)) >> 40) * 0x1.0p-24f;
  }
}

/// The simulated executor over a float paged pool, charging steps with cost model C.
template <StepCost C = TableCost>
class SimExecutor {
 public:
  /// Runs plans on `pool` (head_dim ≥ 3; outlives the executor) with a fake model over `vocab`
  /// tokens; buffers for chunks of up to `max_chunk_tokens` tokens are allocated here. Throws
  /// `shape_error` for head_dim < 3 or vocab = 0.
  SimExecutor(kv::PagedPool<float>& pool, std::size_t vocab, C cost, std::size_t max_chunk_tokens = 256)
      : pool_(pool), vocab_(vocab), cost_(std::move(cost)) {
    require(pool.head_dim() >= 3, "batch::SimExecutor: the pool's head_dim must be >= 3 (the state is stored in K), got ",
            pool.head_dim());
    require(vocab > 0, "batch::SimExecutor: vocab must be > 0");
    row_ = pool.n_kv_heads() * pool.head_dim();
    k_.resize(max_chunk_tokens * row_);
    v_.resize(max_chunk_tokens * row_);
  }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return vocab_; }
  [[nodiscard]] const C& cost() const noexcept { return cost_; }

  /// Appends every chunk's K/V (all layers), writes the logits rows, returns cost.seconds(plan).
  /// Throws `shape_error` when logits is not [plan.logits_rows, vocab].
  double run(const StepPlan& plan, std::span<float> logits) {
    require(logits.size() == plan.logits_rows * vocab_, "batch::SimExecutor::run: expected ", plan.logits_rows * vocab_,
            " logits, got ", logits.size());
    std::size_t row = 0;
    const std::size_t d = pool_.head_dim(), H = pool_.n_kv_heads();
    for (const SeqChunk& c : plan.chunks) {
      std::uint64_t h = kSimRoot;
      if (c.pos > 0) {
        const std::span<const float> k = pool_.key(c.seq, 0, 0, c.pos - 1);
        h = static_cast<std::uint64_t>(k[0]) | static_cast<std::uint64_t>(k[1]) << 21 | static_cast<std::uint64_t>(k[2]) << 42;
      }
      const std::size_t n = c.tokens.size();
      if (k_.size() < n * row_) {  // a chunk longer than the constructor was told: grow once
        k_.resize(n * row_);
        v_.resize(n * row_);
      }
      for (std::size_t j = 0; j < n; ++j) {
        h = sim_chain(h, c.tokens[j]);
        for (std::size_t hh = 0; hh < H; ++hh) {
          float* kr = k_.data() + j * row_ + hh * d;
          kr[0] = static_cast<float>(h & 0x1FFFFF);
          kr[1] = static_cast<float>((h >> 21) & 0x1FFFFF);
          kr[2] = static_cast<float>((h >> 42) & 0x1FFFFF);
          for (std::size_t x = 3; x < d; ++x) kr[x] = 0.0f;
          for (std::size_t x = 0; x < d; ++x) v_[j * row_ + hh * d + x] = kr[x];
        }
      }
      const std::span<const float> k(k_.data(), n * row_), v(v_.data(), n * row_);
      for (std::size_t l = 0; l < pool_.n_layers(); ++l) pool_.view(c.seq, l).append(k, v);
      if (c.wants_logits) sim_logits(h, logits.subspan(row++ * vocab_, vocab_));
    }
    return static_cast<double>(cost_.seconds(plan));
  }

 private:
  kv::PagedPool<float>& pool_;
  std::size_t vocab_;
  C cost_;
  std::size_t row_ = 0;    // n_kv_heads · head_dim
  std::vector<float> k_;   // [max_chunk_tokens, n_kv_heads, head_dim]
  std::vector<float> v_;   // [max_chunk_tokens, n_kv_heads, head_dim]
};

static_assert(Executor<SimExecutor<>>);

}  // namespace barato::batch
