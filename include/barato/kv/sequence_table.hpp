#pragma once
/// \file
/// `kv::SequenceTable`: the sequences of a paged pool, one slot each — the block table (logical page
/// → physical block), the positions stored per layer, the known tokens and the chain hash of each of
/// their full blocks. Slots of released sequences are reused (last released first), so ids stay
/// small. It holds ids only: what a block contains and who else references it is the pool's
/// business (kv/paged.hpp). Every array comes from the memory resource given at construction.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/prefix_cache.hpp"

namespace barato::kv {

/// Id of a sequence in a `PagedPool`.
using SeqId = std::uint32_t;

/// One sequence of a paged pool: its block table, per-layer lengths and known tokens.
struct PagedSequence {
  explicit PagedSequence(std::pmr::memory_resource* mr) : table(mr), len(mr), tokens(mr), hashes(mr) {}

  bool live = false;
  std::pmr::vector<std::uint32_t> table;   // [pages] logical page → physical block
  std::pmr::vector<std::size_t> len;       // [n_layers] positions stored per layer
  std::pmr::vector<Token> tokens;          // known tokens (prompt + declared), ≤ shortest() after a truncate
  std::pmr::vector<std::uint64_t> hashes;  // [full blocks of tokens] chain hash of each (kv/prefix_cache.hpp)
  std::size_t registered = 0;              // leading blocks already offered to the prefix registry

  /// Positions of the shortest / longest layer.
  [[nodiscard]] std::size_t shortest() const noexcept { return *std::min_element(len.begin(), len.end()); }
  [[nodiscard]] std::size_t longest() const noexcept { return *std::max_element(len.begin(), len.end()); }
  /// Appends known tokens and the chain hashes of the blocks of B tokens they complete. Strong
  /// guarantee: both arrays are reserved before either changes.
  void declare(std::span<const Token> more, std::size_t B) {
    tokens.reserve(tokens.size() + more.size());
    hashes.reserve((tokens.size() + more.size()) / B);
    tokens.insert(tokens.end(), more.begin(), more.end());
    extend_hash_chain(tokens, B, hashes);
  }
  /// True when appending n positions to every layer writes logical page i (pages of B positions).
  [[nodiscard]] bool writes(std::size_t i, std::size_t n, std::size_t B) const noexcept {
    return std::any_of(len.begin(), len.end(), [&](std::size_t p) { return p / B <= i && i <= (p + n - 1) / B; });
  }
  /// After a truncate: forgets the known tokens (and their hashes) beyond the shortest layer.
  void forget_beyond_shortest(std::size_t B) {
    const std::size_t known = shortest();
    if (tokens.size() > known) tokens.resize(known);
    hashes.resize(std::min(hashes.size(), tokens.size() / B));
    registered = std::min(registered, known / B);
  }
};

/// The sequence slots of a paged pool: add, look up (checked), release and reuse.
class SequenceTable {
 public:
  explicit SequenceTable(std::size_t n_layers, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : n_layers_(n_layers), mr_(mr), slots_(mr), free_(mr) {}

  /// A new live, empty sequence (0 positions in each of n_layers layers, no table, no tokens).
  /// Strong guarantee: when an allocation throws, the table is unchanged.
  [[nodiscard]] SeqId add() { return insert(fresh()); }
  /// A sequence that is not in the table yet (not live): fill it, then `insert` it.
  [[nodiscard]] PagedSequence fresh() const {
    PagedSequence s(mr_);
    s.len.assign(n_layers_, 0);
    return s;
  }
  /// A copy of live sequence `id` (not in the table yet, not live), from the table's resource.
  [[nodiscard]] PagedSequence copy_of(SeqId id) const {
    PagedSequence s(mr_);
    s = at(id);  // copy assignment keeps s's resource
    s.live = false;
    return s;
  }
  /// Makes `s` a live sequence of the table and returns its id. Strong guarantee: the only
  /// allocations (a new slot and room for it on the free list) come before any change.
  [[nodiscard]] SeqId insert(PagedSequence&& s) {
    BARATO_ASSERT(s.len.size() == n_layers_);
    SeqId id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      free_.reserve(slots_.size() + 1);  // so that `remove` never allocates
      slots_.emplace_back(mr_);
      id = static_cast<SeqId>(slots_.size() - 1);
    }
    slots_[id] = std::move(s);  // same resource: no allocation
    slots_[id].live = true;
    return id;
  }
  /// Ends sequence id (its table must have been released): the slot is empty and reusable. Allocates
  /// nothing (the slot keeps its arrays' capacity for the next sequence), so it cannot throw.
  void remove(SeqId id) noexcept {
    PagedSequence& s = slots_[id];
    s.live = false;
    s.table.clear();
    s.tokens.clear();
    s.hashes.clear();
    s.registered = 0;
    std::fill(s.len.begin(), s.len.end(), std::size_t{0});
    free_.push_back(id);
  }
  [[nodiscard]] bool contains(SeqId id) const noexcept { return id < slots_.size() && slots_[id].live; }
  /// Live sequence id; `shape_error` when it does not exist.
  [[nodiscard]] const PagedSequence& at(SeqId id) const {
    require(contains(id), "kv::PagedPool: sequence ", id, " does not exist");
    return slots_[id];
  }
  [[nodiscard]] PagedSequence& at(SeqId id) { return const_cast<PagedSequence&>(std::as_const(*this).at(id)); }
  /// Slot id without a check (hot paths; the caller knows it is live).
  [[nodiscard]] const PagedSequence& operator[](SeqId id) const noexcept { return slots_[id]; }
  /// Σ over live sequences of their longest layer's positions.
  [[nodiscard]] std::size_t positions() const noexcept {
    std::size_t n = 0;
    for (const PagedSequence& s : slots_)
      if (s.live) n += s.longest();
    return n;
  }

 private:
  std::size_t n_layers_;
  std::pmr::memory_resource* mr_;
  std::pmr::vector<PagedSequence> slots_;  // [slots]
  std::pmr::vector<SeqId> free_;           // released slots, reused last released first
};

}  // namespace barato::kv
