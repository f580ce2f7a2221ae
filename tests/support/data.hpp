#pragma once
// Locating ../shared/data for tests that need the real model and text.
// Order: $BARATO_DATA_DIR, then the compile-time default (<source>/../shared/data).
// A test that needs the data calls `data_dir_or_skip()`: when the data is missing it FAILS in CI
// (CI=true) and otherwise prints a clear message and returns an empty path (the test returns early).

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace barato::test {

inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("BARATO_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return BARATO_DEFAULT_DATA_DIR;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

/// The data directory if `relative` exists below it; otherwise fails (CI) or skips with a message.
inline std::filesystem::path data_dir_or_skip(const std::filesystem::path& relative) {
  const auto dir = data_dir();
  if (std::filesystem::exists(dir / relative)) return dir;
  const std::string msg = "test data missing: " + (dir / relative).string() +
                          " (set BARATO_DATA_DIR to the folder holding stories260K/ and text/)";
  if (in_ci()) {
    FAIL(msg);
  } else {
    MESSAGE("SKIPPED: " << msg);
  }
  return {};
}

}  // namespace barato::test
