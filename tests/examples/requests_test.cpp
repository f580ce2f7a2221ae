// Tests of the barato_batch request file parser (examples/models/requests.hpp): every key, escapes,
// defaults, and each malformed input as an error naming FILE:LINE and what was expected.
#include <doctest/doctest.h>

#include <string>

#include "models/requests.hpp"

using namespace barato_examples;

namespace {
std::string error_of(std::string_view text) {
  try {
    (void)parse_requests(text, "reqs.jsonl");
  } catch (const RequestFileError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("request lines parse with every key, defaults and escapes") {
  const auto r = parse_requests(
      "{\"id\": \"r1\", \"prompt\": \"Once upon a time\", \"max_tokens\": 64, \"temperature\": 0, \"seed\": 7, \"arrival\": 0}\n"
      "\n"
      "  {\"prompt_ids\": [1, 403, 9], \"max_tokens\": 3, \"temperature\": 0.8, \"top_k\": 40, \"top_p\": 0.95, "
      "\"min_p\": 0.05, \"priority\": -2, \"arrival\": 12, \"stop\": [2], \"seed\": 18446744073709551615}\r\n"
      "{\"id\":\"\\u00e9\\ud83d\\ude00\\n\\\"q\\\"\",\"prompt\":\"a\\tb\",\"max_tokens\":1}",
      "reqs.jsonl");
  REQUIRE(r.size() == 3);
  CHECK(r[0].id == "r1");
  CHECK(*r[0].prompt == "Once upon a time");
  CHECK(r[0].max_tokens == 64);
  CHECK(r[0].seed == 7);
  CHECK(r[0].line == 1);
  CHECK(r[1].id == "line 3");
  CHECK(*r[1].prompt_ids == std::vector<barato::Token>{1, 403, 9});
  CHECK(r[1].temperature == doctest::Approx(0.8f));
  CHECK(r[1].top_k == 40);
  CHECK(r[1].top_p == doctest::Approx(0.95f));
  CHECK(r[1].min_p == doctest::Approx(0.05f));
  CHECK(r[1].priority == -2);
  CHECK(r[1].arrival == 12);
  CHECK(r[1].stop == std::vector<barato::Token>{2});
  CHECK(r[1].seed == 18446744073709551615ull);
  CHECK(r[2].id == "\xC3\xA9\xF0\x9F\x98\x80\n\"q\"");
  CHECK(*r[2].prompt == "a\tb");
}

TEST_CASE("a UTF-8 byte order mark starts a request file; anywhere else it is an error") {
  const auto r = parse_requests("\xEF\xBB\xBF{\"id\": \"a\", \"prompt\": \"Hi\", \"max_tokens\": 2}\n", "reqs.jsonl");
  REQUIRE(r.size() == 1);
  CHECK(r[0].id == "a");
  CHECK(r[0].line == 1);
  CHECK(error_of("{\"prompt\": \"Hi\", \"max_tokens\": 2}\n\xEF\xBB\xBF{\"prompt\": \"Hi\", \"max_tokens\": 2}")
            .starts_with("reqs.jsonl:2:1: expected '{'"));
}

TEST_CASE("malformed request files name FILE:LINE and what was expected") {
  const std::string ok = "{\"prompt\": \"x\", \"max_tokens\": 2}\n";
  struct Case {
    std::string text, needle;
  };
  const Case cases[] = {
      {ok + "{\"prompt\": \"x\" \"max_tokens\": 2}", "reqs.jsonl:2:16: expected ',' or '}'"},
      {ok + "{\"prompt\": \"x\"}", "reqs.jsonl:2: \"max_tokens\": expected a \"max_tokens\" key"},
      {"{\"max_tokens\": 2}", "exactly one of \"prompt\" and \"prompt_ids\""},
      {"{\"prompt\": \"x\", \"prompt_ids\": [1], \"max_tokens\": 2}", "exactly one of"},
      {"{\"prompt\": \"x\", \"max_tokens\": 0}", "\"max_tokens\": expected an integer ≥ 1, found 0"},
      {"{\"prompt\": \"x\", \"max_tokens\": 1.5}", "\"max_tokens\": expected an integer ≥ 1, found 1.5"},
      {"{\"prompt\": \"x\", \"max_tokens\": \"3\"}", "\"max_tokens\": expected a number, found a string"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2, \"temprature\": 1}", "\"temprature\": expected one of id, prompt"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2, \"temperature\": -1}", "expected a number ≥ 0, found -1"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2, \"top_p\": 0}", "expected a number in (0, 1], found 0"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2, \"max_tokens\": 3}", "expected each key once"},
      {"{\"prompt\": \"x, \"max_tokens\": 2}", "reqs.jsonl:1:"},
      {"{\"prompt\": \"x\\q\", \"max_tokens\": 2}", "expected an escape"},
      {"{\"prompt\": \"\\ud83d\", \"max_tokens\": 2}", "expected a low surrogate"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2} trailing", "expected the end of the line"},
      {"[1, 2]", "expected '{' (one JSON object per line)"},
      {"{\"prompt_ids\": [1, -3], \"max_tokens\": 2}", "token ids ≥ 0"},
      {"{\"prompt_ids\": [], \"max_tokens\": 2}", "at least one token id"},
      {"{\"id\": \"a\", \"prompt\": \"x\", \"max_tokens\": 2}\n{\"id\": \"a\", \"prompt\": \"y\", \"max_tokens\": 2}",
       "reqs.jsonl:2: \"id\": expected a unique id, found \"a\" again"},
      {"\n  \n", "expected at least one request line"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2, \"seed\": -1}", "\"seed\": expected an integer in [0, 2^64)"},
      {std::string("{\"prompt\": \"a\tb\", \"max_tokens\": 2}"), "no raw control character"},
      // regression (tests/fuzz/regressions/requests/temperature_beyond_float.jsonl): a value beyond
      // float's range used to become +inf and pass the "≥ 0" check
      {"{\"prompt\": \"a\", \"max_tokens\": 1, \"temperature\": 1.5e51}",
       "reqs.jsonl:1: \"temperature\": expected a number ≥ 0 (within float range), found 1.5e51"},
      {"{\"prompt\": \"a\", \"max_tokens\": 1, \"min_p\": -1e39}", "\"min_p\": expected a number in [0, 1) (within float range)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const std::string msg = error_of(c.text);
    CAPTURE(msg);
    CHECK(msg.find(c.needle) != std::string::npos);
  }
}
