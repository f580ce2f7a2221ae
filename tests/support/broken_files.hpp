#pragma once
// Hostile and broken model files for the tools' error-path tests (tests/examples/tools/): written
// on the fly, never committed.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace barato::test {

/// A 1 MiB llama2.c checkpoint whose header claims seq_len = 2^31 − 1 (the rest zeros): the loader
/// must refuse it from the header, naming the field, before allocating.
inline std::filesystem::path write_hostile_checkpoint(const std::filesystem::path& path) {
  const std::int32_t header[7] = {64, 172, 5, 8, 4, 512, 2147483647};
  std::string bytes(std::size_t{1} << 20, '\0');
  std::memcpy(bytes.data(), header, sizeof header);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

/// A llama2.c tokenizer file whose max_token_length is 2^30, followed by one short record.
inline std::filesystem::path write_hostile_tokenizer(const std::filesystem::path& path) {
  const std::int32_t max_len = 1 << 30, len = 1;
  const float score = 0.0f;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&max_len), 4);
  out.write(reinterpret_cast<const char*>(&score), 4);
  out.write(reinterpret_cast<const char*>(&len), 4);
  out.write("a", 1);
  return path;
}

/// True when `err` is exactly one line "<tool>: error: …" that contains every one of `facts`.
template <class... S>
bool one_error_line(const std::string& err, const std::string& tool, const S&... facts) {
  if (err.empty() || err.back() != '\n' || err.find('\n') != err.size() - 1) return false;
  if (err.rfind(tool + ": error: ", 0) != 0) return false;
  return ((err.find(facts) != std::string::npos) && ...);
}

}  // namespace barato::test
