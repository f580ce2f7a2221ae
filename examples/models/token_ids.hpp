#pragma once
/// \file
/// A token-id file for `barato_perplexity --ids`: whitespace-separated decimal ids, BOS (id 1) first —
/// e.g. another engine's greedy output, scored teacher-forced so two engines can be compared position
/// by position without free-running drift. `parse_token_ids` validates everything before anything runs:
/// a non-digit, an id outside the vocabulary, an empty file or a first id that is not BOS is a
/// `barato::format_error` naming the file and the byte offset.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"

namespace barato_examples {

/// The ids of `text` (the contents of `file`), each checked against [0, vocab); the first must be BOS (1).
[[nodiscard]] inline std::vector<barato::Token> parse_token_ids(std::string_view text, const std::string& file,
                                                                std::size_t vocab) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  std::vector<barato::Token> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    std::uint64_t v = 0;
    while (i < text.size() && !is_space(text[i])) {
      const char c = text[i];
      if (c < '0' || c > '9') {
        const auto uc = static_cast<unsigned char>(c);
        const std::string shown = (uc >= 0x20 && uc < 0x7f) ? "'" + std::string(1, c) + "'" : "byte " + std::to_string(uc);
        throw barato::format_error(file, i, "expected a token id (decimal digits separated by whitespace), found " + shown);
      }
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
      if (v >= vocab)
        throw barato::format_error(file, start,
                                   "token id " + std::string(text.substr(start, i + 1 - start)) +
                                       (i + 1 < text.size() && !is_space(text[i + 1]) ? "…" : "") +
                                       " outside the vocabulary [0, " + std::to_string(vocab) + ")");
      ++i;
    }
    if (ids.empty() && v != 1)
      throw barato::format_error(file, start, "expected BOS (id 1) as the first id, found " + std::to_string(v));
    ids.push_back(static_cast<barato::Token>(v));
  }
  if (ids.empty()) throw barato::format_error(file, text.size(), "expected at least one token id (BOS first), found none");
  return ids;
}

}  // namespace barato_examples
