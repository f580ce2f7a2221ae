// Error paths of the barato_generate tool (examples/tools/generate.cpp), run as a program: a
// hostile checkpoint header or tokenizer, a missing file and a bad flag each give one error line
// on stderr naming the file (and the byte offset and field for a bad file), nothing on stdout, and
// exit status 1 (2 for usage errors).
// Built by examples/CMakeLists.txt (it needs the tool); BARATO_GENERATE_TOOL is the tool's path.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/broken_files.hpp"
#include "support/data.hpp"
#include "support/ggml_pack.hpp"
#include "support/run_tool.hpp"

namespace fs = std::filesystem;

namespace {

barato::test::ToolResult run_tool(const std::string& flags) {
  return barato::test::run_tool(BARATO_GENERATE_TOOL, flags, "generate_tool_check", 60);
}

}  // namespace

TEST_CASE("barato_generate: broken files exit 1 with one error line, bad flags exit 2") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "generate_tool_check";
  fs::create_directories(dir);
  using barato::test::one_error_line;
  const fs::path ck = barato::test::write_hostile_checkpoint(dir / "hostile.bin");
  const auto m = run_tool("--steps 4 --model " + ck.string());
  CHECK(m.status == 1);
  CHECK_MESSAGE(one_error_line(m.err, "barato_generate", ck.string(), "byte offset", "seq_len", "2147483647"), m.err);
  CHECK(m.out.empty());
  const fs::path tok = barato::test::write_hostile_tokenizer(dir / "hostile_tok.bin");
  const auto t = run_tool("--steps 4 --tokenizer " + tok.string());
  CHECK(t.status == 1);
  CHECK_MESSAGE(one_error_line(t.err, "barato_generate", tok.string(), "byte offset 0", "max_token_length"), t.err);
  CHECK(t.out.empty());
  const auto missing = run_tool("--steps 4 --model " + (dir / "missing.bin").string());
  CHECK(missing.status == 1);
  CHECK_MESSAGE(one_error_line(missing.err, "barato_generate", (dir / "missing.bin").string()), missing.err);
  CHECK(run_tool("--steps x").status == 2);
  for (const char* bad : {"--top-p -0.5", "--top-p nan", "--top-p 1.5", "--temperature inf", "--temperature -1"}) {
    INFO(bad);
    const auto r = run_tool(std::string("--steps 4 ") + bad);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
  }
  // run.c's -p: a nucleus of 0.3 at temperature 0.5 leaves stories260K's most likely token alone at
  // almost every step; with --top-p 1 the whole distribution is sampled.
  const auto nucleus = run_tool("--steps 60 --json --temperature 0.5 --top-p 0.3 --seed 5 --prompt \"Once upon a time\"");
  const auto greedy = run_tool("--steps 60 --json --prompt \"Once upon a time\"");
  CHECK(nucleus.status == 0);
  const auto ids = [](const std::string& out) {
    const auto at = out.find("\"generated_ids\":");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at + 1);
  };
  CHECK(!ids(nucleus.out).empty());
  CHECK(ids(nucleus.out) == ids(greedy.out));
}

TEST_CASE("barato_generate --steps below the prompt's length prints the prompt as far as run.c does") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (data.empty()) return;
  // run.c prints the token after each of the --steps positions it forwards: "Once upon a time there
  // was" is BOS + 6 tokens on stories260K, so 3 steps show 3 of them, 6 all, 7 one generated token more
  const std::string prompt = " --prompt \"Once upon a time there was\"";
  const auto three = run_tool("--steps 3" + prompt), six = run_tool("--steps 6" + prompt);
  const auto seven = run_tool("--steps 7 --json" + prompt);
  CHECK(three.status == 0);
  CHECK(three.out == "Once upon a\n");
  CHECK(six.out == "Once upon a time there was\n");
  CHECK(seven.out.find("\"text\": \"Once upon a time there was a\"") != std::string::npos);
  CHECK(seven.out.find("\"prompt_ids\": [1, 403, 407, 261, 378, 383, 286]") != std::string::npos);
}

TEST_CASE("barato_generate --model X.gguf with matrices in every ggml block type: the F32 file's ids") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/tok512.bin");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "generate_tool_check";
  fs::create_directories(dir);
  const auto tok = barato_examples::load_tokenizer(data / "stories260K/tok512.bin", 512);
  const auto model = barato::test::block_type_model(tok, 7);
  const auto write = [&](const fs::path& p, const std::vector<std::byte>& b) {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p.string();
  };
  const std::string blocks = write(dir / "block_types.gguf", model.blocks), f32 = write(dir / "block_types_f32.gguf", model.f32);
  const auto ids = [](const std::string& out) {  // the generated_ids array of --json
    const auto at = out.find("\"generated_ids\":");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at + 1);
  };
  // file precision: Q4_1 … Q6_K as their exact fp32 values, Q8_0 / Q4_0 in ggml's kernels — so the
  // F32 file is matched by the block file's --weights fp32, and both re-quantize to the same int8-row
  for (const char* w : {"fp32", "int8-row"}) {
    INFO(w);
    const std::string flags = std::string(" --steps 48 --threads 1 --json --prompt \"Once upon a time\" --weights ") + w;
    const auto a = run_tool("--model " + blocks + flags), b = run_tool("--model " + f32 + flags);
    INFO(a.err << b.err);
    REQUIRE((a.status == 0 && b.status == 0));
    CHECK(!ids(a.out).empty());
    CHECK(ids(a.out) == ids(b.out));
  }
  const auto native = run_tool("--model " + blocks + " --steps 48 --threads 1 --json --prompt \"Once upon a time\"");
  INFO(native.err);
  CHECK(native.status == 0);
  CHECK(!ids(native.out).empty());
}

TEST_CASE("barato_generate --model a llama2.c version-2 file: int8 codes by default, its exact values with --weights fp32") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K_q80.bin");
  if (data.empty()) return;
  const std::string q80 = (data / "stories260K/stories260K_q80.bin").string();
  const auto ids = [](const std::string& out) {
    const auto at = out.find("\"generated_ids\":");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at + 1);
  };
  const std::string flags = " --steps 40 --threads 1 --json --prompt \"Once upon a time\"";
  const auto file = run_tool("--model " + q80 + flags), fp32 = run_tool("--model " + q80 + flags + " --weights fp32");
  INFO(file.err << fp32.err);
  REQUIRE((file.status == 0 && fp32.status == 0));
  CHECK(!ids(file.out).empty());
  CHECK(ids(file.out) == ids(fp32.out));  // the int8 kernel follows the dequantized weights here
  // A version byte the reader does not know: one error line naming the field and its offset.
  const fs::path dir = barato::test::scratch_dir() / "generate_tool_check";
  fs::create_directories(dir);
  std::ifstream in(q80, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[4] = 3;
  const fs::path bad = dir / "version3.bin";
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const auto r = run_tool("--steps 4 --model " + bad.string());
  CHECK(r.status == 1);
  CHECK_MESSAGE(barato::test::one_error_line(r.err, "barato_generate", bad.string(), "byte offset 4", "version", "found 3"), r.err);
  CHECK(r.out.empty());
}
