// Error paths of the barato_plan tool (examples/tools/plan.cpp), run as a program: a checkpoint
// whose header does not match its size and one that is all zeros give one error line on stderr
// naming the file, the byte offset and what was expected, nothing on stdout, exit status 1.
// Built by examples/CMakeLists.txt (it needs the tool); BARATO_PLAN_TOOL is the tool's path.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/broken_files.hpp"
#include "support/run_tool.hpp"

namespace fs = std::filesystem;

TEST_CASE("barato_plan: broken checkpoints exit 1 with one error line") {
  const fs::path dir = barato::test::scratch_dir() / "plan_tool_check";
  fs::create_directories(dir);
  using barato::test::one_error_line;
  const auto run = [](const std::string& flags) {
    return barato::test::run_tool(BARATO_PLAN_TOOL, flags, "plan_tool_check", 60);
  };
  const fs::path ck = barato::test::write_hostile_checkpoint(dir / "hostile.bin");
  const auto m = run("--model " + ck.string() + " --budget 1GiB");
  CHECK(m.status == 1);
  CHECK_MESSAGE(one_error_line(m.err, "barato_plan", ck.string(), "byte offset 1048576", "expected a file of", "found 1048576"), m.err);
  CHECK(m.out.empty());
  std::ofstream(dir / "zeros.bin", std::ios::binary) << std::string(64, '\0');
  const auto z = run("--model " + (dir / "zeros.bin").string() + " --budget 1GiB");
  CHECK(z.status == 1);
  CHECK_MESSAGE(one_error_line(z.err, "barato_plan", (dir / "zeros.bin").string(), "byte offset 0", "dim"), z.err);
}
