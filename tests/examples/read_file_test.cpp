// Tests of the bounded whole-file read (examples/models/read_file.hpp): content up to the limit,
// a larger regular file refused by its size, an endless stream (/dev/zero) refused after limit + 1
// bytes instead of hanging, a missing file; every message names the file, the kind and the limit.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/read_file.hpp"
#include "support/scratch_dir.hpp"

namespace fs = std::filesystem;
using barato_examples::read_bounded;

namespace {

fs::path temp_file(const std::string& name, const std::string& content) {
  const fs::path& d = barato::test::scratch_dir();
  std::ofstream(d / name, std::ios::binary) << content;
  return d / name;
}

std::string error_of(const fs::path& p, std::size_t limit) {
  try {
    (void)read_bounded(p, limit, "text file");
  } catch (const barato::io_error& e) {
    return e.what();
  }
  FAIL("expected barato::io_error for " << p);
  return "";
}

}  // namespace

TEST_CASE("read_bounded: whole files up to the limit, bytes as they are") {
  const std::string bytes = std::string("a\0b\xff\n", 5) + std::string(200000, 'x');  // > one 64 KiB chunk
  const fs::path p = temp_file("ok.bin", bytes);
  CHECK(read_bounded(p, bytes.size(), "text file") == bytes);
  CHECK(read_bounded(temp_file("empty.bin", ""), 0, "text file").empty());
}

TEST_CASE("read_bounded: larger files, endless streams and missing files are io_errors naming file and limit") {
  const fs::path big = temp_file("big.bin", std::string(1001, 'x'));
  const std::string msg = error_of(big, 1000);
  CHECK(msg.find(big.string()) != std::string::npos);
  CHECK(msg.find("the text file is larger than the limit of 1000 bytes (found 1001 bytes)") != std::string::npos);
  const std::string zero = error_of("/dev/zero", 100000);
  CHECK(zero.find("/dev/zero: the text file is larger than the limit of 100000 bytes") != std::string::npos);
  CHECK(zero.find("endless") != std::string::npos);
  const std::string missing = error_of(barato::test::scratch_dir() / "no_such_file.txt", 10);
  CHECK(missing.find("cannot open text file") != std::string::npos);
}
