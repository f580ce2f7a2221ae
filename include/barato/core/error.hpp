#pragma once
/// \file
/// barato's typed errors. Bad input or configuration at an API boundary throws one of these; the
/// message says what was expected and what was found (file and byte offset for files).
/// Capacity exhaustion throws `capacity_error` and leaves the data structure exactly as it was.

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace barato {

/// Base of every exception barato throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Shapes or sizes that do not fit together (mismatched spans, zero heads, H_q % H_kv != 0, ...).
class shape_error : public error {
 public:
  using error::error;
};

/// A bounded structure is full (cache capacity, block pool). The structure is unchanged.
class capacity_error : public error {
 public:
  using error::error;
};

/// A value outside its domain (NaN / Inf where finite numbers are required, bad option values).
class value_error : public error {
 public:
  using error::error;
};

/// A file that does not parse: names the file, the byte offset, what was expected and what was found.
class format_error : public error {
 public:
  format_error(std::string file, std::size_t offset, const std::string& what_msg)
      : error(file + ": at byte offset " + std::to_string(offset) + ": " + what_msg),
        file_(std::move(file)), offset_(offset) {}
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

 private:
  std::string file_;
  std::size_t offset_;
};

/// An I/O failure (cannot open / read a file).
class io_error : public error {
 public:
  using error::error;
};

namespace detail {
/// Builds a message from streamable pieces: `cat("expected ", a, ", got ", b)`.
template <class... Ts>
[[nodiscard]] std::string cat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

namespace detail {
/// The cold, out-of-line half of `require`: builds the message and throws. `[[noreturn]]` tells the
/// optimiser that code after a failed check is unreachable (without it GCC 12 analyses the
/// impossible paths and misfires -Warray-bounds / -Waggressive-loop-optimizations).
template <class E, class... Ts>
[[noreturn, gnu::cold, gnu::noinline]] void fail(const Ts&... parts) {
  throw E(cat(parts...));
}
}  // namespace detail

/// Throws `E` with the concatenated message unless `cond` holds.
template <class E = shape_error, class... Ts>
inline void require(bool cond, const Ts&... parts) {
  if (!cond) [[unlikely]] detail::fail<E>(parts...);
}

}  // namespace barato

/// Programmer-error check for hot loops: active in debug builds, compiled out with NDEBUG.
#ifdef NDEBUG
#define BARATO_ASSERT(cond) ((void)0)
#else
#include <cassert>
#define BARATO_ASSERT(cond) assert(cond)
#endif
