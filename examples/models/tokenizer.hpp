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
///  2. when the text is non-empty, the dummy prefix: the id of the piece " ";
///  3. the text is cut into UTF-8 code points (a lead byte plus up to 3 continuation bytes; stray
///     continuation bytes group the same way run.c groups them); each code point found in the
///     vocabulary becomes its id, otherwise each of its bytes b becomes the byte-fallback id b + 3;
///  4. repeatedly merge the adjacent pair whose concatenated piece is in the vocabulary with the
///     highest score (leftmost on ties; scores ≤ −1e10 never merge), until no pair merges.
/// run.c rescans the whole sequence for every merge (O(n²)). Here the symbols form a linked list and
/// the candidate merges sit in a priority queue ordered by (score desc, position asc); entries made
/// stale by a neighbouring merge are skipped when popped (lazy invalidation), so encoding is
/// O(n log n) and produces the same tokens (each pop is the pair run.c's scan would pick).

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"

namespace barato_examples {

using barato::Token;

/// Special ids of llama2.c tokenizers.
inline constexpr Token kBos = 1;
inline constexpr Token kEos = 2;
/// Byte b falls back to id b + kByteFallbackOffset.
inline constexpr Token kByteFallbackOffset = 3;
/// run.c's initial best score: merges scoring at or below it are never applied.
inline constexpr float kNoMergeScore = -1e10f;

class Tokenizer {
 public:
  /// Builds a tokenizer from pieces and scores (same length, ≥ 259 = 3 specials + 256 byte pieces).
  /// `max_token_length` bounds every piece's length. Throws `barato::value_error` otherwise.
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::size_t max_token_length)
      : pieces_(std::move(pieces)), scores_(std::move(scores)), max_len_(max_token_length) {
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

  /// run.c's encode (see the file comment). Appends to `out`. O(n log n) in the text length.
  /// Throws `barato::value_error` when the text is non-empty and the vocabulary has no " " piece.
  void encode(std::string_view text, bool bos, bool eos, std::vector<Token>& out) const {
    if (text.empty()) {
      if (bos) out.push_back(kBos);
    } else {
      barato::require<barato::value_error>(space_id_ >= 0, "Tokenizer::encode: the vocabulary has no \" \" piece for the dummy prefix");
      std::vector<Token> syms;
      syms.reserve(text.size() + 2);
      if (bos) syms.push_back(kBos);  // run.c merges over the whole array, BOS included
      syms.push_back(space_id_);
      split_code_points(text, syms);
      merge(syms);
      out.insert(out.end(), syms.begin(), syms.end());
    }
    if (eos) out.push_back(kEos);
  }
  [[nodiscard]] std::vector<Token> encode(std::string_view text, bool bos = true, bool eos = false) const {
    std::vector<Token> out;
    encode(text, bos, eos, out);
    return out;
  }

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
      const Token id = find(cp);
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

  /// Id of piece(a) + piece(b) when it is a vocabulary piece, else −1. `buf` holds 2·max_len bytes.
  [[nodiscard]] Token pair_id(Token a, Token b, std::string& buf) const {
    const std::string& pa = pieces_[static_cast<std::size_t>(a)];
    const std::string& pb = pieces_[static_cast<std::size_t>(b)];
    if (pa.size() + pb.size() > max_len_) return -1;  // no piece is that long
    buf.assign(pa);
    buf.append(pb);
    return find(buf);
  }

  struct Candidate {
    float score;
    std::uint32_t left;  ///< index of the left symbol (its original position: list order = index order)
    std::uint32_t right;
    std::uint32_t left_version, right_version;
    Token id;
    /// priority_queue pops the largest: higher score first, then the smaller (leftmost) position.
    friend bool operator<(const Candidate& x, const Candidate& y) noexcept {
      if (x.score != y.score) return x.score < y.score;
      return x.left > y.left;
    }
  };

  /// Step 4: greedy merges over a linked list of symbols with a lazily invalidated priority queue.
  void merge(std::vector<Token>& syms) const {
    const std::size_t n = syms.size();
    if (n < 2) return;
    barato::require<barato::value_error>(n < UINT32_MAX, "Tokenizer::encode: text too long (", n, " symbols)");
    constexpr std::uint32_t kNone = UINT32_MAX;
    std::vector<std::uint32_t> prev(n), next(n), version(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = i == 0 ? kNone : static_cast<std::uint32_t>(i - 1);
      next[i] = i + 1 == n ? kNone : static_cast<std::uint32_t>(i + 1);
    }
    std::vector<Candidate> heap_storage;
    heap_storage.reserve(n);
    std::priority_queue<Candidate> pq(std::less<Candidate>{}, std::move(heap_storage));
    std::string buf;
    buf.reserve(2 * max_len_ + 1);
    const auto push = [&](std::uint32_t l, std::uint32_t r) {
      const Token id = pair_id(syms[l], syms[r], buf);
      if (id < 0) return;
      const float s = scores_[static_cast<std::size_t>(id)];
      if (!(s > kNoMergeScore)) return;
      pq.push(Candidate{s, l, r, version[l], version[r], id});
    };
    for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + 1));

    constexpr std::uint32_t kDead = UINT32_MAX;
    while (!pq.empty()) {
      const Candidate c = pq.top();
      pq.pop();
      if (version[c.left] != c.left_version || version[c.right] != c.right_version) continue;  // stale
      // Both symbols are unchanged since the candidate was made, so they are still alive and adjacent.
      syms[c.left] = c.id;
      ++version[c.left];
      version[c.right] = kDead;  // never matches a stored version again (versions of live symbols stay small)
      const std::uint32_t nr = next[c.right];
      next[c.left] = nr;
      if (nr != kNone) prev[nr] = c.left;
      if (prev[c.left] != kNone) push(prev[c.left], c.left);
      if (nr != kNone) push(c.left, nr);
    }
    std::size_t w = 0;
    for (std::uint32_t i = 0; i != kNone; i = next[i]) syms[w++] = syms[i];
    syms.resize(w);
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::size_t max_len_ = 0;
  std::unordered_map<std::string_view, Token> lookup_;
  Token space_id_ = -1;
};

/// Reads a llama2.c tokenizer file. With `vocab_size` > 0 exactly that many records are read and
/// trailing bytes are an error; with 0 records are read until the end of the file. Every read is
/// length-checked: a record running past the end, a negative length, a piece longer than
/// max_token_length → `barato::format_error` (file, byte offset, expected vs found).
[[nodiscard]] inline Tokenizer load_tokenizer(const std::filesystem::path& path, std::size_t vocab_size = 0) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw barato::io_error(file + ": cannot open tokenizer file");
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw barato::io_error(file + ": read error");
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
  std::vector<std::string> pieces;
  std::vector<float> scores;
  if (vocab_size > 0) {
    pieces.reserve(vocab_size);
    scores.reserve(vocab_size);
  }
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

}  // namespace barato_examples
