#pragma once
// Shared helpers of the libFuzzer harnesses (tests/fuzz/*_fuzz.cpp): a reader that turns the fuzz
// input into bounded integers and byte strings, and BARATO_FUZZ_CHECK, which reports a violated
// invariant on stderr and aborts (libFuzzer and the replay driver both report an abort as a crash).
// Each harness defines LLVMFuzzerTestOneInput; built with -fsanitize=fuzzer it is a fuzzer, linked
// with replay_main.cpp it replays saved inputs (regressions, seed corpus) as a normal test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#define BARATO_FUZZ_CHECK(cond, ...)                                                                       \
  do {                                                                                                     \
    if (!(cond)) ::barato::fuzz::fail(__FILE__, __LINE__, #cond, ::barato::fuzz::message(__VA_ARGS__)); \
  } while (0)

namespace barato::fuzz {

/// Builds a message from streamable pieces (strings and integers).
inline std::string message() { return {}; }
template <class T, class... Ts>
std::string message(const T& first, const Ts&... rest) {
  std::string s;
  if constexpr (std::is_convertible_v<const T&, std::string_view>) s = std::string(std::string_view(first));
  else s = std::to_string(first);
  return s + message(rest...);
}

[[noreturn]] inline void fail(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s%s%s\n", file, line, cond, msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

/// Consumes the fuzz input front to back; once it is exhausted every read returns the low end of
/// its range (or an empty string), so any input is a valid program of operations.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  [[nodiscard]] bool empty() const noexcept { return n_ == 0; }
  [[nodiscard]] std::size_t remaining() const noexcept { return n_; }
  std::uint8_t byte() noexcept {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  std::uint32_t u32() noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | byte();
    return v;
  }
  /// An integer in [lo, hi] (hi - lo < 2^32).
  std::size_t in(std::size_t lo, std::size_t hi) noexcept {
    const std::size_t span = hi - lo + 1;
    const std::uint32_t v = span <= 256 ? byte() : u32();
    return lo + static_cast<std::size_t>(v) % span;
  }
  bool flag() noexcept { return (byte() & 1) != 0; }
  /// Up to `max` bytes (the length is one byte of input, then the bytes themselves).
  std::string bytes(std::size_t max) {
    const std::size_t len = std::min<std::size_t>({in(0, max), n_});
    std::string s(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    n_ -= len;
    return s;
  }
  /// The rest of the input.
  std::string_view rest() noexcept {
    const std::string_view s(reinterpret_cast<const char*>(p_), n_);
    p_ += n_;
    n_ = 0;
    return s;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_;
};

}  // namespace barato::fuzz
