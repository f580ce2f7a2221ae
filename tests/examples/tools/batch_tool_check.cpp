// Tests of the barato_batch tool (examples/tools/batch.cpp), run as a program: with temperature 0
// every request's generated_ids equal llama2.c run.c's reference ids, under static and continuous
// batching, several slot counts, token budgets and prefill chunks, a pool small enough to force
// preemption, two threads and per-slot contiguous caches; a request that cannot fit gets an error line
// while the others proceed; a malformed request file exits 2 naming FILE:LINE.
// Built by examples/CMakeLists.txt (it needs the tool); BARATO_BATCH_TOOL is the tool's path.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/data.hpp"
#include "support/broken_files.hpp"
#include "support/run_tool.hpp"
#include "support/reference_file.hpp"

namespace fs = std::filesystem;

namespace {

using Result = barato::test::ToolResult;

Result run_tool(const std::string& flags, int timeout_s = 0) {
  return barato::test::run_tool(BARATO_BATCH_TOOL, flags, "batch_tool_check", timeout_s);
}

/// The value of "key": in one JSON output line (a string's raw text, a number, or an array's text).
std::string field(const std::string& line, const std::string& key) {
  const auto k = line.find("\"" + key + "\": ");
  if (k == std::string::npos) return "";
  std::size_t b = k + key.size() + 4;
  if (line[b] == '[') return line.substr(b + 1, line.find(']', b) - b - 1);
  if (line[b] == '"') {
    std::size_t e = b + 1;
    while (e < line.size() && !(line[e] == '"' && line[e - 1] != '\\')) ++e;
    return line.substr(b + 1, e - b - 1);
  }
  return line.substr(b, line.find_first_of(",}", b) - b);
}

std::vector<int> ints(const std::string& csv) {
  std::vector<int> v;
  std::stringstream s(csv);
  std::string x;
  while (std::getline(s, x, ',')) v.push_back(std::stoi(x));
  return v;
}

/// id → output line.
std::map<std::string, std::string> by_id(const std::string& out) {
  std::map<std::string, std::string> m;
  std::stringstream s(out);
  std::string line;
  while (std::getline(s, line))
    if (!line.empty()) m[field(line, "id")] = line;
  return m;
}

}  // namespace

TEST_CASE("barato_batch: greedy outputs equal run.c's for every policy, slot count, budget, pool size and thread count") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "batch_tool_check";
  fs::create_directories(dir);
  // the reference prompts (run.c -n 200: 200 − prompt + 1 generated tokens), plus requests that share
  // a long prefix (prefix hits) and arrive later
  std::vector<barato::test::ReferenceFile> refs;
  std::ofstream req(dir / "reqs.jsonl");
  for (const auto& e : fs::directory_iterator(data / "stories260K/reference")) {
    if (e.path().extension() != ".txt") continue;
    refs.push_back(barato::test::read_reference_file(e.path()));
    const auto& r = refs.back();
    req << "{\"id\": \"ref" << refs.size() << "\", \"prompt\": " << r.at("prompt_json")
        << ", \"max_tokens\": " << std::stoi(r.at("steps")) - std::stoi(r.at("n_prompt_ids")) + 1 << ", \"arrival\": " << refs.size() - 1
        << "}\n";
  }
  REQUIRE(refs.size() >= 2);
  const std::string shared = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun";
  for (int i = 0; i < 4; ++i)
    req << "{\"id\": \"s" << i << "\", \"prompt\": \"" << shared << (i % 2 ? " with her dog" : " and the park") << "\", \"max_tokens\": "
        << 40 + 30 * i << ", \"arrival\": " << 2 * i << "}\n";
  req << "{\"id\": \"too_long\", \"prompt_ids\": [1";
  for (int i = 0; i < 600; ++i) req << ", 300";
  req << "], \"max_tokens\": 4}\n";
  req.close();

  const std::string base = "--requests " + (dir / "reqs.jsonl").string() + " --model " + (data / "stories260K/stories260K.bin").string() +
                           " --tokenizer " + (data / "stories260K/tok512.bin").string();
  std::vector<std::string> configs = {
      "--policy continuous --slots 4 --token-budget 64 --prefill-chunk 16",
      "--policy static --slots 3",
      "--policy continuous --slots 1 --token-budget 8 --prefill-chunk 8",
      "--policy continuous --slots 3 --pool-tokens 320 --kv paged:16",   // forces preemption
      "--policy static --slots 2 --pool-tokens 256 --kv paged:8",
      "--policy continuous --slots 6 --threads 2",
      "--policy continuous --slots 3 --kv contiguous",
      "--policy continuous --slots 6 --cascade",  // the shared-prefix requests decode through cascades
  };
  // llama.cpp's GGUF conversion of the same model, its own vocabulary (empty --tokenizer) and the
  // trained context (the file declares 128): the same ids.
  if (fs::exists(data / "stories260K/stories260K-f32.gguf"))
    configs.push_back("--model " + (data / "stories260K/stories260K-f32.gguf").string() +
                      " --tokenizer= --context 512 --policy continuous --slots 4 --token-budget 64 --prefill-chunk 16");
  std::map<std::string, std::string> first;  // id → generated_ids under the first config
  std::size_t preempted_runs = 0, hit_runs = 0;
  for (const auto& c : configs) {
    CAPTURE(c);
    const Result r = run_tool(base + " " + c);
    CAPTURE(r.err);
    REQUIRE(r.status == 0);
    const auto out = by_id(r.out);
    REQUIRE(out.size() == refs.size() + 5);
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const std::string& line = out.at("ref" + std::to_string(i + 1));
      const std::vector<int> gen = ints(field(line, "generated_ids"));
      CHECK(gen == refs[i].ids("generated_ids"));
      CHECK(ints(field(line, "prompt_ids")) == refs[i].ids("prompt_ids"));
      CHECK(field(line, "finish_reason") == (!gen.empty() && gen.back() == 1 ? "bos" : "length"));
    }
    CHECK(field(out.at("too_long"), "error").find("context") != std::string::npos);
    std::size_t pre = 0, hits = 0;
    for (const auto& [id, line] : out) {
      if (id == "too_long") continue;
      if (first.count(id) == 0) first[id] = field(line, "generated_ids");
      CHECK(field(line, "generated_ids") == first[id]);
      pre += std::stoul(field(line, "preemptions"));
      hits += std::stoul(field(line, "prefix_hit_tokens"));
    }
    preempted_runs += pre > 0;
    hit_runs += hits > 0;
    CHECK(r.err.find("batching") != std::string::npos);  // the summary
    if (c.find("--cascade") != std::string::npos) {
      const auto k = r.err.find("cascade attention: ");
      REQUIRE(k != std::string::npos);
      CHECK(std::stoul(r.err.substr(k + 19)) > 0);
    }
  }
  CHECK(preempted_runs >= 1);  // the small pools did preempt, and outputs were unchanged
  CHECK(hit_runs >= 1);        // the shared prefix was reused somewhere
}

TEST_CASE("barato_batch: a malformed request file exits 2 naming FILE:LINE; bad flags exit 2") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "batch_tool_check";
  fs::create_directories(dir);
  std::ofstream(dir / "bad.jsonl") << "{\"prompt\": \"a\", \"max_tokens\": 3}\n{\"prompt\": \"b\", \"max_tokens\": -3}\n";
  const Result r = run_tool("--requests " + (dir / "bad.jsonl").string());
  CHECK(r.status == 2);
  CHECK(r.err.find((dir / "bad.jsonl").string() + ":2") != std::string::npos);
  CHECK(r.out.empty());  // nothing ran
  CHECK(run_tool("--requests " + (dir / "bad.jsonl").string() + " --policy greedy").status == 2);
  CHECK(run_tool("--requests " + (dir / "missing.jsonl").string()).status == 1);
  // an unwritable --summary-json fails before any request runs
  std::ofstream(dir / "ok.jsonl") << "{\"prompt\": \"a\", \"max_tokens\": 3}\n";
  const Result s = run_tool("--requests " + (dir / "ok.jsonl").string() + " --summary-json " + (dir / "no_such_dir" / "s.json").string());
  CHECK(s.status == 1);
  CHECK(s.out.empty());
  CHECK(s.err.find("cannot write") != std::string::npos);
  // a request larger than the whole pool gets an error line; the others proceed
  std::ofstream(dir / "big.jsonl") << "{\"id\": \"small\", \"prompt\": \"Once\", \"max_tokens\": 8}\n"
                                      "{\"id\": \"big\", \"prompt\": \"Once upon a time\", \"max_tokens\": 300}\n";
  const Result b = run_tool("--requests " + (dir / "big.jsonl").string() + " --pool-tokens 64 --kv paged:16");
  CHECK(b.status == 0);
  const auto out = by_id(b.out);
  REQUIRE(out.size() == 2);
  CHECK(field(out.at("big"), "error").find("pool") != std::string::npos);
  CHECK(ints(field(out.at("small"), "generated_ids")).size() == 8);
}

TEST_CASE("barato_batch: finish_reason says why each request ended (length, stop with its token, context)") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "batch_tool_check";
  fs::create_directories(dir);
  // greedy "Once upon a time" continues ", there was …" on stories260K (run.c's reference): ',' is 432
  std::ofstream(dir / "why.jsonl") << "{\"id\": \"len\", \"prompt\": \"Once upon a time\", \"max_tokens\": 3}\n"
                                      "{\"id\": \"stop\", \"prompt\": \"Once upon a time\", \"max_tokens\": 50, \"stop\": [7, 432]}\n"
                                      "{\"id\": \"ctx\", \"prompt\": \"Once upon a time\", \"max_tokens\": 100000}\n";
  const Result r = run_tool("--requests " + (dir / "why.jsonl").string() + " --model " + (data / "stories260K/stories260K.bin").string() +
                            " --tokenizer " + (data / "stories260K/tok512.bin").string() + " --context 64");
  CAPTURE(r.err);
  REQUIRE(r.status == 0);
  const auto out = by_id(r.out);
  REQUIRE(out.size() == 3);
  const std::vector<int> len = ints(field(out.at("len"), "generated_ids"));
  CHECK(field(out.at("len"), "finish_reason") == "length");
  CHECK(len.size() == 3);
  CHECK(field(out.at("len"), "stop_token").empty());
  REQUIRE(len.front() == 432);
  CHECK(field(out.at("stop"), "finish_reason") == "stop");
  CHECK(field(out.at("stop"), "stop_token") == "432");
  CHECK(field(out.at("stop"), "generated_ids").empty());  // the stop token is not output
  CHECK(field(out.at("ctx"), "finish_reason") == "context");
  // 64 positions fed; the token sampled at the last one is output, never fed (as run.c --steps 64)
  CHECK(ints(field(out.at("ctx"), "prompt_ids")).size() + ints(field(out.at("ctx"), "generated_ids")).size() == 65);
}

TEST_CASE("barato_batch: an endless request file, a hostile checkpoint or tokenizer exit 1 with one error line") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "batch_tool_check";
  fs::create_directories(dir);
  using barato::test::one_error_line;
  // /dev/zero used to hang (read until memory ran out): now the read stops at the limit.
  const Result z = run_tool("--requests /dev/zero", 60);
  CHECK(z.status == 1);
  CHECK_MESSAGE(one_error_line(z.err, "barato_batch", "/dev/zero", "request file", "limit"), z.err);
  CHECK(z.out.empty());
  std::ofstream(dir / "ok.jsonl") << "{\"prompt\": \"Once\", \"max_tokens\": 2}\n";
  const std::string reqs = "--requests " + (dir / "ok.jsonl").string();
  const fs::path ck = barato::test::write_hostile_checkpoint(dir / "hostile.bin");
  const Result m = run_tool(reqs + " --model " + ck.string(), 60);
  CHECK(m.status == 1);
  CHECK_MESSAGE(one_error_line(m.err, "barato_batch", ck.string(), "byte offset", "seq_len", "2147483647"), m.err);
  CHECK(m.out.empty());
  const fs::path tok = barato::test::write_hostile_tokenizer(dir / "hostile_tok.bin");
  const Result t = run_tool(reqs + " --tokenizer " + tok.string(), 60);
  CHECK(t.status == 1);
  CHECK_MESSAGE(one_error_line(t.err, "barato_batch", tok.string(), "byte offset 0", "max_token_length", "1073741824"), t.err);
  CHECK(t.out.empty());
}
