#pragma once
// The test process's scratch directory: one fresh directory under the system's temporary
// directory (mkdtemp, so two runs of the suite at once — a release and a sanitizer build, or
// `ctest -j` — never share a file), removed with everything in it when the process exits.
// Tests used to write under fixed or per-pid names and leave them behind, one directory per run.

#include <stdlib.h>  // mkdtemp (POSIX)

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace barato::test {

/// A directory made at construction (unique, `<temp>/<stem>_XXXXXX`), removed recursively at
/// destruction. Neither copyable nor movable: it owns what it names.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& stem) {
    std::string name = (std::filesystem::temp_directory_path() / (stem + "_XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "cannot make a scratch directory " + name);
    path_ = name;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover is only untidy
    std::filesystem::remove_all(path_, ignored);
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// The process's scratch directory, made on first use and removed when the process exits
/// normally (a crash leaves it: look there for the files the failing test wrote).
inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir("barato_test");
  return dir.path();
}

}  // namespace barato::test
