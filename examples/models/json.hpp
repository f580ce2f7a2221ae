#pragma once
/// \file
/// A minimal JSON writer for the command-line tools' `--json` output: one flat object of strings,
/// numbers, booleans and integer arrays, keys in insertion order. Strings are escaped per RFC 8259;
/// bytes that are not valid UTF-8 (a model can emit lone byte-fallback tokens) become U+FFFD so the
/// output is always valid JSON.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace barato_examples {

/// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
[[nodiscard]] inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  const bool overlong = (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

/// `s` as a JSON string literal (with quotes).
[[nodiscard]] inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

/// Builds one JSON object: `JsonObject o; o.add("tokens", 12).add("text", s); puts(o.str())`.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value) { return raw(key, json_quote(value)); }
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  JsonObject& add(std::string_view key, double value) {
    if (!std::isfinite(value)) return raw(key, "null");
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    return raw(key, buf);
  }
  template <class I>
    requires std::is_integral_v<I>
  JsonObject& add(std::string_view key, I value) {
    return raw(key, std::to_string(value));
  }
  template <class I>
    requires std::is_integral_v<I>
  JsonObject& add(std::string_view key, std::span<const I> values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) s += ", ";
      s += std::to_string(values[i]);
    }
    return raw(key, s + "]");
  }
  /// The object text (one line).
  [[nodiscard]] std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonObject& raw(std::string_view key, std::string_view value) {
    if (!body_.empty()) body_ += ", ";
    body_ += json_quote(key);
    body_ += ": ";
    body_ += value;
    return *this;
  }
  std::string body_;
};

}  // namespace barato_examples
