// Tests of barato_perplexity --kl-divergence (examples/tools/perplexity.cpp), run as a program on
// stories260K and a prefix of the TinyStories sample: fp32 against itself gives KLD 0, 100 % same top-1
// and ΔPPL 0, and the same perplexity as a run without the flag; int8-row gives a small positive KLD
// with ordered quantiles, and its fp32_perplexity is the fp32 run's; bad flags exit 2.
// Built by examples/CMakeLists.txt (it needs the tool); BARATO_PERPLEXITY_TOOL is the tool's path.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "support/data.hpp"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result run_tool(const std::string& flags) {
  const fs::path dir = fs::temp_directory_path() / "barato_perplexity_tool_check";
  fs::create_directories(dir);
  const std::string cmd =
      std::string(BARATO_PERPLEXITY_TOOL) + " " + flags + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int rc = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

/// The raw text of a number field "key": in the JSON line ("" when absent).
std::string field(const std::string& line, const std::string& key) {
  const auto k = line.find("\"" + key + "\": ");
  if (k == std::string::npos) return "";
  const std::size_t b = k + key.size() + 4;
  return line.substr(b, line.find_first_of(",}", b) - b);
}

double number(const std::string& line, const std::string& key) {
  const std::string s = field(line, key);
  REQUIRE_MESSAGE(!s.empty(), "no field ", key, " in ", line);
  return std::stod(s);
}

}  // namespace

TEST_CASE("barato_perplexity --kl-divergence on stories260K") {
  const auto dir = barato::test::data_dir_or_skip("text/tinystories-valid-sample.txt");
  if (dir.empty()) return;
  const std::string base = "--quiet --max-tokens 700 --text " + (dir / "text/tinystories-valid-sample.txt").string();

  const Result plain = run_tool(base + " --json");
  REQUIRE(plain.status == 0);
  CHECK(field(plain.out, "kld_mean").empty());  // only with --kl-divergence

  const Result same = run_tool(base + " --json --kl-divergence");
  REQUIRE(same.status == 0);
  CHECK(number(same.out, "tokens") == 700);
  CHECK(number(same.out, "kld_mean") == 0.0);
  CHECK(number(same.out, "kld_max") == 0.0);
  CHECK(number(same.out, "same_top1") == 1.0);
  CHECK(number(same.out, "same_top1_hi") == 1.0);
  CHECK(number(same.out, "same_top1_lo") < 1.0);
  CHECK(number(same.out, "delta_perplexity") == 0.0);
  CHECK(field(same.out, "perplexity") == field(plain.out, "perplexity"));
  CHECK(field(same.out, "fp32_perplexity") == field(plain.out, "perplexity"));

  const Result q = run_tool(base + " --json --kl-divergence --weights int8-row");
  REQUIRE(q.status == 0);
  const double mean = number(q.out, "kld_mean");
  CHECK(mean > 0.0);
  CHECK(mean < 0.005);
  CHECK(number(q.out, "kld_stderr") > 0.0);
  CHECK(number(q.out, "kld_stderr") < mean);
  CHECK(number(q.out, "kld_median") <= number(q.out, "kld_p90"));
  CHECK(number(q.out, "kld_p90") <= number(q.out, "kld_p99"));
  CHECK(number(q.out, "kld_p99") <= number(q.out, "kld_max"));
  CHECK(number(q.out, "same_top1_lo") < number(q.out, "same_top1"));
  CHECK(number(q.out, "same_top1") < number(q.out, "same_top1_hi"));
  CHECK(field(q.out, "fp32_perplexity") == field(plain.out, "perplexity"));
  CHECK(number(q.out, "delta_perplexity") ==
        doctest::Approx(number(q.out, "perplexity") - number(q.out, "fp32_perplexity")).epsilon(1e-9));

  const Result text = run_tool(base + " --kl-divergence --weights int8-row --kv int8");
  REQUIRE(text.status == 0);
  for (const char* label : {"mean KLD:", "median KLD:", "p90 KLD:", "p99 KLD:", "max KLD:", "same top-1:", "fp32 PPL:", "ΔPPL:"})
    CHECK_MESSAGE(text.out.find(label) != std::string::npos, label, " missing in\n", text.out);
}

TEST_CASE("barato_perplexity: bad flags exit 2") {
  CHECK(run_tool("--kl-divergence=yes --text x").status == 2);
  CHECK(run_tool("--kl-divergence --weights int9 --text x").status == 2);
  CHECK(run_tool("--kl-divergence --kv nope --text /dev/null").status == 2);
}

TEST_CASE("barato_perplexity --model X.gguf: the GGUF conversion scores as the llama2.c checkpoint") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-f32.gguf");
  if (dir.empty() || barato::test::data_dir_or_skip("text/tinystories-valid-sample.txt").empty()) return;
  const std::string base = "--quiet --json --max-tokens 700 --text " + (dir / "text/tinystories-valid-sample.txt").string();
  const Result bin = run_tool(base + " --model " + (dir / "stories260K/stories260K.bin").string());
  REQUIRE(bin.status == 0);
  // No --tokenizer: the GGUF file's own vocabulary; --context 512 as the model was trained.
  const Result gguf = run_tool(base + " --context 512 --model " + (dir / "stories260K/stories260K-f32.gguf").string());
  INFO(gguf.err);
  REQUIRE(gguf.status == 0);
  CHECK(field(gguf.out, "perplexity") == field(bin.out, "perplexity"));
  CHECK(number(gguf.out, "windows") == number(bin.out, "windows"));
  // Without --context the file's llama.context_length (128) sets the window: more, shorter windows.
  const Result short_ctx = run_tool(base + " --model " + (dir / "stories260K/stories260K-f32.gguf").string());
  REQUIRE(short_ctx.status == 0);
  CHECK(number(short_ctx.out, "windows") > number(bin.out, "windows"));
  // A Q4_0 file: --weights file (dequantized for now) and --weights fp32 agree; re-quantizing is accepted.
  const std::string q4 = base + " --context 512 --model " + (dir / "stories260K/stories260K-h192-q4_0.gguf").string();
  const Result file = run_tool(q4);
  const Result fp32 = run_tool(q4 + " --weights fp32");
  REQUIRE(file.status == 0);
  REQUIRE(fp32.status == 0);
  CHECK(field(file.out, "perplexity") == field(fp32.out, "perplexity"));
  CHECK(field(file.out, "perplexity") != field(bin.out, "perplexity"));
  CHECK(run_tool(q4 + " --weights int8-row").status == 0);
  CHECK(run_tool(q4 + " --weights int9").status == 2);
}
