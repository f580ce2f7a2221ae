// barato_quantize (examples/tools/quantize.cpp) run as a program: a GGUF model is converted tensor
// by tensor while the file is written and gives the file the in-memory export gives; a llama2.c
// checkpoint names its F16 fallbacks; a block that fails to decode mid-write exits 1 with one error
// line naming the file and byte offset and leaves no file behind; bad flags exit 2.
// Built by examples/CMakeLists.txt (it needs the tool); BARATO_QUANTIZE_TOOL is the tool's path.
#include <doctest/doctest.h>

#include <cctype>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "models/gguf.hpp"
#include "models/gguf_export.hpp"
#include "models/gguf_llama.hpp"
#include "support/broken_files.hpp"
#include "support/data.hpp"
#include "support/run_tool.hpp"

namespace fs = std::filesystem;
using namespace barato_examples;

namespace {

barato::test::ToolResult run_tool(const std::string& flags) {
  return barato::test::run_tool(BARATO_QUANTIZE_TOOL, flags, "quantize_tool_check", 120);
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const std::byte*>(c.data());
  return {b, b + c.size()};
}

}  // namespace

TEST_CASE("barato_quantize: GGUF and llama2.c inputs, a block that fails mid-write, bad flags") {
  const fs::path data = barato::test::data_dir_or_skip("stories260K/stories260K-h192-q4_0.gguf");
  if (data.empty()) return;
  const fs::path dir = barato::test::scratch_dir() / "quantize_tool_check";
  fs::create_directories(dir);
  const fs::path f32 = data / "stories260K/stories260K-h192-f32.gguf", q4 = data / "stories260K/stories260K-h192-q4_0.gguf";

  // A GGUF model: the file equals the in-memory export of the dequantized model.
  for (const auto& job : {std::pair{f32, GgmlType::q4_0}, std::pair{q4, GgmlType::q8_0}, std::pair{q4, GgmlType::f16}}) {
    const fs::path& in = job.first;  // (not a structured binding: clang 14 cannot capture one in INFO)
    const GgmlType type = job.second;
    const fs::path out = dir / "out.gguf";
    const std::string tname(ggml_type_name(static_cast<std::uint32_t>(type)));
    INFO(in.filename().string() << " -> " << tname);
    std::string lower;
    for (const char ch : tname) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const auto r = run_tool("--model " + in.string() + " --out " + out.string() + " --type " + lower);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(r.err.find("barato_quantize: wrote " + out.string()) != std::string::npos);
    const GgufFile src = GgufFile::open(in);
    const GgufExport want = export_llama_gguf(load_gguf_llama_fp32(src, gguf_llama_config(src)), gguf_tokenizer(src), type, &src,
                                              in.stem().string());
    CHECK(read_bytes(out) == want.writer.bytes());
    fs::remove(out);
  }

  // A llama2.c checkpoint: ffn_down's 172 columns stay F16, named on stderr; the file reads back and
  // is the in-memory export's.
  {
    const fs::path out = dir / "from_bin.gguf";
    const auto r = run_tool("--model " + (data / "stories260K/stories260K.bin").string() + " --tokenizer " +
                            (data / "stories260K/tok512.bin").string() + " --out " + out.string() + " --type q8_0");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(r.err.find("kept blk.0.ffn_down.weight: 172 columns") != std::string::npos);
    const GgufFile back = GgufFile::open(out);
    CHECK(back.tensor("blk.0.ffn_up.weight")->type == static_cast<std::uint32_t>(GgmlType::q8_0));
    // streamed tensor by tensor from the checkpoint: the in-memory export's file, byte for byte
    const GgufExport want = export_llama_gguf(load_llama2c(data / "stories260K/stories260K.bin"),
                                              load_tokenizer(data / "stories260K/tok512.bin", 512), GgmlType::q8_0, nullptr,
                                              "stories260K");
    CHECK(read_bytes(out) == want.writer.bytes());
    fs::remove(out);
  }

  // A Q4_0 block with an infinite scale in the middle of the file: found while writing (the
  // tensors are decoded one by one then), one error line, and neither --out nor its temporary left.
  {
    const GgufFile src = GgufFile::open(q4);
    const GgufTensor* t = src.tensor("blk.1.ffn_up.weight");
    REQUIRE(t != nullptr);
    REQUIRE(t->type == static_cast<std::uint32_t>(GgmlType::q4_0));
    auto bytes = read_bytes(q4);
    const std::size_t at = src.data_offset() + static_cast<std::size_t>(t->offset) + 18 * 5;  // block 5's fp16 scale
    bytes[at] = std::byte{0x00};
    bytes[at + 1] = std::byte{0x7C};  // +inf
    const fs::path broken = dir / "broken.gguf", out = dir / "never.gguf";
    std::ofstream(broken, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const auto r = run_tool("--model " + broken.string() + " --out " + out.string() + " --type q8_0");
    CHECK(r.status == 1);
    CHECK_MESSAGE(barato::test::one_error_line(r.err, "barato_quantize", broken.string(), "byte offset " + std::to_string(at)), r.err);
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(out.string() + ".tmp"));
  }

  CHECK(run_tool("--model " + f32.string() + " --out " + (dir / "x.gguf").string() + " --type q5_k").status == 2);
  CHECK(run_tool("--model " + f32.string() + " --out " + f32.string() + " --type q8_0").status == 2);
  CHECK(run_tool("--out " + (dir / "x.gguf").string() + " --type q8_0").status == 2);
}
