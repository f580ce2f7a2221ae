#pragma once
/// \file
/// Rotary position embedding (RoPE, Su et al. 2021). Pair i of a head (i < rotary_dim/2) is rotated
/// by angle pos · base^(−2i/rotary_dim). Two pairing conventions exist:
///  - `RopeStyle::adjacent`: pairs (2i, 2i+1) — llama2.c, GPT-J, Meta's original Llama code;
///  - `RopeStyle::half_split`: pairs (i, i + rotary_dim/2) — GPT-NeoX, Hugging Face Llama.
/// `rope()` computes the angles directly; `RopeTable` precomputes cos/sin for positions
/// [0, max_pos) so a decode step costs no transcendental calls. Both rotate one token's heads, or in
/// one call the queries and keys of a block of n tokens at consecutive positions
/// (`rope(q, k, heads, pos)`, `table.apply(q, k, heads, pos)`: q [n, H_q, d], k [n, H_kv, d]).

#include <cmath>
#include <cstddef>
#include <memory_resource>
#include <span>

#include "barato/attention/heads.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"

namespace barato::attention {

/// Which dims of a head form a rotated pair (see the file comment).
enum class RopeStyle { adjacent, half_split };

/// RoPE hyper-parameters (designated initialisers).
struct RopeConfig {
  float base = 10000.0f;                  ///< θ base
  RopeStyle style = RopeStyle::adjacent;  ///< pairing convention
  std::size_t rotary_dim = 0;             ///< dims rotated per head (0 = head_dim); even
};

namespace detail {
inline std::size_t rotary_dim(const RopeConfig& cfg, std::size_t head_dim) {
  const std::size_t r = cfg.rotary_dim == 0 ? head_dim : cfg.rotary_dim;
  require(head_dim > 0, "rope: head_dim must be > 0, got 0");
  require(r % 2 == 0 && r <= head_dim, "rope: rotary_dim must be even and <= head_dim (", head_dim, "), got ", r);
  return r;
}
inline void rotate(float* x, std::size_t n_heads, std::size_t head_dim, std::size_t r, RopeStyle style,
                   const float* cos_row, const float* sin_row) noexcept {
  const std::size_t half = r / 2;
  for (std::size_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    for (std::size_t i = 0; i < half; ++i) {
      const std::size_t a = style == RopeStyle::adjacent ? 2 * i : i;
      const std::size_t b = style == RopeStyle::adjacent ? 2 * i + 1 : i + half;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * cos_row[i] - x1 * sin_row[i];
      xh[b] = x0 * sin_row[i] + x1 * cos_row[i];
    }
  }
}
/// Largest rotary_dim / 2 of the direct `rope()` (its angles live on the stack).
inline constexpr std::size_t kRopeMaxHalf = 512;
/// cos/sin of the r/2 angles of position `pos` into c and s.
inline void angles(const RopeConfig& cfg, std::size_t r, std::size_t pos, float* c, float* s) {
  for (std::size_t i = 0; i < r / 2; ++i) {
    const double freq = std::pow(static_cast<double>(cfg.base), -static_cast<double>(2 * i) / static_cast<double>(r));
    const double ang = static_cast<double>(pos) * freq;
    c[i] = static_cast<float>(std::cos(ang));
    s[i] = static_cast<float>(std::sin(ang));
  }
}
/// Tokens in a q/k block: q [n, H_q, d] and k [n, H_kv, d] must hold the same n ≥ 1.
inline std::size_t block_tokens(std::size_t q_size, std::size_t k_size, const Heads& heads, const char* who) {
  heads.validate();
  const std::size_t n = q_size / heads.q_dim();
  require(n > 0 && q_size == n * heads.q_dim() && k_size == n * heads.kv_dim(), who, ": q has ", q_size, " and k ",
          k_size, " floats, expected n x ", heads.q_dim(), " and n x ", heads.kv_dim(), " for n >= 1 tokens");
  return n;
}
}  // namespace detail

/// Rotates `x` ([n_heads, head_dim]) in place for position `pos`, computing angles directly.
inline void rope(std::span<float> x, std::size_t n_heads, std::size_t head_dim, std::size_t pos, const RopeConfig& cfg = {}) {
  const std::size_t r = detail::rotary_dim(cfg, head_dim);
  require(x.size() == n_heads * head_dim, "rope: x has ", x.size(), " floats, expected ", n_heads, " x ", head_dim);
  require(r / 2 <= detail::kRopeMaxHalf, "rope: rotary_dim ", r, " exceeds ", 2 * detail::kRopeMaxHalf);
  float c[detail::kRopeMaxHalf], s[detail::kRopeMaxHalf];
  detail::angles(cfg, r, pos, c, s);
  detail::rotate(x.data(), n_heads, head_dim, r, cfg.style, c, s);
}

/// Rotates the queries q ([n, H_q, d]) and keys k ([n, H_kv, d]) of n tokens at positions
/// pos … pos+n−1 in place (token t at pos + t), computing angles directly; the same rotation as
/// `rope(x, n_heads, head_dim, pos)` on each token's q and k. Throws `shape_error` when q and k do
/// not hold the same n ≥ 1 tokens of `heads`.
inline void rope(std::span<float> q, std::span<float> k, const Heads& heads, std::size_t pos, const RopeConfig& cfg = {}) {
  const std::size_t n = detail::block_tokens(q.size(), k.size(), heads, "rope");
  const std::size_t d = heads.head_dim, r = detail::rotary_dim(cfg, d);
  require(r / 2 <= detail::kRopeMaxHalf, "rope: rotary_dim ", r, " exceeds ", 2 * detail::kRopeMaxHalf);
  float c[detail::kRopeMaxHalf], s[detail::kRopeMaxHalf];
  for (std::size_t t = 0; t < n; ++t) {
    detail::angles(cfg, r, pos + t, c, s);
    detail::rotate(q.data() + t * heads.q_dim(), heads.n_q, d, r, cfg.style, c, s);
    detail::rotate(k.data() + t * heads.kv_dim(), heads.n_kv, d, r, cfg.style, c, s);
  }
}

/// Precomputed cos/sin for positions [0, max_pos): [max_pos, rotary_dim/2] each, from `mr`.
/// `apply` rotates like `rope()` without transcendental calls.
class RopeTable {
 public:
  /// Tables for heads of `head_dim` and positions [0, max_pos). Throws `shape_error` for an odd or
  /// zero head_dim, or a rotary_dim that is odd or larger than head_dim.
  RopeTable(std::size_t head_dim, std::size_t max_pos, const RopeConfig& cfg = {},
            std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : head_dim_(head_dim), rot_(detail::rotary_dim(cfg, head_dim)), max_pos_(max_pos), style_(cfg.style),
        cos_(max_pos * (rot_ / 2), mr), sin_(max_pos * (rot_ / 2), mr) {
    const std::size_t half = rot_ / 2;
    for (std::size_t i = 0; i < half; ++i) {
      const double freq = std::pow(static_cast<double>(cfg.base), -static_cast<double>(2 * i) / static_cast<double>(rot_));
      for (std::size_t p = 0; p < max_pos; ++p) {
        cos_[p * half + i] = static_cast<float>(std::cos(static_cast<double>(p) * freq));
        sin_[p * half + i] = static_cast<float>(std::sin(static_cast<double>(p) * freq));
      }
    }
  }
  /// Positions covered: [0, max_pos()).
  [[nodiscard]] std::size_t max_pos() const noexcept { return max_pos_; }
  /// Width of the heads it rotates.
  [[nodiscard]] std::size_t head_dim() const noexcept { return head_dim_; }

  /// Rotates `x` ([n_heads, head_dim]) in place for `pos` < max_pos(); throws `shape_error` otherwise.
  void apply(std::span<float> x, std::size_t n_heads, std::size_t pos) const {
    require(pos < max_pos_, "RopeTable::apply: position ", pos, " >= table size ", max_pos_);
    require(x.size() == n_heads * head_dim_, "RopeTable::apply: x has ", x.size(), " floats, expected ", n_heads, " x ",
            head_dim_);
    const std::size_t half = rot_ / 2;
    detail::rotate(x.data(), n_heads, head_dim_, rot_, style_, cos_.data() + pos * half, sin_.data() + pos * half);
  }

  /// Rotates the queries q ([n, H_q, d]) and keys k ([n, H_kv, d]) of n tokens at positions
  /// pos … pos+n−1 in place (token t at pos + t): per token, exactly `apply(q_t, H_q, pos + t)` and
  /// `apply(k_t, H_kv, pos + t)`. Throws `shape_error` when q and k do not hold the same n ≥ 1 tokens
  /// of `heads`, heads.head_dim differs from head_dim(), or pos + n > max_pos().
  void apply(std::span<float> q, std::span<float> k, const Heads& heads, std::size_t pos) const {
    const std::size_t n = detail::block_tokens(q.size(), k.size(), heads, "RopeTable::apply");
    require(heads.head_dim == head_dim_, "RopeTable::apply: heads have head_dim ", heads.head_dim, ", the table ", head_dim_);
    require(pos + n <= max_pos_, "RopeTable::apply: positions up to ", pos + n - 1, " >= table size ", max_pos_);
    const std::size_t half = rot_ / 2;
    for (std::size_t t = 0; t < n; ++t) {
      const float* c = cos_.data() + (pos + t) * half;
      const float* s = sin_.data() + (pos + t) * half;
      detail::rotate(q.data() + t * heads.q_dim(), heads.n_q, head_dim_, rot_, style_, c, s);
      detail::rotate(k.data() + t * heads.kv_dim(), heads.n_kv, head_dim_, rot_, style_, c, s);
    }
  }

 private:
  std::size_t head_dim_, rot_, max_pos_;
  RopeStyle style_;
  Buffer<float> cos_;  // [max_pos, rot/2]
  Buffer<float> sin_;  // [max_pos, rot/2]
};

}  // namespace barato::attention
