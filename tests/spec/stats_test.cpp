#include "barato/spec/stats.hpp"

#include <doctest/doctest.h>

using namespace barato;

TEST_CASE("alpha counts drafts examined up to the first rejection; per-position acceptance") {
  spec::Stats s(4);
  s.record(4, 4, 5, 0.1, 0.2);  // all accepted: 4 examined
  s.record(4, 1, 2, 0.1, 0.2);  // accepted 1, rejected the 2nd: 2 examined
  s.record(4, 0, 1, 0.1, 0.2);  // rejected the 1st: 1 examined
  s.record(0, 0, 1, 0.0, 0.2);  // no proposal
  CHECK(s.passes() == 4);
  CHECK(s.empty_passes() == 1);
  CHECK(s.proposed() == 12);
  CHECK(s.accepted() == 5);
  CHECK(s.examined() == 7);
  CHECK(s.alpha() == doctest::Approx(5.0 / 7.0));
  CHECK(s.emitted() == 9);
  CHECK(s.tokens_per_pass() == doctest::Approx(9.0 / 4.0));
  CHECK(s.acceptance_at(0) == doctest::Approx(2.0 / 3.0));
  CHECK(s.acceptance_at(1) == doctest::Approx(1.0 / 2.0));
  CHECK(s.acceptance_at(2) == 1.0);
  CHECK(s.examined_at(3) == 1);
  CHECK(s.accepted_at(0) == 2);
  CHECK(s.accepted_at(1) == 1);
  CHECK(s.passes_accepting(0) == 2);
  CHECK(s.passes_accepting(4) == 1);
  CHECK(s.draft_seconds() == doctest::Approx(0.3));
  CHECK(s.target_seconds() == doctest::Approx(0.8));
  CHECK_THROWS_AS(s.record(5, 0, 1, 0, 0), shape_error);
  s.clear();
  CHECK(s.passes() == 0);
  CHECK(s.alpha() == 0.0);
  CHECK(s.acceptance_at(0) == 0.0);
}
