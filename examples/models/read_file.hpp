#pragma once
/// \file
/// Bounded whole-file reads for the tools' input files (request files, texts, tokenizers). A file
/// is read into memory only up to a limit: an endless stream (`/dev/zero`, a FIFO that never ends)
/// or a file larger than the limit is a `barato::io_error` naming the file and the limit after at
/// most limit + 1 bytes were read, never a hang or an unbounded allocation. Regular files are
/// checked against the limit by their size before a byte is read.

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "barato/core/error.hpp"

namespace barato_examples {

/// Default limits of `read_bounded` per kind of file (bytes).
inline constexpr std::size_t kMaxRequestFileBytes = std::size_t{64} << 20;   ///< JSONL request files
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{256} << 20;     ///< texts to score or encode
inline constexpr std::size_t kMaxTokenizerFileBytes = std::size_t{256} << 20;  ///< llama2.c tokenizer files

/// The whole content of `path`, read as bytes, when it has at most `limit` bytes. `what` names the
/// kind of file in messages ("request file"). Throws `barato::io_error` when the file cannot be
/// opened or read, or when it holds (or streams) more than `limit` bytes: "FILE: the text file is
/// larger than the limit of N bytes".
[[nodiscard]] inline std::string read_bounded(const std::filesystem::path& path, std::size_t limit, const char* what) {
  const std::string file = path.string();
  const auto too_big = [&](const std::string& found) {
    return barato::io_error(file + ": the " + what + " is larger than the limit of " + std::to_string(limit) + " bytes (" +
                            found + ")");
  };
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > limit) throw too_big("found " + std::to_string(size) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw barato::io_error(file + ": cannot open " + what);
  std::string out;
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  while (true) {
    // Read at most limit + 1 bytes in all: one byte past the limit proves the file is too large.
    const std::size_t want = std::min(kChunk, limit + 1 - out.size());
    const std::size_t at = out.size();
    out.resize(at + want);
    in.read(out.data() + at, static_cast<std::streamsize>(want));
    const auto got = static_cast<std::size_t>(in.gcount());
    out.resize(at + got);
    if (out.size() > limit) throw too_big("read more than " + std::to_string(limit) + " bytes; is it an endless stream?");
    if (got < want) break;
  }
  if (in.bad()) throw barato::io_error(file + ": read error in " + what);
  return out;
}

}  // namespace barato_examples
