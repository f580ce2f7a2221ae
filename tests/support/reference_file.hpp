#pragma once
// Reader of the llama2c-greedy-v1 reference files (../shared/data/stories260K/reference/*.txt):
// `key: value` lines, `#` comments, unknown keys kept but ignored by the tests; and a small decoder
// for the JSON strings they hold (prompt_json, text_json): the JSON reader of the examples' request files.

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/requests.hpp"

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

/// Decodes one JSON string literal (with its quotes), by the JSON reader of barato_batch's request
/// files (RFC 8259 escapes, surrogate pairs). Throws what that reader throws when malformed, and
/// `std::runtime_error` for text after the closing quote.
inline std::string parse_json_string(const std::string& j) {
  barato_examples::detail::JsonLine in(j, "reference file JSON string", 1);
  std::string out = in.string();
  if (!in.at_end()) throw std::runtime_error("not one JSON string: " + j);
  return out;
}

}  // namespace barato::test
