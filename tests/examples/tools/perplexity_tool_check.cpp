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

#include "support/data.hpp"
#include "support/broken_files.hpp"
#include "support/run_tool.hpp"

namespace fs = std::filesystem;

namespace {

using Result = barato::test::ToolResult;

Result run_tool(const std::string& flags, int timeout_s = 0) {
  return barato::test::run_tool(BARATO_PERPLEXITY_TOOL, flags, "perplexity_tool_check", timeout_s);
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
  // 300 tokens: one window; the tool's runs under the sanitizers take 4-7 s per 700 tokens
  const std::string base = "--quiet --max-tokens 300 --text " + (dir / "text/tinystories-valid-sample.txt").string();

  const Result plain = run_tool(base + " --json");
  REQUIRE(plain.status == 0);
  CHECK(field(plain.out, "kld_mean").empty());  // only with --kl-divergence

  const Result same = run_tool(base + " --json --kl-divergence");
  REQUIRE(same.status == 0);
  CHECK(number(same.out, "tokens") == 300);
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
  // 700 tokens span two windows of the trained context (512); the Q4_0 runs below score 300
  const std::string text = " --text " + (dir / "text/tinystories-valid-sample.txt").string();
  const std::string base = "--quiet --json --max-tokens 700" + text, short_base = "--quiet --json --max-tokens 300" + text;
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
  // A Q4_0 file: --weights file keeps ggml's Q4_0 blocks (activations quantized in the product),
  // --weights fp32 dequantizes them exactly: close, not equal; both differ from the fp32 model.
  const std::string q4 = short_base + " --context 512 --model " + (dir / "stories260K/stories260K-h192-q4_0.gguf").string();
  const Result file = run_tool(q4);
  const Result fp32 = run_tool(q4 + " --weights fp32");
  REQUIRE(file.status == 0);
  REQUIRE(fp32.status == 0);
  CHECK(number(file.out, "perplexity") == doctest::Approx(number(fp32.out, "perplexity")).epsilon(0.01));
  CHECK(field(file.out, "perplexity") != field(fp32.out, "perplexity"));
  CHECK(field(fp32.out, "perplexity") != field(bin.out, "perplexity"));
  // Memory: the file's Q4_0 blocks are what --weights file holds (no fp32 model behind them, as
  // before 2026-12-06), and neither load allocates more than it keeps.
  CHECK(number(file.out, "weight_bytes") * 3 < number(fp32.out, "weight_bytes"));
  CHECK(number(file.out, "load_peak_bytes") == number(file.out, "weight_bytes"));
  CHECK(number(fp32.out, "load_peak_bytes") == number(fp32.out, "weight_bytes"));
  CHECK(run_tool(q4 + " --weights int8-row").status == 0);
  CHECK(run_tool(q4 + " --weights int9").status == 2);
}

TEST_CASE("barato_perplexity: an endless text, a hostile checkpoint or tokenizer exit 1 with one error line") {
  const auto data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "perplexity_tool_check";
  fs::create_directories(dir);
  using barato::test::one_error_line;
  // --text /dev/zero used to hang: now the read stops at the limit.
  const Result z = run_tool("--quiet --text /dev/zero", 60);
  CHECK(z.status == 1);
  CHECK_MESSAGE(one_error_line(z.err, "barato_perplexity", "/dev/zero", "text file", "limit"), z.err);
  CHECK(z.out.empty());
  const std::string text = "--quiet --text " + (data / "stories260K/README.md").string();
  const fs::path ck = barato::test::write_hostile_checkpoint(dir / "hostile.bin");
  const Result m = run_tool(text + " --model " + ck.string(), 60);
  CHECK(m.status == 1);
  CHECK_MESSAGE(one_error_line(m.err, "barato_perplexity", ck.string(), "byte offset", "seq_len"), m.err);
  const fs::path tok = barato::test::write_hostile_tokenizer(dir / "hostile_tok.bin");
  const Result t = run_tool(text + " --tokenizer " + tok.string(), 60);
  CHECK(t.status == 1);
  CHECK_MESSAGE(one_error_line(t.err, "barato_perplexity", tok.string(), "max_token_length"), t.err);
  CHECK(t.out.empty());
}

TEST_CASE("barato_perplexity --ids: llama.cpp's Q4_0 greedy sequence scored teacher-forced on the same file") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/reference/llamacpp/greedy_q4_0_once_upon_a_time.txt");
  if (dir.empty()) return;
  // The ids file: prompt_ids then generated_ids of the reference, whitespace-separated (BOS first).
  std::ifstream ref(dir / "stories260K/reference/llamacpp/greedy_q4_0_once_upon_a_time.txt");
  std::string line, ids;
  std::size_t n = 0;
  while (std::getline(ref, line))
    if (line.starts_with("prompt_ids:") || line.starts_with("generated_ids:")) {
      const std::string v = line.substr(line.find(':') + 1);
      ids += v + "\n";
      std::istringstream in(v);
      for (std::string t; in >> t;) ++n;
    }
  REQUIRE(n > 100);
  const fs::path tmp = barato::test::scratch_dir() / "perplexity_ids.txt";
  std::ofstream(tmp) << ids;
  const std::string model = " --context 512 --model " + (dir / "stories260K/stories260K-h192-q4_0.gguf").string();
  const Result r = run_tool("--quiet --json --ids " + tmp.string() + model);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(number(r.out, "tokens") == n - 1);  // every id after BOS is scored
  CHECK(r.out.find("\"argmax_ids\": [") != std::string::npos);
  CHECK(r.out.find("bits_per_byte") == std::string::npos);
  CHECK(number(r.out, "argmax_agreement") >= 0.98);
  // Bad files: a non-id, an id outside the vocabulary, no BOS; and --text with --ids is a usage error.
  for (const char* bad : {"1 403 x", "1 403 999", "403 407"}) {
    std::ofstream(tmp) << bad;
    const Result b = run_tool("--quiet --ids " + tmp.string() + model);
    CHECK_MESSAGE(b.status == 1, bad);
    CHECK_MESSAGE(barato::test::one_error_line(b.err, "barato_perplexity", tmp.string(), "byte offset"), b.err);
  }
  CHECK(run_tool("--quiet --ids " + tmp.string() + " --text " + tmp.string()).status == 2);
}
