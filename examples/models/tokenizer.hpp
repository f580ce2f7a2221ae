#pragma once
/// \file
/// The llama2.c tokenizer: file loader, run.c-compatible BPE encoder (fast), decoder and safe print.
///
/// File format (llama2.c `tokenizer.bin`, little-endian): int32 max_token_length, then one record per
/// token id: float32 merge score, int32 byte length, that many bytes (no NUL). The file does not store
/// the vocabulary size; pass the model's, or let the loader read records until the end of the file.
///
/// Encoding follows llama2.c `run.c` `encode()` exactly:
///  1. optional BOS (id 1);
///  2. when the text is non-empty, the dummy prefix: the id of the piece " " (SentencePiece's
///     add_dummy_prefix; `set_dummy_prefix(false)` leaves it out, as a GGUF vocabulary with
///     `tokenizer.ggml.add_space_prefix = false` asks);
///  3. the text is cut into UTF-8 code points (a lead byte plus up to 3 continuation bytes; stray
///     continuation bytes group the same way run.c groups them); each code point found in the
///     vocabulary becomes its id, otherwise each of its bytes b becomes the byte-fallback id b + 3;
///  4. repeatedly merge the adjacent pair whose concatenated piece is in the vocabulary with the
///     highest score (leftmost on ties; scores ≤ −1e10 never merge), until no pair merges.
/// run.c rescans the whole sequence for every merge (O(n²)). Here the symbols form a linked list and
/// the candidate merges sit in a priority queue ordered by (score desc, position asc); entries made
/// stale by a neighbouring merge are skipped when popped (lazy invalidation), so encoding is
/// O(n log n) and produces the same tokens (each pop is the pair run.c's scan would pick). Pair
/// lookups use a precomputed (id, id) → id hash table instead of concatenating strings.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "models/read_file.hpp"

namespace barato_examples {

using barato::Token;

/// Special ids of llama2.c tokenizers.
inline constexpr Token kBos = 1;
inline constexpr Token kEos = 2;
/// Byte b falls back to id b + kByteFallbackOffset.
inline constexpr Token kByteFallbackOffset = 3;
/// run.c's initial best score: merges scoring at or below it are never applied.
inline constexpr float kNoMergeScore = -1e10f;
/// Longest piece (and max_token_length) a Tokenizer accepts, in bytes. Building the merge tables
/// splits every piece at every byte, O(len²) per piece, so an unbounded length would let a small
/// hostile file cost hours; real llama2.c tokenizers stay far below (tok512: 7, Llama 2's: 48).
inline constexpr std::size_t kMaxTokenLength = 1024;
/// Longest concatenation of two symbols the encoder's boundary test (`crossable`) looks up; longer
/// ones are assumed crossable (costs only speed), so its table holds O(Σ len · 32) substrings.
inline constexpr std::size_t kMaxCrossableBytes = 32;

class Tokenizer {
 public:
  /// Builds a tokenizer from pieces and scores (same length, ≥ 259 = 3 specials + 256 byte pieces).
  /// `max_token_length` (≤ kMaxTokenLength) bounds every piece's length. Throws `barato::value_error`
  /// otherwise.
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::size_t max_token_length)
      : pieces_(std::move(pieces)), scores_(std::move(scores)), max_len_(max_token_length) {
    barato::require<barato::value_error>(max_len_ <= kMaxTokenLength, "Tokenizer: max_token_length ", max_len_,
                                         " exceeds the supported maximum of ", kMaxTokenLength, " bytes");
    barato::require<barato::value_error>(pieces_.size() == scores_.size(), "Tokenizer: ", pieces_.size(), " pieces but ",
                                         scores_.size(), " scores");
    barato::require<barato::value_error>(pieces_.size() >= 259, "Tokenizer: expected >= 259 tokens (3 special + 256 byte "
                                                                "pieces), found ", pieces_.size());
    lookup_.reserve(pieces_.size() * 2);
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      barato::require<barato::value_error>(pieces_[i].size() <= max_len_, "Tokenizer: piece ", i, " has ", pieces_[i].size(),
                                           " bytes, more than max_token_length ", max_len_);
      lookup_.emplace(std::string_view(pieces_[i]), static_cast<Token>(i));  // the first id wins on duplicates
    }
    space_id_ = find(" ");
    build_merge_tables();
  }
  Tokenizer(const Tokenizer&) = delete;  // lookup_ holds views into pieces_
  Tokenizer& operator=(const Tokenizer&) = delete;
  Tokenizer(Tokenizer&& o) noexcept = default;  // moving strings of a vector keeps their buffers (vector move)
  Tokenizer& operator=(Tokenizer&&) noexcept = default;

  [[nodiscard]] std::size_t vocab_size() const noexcept { return pieces_.size(); }
  [[nodiscard]] std::size_t max_token_length() const noexcept { return max_len_; }
  [[nodiscard]] const std::string& piece(Token id) const { return pieces_.at(checked(id)); }
  [[nodiscard]] float score(Token id) const { return scores_.at(checked(id)); }
  [[nodiscard]] std::span<const std::string> pieces() const noexcept { return pieces_; }
  [[nodiscard]] std::span<const float> scores() const noexcept { return scores_; }

  /// Id of the piece equal to `s`, or −1.
  [[nodiscard]] Token find(std::string_view s) const noexcept {
    const auto it = lookup_.find(s);
    return it == lookup_.end() ? Token{-1} : it->second;
  }

  /// Whether encode puts the dummy prefix (" ") before a non-empty text (default: yes, as run.c).
  [[nodiscard]] bool dummy_prefix() const noexcept { return dummy_prefix_; }
  void set_dummy_prefix(bool on) noexcept { dummy_prefix_ = on; }

  /// Whether a prompt starts with BOS (default: yes, as run.c; a GGUF vocabulary's
  /// `tokenizer.ggml.add_bos_token` may say no). Used by `encode_prompt`; `encode` takes it explicitly.
  [[nodiscard]] bool add_bos() const noexcept { return add_bos_; }
  void set_add_bos(bool on) noexcept { add_bos_ = on; }

  /// run.c's encode (see the file comment). Appends to `out`. O(n log n) in the text length.
  /// Throws `barato::value_error` when the text is non-empty, the dummy prefix is on and the
  /// vocabulary has no " " piece.
  void encode(std::string_view text, bool bos, bool eos, std::vector<Token>& out) const {
    if (text.empty()) {
      if (bos) out.push_back(kBos);
    } else {
      barato::require<barato::value_error>(space_id_ >= 0 || !dummy_prefix_,
                                           "Tokenizer::encode: the vocabulary has no \" \" piece for the dummy prefix");
      std::vector<Token> syms;
      syms.reserve(text.size() + 2);
      if (bos) syms.push_back(kBos);  // run.c merges over the whole array, BOS included
      if (dummy_prefix_) syms.push_back(space_id_);
      split_code_points(text, syms);
      merge_segments(syms);
      out.insert(out.end(), syms.begin(), syms.end());
    }
    if (eos) out.push_back(kEos);
  }
  [[nodiscard]] std::vector<Token> encode(std::string_view text, bool bos = true, bool eos = false) const {
    std::vector<Token> out;
    encode(text, bos, eos, out);
    return out;
  }

  /// A prompt's ids: `encode(text, add_bos())`, except that an empty text still gives BOS (a decoder
  /// needs one token to start from).
  [[nodiscard]] std::vector<Token> encode_prompt(std::string_view text) const { return encode(text, add_bos_ || text.empty()); }

  /// Step 3 of encode alone: code points → ids or byte-fallback ids (no dummy prefix, no merges).
  void split_code_points(std::string_view text, std::vector<Token>& out) const {
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
      // run.c: a group starts at any byte and extends over following continuation bytes (10xxxxxx)
      // while it holds fewer than 4 bytes.
      std::size_t len = 1;
      while (i + len < n && len < 4 && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
      const std::string_view cp = text.substr(i, len);
      const Token id = len == 1 ? single_byte_id_[static_cast<unsigned char>(cp[0])] : find(cp);
      if (id >= 0) {
        out.push_back(id);
      } else {
        for (const char c : cp) out.push_back(static_cast<Token>(static_cast<unsigned char>(c)) + kByteFallbackOffset);
      }
      i += len;
    }
  }

  /// run.c's decode(prev, token): after BOS a leading ' ' is stripped; a piece "<0xXX>" (1–2 hex
  /// digits) is the raw byte XX. The view stays valid as long as the tokenizer.
  [[nodiscard]] std::string_view decode(Token prev, Token token) const {
    std::string_view p = pieces_.at(checked(token));
    if (prev == kBos && !p.empty() && p[0] == ' ') p.remove_prefix(1);
    if (const int b = byte_piece_value(p); b >= 0) return {&kBytes[static_cast<std::size_t>(b)], 1};
    return p;
  }

  /// Appends `piece` to `out` the way run.c's safe_printf prints it: the piece ends at its first NUL;
  /// a single byte that is neither printable ASCII nor whitespace is dropped.
  static void safe_append(std::string_view piece, std::string& out) {
    if (const auto z = piece.find('\0'); z != std::string_view::npos) piece = piece.substr(0, z);
    if (piece.empty()) return;
    if (piece.size() == 1) {
      const auto b = static_cast<unsigned char>(piece[0]);
      const bool printable = b >= 0x20 && b <= 0x7E;
      const bool space = b == ' ' || (b >= '\t' && b <= '\r');
      if (!printable && !space) return;
    }
    out.append(piece);
  }

  /// Text of `ids[1:]` decoded with run.c's rules (each token decoded after its predecessor) and
  /// filtered by `safe_append`: exactly what run.c prints for that token sequence.
  [[nodiscard]] std::string decode_text(std::span<const Token> ids) const {
    std::string s;
    for (std::size_t i = 1; i < ids.size(); ++i) safe_append(decode(ids[i - 1], ids[i]), s);
    return s;
  }

  /// The bytes of `ids[1:]`, each token decoded after its predecessor, with nothing filtered: byte
  /// pieces ("<0xXX>") are joined into the characters they spell, so text a small vocabulary can only
  /// encode through byte fallback (accents, CJK, emoji) comes back whole. What the tools' JSON `text`
  /// holds (the JSON writer turns any byte sequence that is still not valid UTF-8 into U+FFFD);
  /// `decode_text` is what run.c prints, which drops every lone non-ASCII byte.
  [[nodiscard]] std::string decode_utf8(std::span<const Token> ids) const {
    std::string s;
    for (std::size_t i = 1; i < ids.size(); ++i) s.append(decode(ids[i - 1], ids[i]));
    return s;
  }

  /// Byte value of a "<0xXX>" piece (1–2 hex digits, as run.c's sscanf("<0x%02hhX>") accepts), else −1.
  [[nodiscard]] static int byte_piece_value(std::string_view p) noexcept {
    if (p.size() < 4 || p.substr(0, 3) != "<0x") return -1;
    int v = 0, digits = 0;
    for (std::size_t i = 3; i < p.size() && digits < 2; ++i, ++digits) {
      const char c = p[i];
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else break;
      v = v * 16 + d;
    }
    return digits == 0 ? -1 : v;
  }

 private:
  /// One char per byte value: decode() returns 1-byte views into it.
  static constexpr std::array<char, 256> kBytes = [] {
    std::array<char, 256> t{};
    for (std::size_t i = 0; i < 256; ++i) t[i] = static_cast<char>(static_cast<unsigned char>(i));
    return t;
  }();

  [[nodiscard]] std::size_t checked(Token id) const {
    barato::require<barato::value_error>(id >= 0 && static_cast<std::size_t>(id) < pieces_.size(), "Tokenizer: token id ", id,
                                         " outside [0, ", pieces_.size(), ")");
    return static_cast<std::size_t>(id);
  }

  /// Id of piece(a) + piece(b) when it is a vocabulary piece, else −1 (as `find` would return).
  /// Precomputed: every piece is split at every byte into two vocabulary pieces, and the pair of
  /// their canonical ids (the first id of each string) maps to the piece's canonical id. An
  /// open-addressing table keyed by the 64-bit pair replaces string concatenation and hashing.
  [[nodiscard]] Token pair_id(Token a, Token b) const noexcept {
    const Token ca = canonical_[static_cast<std::size_t>(a)], cb = canonical_[static_cast<std::size_t>(b)];
    if (pieces_[static_cast<std::size_t>(ca)].empty()) return cb;  // "" + p = p
    if (pieces_[static_cast<std::size_t>(cb)].empty()) return ca;
    const std::uint64_t key = pair_key(ca, cb);
    for (std::size_t h = hash_slot(key);; h = (h + 1) & table_mask_) {
      const auto& e = table_[h];
      if (e.id < 0) return -1;
      if (e.key == key) return e.id;
    }
  }

  static std::uint64_t pair_key(Token a, Token b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  [[nodiscard]] std::size_t hash_slot(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> table_shift_);  // top bits (Fibonacci hashing)
  }

  void build_merge_tables() {
    for (std::size_t b = 0; b < 256; ++b) single_byte_id_[b] = find(std::string_view(&kBytes[b], 1));
    canonical_.resize(pieces_.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) canonical_[i] = find(pieces_[i]);
    std::vector<std::pair<std::uint64_t, Token>> entries;
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      if (canonical_[i] != static_cast<Token>(i)) continue;  // duplicates map like their first copy
      const std::string_view p = pieces_[i];
      for (std::size_t k = 1; k < p.size(); ++k) {
        const Token a = find(p.substr(0, k)), b = find(p.substr(k));
        if (a >= 0 && b >= 0) entries.emplace_back(pair_key(a, b), static_cast<Token>(i));
      }
    }
    // Merge ranks: equal scores share a rank, higher score → higher rank, 0 = never merges.
    std::vector<float> distinct;
    for (const float sc : scores_)
      if (sc > kNoMergeScore) distinct.push_back(sc);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    merge_rank_.assign(scores_.size(), 0);
    for (std::size_t i = 0; i < scores_.size(); ++i)
      if (scores_[i] > kNoMergeScore)
        merge_rank_[i] = 1 + static_cast<std::uint32_t>(std::lower_bound(distinct.begin(), distinct.end(), scores_[i]) -
                                                        distinct.begin());
    std::size_t cap = 16;
    table_shift_ = 60;
    while (cap < 2 * entries.size() + 1) {
      cap *= 2;
      --table_shift_;
    }
    table_.assign(cap, Slot{});
    table_mask_ = cap - 1;
    for (const auto& [key, id] : entries) {
      std::size_t h = hash_slot(key);
      while (table_[h].id >= 0 && table_[h].key != key) h = (h + 1) & table_mask_;
      table_[h] = Slot{key, id};
    }
    // Hashes of every substring (≥ 2 bytes) of every piece: a boundary between two symbols whose
    // concatenation is not among them can never be crossed by a merge.
    std::vector<std::uint64_t> subs;
    for (const auto& p : pieces_)
      for (std::size_t i = 0; i < p.size(); ++i)
        for (std::size_t len = 2; i + len <= p.size() && len <= kMaxCrossableBytes; ++len)
          subs.push_back(bytes_hash(std::string_view(p).substr(i, len)));
    std::size_t scap = 16;
    while (scap < 2 * subs.size() + 1) scap *= 2;
    substrings_.assign(scap, 0);
    for (const std::uint64_t h : subs) {
      std::size_t i = static_cast<std::size_t>(h) & (scap - 1);
      while (substrings_[i] != 0 && substrings_[i] != h) i = (i + 1) & (scap - 1);
      substrings_[i] = h;
    }
  }

  /// FNV-1a over the bytes, never 0 (0 marks an empty slot).
  static std::uint64_t bytes_hash(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h | 1;
  }

  /// False only when no piece contains piece(a) + piece(b): then no merge ever spans a|b. May return
  /// true spuriously (hash collision, empty pieces), which only costs speed.
  [[nodiscard]] bool crossable(Token a, Token b) const noexcept {
    const std::string& pa = pieces_[static_cast<std::size_t>(a)];
    const std::string& pb = pieces_[static_cast<std::size_t>(b)];
    if (pa.empty() || pb.empty()) return true;
    if (pa.size() + pb.size() > max_len_) return false;
    if (pa.size() + pb.size() > kMaxCrossableBytes) return true;  // not in the table (see kMaxCrossableBytes)
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const char c : pa) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    h = bytes_hash(pb, h);
    const std::size_t mask = substrings_.size() - 1;
    for (std::size_t i = static_cast<std::size_t>(h) & mask;; i = (i + 1) & mask) {
      if (substrings_[i] == h) return true;
      if (substrings_[i] == 0) return false;
    }
  }

  /// Reused buffers of `merge`.
  struct MergeScratch {
    std::vector<std::uint32_t> prev, next;
    std::vector<unsigned char> dead;
    std::vector<std::uint64_t> heap;
  };

  /// Step 4 over the whole sequence: cut it at boundaries no merge can cross and merge each segment
  /// on its own. Merges in different segments never interact and within a segment they happen in
  /// run.c's global order, so the result equals merging the whole sequence at once — but every heap
  /// stays small and in cache.
  void merge_segments(std::vector<Token>& syms) const {
    MergeScratch scratch;
    std::size_t out = 0, start = 0;
    const std::size_t n = syms.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (i + 1 < n && crossable(syms[i], syms[i + 1])) continue;
      const std::size_t len = merge(syms.data() + start, i + 1 - start, scratch);
      std::copy(syms.begin() + static_cast<std::ptrdiff_t>(start), syms.begin() + static_cast<std::ptrdiff_t>(start + len),
                syms.begin() + static_cast<std::ptrdiff_t>(out));
      out += len;
      start = i + 1;
    }
    syms.resize(out);
  }

  /// Step 4: greedy merges over a linked list of symbols with a lazily invalidated priority queue.
  /// A queue entry is one 64-bit key, (merge rank << 32) | (2³² − 1 − left position), so the max-heap
  /// pops the highest score first and the leftmost pair among equal scores. An entry is checked when
  /// popped: if the pair now starting at its position still merges at the entry's rank it is a current
  /// pair with the highest rank of all current pairs (every current pair is in the queue), so it is
  /// exactly the pair run.c's scan picks; otherwise it is stale and skipped.
  /// Merges syms[0, n) in place; returns the new length.
  std::size_t merge(Token* syms, std::size_t n, MergeScratch& sc) const {
    if (n < 2) return n;
    barato::require<barato::value_error>(n < UINT32_MAX, "Tokenizer::encode: text too long (", n, " symbols)");
    constexpr std::uint32_t kNone = UINT32_MAX;
    auto& prev = sc.prev;
    auto& next = sc.next;
    auto& dead = sc.dead;
    prev.resize(n);
    next.resize(n);
    dead.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = i == 0 ? kNone : static_cast<std::uint32_t>(i - 1);
      next[i] = i + 1 == n ? kNone : static_cast<std::uint32_t>(i + 1);
    }
    const auto rank_of = [&](std::uint32_t l, std::uint32_t r) -> std::uint32_t {
      const Token id = pair_id(syms[l], syms[r]);
      return id < 0 ? 0 : merge_rank_[static_cast<std::size_t>(id)];
    };
    const auto key = [](std::uint32_t rank, std::uint32_t l) {
      return (static_cast<std::uint64_t>(rank) << 32) | (UINT32_MAX - l);
    };
    auto& heap = sc.heap;
    heap.clear();
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (const std::uint32_t r = rank_of(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + 1)); r != 0)
        heap.push_back(key(r, static_cast<std::uint32_t>(i)));
    std::make_heap(heap.begin(), heap.end());
    const auto push = [&](std::uint32_t l, std::uint32_t r) {
      if (const std::uint32_t rank = rank_of(l, r); rank != 0) {
        heap.push_back(key(rank, l));
        std::push_heap(heap.begin(), heap.end());
      }
    };
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const std::uint64_t top = heap.back();
      heap.pop_back();
      const auto l = static_cast<std::uint32_t>(UINT32_MAX - (top & UINT32_MAX));
      const auto rank = static_cast<std::uint32_t>(top >> 32);
      const std::uint32_t r = next[l];
      if (dead[l] || r == kNone) continue;
      const Token id = pair_id(syms[l], syms[r]);
      if (id < 0 || merge_rank_[static_cast<std::size_t>(id)] != rank) continue;  // stale
      syms[l] = id;
      dead[r] = 1;
      const std::uint32_t nr = next[r];
      next[l] = nr;
      if (nr != kNone) prev[nr] = l;
      if (prev[l] != kNone) push(prev[l], l);
      if (nr != kNone) push(l, nr);
    }
    std::size_t w = 0;
    for (std::uint32_t i = 0; i != kNone; i = next[i]) syms[w++] = syms[i];
    return w;
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::size_t max_len_ = 0;
  std::unordered_map<std::string_view, Token> lookup_;
  Token space_id_ = -1;
  bool dummy_prefix_ = true;
  bool add_bos_ = true;
  std::array<Token, 256> single_byte_id_{};  // id of the 1-byte piece of each byte value, or −1
  std::vector<Token> canonical_;             // [vocab] first id with the same piece
  struct Slot {
    std::uint64_t key = 0;
    Token id = -1;  // −1: empty slot
  };
  std::vector<Slot> table_;  // open addressing: (canonical a, canonical b) → canonical id of a+b
  std::size_t table_mask_ = 0;
  int table_shift_ = 60;  // 64 − log2(table size)
  std::vector<std::uint64_t> substrings_;  // open-addressing set of substring hashes (0 = empty)
  std::vector<std::uint32_t> merge_rank_;  // [vocab] 1 + rank of the score among mergeable scores; 0 = never
};

/// Parses the bytes of a llama2.c tokenizer file (named `file` in messages). With `vocab_size` > 0
/// exactly that many records are read and trailing bytes are an error; with 0 records are read
/// until the end. Every read is length-checked before anything is allocated for it: a
/// max_token_length ≤ 0, above kMaxTokenLength or above the bytes after the header, a record
/// running past the end, a negative length, a piece longer than max_token_length, fewer records
/// than vocab_size → `barato::format_error` (file, byte offset, field, expected vs found). Memory
/// is reserved only for the records the file's size can hold.
[[nodiscard]] inline Tokenizer parse_tokenizer(std::string_view data, const std::string& file, std::size_t vocab_size = 0) {
  std::size_t off = 0;
  const auto need = [&](std::size_t n, const char* what) {
    if (data.size() - off < n)
      throw barato::format_error(file, off, std::string("truncated ") + what + ": expected " + std::to_string(n) +
                                                " bytes, found " + std::to_string(data.size() - off));
  };
  const auto read_i32 = [&](const char* what) {
    need(4, what);
    std::int32_t v;
    std::memcpy(&v, data.data() + off, 4);
    off += 4;
    return v;
  };
  const std::int32_t max_len = read_i32("header (max_token_length)");
  if (max_len <= 0) throw barato::format_error(file, 0, "max_token_length: expected > 0, found " + std::to_string(max_len));
  const std::size_t after_header = data.size() - off;
  if (static_cast<std::size_t>(max_len) > std::min(kMaxTokenLength, after_header))
    throw barato::format_error(file, 0, "max_token_length: expected <= " + std::to_string(kMaxTokenLength) +
                                            " and <= the " + std::to_string(after_header) +
                                            " bytes after the header, found " + std::to_string(max_len));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  // A record is at least 8 bytes (score + length): room is reserved for no more records than the
  // file can hold, whatever vocab_size says (a short file then fails at its first missing record).
  const std::size_t fit = std::min(vocab_size, after_header / 8);
  pieces.reserve(fit);
  scores.reserve(fit);
  while (vocab_size > 0 ? pieces.size() < vocab_size : off < data.size()) {
    const std::string rec = "token " + std::to_string(pieces.size());
    const std::size_t rec_off = off;
    need(4, (rec + " score").c_str());
    float score;
    std::memcpy(&score, data.data() + off, 4);
    off += 4;
    const std::size_t len_off = off;
    const std::int32_t len = read_i32((rec + " length").c_str());
    if (len < 0) throw barato::format_error(file, len_off, rec + " length: expected >= 0, found " + std::to_string(len));
    if (len > max_len)
      throw barato::format_error(file, len_off, rec + " length: expected <= max_token_length " + std::to_string(max_len) +
                                                    ", found " + std::to_string(len));
    if (data.size() - off < static_cast<std::size_t>(len))
      throw barato::format_error(file, off, rec + " (record at byte " + std::to_string(rec_off) + ") runs past the end: " +
                                                "expected " + std::to_string(len) + " bytes, found " +
                                                std::to_string(data.size() - off));
    pieces.emplace_back(data.data() + off, static_cast<std::size_t>(len));
    scores.push_back(score);
    off += static_cast<std::size_t>(len);
  }
  if (off != data.size())
    throw barato::format_error(file, off, "trailing bytes: expected the file to end after " + std::to_string(pieces.size()) +
                                              " tokens, found " + std::to_string(data.size() - off) + " more bytes");
  if (pieces.size() < 259)
    throw barato::format_error(file, off, "expected >= 259 tokens (3 special + 256 byte pieces), found " +
                                              std::to_string(pieces.size()));
  return Tokenizer(std::move(pieces), std::move(scores), static_cast<std::size_t>(max_len));
}

/// Reads a llama2.c tokenizer file (at most kMaxTokenizerFileBytes, see read_file.hpp) and parses
/// it with `parse_tokenizer`. Throws `barato::io_error` when it cannot be read or is too large.
[[nodiscard]] inline Tokenizer load_tokenizer(const std::filesystem::path& path, std::size_t vocab_size = 0) {
  const std::string data = read_bounded(path, kMaxTokenizerFileBytes, "tokenizer file");
  return parse_tokenizer(data, path.string(), vocab_size);
}

}  // namespace barato_examples
