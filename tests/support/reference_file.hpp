#pragma once
// Reader of the llama2c-greedy-v1 reference files (../shared/data/stories260K/reference/*.txt):
// `key: value` lines, `#` comments, unknown keys kept but ignored by the tests; and a small decoder
// for the JSON strings they hold (prompt_json, text_json).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace barato::test {

struct ReferenceFile {
  std::map<std::string, std::string> values;
  [[nodiscard]] const std::string& at(const std::string& key) const {
    const auto it = values.find(key);
    if (it == values.end()) throw std::runtime_error("reference file: missing key " + key);
    return it->second;
  }
  [[nodiscard]] std::vector<int> ids(const std::string& key) const {
    std::vector<int> out;
    std::istringstream in(at(key));
    int v;
    while (in >> v) out.push_back(v);
    return out;
  }
};

inline ReferenceFile read_reference_file(const std::filesystem::path& p) {
  ReferenceFile r;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    r.values[line.substr(0, colon)] = value;
  }
  return r;
}

inline void append_utf8(std::string& s, std::uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Decodes one JSON string literal (with its quotes). Throws std::runtime_error when malformed.
inline std::string parse_json_string(const std::string& j) {
  if (j.size() < 2 || j.front() != '"' || j.back() != '"') throw std::runtime_error("not a JSON string: " + j);
  std::string out;
  const auto hex4 = [&](std::size_t i) {
    if (i + 4 > j.size() - 1) throw std::runtime_error("bad \\u escape");
    return static_cast<std::uint32_t>(std::stoul(j.substr(i, 4), nullptr, 16));
  };
  for (std::size_t i = 1; i + 1 < j.size(); ++i) {
    if (j[i] != '\\') {
      out += j[i];
      continue;
    }
    const char e = j[++i];
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
        std::uint32_t cp = hex4(i + 1);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < j.size() && j[i + 1] == '\\' && j[i + 2] == 'u') {
          const std::uint32_t lo = hex4(i + 3);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        }
        append_utf8(out, cp);
        break;
      }
      default: throw std::runtime_error(std::string("bad escape \\") + e);
    }
  }
  return out;
}

}  // namespace barato::test
