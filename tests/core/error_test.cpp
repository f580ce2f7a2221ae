#include "barato/core/error.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

using namespace barato;

TEST_CASE("every barato error is a barato::error and a std::runtime_error") {
  CHECK_THROWS_AS(throw shape_error("s"), error);
  CHECK_THROWS_AS(throw capacity_error("c"), error);
  CHECK_THROWS_AS(throw value_error("v"), error);
  CHECK_THROWS_AS(throw io_error("i"), error);
  CHECK_THROWS_AS(throw format_error("f.bin", 12, "bad"), error);
  CHECK_THROWS_AS(throw shape_error("s"), std::runtime_error);
}

TEST_CASE("require throws the requested type with the concatenated message, only when the condition fails") {
  CHECK_NOTHROW(require(true, "never"));
  try {
    require(2 + 2 == 5, "expected ", 4, " heads, got ", 5.5, " (", std::string("x"), ")");
    FAIL("require did not throw");
  } catch (const shape_error& e) {  // the default type
    CHECK(std::string(e.what()) == "expected 4 heads, got 5.5 (x)");
  }
  CHECK_THROWS_AS(require<capacity_error>(false, "full"), capacity_error);
  CHECK_THROWS_AS(require<value_error>(false, "nan"), value_error);
  CHECK_THROWS_WITH(require<io_error>(false, "cannot open ", "a.bin"), "cannot open a.bin");
}

TEST_CASE("format_error names the file and the byte offset") {
  const format_error e("model.bin", 4096, "expected magic 0x616b3432, got 0x0");
  CHECK(e.file() == "model.bin");
  CHECK(e.offset() == 4096);
  CHECK(std::string(e.what()) == "model.bin: at byte offset 4096: expected magic 0x616b3432, got 0x0");
}
