// Fuzz harness: a sequence of operations on kv::PagedPool (include/barato/kv/paged.hpp) checked
// against a reference model after every operation.
// Input: a pool shape (layers, KV heads, head_dim, block size, blocks, extent, prefix caching), then
// operations: new sequence, admit(prompt) with prefix hits (and optionally prefill the rest), append
// n positions to every layer (exhaustion included), fork, release, truncate, declare tokens.
// The reference keeps per sequence its known tokens and per-layer lengths. Every row written at
// position p is a function of the tokens 0..p (the harness declares tokens before appending them),
// so the rows a prefix hit brings must equal the rows the reference computes for the new prompt.
// Checked after every operation: sizes, known tokens, block tables (length ceil(longest / B)),
// every block's reference count against the tables, used + free = n_blocks, the free list; every
// row of the sequences the operation changed and of all sequences sharing a block with them (and
// every row of every sequence at the end); blocks_to_grow / blocks_to_admit predict exactly the blocks an append / an
// admission's prefill takes, and an append throws capacity_error iff the prediction exceeds the
// free blocks, leaving the sequence unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "barato/kv/paged.hpp"
#include "fuzz/fuzz_support.hpp"

namespace {

using barato::Token;
using barato::kv::SeqId;
using Pool = barato::kv::PagedPool<float>;

struct RefSeq {
  std::vector<Token> tokens;        // known tokens
  std::vector<std::size_t> len;     // [n_layers] positions stored
  std::size_t longest() const { return *std::max_element(len.begin(), len.end()); }
  std::size_t shortest() const { return *std::min_element(len.begin(), len.end()); }
};

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 31;
  x *= 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return x;
}

/// chain[p] = hash of the tokens 0..p.
std::vector<std::uint64_t> chain(const std::vector<Token>& t) {
  std::vector<std::uint64_t> c(t.size());
  std::uint64_t x = 0x1234;
  for (std::size_t i = 0; i < t.size(); ++i) c[i] = x = mix(x + static_cast<std::uint64_t>(t[i]) + 1);
  return c;
}

/// Element j of the K (kv = 0) or V (kv = 1) row of head h, layer `layer`, at a position whose
/// token chain hashes to `c`: depends on the tokens up to that position only (a multiple of 1/8,
/// exact in float).
float row_value(std::uint64_t c, std::size_t layer, std::size_t h, std::size_t j, int kv) {
  const std::uint64_t x = mix(c ^ (layer << 40) ^ (h << 32) ^ (j << 8) ^ static_cast<std::uint64_t>(kv));
  return static_cast<float>(static_cast<int>(x % 2001) - 1000) / 8.0f;
}

class Harness {
 public:
  Harness(const barato::kv::PagedConfig& cfg) : cfg_(cfg), pool_(cfg) {}

  void run(barato::fuzz::Input& in) {
    while (!in.empty()) {
      const int op = in.byte() % 8;
      if (op == 0 && seqs_.size() < 16) {
        const SeqId id = pool_.add_sequence();
        BARATO_FUZZ_CHECK(!seqs_.contains(id), "add_sequence returned a live id");
        seqs_[id] = fresh();
      }
      else if (op == 1 && seqs_.size() < 16) admit(in);
      else if (op == 2 || op == 3) append(in);
      else if (op == 4 && !seqs_.empty() && seqs_.size() < 16) {
        const SeqId parent = pick(in);
        const SeqId child = pool_.fork(parent);
        BARATO_FUZZ_CHECK(!seqs_.contains(child), "fork returned a live id");
        seqs_[child] = seqs_[parent];
        touched_.push_back(child);
      } else if (op == 5 && !seqs_.empty()) {
        const SeqId s = pick(in);
        pool_.release(s);
        seqs_.erase(s);
      } else if (op == 6 && !seqs_.empty()) {
        const SeqId s = pick(in);
        RefSeq& r = seqs_[s];
        const std::size_t n = in.in(0, r.shortest());
        pool_.truncate(s, n);
        for (auto& l : r.len) l = n;
        if (r.tokens.size() > n) r.tokens.resize(n);
        touched_.push_back(s);
      } else if (op == 7 && !seqs_.empty()) {
        const SeqId s = pick(in);
        declare(s, in, in.in(0, cfg_.block_tokens * 2));
      }
      check_books();
      check_rows(touched_);
      touched_.clear();
    }
    check_rows(live_ids());  // every row of every sequence, once at the end
    for (auto& [id, r] : seqs_) pool_.release(id);
    seqs_.clear();
    check_books();
    BARATO_FUZZ_CHECK(pool_.free_blocks() == cfg_.n_blocks, "blocks leaked after releasing every sequence");
  }

 private:
  RefSeq fresh() const { return RefSeq{{}, std::vector<std::size_t>(cfg_.n_layers, 0)}; }

  SeqId pick(barato::fuzz::Input& in) {
    auto it = seqs_.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(in.in(0, seqs_.size() - 1)));
    return it->first;
  }

  /// Tokens from a 3-letter alphabet, so prompts share prefixes often.
  Token token(barato::fuzz::Input& in) { return static_cast<Token>(in.byte() % 3); }

  void declare(SeqId s, barato::fuzz::Input& in, std::size_t n) {
    std::vector<Token> more(n);
    for (Token& t : more) t = token(in);
    pool_.declare_tokens(s, more);
    auto& r = seqs_[s];
    r.tokens.insert(r.tokens.end(), more.begin(), more.end());
  }

  void admit(barato::fuzz::Input& in) {
    std::vector<Token> prompt(in.in(0, 4 * cfg_.block_tokens));
    for (Token& t : prompt) t = token(in);
    const std::size_t free_before = pool_.free_blocks();
    const Pool::AdmitCost cost = pool_.blocks_to_admit(prompt);
    const Pool::Admission a = pool_.admit(prompt);
    const std::size_t B = cfg_.block_tokens;
    BARATO_FUZZ_CHECK(a.match.cached_tokens == cost.match.cached_tokens, "blocks_to_admit predicted another prefix hit");
    BARATO_FUZZ_CHECK(a.match.cached_tokens == a.match.blocks_hit * B, "cached tokens are not whole blocks");
    BARATO_FUZZ_CHECK(prompt.empty() ? a.match.cached_tokens == 0 : a.match.cached_tokens <= (prompt.size() - 1) / B * B,
                      "the hit covers the prompt's last token");
    BARATO_FUZZ_CHECK(!seqs_.contains(a.seq), "admit returned a live id");
    RefSeq r = fresh();
    r.tokens = prompt;
    for (auto& l : r.len) l = a.match.cached_tokens;
    seqs_[a.seq] = r;
    check_rows({a.seq});  // the hit's rows are the prompt's rows
    if (in.flag() && cost.blocks <= free_before && prompt.size() > a.match.cached_tokens) {
      const bool ok = append_rows(a.seq, prompt.size() - a.match.cached_tokens);
      BARATO_FUZZ_CHECK(ok, "the prefill blocks_to_admit said fits threw capacity_error");
      BARATO_FUZZ_CHECK(free_before - pool_.free_blocks() == cost.blocks, "blocks_to_admit said ", cost.blocks, ", the prefill took ",
                        free_before - pool_.free_blocks());
    }
  }

  void append(barato::fuzz::Input& in) {
    if (seqs_.empty()) return;
    const SeqId s = pick(in);
    const std::size_t n = in.in(1, 2 * cfg_.block_tokens + 1);
    RefSeq& r = seqs_[s];
    if (r.tokens.size() < r.longest() + n) declare(s, in, r.longest() + n - r.tokens.size());
    (void)append_rows(s, n);
  }

  /// Appends n positions to every layer of s (rows from the known tokens). True when every layer
  /// took them; checks the blocks_to_grow prediction either way.
  bool append_rows(SeqId s, std::size_t n) {
    touched_.push_back(s);
    RefSeq& r = seqs_[s];
    const std::size_t need = pool_.blocks_to_grow(s, n), free = pool_.free_blocks();
    const std::size_t H = cfg_.n_kv_heads, d = cfg_.head_dim;
    bool all = true;
    const std::vector<std::uint64_t> c = chain(r.tokens);
    for (std::size_t layer = 0; layer < cfg_.n_layers; ++layer) {
      std::vector<float> k(n * H * d), v(n * H * d);  // [n, H, d]
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t j = 0; j < d; ++j) {
            k[(i * H + h) * d + j] = row_value(c[r.len[layer] + i], layer, h, j, 0);
            v[(i * H + h) * d + j] = row_value(c[r.len[layer] + i], layer, h, j, 1);
          }
      const std::size_t before = pool_.free_blocks();
      try {
        pool_.append(s, layer, k, v);
        r.len[layer] += n;
      } catch (const barato::capacity_error&) {
        BARATO_FUZZ_CHECK(pool_.free_blocks() == before, "a failed append changed the free blocks");
        all = false;
      }
    }
    BARATO_FUZZ_CHECK(all == (need <= free), "blocks_to_grow said ", need, " of ", free, " free, the appends ",
                      all ? "fit" : "did not fit");
    if (all) BARATO_FUZZ_CHECK(free - pool_.free_blocks() == need, "blocks_to_grow said ", need, ", the append took ",
                               free - pool_.free_blocks());
    return all;
  }

  std::vector<SeqId> live_ids() const {
    std::vector<SeqId> ids;
    for (const auto& [id, r] : seqs_) ids.push_back(id);
    return ids;
  }

  /// Every row of the given sequences and of every sequence sharing a block with one of them (a
  /// write that skipped copy-on-write shows there), against the rows of their known tokens.
  void check_rows(const std::vector<SeqId>& ids) const {
    std::set<std::uint32_t> blocks;
    for (const SeqId id : ids)
      if (seqs_.contains(id))
        for (const auto b : pool_.block_table(id)) blocks.insert(b);
    for (const auto& [id, r] : seqs_) {
      bool want = std::find(ids.begin(), ids.end(), id) != ids.end();
      for (const auto b : pool_.block_table(id)) want = want || blocks.contains(b);
      if (!want) continue;
      const std::vector<std::uint64_t> c = chain(r.tokens);
      for (std::size_t layer = 0; layer < cfg_.n_layers; ++layer) {
        BARATO_FUZZ_CHECK(r.len[layer] <= c.size(), "positions without known tokens");
        for (std::size_t p = 0; p < r.len[layer]; ++p)
          for (std::size_t h = 0; h < cfg_.n_kv_heads; ++h) {
            const auto k = pool_.key(id, layer, h, p), v = pool_.value(id, layer, h, p);
            for (std::size_t j = 0; j < cfg_.head_dim; ++j) {
              BARATO_FUZZ_CHECK(k[j] == row_value(c[p], layer, h, j, 0), "sequence ", id, " layer ", layer, " position ", p,
                                ": wrong key");
              BARATO_FUZZ_CHECK(v[j] == row_value(c[p], layer, h, j, 1), "sequence ", id, " layer ", layer, " position ", p,
                                ": wrong value");
            }
          }
      }
    }
  }

  /// Sizes, known tokens, tables, reference counts, free blocks and the free list.
  void check_books() const {
    const std::size_t B = cfg_.block_tokens;
    std::vector<std::uint32_t> refs(cfg_.n_blocks, 0);
    for (const auto& [id, r] : seqs_) {
      BARATO_FUZZ_CHECK(pool_.is_live(id), "sequence ", id, " is not live");
      const auto table = pool_.block_table(id);
      BARATO_FUZZ_CHECK(table.size() == (r.longest() + B - 1) / B, "sequence ", id, ": table of ", table.size(), " blocks for ",
                        r.longest(), " positions");
      for (const auto b : table) {
        BARATO_FUZZ_CHECK(b < cfg_.n_blocks, "block id out of range");
        ++refs[b];
      }
      const auto toks = pool_.tokens(id);
      BARATO_FUZZ_CHECK(std::vector<Token>(toks.begin(), toks.end()) == r.tokens, "sequence ", id, ": known tokens differ");
      for (std::size_t layer = 0; layer < cfg_.n_layers; ++layer)
        BARATO_FUZZ_CHECK(pool_.size(id, layer) == r.len[layer], "sequence ", id, " layer ", layer, ": size ",
                          pool_.size(id, layer), ", expected ", r.len[layer]);
    }
    std::size_t used = 0;
    for (std::size_t b = 0; b < cfg_.n_blocks; ++b) {
      BARATO_FUZZ_CHECK(pool_.refcount(static_cast<Pool::BlockId>(b)) == refs[b], "block ", b, ": refcount ",
                        pool_.refcount(static_cast<Pool::BlockId>(b)), ", tables hold it ", refs[b], " times");
      used += refs[b] > 0 ? 1 : 0;
    }
    BARATO_FUZZ_CHECK(pool_.used_blocks() == used, "used_blocks ", pool_.used_blocks(), ", expected ", used);
    BARATO_FUZZ_CHECK(pool_.free_blocks() + used == cfg_.n_blocks, "free + used != n_blocks");
    const std::vector<Pool::BlockId> fl = pool_.free_list();
    BARATO_FUZZ_CHECK(fl.size() == pool_.free_blocks(), "free list of ", fl.size(), ", free_blocks ", pool_.free_blocks());
    std::set<Pool::BlockId> distinct(fl.begin(), fl.end());
    BARATO_FUZZ_CHECK(distinct.size() == fl.size(), "a block twice on the free list");
    for (const auto b : fl) BARATO_FUZZ_CHECK(refs[b] == 0, "block ", b, " is free and in a table");
    BARATO_FUZZ_CHECK(pool_.cached_blocks() <= cfg_.n_blocks, "more cached blocks than blocks");
  }

  barato::kv::PagedConfig cfg_;
  Pool pool_;
  std::map<SeqId, RefSeq> seqs_;
  std::vector<SeqId> touched_;  // sequences the current operation changed
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  barato::fuzz::Input in(data, size);
  const barato::kv::PagedConfig cfg{.n_layers = in.in(1, 3),
                                    .n_kv_heads = in.in(1, 2),
                                    .head_dim = in.in(1, 4),
                                    .block_tokens = in.in(1, 8),
                                    .n_blocks = in.in(1, 24),
                                    .extent_blocks = in.in(0, 4),
                                    .prefix_caching = in.flag()};
  Harness h(cfg);
  h.run(in);
  return 0;
}
