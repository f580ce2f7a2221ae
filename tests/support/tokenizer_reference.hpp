#pragma once
// Scalar reference of llama2.c run.c's encode(): the oracle for barato_examples::Tokenizer::encode.
// A literal transcription of the quadratic algorithm (rescan every adjacent pair for every merge),
// with its own sorted-vocabulary binary search, written for clarity rather than speed.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace barato::test {

class TokenizerReference {
 public:
  TokenizerReference(std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    for (std::size_t i = 0; i < pieces_.size(); ++i) sorted_.emplace_back(pieces_[i], static_cast<int>(i));
    // Stable: among equal pieces the lowest id comes first (run.c's qsort leaves that unspecified).
    std::stable_sort(sorted_.begin(), sorted_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }

  /// Id of `s` by binary search, or -1 (run.c's str_lookup).
  [[nodiscard]] int lookup(std::string_view s) const {
    auto it = std::lower_bound(sorted_.begin(), sorted_.end(), s,
                               [](const auto& e, std::string_view key) { return std::string_view(e.first) < key; });
    return (it != sorted_.end() && it->first == s) ? it->second : -1;
  }

  /// run.c encode(text, bos, eos=0), quadratic.
  [[nodiscard]] std::vector<int> encode(std::string_view text, bool bos) const {
    std::vector<int> tokens;
    if (bos) tokens.push_back(1);
    if (!text.empty()) tokens.push_back(lookup(" "));
    // UTF-8 code points, grouped exactly as run.c does (byte by byte with a lookahead).
    std::string buf;
    for (std::size_t c = 0; c < text.size(); ++c) {
      const auto byte = static_cast<unsigned char>(text[c]);
      if ((byte & 0xC0) != 0x80) buf.clear();
      buf.push_back(text[c]);
      const bool next_is_cont = c + 1 < text.size() && (static_cast<unsigned char>(text[c + 1]) & 0xC0) == 0x80;
      if (next_is_cont && buf.size() < 4) continue;
      const int id = lookup(buf);
      if (id != -1) {
        tokens.push_back(id);
      } else {
        for (const char b : buf) tokens.push_back(static_cast<unsigned char>(b) + 3);
      }
      buf.clear();
    }
    // Merges run over the whole array, BOS and dummy prefix included (as in run.c).
    while (true) {
      float best_score = -1e10f;
      int best_id = -1;
      std::size_t best_idx = 0;
      bool found = false;
      for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
        const std::string merged = pieces_[static_cast<std::size_t>(tokens[i])] + pieces_[static_cast<std::size_t>(tokens[i + 1])];
        const int id = lookup(merged);
        if (id != -1 && scores_[static_cast<std::size_t>(id)] > best_score) {
          best_score = scores_[static_cast<std::size_t>(id)];
          best_id = id;
          best_idx = i;
          found = true;
        }
      }
      if (!found) break;
      tokens[best_idx] = best_id;
      tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
    }
    return tokens;
  }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::pair<std::string, int>> sorted_;
};

}  // namespace barato::test
