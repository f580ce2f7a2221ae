// Fuzz harness: the JSON Lines request parser of barato_batch (examples/models/requests.hpp).
// Input: the text of a request file. A malformed file must be a RequestFileError naming
// FILE:LINE; anything else escaping, a crash or a sanitizer report is a defect. A file that parses
// must satisfy the documented contract: at least one request, unique ids, exactly one of prompt /
// prompt_ids (non-empty, ids ≥ 0), max_tokens ≥ 1, a finite temperature ≥ 0, top_p in (0, 1],
// min_p in [0, 1), priority in [-10^6, 10^6], lines in order; strings of a valid UTF-8 line stay
// valid UTF-8 after unescaping; and each request line parsed alone gives the same request.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "models/requests.hpp"

namespace {

using barato_examples::RequestSpec;

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (b < 0x80) len = 1, cp = b;
    else if ((b & 0xE0) == 0xC0) len = 2, cp = b & 0x1F;
    else if ((b & 0xF0) == 0xE0) len = 3, cp = b & 0x0F;
    else if ((b & 0xF8) == 0xF0) len = 4, cp = b & 0x07;
    else return false;
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

bool same(const RequestSpec& a, const RequestSpec& b) {
  const auto eq = [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.prompt == b.prompt && a.prompt_ids == b.prompt_ids && a.max_tokens == b.max_tokens && eq(a.temperature, b.temperature) &&
         a.top_k == b.top_k && eq(a.top_p, b.top_p) && eq(a.min_p, b.min_p) && a.seed == b.seed && a.arrival == b.arrival &&
         a.priority == b.priority && a.stop == b.stop;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<RequestSpec> reqs;
  try {
    reqs = barato_examples::parse_requests(text, "fuzz.jsonl");
  } catch (const barato_examples::RequestFileError& e) {
    BARATO_FUZZ_CHECK(std::string_view(e.what()).starts_with("fuzz.jsonl:"), "message without FILE: ", e.what());
    return 0;
  }
  BARATO_FUZZ_CHECK(!reqs.empty(), "a file without requests parsed");
  std::set<std::string> ids;
  std::size_t prev_line = 0;
  for (const RequestSpec& r : reqs) {
    BARATO_FUZZ_CHECK(ids.insert(r.id).second, "duplicate id ", r.id);
    BARATO_FUZZ_CHECK(r.line > prev_line, "lines out of order");
    prev_line = r.line;
    BARATO_FUZZ_CHECK(r.prompt.has_value() != r.prompt_ids.has_value(), "line ", r.line, ": not exactly one prompt");
    if (r.prompt_ids) {
      BARATO_FUZZ_CHECK(!r.prompt_ids->empty(), "empty prompt_ids");
      for (const barato::Token t : *r.prompt_ids) BARATO_FUZZ_CHECK(t >= 0, "negative prompt id");
    }
    for (const barato::Token t : r.stop) BARATO_FUZZ_CHECK(t >= 0, "negative stop id");
    BARATO_FUZZ_CHECK(r.max_tokens >= 1, "max_tokens 0");
    BARATO_FUZZ_CHECK(std::isfinite(r.temperature) && r.temperature >= 0.0f, "line ", r.line, ": temperature not a finite number >= 0");
    BARATO_FUZZ_CHECK(r.top_p > 0.0f && r.top_p <= 1.0f, "top_p outside (0, 1]");
    BARATO_FUZZ_CHECK(r.min_p >= 0.0f && r.min_p < 1.0f, "min_p outside [0, 1)");
    BARATO_FUZZ_CHECK(r.priority >= -1000000 && r.priority <= 1000000, "priority out of range");
    // The line alone parses to the same request.
    std::size_t b = 0;
    for (std::size_t l = 1; l < r.line; ++l) b = text.find('\n', b) + 1;
    const std::size_t e = std::min(text.find('\n', b), text.size());
    std::string_view line = text.substr(b, e - b);
    if (b == 0 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // the file's byte order mark, not the line's
    const RequestSpec alone = barato_examples::detail::parse_request_line(line, "fuzz.jsonl", r.line);
    BARATO_FUZZ_CHECK(same(alone, r) && alone.id == r.id, "line ", r.line, " parses differently alone");
    if (valid_utf8(line)) {
      BARATO_FUZZ_CHECK(valid_utf8(r.id), "line ", r.line, ": id is not valid UTF-8 after unescaping");
      if (r.prompt) BARATO_FUZZ_CHECK(valid_utf8(*r.prompt), "line ", r.line, ": prompt is not valid UTF-8 after unescaping");
    }
  }
  return 0;
}
