// Tests of the example tools' command-line parser (examples/models/cli.hpp) and JSON writer (json.hpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/cli.hpp"
#include "models/json.hpp"

using namespace barato_examples;

namespace {
struct Parsed {
  std::string model = "m.bin";
  std::size_t steps = 256;
  float temperature = 0.0f;
  int threads = 1;
  std::uint64_t seed = 0;
  bool json = false;
};
Cli make(Parsed& p) {
  Cli cli("tool", "A test tool.");
  cli.option("--model", p.model, "FILE", "model file")
      .option("--steps", p.steps, "N", "steps")
      .option("--temperature", p.temperature, "T", "temperature")
      .option("--threads", p.threads, "N", "threads")
      .option("--seed", p.seed, "S", "seed")
      .flag("--json", p.json, "json output");
  return cli;
}
bool parse(Cli& cli, std::vector<const char*> args) {
  args.insert(args.begin(), "tool");
  return cli.parse(static_cast<int>(args.size()), args.data());
}
}  // namespace

TEST_CASE("cli: values, flags, --name=value, defaults in help") {
  Parsed p;
  Cli cli = make(p);
  CHECK(cli.help().find("--steps N") != std::string::npos);
  CHECK(cli.help().find("(default: 256)") != std::string::npos);
  CHECK(cli.help().find("(default: \"m.bin\")") != std::string::npos);
  CHECK(cli.help().find("--json") != std::string::npos);
  CHECK(parse(cli, {"--model", "x.bin", "--steps=12", "--temperature", "0.5", "--json", "--threads", "-3", "--seed",
                    "18446744073709551615"}));
  CHECK(p.model == "x.bin");
  CHECK(p.steps == 12);
  CHECK(p.temperature == doctest::Approx(0.5));
  CHECK(p.json);
  CHECK(p.threads == -3);
  CHECK(p.seed == 18446744073709551615ull);
}

TEST_CASE("cli: typed errors") {
  Parsed p;
  Cli cli = make(p);
  CHECK_THROWS_AS(parse(cli, {"--bogus"}), CliError);
  CHECK_THROWS_AS(parse(cli, {"--steps"}), CliError);          // missing value
  CHECK_THROWS_AS(parse(cli, {"--steps", "12x"}), CliError);   // trailing garbage
  CHECK_THROWS_AS(parse(cli, {"--steps", "-1"}), CliError);    // negative for unsigned
  CHECK_THROWS_AS(parse(cli, {"--temperature", "warm"}), CliError);
  CHECK_THROWS_AS(parse(cli, {"--json=1"}), CliError);         // flags take no value
  CHECK_THROWS_AS(parse(cli, {"--threads", "99999999999"}), CliError);  // out of range
  CHECK(Cli::run_tool("t", [] () -> int { throw CliError("x"); }) == 2);
  CHECK(Cli::run_tool("t", [] () -> int { throw barato::value_error("x"); }) == 1);
  CHECK(Cli::run_tool("t", [] { return 0; }) == 0);
}

TEST_CASE("json: escaping and invalid UTF-8") {
  CHECK(json_quote("a\"b\\c\n\t") == "\"a\\\"b\\\\c\\n\\t\"");
  CHECK(json_quote(std::string("\x01", 1)) == "\"\\u0001\"");
  CHECK(json_quote("é😀") == "\"é😀\"");
  CHECK(json_quote("\xC3") == "\"\\ufffd\"");           // truncated sequence
  CHECK(json_quote("\xC0\xAF") == "\"\\ufffd\\ufffd\"");  // overlong
  JsonObject o;
  const std::vector<int> ids = {1, 2};
  o.add("ids", std::span<const int>(ids)).add("x", 1.5).add("n", std::size_t{3}).add("s", "t").add("b", true);
  CHECK(o.str() == "{\"ids\": [1, 2], \"x\": 1.5, \"n\": 3, \"s\": \"t\", \"b\": true}");
}
