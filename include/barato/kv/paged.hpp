#pragma once
/// \file
/// Paged KV cache (PagedAttention, Kwon et al. 2023, "Efficient Memory Management for Large Language
/// Model Serving with PagedAttention"): one pool of fixed-size blocks shared by many sequences.
///
///  - **Blocks hold all layers.** A block stores `block_tokens` (B) positions of every layer and KV
///    head. One block table per sequence then serves every layer (a table per (sequence, layer) would
///    multiply the bookkeeping by the layer count), and a fork, a copy-on-write or a prefix hit is one
///    table operation. The layout is [n_layers, n_kv_heads, n_blocks, B, head_dim] for K and for V
///    (vLLM keeps one tensor per layer the same way): blocks b and b + 1 are adjacent in every
///    (layer, head), so a sequence whose pages are consecutive blocks reads like a contiguous cache.
///  - **Page runs.** One core reads scattered 4 KiB pages ~1.3–1.6x slower than one stream (the
///    hardware prefetchers restart at every page; bench_kv's read probe), so the allocator keeps a
///    sequence's pages consecutive when it can: a new page takes the block after the sequence's last
///    one if that is free (and holds no cached prefix), else starts a run at a wholly free extent of
///    `extent()` blocks (2048 tokens by default), else takes the free list's head. Attention reads
///    stretches of consecutive pages as contiguous rows. Sequences growing side by side thus get runs
///    of at least one extent; a fragmented pool still works, at the scattered cost.
///  - **Reference counts + free list.** `fork(seq)` shares every block (counts + 1, nothing copied).
///    Appending into a block whose count is > 1 copies it first (copy-on-write); `release(seq)`
///    returns blocks whose count drops to zero. The free list is intrusive (no allocation): blocks
///    without cached content are reused first, cached blocks in least-recently-freed order.
///  - **Automatic prefix sharing** (kv/prefix_cache.hpp): a block that is full in every layer and
///    whose B tokens are known is registered under hash(prefix hash, tokens). `admit(prompt)`
///    creates a sequence that reuses the longest chain of cached blocks and says how many positions
///    are cached, so the model prefills only prompt[cached …]. A freed cached block keeps its content
///    until the allocator reclaims it (then it counts as evicted).
///  - **Capacity.** When an append needs more free blocks than exist, it throws `capacity_error`
///    before touching anything: every sequence, count and the free list are unchanged.
///  - **Attention** reads the pages in place: `for_each_block` yields one `PagedBlock` per head that
///    spans all its pages (kv/paged_block.hpp; no gather copy), so one kernel call covers every page.
///  - **Page formats.** `PagedPool<T>` stores fp32 / fp16 / bf16 rows, `PagedPool<QuantizedPages<KF,
///    VF>>` int8 / int4 codes with one fp32 scale per token and KV head (kv/quantized.hpp: the same
///    quantiser and kernel as `kv::Quantized`, bitwise the same attention), and then hands attention a
///    `PagedQuantBlock`. Block tables, forks, copy-on-write (codes and scales), prefix sharing and the
///    capacity guarantee are the same code for every format; `block_bytes()` includes the scales.
///
/// `PagedView` (one sequence, one layer) is what a model holds; it satisfies `kv::CachePolicy`.
/// Views refer to the pool, which therefore neither moves nor copies.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <span>
#include <type_traits>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/token.hpp"
#include "barato/kv/block.hpp"
#include "barato/kv/cache_policy.hpp"
#include "barato/kv/paged_block.hpp"
#include "barato/kv/prefix_cache.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/simd/convert.hpp"

namespace barato::kv {

/// Construction parameters of `PagedPool` (designated initialisers).
struct PagedConfig {
  std::size_t n_layers = 1;        ///< layers stored per block
  std::size_t n_kv_heads = 0;      ///< KV heads per layer
  std::size_t head_dim = 0;        ///< d
  std::size_t block_tokens = 16;   ///< B: positions per block
  std::size_t n_blocks = 0;        ///< blocks in the pool (capacity = n_blocks · B positions, shared)
  std::size_t extent_blocks = 0;   ///< blocks per allocation extent: a sequence starts a new run of pages
                                   ///< at a wholly free extent (see PagedPool, "Page runs"); 0 = extent()
  bool prefix_caching = true;      ///< register full blocks for automatic prefix sharing

  /// Tokens per extent when extent_blocks is 0: runs of 2048 tokens are 512 KiB per head at d = 64
  /// fp32, long enough that one core reads them as fast as one stream (bench_kv; runs of 1024 tokens
  /// cost 3–9 % more at B = 16, of 512 tokens 8–12 % at B = 8).
  static constexpr std::size_t kAutoExtentTokens = 2048;
  /// Blocks per extent: extent_blocks, or kAutoExtentTokens / block_tokens (≥ 1) when it is 0.
  [[nodiscard]] constexpr std::size_t extent() const noexcept {
    if (extent_blocks != 0) return extent_blocks;
    return block_tokens == 0 ? 1 : std::max<std::size_t>(1, kAutoExtentTokens / block_tokens);
  }
};

/// Id of a sequence in a `PagedPool`.
using SeqId = std::uint32_t;

/// Page format of a `PagedPool` that stores keys as KF codes and values as VF codes (kv/quantized.hpp:
/// `Int8`, `Int4`) with one fp32 absmax scale per token and KV head, quantised on append exactly as
/// `kv::Quantized<KF, VF>` does. `PagedPool<QuantizedPages<Int8>>` is the paged int8 KV cache.
template <KvFormat KF, KvFormat VF = KF>
struct QuantizedPages {
  using key_format = KF;
  using value_format = VF;
};

namespace detail {
template <class T>
inline constexpr bool kIsQuantizedPages = false;
template <KvFormat KF, KvFormat VF>
inline constexpr bool kIsQuantizedPages<QuantizedPages<KF, VF>> = true;
}  // namespace detail

/// What a `PagedPool` can store: an element type (fp32 / fp16 / bf16 rows) or `QuantizedPages<KF, VF>`.
template <class T>
concept PageFormat = Element<T> || detail::kIsQuantizedPages<T>;

namespace detail {
/// The rows of a pool's pages: [n_blocks · n_layers · n_kv_heads · B] rows of head_dim for K and V.
template <class T>
struct PageStore;

template <Element T>
struct PageStore<T> {
  using block_type = PagedBlock<T>;
  std::size_t d;
  Buffer<T> k, v;  // [rows, d]
  PageStore(std::size_t rows, std::size_t d_, std::pmr::memory_resource* mr) : d(d_), k(rows * d_, mr), v(rows * d_, mr) {}
  /// Bytes of one row of K plus V.
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept { return 2 * d * sizeof(T); }
  [[nodiscard]] std::size_t bytes() const noexcept { return k.bytes() + v.bytes(); }
  void write(std::size_t row, const float* kr, const float* vr) noexcept {
    simd::from_float<T>(kr, k.data() + row * d, d);
    simd::from_float<T>(vr, v.data() + row * d, d);
  }
  void copy(std::size_t dst, std::size_t src, std::size_t rows) noexcept {
    std::memcpy(k.data() + dst * d, k.data() + src * d, rows * d * sizeof(T));
    std::memcpy(v.data() + dst * d, v.data() + src * d, rows * d * sizeof(T));
  }
};

template <KvFormat KF, KvFormat VF>
struct PageStore<QuantizedPages<KF, VF>> {
  using block_type = PagedQuantBlock<KF, VF>;
  std::size_t d, k_row, v_row;     // head_dim; bytes of one row of key / value codes
  Buffer<std::uint8_t> kc, vc;     // [rows, k_row], [rows, v_row]
  Buffer<float> ks, vs;            // [rows] scales
  PageStore(std::size_t rows, std::size_t d_, std::pmr::memory_resource* mr)
      : d(d_), k_row(KF::row_bytes(d_)), v_row(VF::row_bytes(d_)), kc(rows * k_row, mr), vc(rows * v_row, mr),
        ks(rows, mr), vs(rows, mr) {}
  [[nodiscard]] static constexpr std::size_t row_bytes(std::size_t d) noexcept {
    return KF::row_bytes(d) + VF::row_bytes(d) + 2 * sizeof(float);
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return kc.bytes() + vc.bytes() + ks.bytes() + vs.bytes(); }
  void write(std::size_t row, const float* kr, const float* vr) noexcept {
    ks.data()[row] = quantize_row<KF>(kr, d, kc.data() + row * k_row);
    vs.data()[row] = quantize_row<VF>(vr, d, vc.data() + row * v_row);
  }
  void copy(std::size_t dst, std::size_t src, std::size_t rows) noexcept {
    std::memcpy(kc.data() + dst * k_row, kc.data() + src * k_row, rows * k_row);
    std::memcpy(vc.data() + dst * v_row, vc.data() + src * v_row, rows * v_row);
    std::memcpy(ks.data() + dst, ks.data() + src, rows * sizeof(float));
    std::memcpy(vs.data() + dst, vs.data() + src, rows * sizeof(float));
  }
  /// The rows of one head reached through `table`: row 0 of physical page 0 is store row `row0`,
  /// pages are `page_stride` rows apart.
  [[nodiscard]] block_type block(std::size_t row0, const std::uint32_t* table, std::size_t page_rows, std::size_t page_stride,
                                 std::size_t n) const noexcept {
    return {kc.data() + row0 * k_row, ks.data() + row0, vc.data() + row0 * v_row, vs.data() + row0, table, page_rows,
            page_stride, n, k_row, v_row, 0, block_type::shift_for(page_rows)};
  }
};
}  // namespace detail

template <PageFormat T>
class PagedView;

template <PageFormat T = float>
class PagedPool {
 public:
  using element_type = T;
  using block_type = typename detail::PageStore<T>::block_type;
  using BlockId = std::uint32_t;
  static constexpr BlockId kNoBlock = 0xFFFFFFFFu;

  /// Allocates the whole pool from `mr` up front. Throws `shape_error` for a zero dimension.
  explicit PagedPool(const PagedConfig& cfg, std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : cfg_(checked(cfg)), block_rows_(cfg.n_layers * cfg.n_kv_heads * cfg.block_tokens),
        store_(cfg.n_blocks * block_rows_, cfg.head_dim, mr), ref_(cfg.n_blocks, 0),
        prev_(cfg.n_blocks + 1), next_(cfg.n_blocks + 1), hashed_(cfg.n_blocks, 0), hash_(cfg.n_blocks, 0),
        parent_(cfg.n_blocks, 0), tok_(cfg.n_blocks * cfg.block_tokens, 0),
        extent_(cfg.extent()), ext_clean_((cfg.n_blocks + extent_ - 1) / extent_, 0) {
    // Free list: sentinel at index n_blocks; all blocks free in id order (every extent clean).
    const BlockId s = sentinel();
    prev_[s] = next_[s] = s;
    for (BlockId b = 0; b < cfg_.n_blocks; ++b) push_back_free(b);
  }
  PagedPool(const PagedPool&) = delete;
  PagedPool& operator=(const PagedPool&) = delete;

  // ---- shape and memory ------------------------------------------------------------------------
  [[nodiscard]] const PagedConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t n_layers() const noexcept { return cfg_.n_layers; }
  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return cfg_.n_kv_heads; }
  [[nodiscard]] std::size_t head_dim() const noexcept { return cfg_.head_dim; }
  [[nodiscard]] std::size_t block_tokens() const noexcept { return cfg_.block_tokens; }
  [[nodiscard]] std::size_t n_blocks() const noexcept { return cfg_.n_blocks; }
  [[nodiscard]] std::size_t free_blocks() const noexcept { return n_free_; }
  [[nodiscard]] std::size_t used_blocks() const noexcept { return cfg_.n_blocks - n_free_; }
  /// Bytes of one block (all layers, K and V).
  [[nodiscard]] std::size_t block_bytes() const noexcept { return block_rows_ * detail::PageStore<T>::row_bytes(cfg_.head_dim); }
  /// Bytes of the pool's K/V storage, scales included (what it holds from its memory resource for pages).
  [[nodiscard]] std::size_t bytes_reserved() const noexcept { return store_.bytes(); }
  /// Bytes of the blocks currently referenced by some sequence.
  [[nodiscard]] std::size_t bytes_in_use() const noexcept { return used_blocks() * block_bytes(); }
  /// Bytes occupied by stored positions: Σ over live sequences of their positions (max over layers),
  /// counting a shared position once per sequence that sees it (so it can exceed bytes_in_use()).
  [[nodiscard]] std::size_t bytes_used() const noexcept {
    std::size_t n = 0;
    for (const auto& s : seqs_)
      if (s.live) n += *std::max_element(s.len.begin(), s.len.end());
    return n * block_bytes() / cfg_.block_tokens;
  }

  // ---- sequences --------------------------------------------------------------------------------
  /// A new, empty sequence (no tokens declared).
  [[nodiscard]] SeqId add_sequence() { return new_slot(); }

  /// Result of `admit`.
  struct Admission {
    SeqId seq;          ///< the new sequence
    PrefixMatch match;  ///< match.cached_tokens positions are already filled: prefill prompt[cached …]
  };

  /// A new sequence for `prompt`: declares its tokens and reuses the longest chain of cached full
  /// blocks (at most (prompt.size() − 1) / B of them, so the last prompt token is always computed and
  /// yields logits). Allocates no block, so it cannot run out of pool. Updates `prefix_stats()`.
  [[nodiscard]] Admission admit(std::span<const Token> prompt) {
    const SeqId id = new_slot();
    Seq& s = seqs_[id];
    const std::size_t B = cfg_.block_tokens;
    PrefixMatch m;
    m.usable_blocks = prompt.empty() ? 0 : (prompt.size() - 1) / B;
    m.stop = m.usable_blocks == 0 ? PrefixMiss::too_short : PrefixMiss::none;
    std::uint64_t h = kRootHash;
    std::vector<BlockId> hits;
    if (cfg_.prefix_caching) {
      for (std::size_t i = 0; i < m.usable_blocks; ++i) {
        const auto toks = prompt.subspan(i * B, B);
        const std::uint64_t hi = block_hash(h, toks);
        const BlockId b = index_.find(hi);
        if (b == PrefixIndex::kNone || !same_block(b, h, toks)) {
          m.stop = b == PrefixIndex::kNone && index_.was_evicted(hi) ? PrefixMiss::evicted : PrefixMiss::differs;
          break;
        }
        hits.push_back(b);
        h = hi;
      }
    } else if (m.usable_blocks > 0) {
      m.stop = PrefixMiss::differs;
    }
    s.table.reserve(hits.size());
    for (const BlockId b : hits) {
      if (ref_[b] == 0) unlink_free(b);
      ++ref_[b];
      s.table.push_back(b);
    }
    m.blocks_hit = hits.size();
    m.cached_tokens = hits.size() * B;
    std::fill(s.len.begin(), s.len.end(), m.cached_tokens);
    s.registered = hits.size();
    declare_tokens(id, prompt);
    stats_.count(m);
    return {id, m};
  }

  /// Records tokens at the end of the sequence's known tokens (prompt, then sampled tokens). Only
  /// blocks whose tokens are known can be registered for prefix sharing.
  void declare_tokens(SeqId id, std::span<const Token> tokens) {
    Seq& s = live(id);
    const std::size_t B = cfg_.block_tokens;
    s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
    while ((s.hashes.size() + 1) * B <= s.tokens.size()) {
      const std::size_t i = s.hashes.size();
      const std::uint64_t parent = i == 0 ? kRootHash : s.hashes[i - 1];
      s.hashes.push_back(block_hash(parent, std::span<const Token>(s.tokens).subspan(i * B, B)));
    }
    register_full_blocks(s);
  }

  /// A new sequence sharing every block of `id` (counts + 1, no copy; O(blocks)).
  [[nodiscard]] SeqId fork(SeqId id) {
    live(id);
    const SeqId c = new_slot();
    Seq& src = seqs_[id];  // new_slot may have reallocated seqs_
    Seq& dst = seqs_[c];
    dst.table = src.table;
    dst.len = src.len;
    dst.tokens = src.tokens;
    dst.hashes = src.hashes;
    dst.registered = src.registered;
    for (const BlockId b : dst.table) ++ref_[b];
    return c;
  }

  /// Ends a sequence: every block's count drops by one; blocks reaching zero return to the free list.
  void release(SeqId id) {
    Seq& s = live(id);
    for (const BlockId b : s.table) unref(b);
    s = Seq{};
    s.len.assign(cfg_.n_layers, 0);
    free_slots_.push_back(id);
  }

  /// Rolls every layer of the sequence back to n positions (and its known tokens to ≤ n).
  void truncate(SeqId id, std::size_t n) {
    Seq& s = live(id);
    require(n <= *std::min_element(s.len.begin(), s.len.end()), "kv::PagedPool::truncate: n = ", n,
            " exceeds the sequence length ", *std::min_element(s.len.begin(), s.len.end()));
    for (auto& l : s.len) l = n;
    shrink(s);
  }

  /// Rolls one layer back to n positions (n ≤ its size, else `shape_error`).
  void truncate(SeqId id, std::size_t layer, std::size_t n) {
    Seq& s = live(id);
    check_layer(layer);
    require(n <= s.len[layer], "kv::PagedPool::truncate: n = ", n, " exceeds size ", s.len[layer], " of layer ", layer);
    s.len[layer] = n;
    shrink(s);
  }

  /// Appends n_new tokens of one layer given as rows [n_new, n_kv_heads, head_dim]. Copies shared
  /// blocks it writes into (copy-on-write) and takes new blocks from the free list. Throws
  /// `shape_error` for mismatched spans and `capacity_error` when the pool has too few free blocks;
  /// in both cases nothing changed.
  void append(SeqId id, std::size_t layer, std::span<const float> k, std::span<const float> v) {
    Seq& s = live(id);
    check_layer(layer);
    const std::size_t d = cfg_.head_dim, H = cfg_.n_kv_heads, B = cfg_.block_tokens;
    const std::size_t row = H * d;
    const std::size_t n_new = detail::append_tokens("kv::PagedPool::append", k.size(), v.size(), row);
    if (n_new == 0) return;
    const std::size_t p0 = s.len[layer], p1 = p0 + n_new;
    const std::size_t first = p0 / B, last = (p1 - 1) / B;  // logical blocks written
    // Count what this append needs before changing anything.
    std::size_t need = 0;
    for (std::size_t i = first; i <= last; ++i) need += (i >= s.table.size() || ref_[s.table[i]] > 1) ? 1 : 0;
    require<capacity_error>(need <= n_free_, "kv::PagedPool::append: ", n_new, " tokens need ", need,
                            " free blocks, the pool has ", n_free_, " of ", cfg_.n_blocks);
    if (s.table.capacity() < last + 1)  // the only allocation (amortised); may throw before any change
      s.table.reserve(std::max(last + 1, 2 * s.table.capacity()));
    for (std::size_t i = first; i <= last; ++i) {
      if (i >= s.table.size()) {
        s.table.push_back(take_free(s.table.empty() ? kNoBlock : s.table.back()));
      } else {
        s.table[i] = writable(s.table[i], i > 0 ? s.table[i - 1] : kNoBlock);
      }
    }
    for (std::size_t p = p0; p < p1; ++p) {
      const BlockId b = s.table[p / B];
      for (std::size_t h = 0; h < H; ++h) {
        const std::size_t src = (p - p0) * row + h * d;
        store_.write(row_index(b, layer, h) + p % B, k.data() + src, v.data() + src);
      }
    }
    s.len[layer] = p1;
    register_full_blocks(s);
  }

  /// Calls f once for KV head h of (sequence, layer) when it holds positions: one block spanning all
  /// of them (pos0 = 0), rows reached through the sequence's block table — a `PagedBlock<T>` for
  /// element pages, a `PagedQuantBlock<KF, VF>` for quantized pages (`page(i)` is logical page i).
  /// The view points into the pool and the table (valid until the next mutation).
  template <class F>
  void for_each_block(SeqId id, std::size_t layer, std::size_t h, F&& f) const {
    const Seq& s = seqs_[id];
    BARATO_ASSERT(s.live && layer < cfg_.n_layers && h < cfg_.n_kv_heads);
    const std::size_t n = s.len[layer];
    if (n == 0) return;
    if constexpr (Element<T>) {
      const std::size_t off = row_index(0, layer, h) * cfg_.head_dim;
      f(PagedBlock<T>{store_.k.data() + off, store_.v.data() + off, s.table.data(), cfg_.block_tokens, cfg_.block_tokens * cfg_.head_dim, n,
                      cfg_.head_dim, 0});
    } else {
      f(store_.block(row_index(0, layer, h), s.table.data(), cfg_.block_tokens, cfg_.block_tokens, n));
    }
  }

  /// The view of one (sequence, layer): what a model's layer holds. Valid while the sequence lives.
  [[nodiscard]] PagedView<T> view(SeqId id, std::size_t layer) {
    live(id);
    check_layer(layer);
    return PagedView<T>(*this, id, layer);
  }

  // ---- introspection (tests, tutorials) ---------------------------------------------------------
  [[nodiscard]] bool is_live(SeqId id) const noexcept { return id < seqs_.size() && seqs_[id].live; }
  [[nodiscard]] std::size_t size(SeqId id, std::size_t layer) const { return live(id).len[layer]; }
  [[nodiscard]] std::span<const BlockId> block_table(SeqId id) const { return live(id).table; }
  [[nodiscard]] std::span<const Token> tokens(SeqId id) const { return live(id).tokens; }
  [[nodiscard]] std::uint32_t refcount(BlockId b) const { return ref_.at(b); }
  /// True when block b holds registered (shareable) prefix content.
  [[nodiscard]] bool is_cached(BlockId b) const { return hashed_.at(b) != 0; }
  /// The free blocks in list order: those without cached content first, then cached ones least
  /// recently freed first (O(n_blocks); allocates).
  [[nodiscard]] std::vector<BlockId> free_list() const {
    std::vector<BlockId> out;
    for (BlockId b = next_[sentinel()]; b != sentinel(); b = next_[b]) out.push_back(b);
    return out;
  }
  [[nodiscard]] const PrefixCacheStats& prefix_stats() const noexcept { return stats_; }
  [[nodiscard]] std::size_t cached_blocks() const noexcept { return index_.size(); }
  /// Key / value row (layer, head, position) of a sequence: a view into the pool's page.
  [[nodiscard]] std::span<const T> key(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const
    requires Element<T>
  {
    return {store_.k.data() + row_offset(id, layer, h, pos) * cfg_.head_dim, cfg_.head_dim};
  }
  [[nodiscard]] std::span<const T> value(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const
    requires Element<T>
  {
    return {store_.v.data() + row_offset(id, layer, h, pos) * cfg_.head_dim, cfg_.head_dim};
  }

 private:
  struct Seq {
    bool live = false;
    std::vector<BlockId> table;        // logical block → physical block
    std::vector<std::size_t> len;      // [n_layers] positions stored per layer
    std::vector<Token> tokens;         // known tokens (prompt + declared)
    std::vector<std::uint64_t> hashes;  // prefix hash of each full block of `tokens`
    std::size_t registered = 0;        // leading blocks already offered to the index
  };

  static const PagedConfig& checked(const PagedConfig& c) {
    require(c.n_layers > 0 && c.n_kv_heads > 0 && c.head_dim > 0 && c.block_tokens > 0 && c.n_blocks > 0,
            "kv::PagedPool: n_layers, n_kv_heads, head_dim, block_tokens and n_blocks must be > 0, got ", c.n_layers, ", ",
            c.n_kv_heads, ", ", c.head_dim, ", ", c.block_tokens, ", ", c.n_blocks);
    require(c.n_blocks < kNoBlock, "kv::PagedPool: n_blocks must be < 2^32 - 1, got ", c.n_blocks);
    return c;
  }
  void check_layer(std::size_t layer) const {
    require(layer < cfg_.n_layers, "kv::PagedPool: layer ", layer, " out of range (", cfg_.n_layers, " layers)");
  }
  const Seq& live(SeqId id) const {
    require(id < seqs_.size() && seqs_[id].live, "kv::PagedPool: sequence ", id, " does not exist");
    return seqs_[id];
  }
  Seq& live(SeqId id) {
    require(id < seqs_.size() && seqs_[id].live, "kv::PagedPool: sequence ", id, " does not exist");
    return seqs_[id];
  }
  SeqId new_slot() {
    SeqId id;
    if (!free_slots_.empty()) {
      id = free_slots_.back();
      free_slots_.pop_back();
    } else {
      seqs_.emplace_back();
      id = static_cast<SeqId>(seqs_.size() - 1);
    }
    seqs_[id] = Seq{};
    seqs_[id].live = true;
    seqs_[id].len.assign(cfg_.n_layers, 0);
    return id;
  }
  /// Row of (block b, layer, head h, position 0 of the block) in the page store.
  [[nodiscard]] std::size_t row_index(BlockId b, std::size_t layer, std::size_t h) const noexcept {
    return ((layer * cfg_.n_kv_heads + h) * cfg_.n_blocks + b) * cfg_.block_tokens;
  }
  [[nodiscard]] std::size_t row_offset(SeqId id, std::size_t layer, std::size_t h, std::size_t pos) const {
    const Seq& s = live(id);
    require(layer < cfg_.n_layers && h < cfg_.n_kv_heads && pos < s.len[layer], "kv::PagedPool: (layer ", layer,
            ", head ", h, ", pos ", pos, ") out of range");
    return row_index(s.table[pos / cfg_.block_tokens], layer, h) + pos % cfg_.block_tokens;
  }
  [[nodiscard]] bool same_block(BlockId b, std::uint64_t parent, std::span<const Token> toks) const noexcept {
    return hashed_[b] != 0 && parent_[b] == parent &&
           std::equal(toks.begin(), toks.end(), tok_.begin() + static_cast<std::ptrdiff_t>(b * cfg_.block_tokens));
  }

  // Free list (intrusive, sentinel = n_blocks).
  [[nodiscard]] BlockId sentinel() const noexcept { return static_cast<BlockId>(cfg_.n_blocks); }
  void link_after(BlockId at, BlockId b) noexcept {
    prev_[b] = at;
    next_[b] = next_[at];
    prev_[next_[at]] = b;
    next_[at] = b;
    ++n_free_;
    if (hashed_[b] == 0) {
      const std::size_t e = b / extent_;
      if (++ext_clean_[e] == extent_size(e)) ++n_clean_extents_;
    }
  }
  void push_back_free(BlockId b) noexcept { link_after(prev_[sentinel()], b); }
  void push_front_free(BlockId b) noexcept { link_after(sentinel(), b); }
  void unlink_free(BlockId b) noexcept {
    next_[prev_[b]] = next_[b];
    prev_[next_[b]] = prev_[b];
    --n_free_;
    if (hashed_[b] == 0) {
      const std::size_t e = b / extent_;
      if (ext_clean_[e]-- == extent_size(e)) --n_clean_extents_;
    }
  }
  [[nodiscard]] std::size_t extent_size(std::size_t e) const noexcept {
    return std::min(extent_, cfg_.n_blocks - e * extent_);
  }
  /// First block of a wholly free extent without cached content (round robin), or kNoBlock.
  [[nodiscard]] BlockId clean_extent() noexcept {
    if (n_clean_extents_ == 0) return kNoBlock;
    const std::size_t n_ext = ext_clean_.size();
    for (std::size_t i = 0; i < n_ext; ++i) {
      const std::size_t e = (ext_next_ + i) % n_ext;
      if (ext_clean_[e] == extent_size(e)) {
        ext_next_ = (e + 1) % n_ext;
        return static_cast<BlockId>(e * extent_);
      }
    }
    BARATO_ASSERT(false);
    return kNoBlock;
  }
  /// Takes a free block for the page after `after` in a sequence's table (kNoBlock: its first page);
  /// the caller checked n_free_ > 0. Page runs: without cached content, the block after `after` if it
  /// is free, else the first block of a wholly free extent, else the free list's head; once no block
  /// without cached content is free, the least recently freed cached block (its content is evicted).
  BlockId take_free(BlockId after) {
    BlockId b = next_[sentinel()];
    BARATO_ASSERT(b != sentinel());
    if (hashed_[b] == 0) {  // clean blocks come first in the list: some are free
      if (after != kNoBlock && after + 1 < cfg_.n_blocks && ref_[after + 1] == 0 && hashed_[after + 1] == 0) {
        b = after + 1;
      } else if (const BlockId e = clean_extent(); e != kNoBlock) {
        b = e;
      }
    }
    unlink_free(b);
    if (hashed_[b] != 0) {
      uncache(b, /*evicted=*/true);
      ++stats_.blocks_evicted;
    }
    ref_[b] = 1;
    return b;
  }
  void unref(BlockId b) noexcept {
    BARATO_ASSERT(ref_[b] > 0);
    if (--ref_[b] == 0) {
      if (hashed_[b] != 0) push_back_free(b);  // keep cached content as long as possible
      else push_front_free(b);
    }
  }
  void uncache(BlockId b, bool evicted) {
    index_.erase(hash_[b], evicted);
    hashed_[b] = 0;
  }
  /// A block of the caller's table that it may write: copied if shared (count > 1), un-cached if its
  /// registered content is about to change.
  BlockId writable(BlockId b, BlockId after) {
    if (ref_[b] > 1) {
      const BlockId c = take_free(after);
      for (std::size_t l = 0; l < cfg_.n_layers; ++l)
        for (std::size_t h = 0; h < cfg_.n_kv_heads; ++h)
          store_.copy(row_index(c, l, h), row_index(b, l, h), cfg_.block_tokens);
      --ref_[b];
      return c;
    }
    if (hashed_[b] != 0) uncache(b, /*evicted=*/false);
    return b;
  }
  /// Drops table entries beyond every layer's length and the known tokens beyond the shortest layer.
  void shrink(Seq& s) {
    const std::size_t B = cfg_.block_tokens;
    const std::size_t lo = *std::min_element(s.len.begin(), s.len.end());
    const std::size_t hi = *std::max_element(s.len.begin(), s.len.end());
    const std::size_t keep = (hi + B - 1) / B;
    while (s.table.size() > keep) {
      unref(s.table.back());
      s.table.pop_back();
    }
    if (s.tokens.size() > lo) s.tokens.resize(lo);
    s.hashes.resize(std::min(s.hashes.size(), s.tokens.size() / B));
    s.registered = std::min(s.registered, lo / B);
  }
  /// Registers blocks that are now full in every layer and whose tokens are known.
  void register_full_blocks(Seq& s) {
    if (!cfg_.prefix_caching) return;
    const std::size_t B = cfg_.block_tokens;
    const std::size_t full = std::min(*std::min_element(s.len.begin(), s.len.end()) / B, s.hashes.size());
    for (; s.registered < full; ++s.registered) {
      const std::size_t i = s.registered;
      const BlockId b = s.table[i];
      if (hashed_[b] != 0) continue;  // already shared content
      if (!index_.insert(s.hashes[i], b)) continue;  // same prefix already cached in another block
      hashed_[b] = 1;
      hash_[b] = s.hashes[i];
      parent_[b] = i == 0 ? kRootHash : s.hashes[i - 1];
      std::copy_n(s.tokens.begin() + static_cast<std::ptrdiff_t>(i * B), B,
                  tok_.begin() + static_cast<std::ptrdiff_t>(b * B));
      ++stats_.blocks_registered;
    }
  }

  PagedConfig cfg_;
  std::size_t block_rows_;           // n_layers · n_kv_heads · B
  detail::PageStore<T> store_;       // rows [n_layers, n_kv_heads, n_blocks, B] of K and V (and scales)
  std::vector<std::uint32_t> ref_;   // [n_blocks] reference counts
  std::vector<BlockId> prev_, next_;  // [n_blocks + 1] intrusive free list, sentinel last
  std::size_t n_free_ = 0;
  std::vector<std::uint8_t> hashed_;    // [n_blocks] block content registered in index_
  std::vector<std::uint64_t> hash_;     // [n_blocks] its prefix hash
  std::vector<std::uint64_t> parent_;   // [n_blocks] hash of the prefix before it
  std::vector<Token> tok_;              // [n_blocks, B] its tokens (verified on every hit)
  std::size_t extent_;                    // blocks per extent (cfg_.extent())
  std::vector<std::uint32_t> ext_clean_;  // [n_extents] free blocks without cached content per extent
  std::size_t n_clean_extents_ = 0;       // extents whose blocks are all free without cached content
  std::size_t ext_next_ = 0;              // where clean_extent() looks first
  PrefixIndex index_;
  PrefixCacheStats stats_;
  std::vector<Seq> seqs_;
  std::vector<SeqId> free_slots_;
};

/// One (sequence, layer) of a `PagedPool`: the per-layer cache a model holds. Satisfies
/// `kv::CachePolicy`; a cheap handle (pointer + ids), copyable.
template <PageFormat T = float>
class PagedView {
 public:
  using element_type = T;
  using block_type = typename PagedPool<T>::block_type;

  PagedView(PagedPool<T>& pool, SeqId seq, std::size_t layer) noexcept : pool_(&pool), seq_(seq), layer_(layer) {}

  [[nodiscard]] std::size_t n_kv_heads() const noexcept { return pool_->n_kv_heads(); }
  [[nodiscard]] std::size_t head_dim() const noexcept { return pool_->head_dim(); }
  [[nodiscard]] std::size_t size() const { return pool_->size(seq_, layer_); }
  /// This layer's share of the pages the sequence references.
  [[nodiscard]] std::size_t bytes_reserved() const {
    return pool_->block_table(seq_).size() * pool_->block_bytes() / pool_->n_layers();
  }
  /// This layer's stored positions.
  [[nodiscard]] std::size_t bytes_used() const {
    return size() * pool_->block_bytes() / (pool_->n_layers() * pool_->block_tokens());
  }
  /// See `PagedPool::append` (copy-on-write, capacity_error with nothing changed).
  void append(std::span<const float> k, std::span<const float> v) { pool_->append(seq_, layer_, k, v); }
  void truncate(std::size_t n) { pool_->truncate(seq_, layer_, n); }
  template <class F>
  void for_each_block(std::size_t h, F&& f) const {
    pool_->for_each_block(seq_, layer_, h, std::forward<F>(f));
  }
  [[nodiscard]] SeqId sequence() const noexcept { return seq_; }
  [[nodiscard]] std::size_t layer() const noexcept { return layer_; }
  [[nodiscard]] PagedPool<T>& pool() const noexcept { return *pool_; }

 private:
  PagedPool<T>* pool_;
  SeqId seq_;
  std::size_t layer_;
};

static_assert(CachePolicy<PagedView<float>>);
static_assert(CachePolicy<PagedView<f16>>);
static_assert(CachePolicy<PagedView<QuantizedPages<Int8>>>);
static_assert(CachePolicy<PagedView<QuantizedPages<Int8, Int4>>>);

}  // namespace barato::kv
