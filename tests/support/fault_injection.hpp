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

/// Runs `op(s)` on `s = make()` with the k-th allocation failing for k = 1, 2, …: every failing run
/// must throw `std::bad_alloc` and leave `snap(s)` as before; the first run without a fault must
/// succeed and leave `snap(s)` equal to what `op` gives on a second, untouched `make()`. Returns the
/// number of faults injected (the allocations `op` makes). `op` may return a value (compared too).
template <class Make, class Op, class Snap>
std::size_t check_strong_guarantee(Make&& make, Op&& op, Snap&& snap) {
  auto control = make();
  std::string want_result;
  if constexpr (std::is_void_v<decltype(op(control))>) op(control);
  else want_result = (Snapshot{}("result", op(control))).str();
  const std::string want = snap(control);

  auto s = make();
  const std::string before = snap(s);
  std::size_t k = 1;
  for (;; ++k) {
    bool threw = false, fired = false;
    std::string got_result;
    {
      FailAllocation fault(k);
      try {
        if constexpr (std::is_void_v<decltype(op(s))>) op(s);
        else got_result = (Snapshot{}("result", op(s))).str();
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      fired = fault.fired();
    }
    if (!threw) {
      CHECK_MESSAGE(!fired, "allocation ", k, " failed but the operation did not report it");
      CHECK(got_result == want_result);
      break;
    }
    CAPTURE(k);
    REQUIRE(snap(s) == before);
  }
  CHECK(snap(s) == want);
  return k - 1;
}

}  // namespace barato::test
