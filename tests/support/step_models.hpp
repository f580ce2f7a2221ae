#pragma once
// Fake step models for the speculative-decoding tests: deterministic, tiny, with a "KV cache" that is
// the list of token ids plus a running prefix hash per position (a stand-in for K/V rows: it depends on
// the whole prefix, so a wrong rollback or a stale position shows up as a different cache).
// Neither allocates in forward(): storage is reserved at construction.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/spec/step_model.hpp"

namespace barato::test {

/// A well-mixed 64-bit hash of (a, b) (SplitMix64 finaliser).
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
/// A value in [−1, 1) from a hash.
inline float unit(std::uint64_t h) { return static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0); }

/// One cached position: the token and a hash of the whole prefix up to and including it.
struct CacheEntry {
  Token token;
  std::uint64_t prefix_hash;
  bool operator==(const CacheEntry&) const = default;
};

struct TableModelConfig {
  std::size_t vocab = 8;
  std::size_t capacity = 64;
  std::size_t order = 2;        // logits depend on the last `order` tokens
  std::uint64_t seed = 1;       // the table
  float scale = 3.0f;           // logit = scale·unit(hash(seed, key, v)) + noise·unit(hash(noise_seed, key, v))
  std::uint64_t noise_seed = 0;
  float noise = 0.0f;           // a draft "close to" the target: same seed, small noise
};

/// A table-driven causal LM: next-token logits are a fixed pseudo-random function of the last `order`
/// tokens. Satisfies spec::StepModel.
class TableModel {
 public:
  explicit TableModel(TableModelConfig c) : c_(c) { cache_.reserve(c.capacity); }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return c_.vocab; }
  [[nodiscard]] std::size_t size() const noexcept { return cache_.size(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return c_.capacity; }
  [[nodiscard]] std::span<const CacheEntry> cache() const noexcept { return cache_; }
  [[nodiscard]] std::size_t forward_calls() const noexcept { return forward_calls_; }
  [[nodiscard]] std::size_t positions_forwarded() const noexcept { return positions_; }

  void forward(std::span<const Token> tokens, std::span<float> logits) {
    require(!tokens.empty() && logits.size() == tokens.size() * c_.vocab, "TableModel::forward: ", tokens.size(),
            " tokens need ", tokens.size() * c_.vocab, " logits, got ", logits.size());
    require<capacity_error>(cache_.size() + tokens.size() <= c_.capacity, "TableModel::forward: capacity");
    for (Token t : tokens) require<value_error>(t >= 0 && std::size_t(t) < c_.vocab, "TableModel: token out of range");
    ++forward_calls_;
    positions_ += tokens.size();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::uint64_t prev = cache_.empty() ? 0x12345 : cache_.back().prefix_hash;
      cache_.push_back({tokens[i], mix(prev, static_cast<std::uint64_t>(tokens[i]))});
      row(key_of_cache(), logits.subspan(i * c_.vocab, c_.vocab));
    }
  }
  void truncate(std::size_t n) {
    require(n <= cache_.size(), "TableModel::truncate: ", n, " > size ", cache_.size());
    cache_.resize(n);
  }
  void reset() noexcept { cache_.clear(); }

  /// The logits after `context` (a pure function; no cache involved).
  void logits_after(std::span<const Token> context, std::span<float> out) const {
    std::uint64_t key = 0x9999;
    const std::size_t from = context.size() > c_.order ? context.size() - c_.order : 0;
    for (std::size_t i = from; i < context.size(); ++i) key = mix(key, static_cast<std::uint64_t>(context[i]));
    row(key, out);
  }

 private:
  [[nodiscard]] std::uint64_t key_of_cache() const {
    std::uint64_t key = 0x9999;
    const std::size_t from = cache_.size() > c_.order ? cache_.size() - c_.order : 0;
    for (std::size_t i = from; i < cache_.size(); ++i) key = mix(key, static_cast<std::uint64_t>(cache_[i].token));
    return key;
  }
  void row(std::uint64_t key, std::span<float> out) const {
    for (std::size_t v = 0; v < c_.vocab; ++v) {
      out[v] = c_.scale * unit(mix(mix(c_.seed, key), v));
      if (c_.noise != 0.0f) out[v] += c_.noise * unit(mix(mix(c_.noise_seed, key), v));
    }
  }

  TableModelConfig c_;
  std::vector<CacheEntry> cache_;  // [size] reserved to capacity
  std::size_t forward_calls_ = 0, positions_ = 0;
};

/// A model whose next-token logits are the same fixed vector at every position (for distribution tests).
class FixedModel {
 public:
  FixedModel(std::vector<float> logits, std::size_t capacity) : logits_(std::move(logits)), capacity_(capacity) {
    tokens_.reserve(capacity);
  }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return logits_.size(); }
  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  void forward(std::span<const Token> tokens, std::span<float> logits) {
    require(!tokens.empty() && logits.size() == tokens.size() * logits_.size(), "FixedModel::forward: sizes");
    require<capacity_error>(tokens_.size() + tokens.size() <= capacity_, "FixedModel::forward: capacity");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      tokens_.push_back(tokens[i]);
      for (std::size_t v = 0; v < logits_.size(); ++v) logits[i * logits_.size() + v] = logits_[v];
    }
  }
  void truncate(std::size_t n) {
    require(n <= tokens_.size(), "FixedModel::truncate");
    tokens_.resize(n);
  }
  void reset() noexcept { tokens_.clear(); }

 private:
  std::vector<float> logits_;  // [vocab]
  std::size_t capacity_;
  std::vector<Token> tokens_;  // [size]
};

static_assert(spec::StepModel<TableModel> && spec::StepModel<FixedModel>);

}  // namespace barato::test
