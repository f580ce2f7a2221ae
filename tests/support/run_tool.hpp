#pragma once
// Running a tool (examples/tools) as a user runs it, for the tool-check tests of
// tests/examples/tools/: its exit status, stdout and stderr.

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "scratch_dir.hpp"

namespace barato::test {

/// What a tool run left: exit status (-1 when killed by a signal), stdout, stderr.
struct ToolResult {
  int status = -1;
  std::string out, err;
};

/// The whole content of a file ("" when it does not exist).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `tool flags` through the shell, stdout and stderr captured in files under
/// scratch_dir()/<scratch>/. With `timeout_s` > 0 the run is killed after that many seconds (coreutils
/// `timeout`; status 124), so a test of an input that used to hang fails instead of hanging.
inline ToolResult run_tool(const std::string& tool, const std::string& flags, const std::string& scratch, int timeout_s = 0) {
  const std::filesystem::path dir = scratch_dir() / scratch;
  std::filesystem::create_directories(dir);
  const std::string prefix = timeout_s > 0 ? "timeout " + std::to_string(timeout_s) + " " : std::string();
  const std::string cmd = prefix + tool + " " + flags + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int rc = std::system(cmd.c_str());
  ToolResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

}  // namespace barato::test
