#pragma once
// Strong-guarantee checks by fault injection: run an operation with the k-th global allocation
// failing, for k = 1, 2, … until it succeeds, and require after every failure that the structure is
// exactly as before (a full snapshot compares equal) and, at the end, that the operation gives the
// same result as on an untouched copy. Includes alloc_counter.hpp, which replaces the global
// operator new: include it in exactly ONE translation unit of a test executable.

#include <doctest/doctest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <sstream>
#include <string>

#include "support/alloc_counter.hpp"

namespace barato::test {

/// A structure's observable state written out exactly (floats by bit pattern), compared as a string
/// so a mismatch prints readably.
class Snapshot {
 public:
  template <class T>
  Snapshot& operator()(const char* name, const T& x) {
    os_ << name << '=' << x << ';';
    return *this;
  }
  Snapshot& operator()(const char* name, float x) {
    os_ << name << "=f" << std::bit_cast<std::uint32_t>(x) << ';';
    return *this;
  }
  /// Every element of a range (floats exactly).
  template <class Range>
  Snapshot& range(const char* name, const Range& r) {
    os_ << name << "=[";
    for (const auto& x : r) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, float>) os_ << std::bit_cast<std::uint32_t>(x) << ',';
      else os_ << +x << ',';
    }
    os_ << "];";
    return *this;
  }
  [[nodiscard]] std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

namespace detail {
/// The snapshot of an operation's result (a range element by element, else streamed).
template <class R>
std::string result_string(const R& r) {
  Snapshot s;
  if constexpr (requires { r.begin(); r.end(); }) s.range("result", r);
  else s("result", r);
  return s.str();
}
}  // namespace detail

/// Runs `op(s)` on `s = make()` with the k-th allocation failing for k = 1, 2, …: every failing run
/// must throw `std::bad_alloc` and leave `snap(s)` as before; the first run without a fault must
/// succeed and leave `snap(s)` equal to what `op` gives on a second, untouched `make()`. Returns the
/// number of faults injected (the allocations `op` makes). `op` may return a value (compared too;
/// its snapshot is taken outside the faulted region).
template <class Make, class Op, class Snap>
std::size_t check_strong_guarantee(Make&& make, Op&& op, Snap&& snap) {
  using Result = decltype(op(std::declval<decltype(make())&>()));
  constexpr bool kVoid = std::is_void_v<Result>;
  auto control = make();
  std::string want_result;
  if constexpr (kVoid) op(control);
  else want_result = detail::result_string(op(control));
  const std::string want = snap(control);

  auto s = make();
  const std::string before = snap(s);
  std::size_t k = 1;
  for (;; ++k) {
    bool threw = false, fired = false;
    std::optional<std::conditional_t<kVoid, int, Result>> got;
    {
      FailAllocation fault(k);
      try {
        if constexpr (kVoid) op(s);
        else got.emplace(op(s));
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      fired = fault.fired();
    }
    if (!threw) {
      CHECK_MESSAGE(!fired, "allocation ", k, " failed but the operation did not report it");
      if constexpr (!kVoid) CHECK(detail::result_string(*got) == want_result);
      break;
    }
    CAPTURE(k);
    REQUIRE(snap(s) == before);
  }
  CHECK(snap(s) == want);
  return k - 1;
}

}  // namespace barato::test
