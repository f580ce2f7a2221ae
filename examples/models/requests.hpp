#pragma once
/// \file
/// The request file of `barato_batch`: JSON Lines, one request object per line, e.g.
///
///   {"id": "r1", "prompt": "Once upon a time", "max_tokens": 64, "temperature": 0, "seed": 7, "arrival": 0}
///
/// Keys (every other key is an error, so a typo does not pass silently):
///   id           string, unique in the file (default "line N")
///   prompt       string (tokenized by the tool, BOS first), or
///   prompt_ids   array of token ids (exactly one of prompt / prompt_ids)
///   max_tokens   integer ≥ 1: tokens to generate (required)
///   temperature  number ≥ 0 (0 = greedy; default 0)   top_k integer ≥ 0 (0 = off)
///   top_p        number in (0, 1] (default 1)          min_p number in [0, 1) (default 0)
///   seed         integer ≥ 0 (default 0)               arrival integer step ≥ 0 (default 0)
///   priority     integer (higher first; default 0)     stop array of token ids (default none)
/// Blank lines are skipped. The whole file is validated before anything runs: the first problem
/// throws `RequestFileError` naming FILE:LINE:COLUMN, what was expected and what was found.
/// Strings follow RFC 8259 (escapes incl. \uXXXX and surrogate pairs; raw control characters are
/// errors); numbers are parsed exactly as written (an integer key rejects 1.5 and 1e3).

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/core/token.hpp"
#include "models/read_file.hpp"

namespace barato_examples {

/// A malformed request file: the message names FILE:LINE:COLUMN, the expectation and what was found.
class RequestFileError : public barato::error {
 public:
  using barato::error::error;
};

/// One request as written in the file (before tokenization).
struct RequestSpec {
  std::string id;
  std::optional<std::string> prompt;
  std::optional<std::vector<barato::Token>> prompt_ids;
  std::size_t max_tokens = 0;
  float temperature = 0.0f;
  std::size_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::uint64_t seed = 0;
  std::size_t arrival = 0;
  int priority = 0;
  std::vector<barato::Token> stop;
  std::size_t line = 0;  ///< 1-based line in the file
};

namespace detail {

/// A cursor over one line with the error context (file, line, column).
class JsonLine {
 public:
  JsonLine(std::string_view text, std::string_view file, std::size_t line) : s_(text), file_(file), line_(line) {}

  [[noreturn]] void fail(std::string_view expected) const {
    std::string found;
    if (i_ >= s_.size()) found = "end of line";
    else {
      found = "'";
      for (std::size_t k = i_; k < s_.size() && k < i_ + 12; ++k) found += s_[k];
      found += i_ + 12 < s_.size() ? "…'" : "'";
    }
    throw RequestFileError(std::string(file_) + ":" + std::to_string(line_) + ":" + std::to_string(i_ + 1) + ": expected " +
                           std::string(expected) + ", found " + found);
  }
  [[noreturn]] void fail_value(std::string_view key, std::string_view expected, std::string_view found) const {
    throw RequestFileError(std::string(file_) + ":" + std::to_string(line_) + ": \"" + std::string(key) + "\": expected " +
                           std::string(expected) + ", found " + std::string(found));
  }
  void ws() noexcept {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  [[nodiscard]] bool peek(char c) noexcept {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c, std::string_view what) {
    if (!peek(c)) fail(what);
    ++i_;
  }
  [[nodiscard]] bool at_end() noexcept {
    ws();
    return i_ >= s_.size();
  }

  /// A JSON string (after optional whitespace), UTF-8 encoded.
  std::string string() {
    expect('"', "a string");
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("a closing '\"'");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("no raw control character in a string (escape it)");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) fail("an escape character");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') fail("a low surrogate \\uDC00…\\uDFFF");
            i_ += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a low surrogate \\uDC00…\\uDFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            --i_;
            fail("no lone low surrogate");
          }
          utf8(cp, out);
          break;
        }
        default: i_ -= 1; fail("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  /// The raw text of a JSON number (validated against the JSON grammar).
  std::string_view number() {
    ws();
    const std::size_t b = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || !digit(s_[i_])) fail("a number");
    if (s_[i_] == '0') ++i_;
    else
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (i_ >= s_.size() || !digit(s_[i_])) fail("digits after '.'");
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (i_ >= s_.size() || !digit(s_[i_])) fail("exponent digits");
      while (i_ < s_.size() && digit(s_[i_])) ++i_;
    }
    return s_.substr(b, i_ - b);
  }

  /// Skips any JSON value's text kind check: returns a short name of the value starting here.
  [[nodiscard]] std::string_view kind() noexcept {
    ws();
    if (i_ >= s_.size()) return "end of line";
    switch (s_[i_]) {
      case '"': return "a string";
      case '[': return "an array";
      case '{': return "an object";
      case 't': case 'f': return "a boolean";
      case 'n': return "null";
      default: return "a number";
    }
  }

 private:
  static bool digit(char c) noexcept { return c >= '0' && c <= '9'; }
  std::uint32_t hex4() {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      if (i_ >= s_.size()) fail("4 hex digits after \\u");
      const char c = s_[i_];
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("4 hex digits after \\u");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++i_;
    }
    return v;
  }
  static void utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string_view s_, file_;
  std::size_t line_;
  std::size_t i_ = 0;
};

/// An integer in [lo, hi] from JSON number text (no fraction, no exponent).
template <class I>
I integer_value(JsonLine& j, std::string_view key, std::string_view text, I lo, I hi, std::string_view expected) {
  long long v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size() || static_cast<long double>(v) < static_cast<long double>(lo) ||
      static_cast<long double>(v) > static_cast<long double>(hi))
    j.fail_value(key, expected, text);
  return static_cast<I>(v);
}

/// A JSON number as a float: a value beyond float's range (1e39 overflows to infinity) is refused,
/// not turned into inf (found by tests/fuzz/requests_fuzz.cpp: "temperature": 1.5e51 was accepted).
inline float float_value(JsonLine& j, std::string_view key, std::string_view text, std::string_view expected) {
  const double v = std::strtod(std::string(text).c_str(), nullptr);
  if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v)))
    j.fail_value(key, std::string(expected) + " (within float range)", text);
  return static_cast<float>(v);
}

inline std::vector<barato::Token> id_array(JsonLine& j, std::string_view key) {
  if (!j.peek('[')) j.fail_value(key, "an array of token ids", j.kind());
  j.expect('[', "'['");
  std::vector<barato::Token> ids;
  if (j.peek(']')) {
    j.expect(']', "']'");
    return ids;
  }
  while (true) {
    const std::string_view t = j.number();
    ids.push_back(integer_value<barato::Token>(j, key, t, 0, INT32_MAX, "token ids ≥ 0"));
    if (j.peek(',')) {
      j.expect(',', "','");
      continue;
    }
    j.expect(']', "',' or ']'");
    return ids;
  }
}

/// Parses one non-blank line into a RequestSpec.
inline RequestSpec parse_request_line(std::string_view text, std::string_view file, std::size_t line) {
  JsonLine j(text, file, line);
  RequestSpec r;
  r.line = line;
  r.id = "line " + std::to_string(line);
  std::set<std::string, std::less<>> seen;
  bool has_max = false;
  j.expect('{', "'{' (one JSON object per line)");
  if (!j.peek('}')) {
    while (true) {
      const std::string key = j.string();
      if (!seen.insert(key).second) j.fail_value(key, "each key once", "a second \"" + key + "\"");
      j.expect(':', "':'");
      auto num = [&] {
        if (j.kind() != "a number") j.fail_value(key, "a number", j.kind());
        return j.number();
      };
      if (key == "id") {
        if (j.kind() != "a string") j.fail_value(key, "a string", j.kind());
        r.id = j.string();
      } else if (key == "prompt") {
        if (j.kind() != "a string") j.fail_value(key, "a string", j.kind());
        r.prompt = j.string();
      } else if (key == "prompt_ids") {
        r.prompt_ids = id_array(j, key);
        if (r.prompt_ids->empty()) j.fail_value(key, "at least one token id", "[]");
      } else if (key == "stop") {
        r.stop = id_array(j, key);
      } else if (key == "max_tokens") {
        r.max_tokens = integer_value<std::size_t>(j, key, num(), 1, std::size_t{1} << 40, "an integer ≥ 1");
        has_max = true;
      } else if (key == "temperature") {
        const std::string_view t = num();
        r.temperature = float_value(j, key, t, "a number ≥ 0");
        if (r.temperature < 0.0f) j.fail_value(key, "a number ≥ 0", t);
      } else if (key == "top_k") {
        r.top_k = integer_value<std::size_t>(j, key, num(), 0, std::size_t{1} << 40, "an integer ≥ 0");
      } else if (key == "top_p") {
        const std::string_view t = num();
        r.top_p = float_value(j, key, t, "a number in (0, 1]");
        if (!(r.top_p > 0.0f && r.top_p <= 1.0f)) j.fail_value(key, "a number in (0, 1]", t);
      } else if (key == "min_p") {
        const std::string_view t = num();
        r.min_p = float_value(j, key, t, "a number in [0, 1)");
        if (!(r.min_p >= 0.0f && r.min_p < 1.0f)) j.fail_value(key, "a number in [0, 1)", t);
      } else if (key == "seed") {
        const std::string_view t = num();
        unsigned long long v = 0;
        const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc{} || p != t.data() + t.size()) j.fail_value(key, "an integer in [0, 2^64)", t);
        r.seed = v;
      } else if (key == "arrival") {
        r.arrival = integer_value<std::size_t>(j, key, num(), 0, std::size_t{1} << 40, "an integer step ≥ 0");
      } else if (key == "priority") {
        r.priority = integer_value<int>(j, key, num(), -1000000, 1000000, "an integer in [-10^6, 10^6]");
      } else {
        j.fail_value(key, "one of id, prompt, prompt_ids, max_tokens, temperature, top_k, top_p, min_p, seed, arrival, "
                          "priority, stop", "an unknown key");
      }
      if (j.peek(',')) {
        j.expect(',', "','");
        continue;
      }
      j.expect('}', "',' or '}'");
      break;
    }
  } else {
    j.expect('}', "'}'");
  }
  if (!j.at_end()) j.fail("the end of the line after the object");
  if (r.prompt.has_value() == r.prompt_ids.has_value())
    j.fail_value("prompt", "exactly one of \"prompt\" and \"prompt_ids\"", r.prompt ? "both" : "neither");
  if (!has_max) j.fail_value("max_tokens", "a \"max_tokens\" key (tokens to generate)", "none");
  return r;
}

}  // namespace detail

/// Parses a whole JSONL text (named `file` in messages). A UTF-8 byte order mark at the start is
/// skipped (editors on Windows write one; RFC 8259 lets a parser ignore it). Throws
/// `RequestFileError` at the first problem (incl. a duplicate id, or a file without requests);
/// nothing is returned partially.
[[nodiscard]] inline std::vector<RequestSpec> parse_requests(std::string_view text, std::string_view file) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<RequestSpec> out;
  std::set<std::string, std::less<>> ids;
  std::size_t line = 0;
  for (std::size_t b = 0; b <= text.size();) {
    std::size_t e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    ++line;
    const std::string_view l = text.substr(b, e - b);
    if (l.find_first_not_of(" \t\r") != std::string_view::npos) {
      RequestSpec r = detail::parse_request_line(l, file, line);
      if (!ids.insert(r.id).second)
        throw RequestFileError(std::string(file) + ":" + std::to_string(line) + ": \"id\": expected a unique id, found \"" +
                               r.id + "\" again");
      out.push_back(std::move(r));
    }
    b = e + 1;
  }
  if (out.empty()) throw RequestFileError(std::string(file) + ": expected at least one request line, found none");
  return out;
}

/// Reads (at most kMaxRequestFileBytes, see read_file.hpp) and parses a request file. Throws
/// `barato::io_error` when it cannot be read or is larger than the limit (an endless stream too).
[[nodiscard]] inline std::vector<RequestSpec> load_requests(const std::filesystem::path& path) {
  const std::string text = read_bounded(path, kMaxRequestFileBytes, "request file");
  return parse_requests(text, path.string());
}

}  // namespace barato_examples
