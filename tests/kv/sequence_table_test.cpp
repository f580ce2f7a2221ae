#include "barato/kv/sequence_table.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "barato/core/memory.hpp"

using namespace barato;

TEST_CASE("sequence table: slots are added empty, looked up checked, and reused last released first") {
  kv::SequenceTable t(3);
  const kv::SeqId a = t.add(), b = t.add(), c = t.add();
  CHECK(a == 0);
  CHECK(b == 1);
  CHECK(c == 2);
  CHECK(t.at(b).live);
  CHECK(t.at(b).len.size() == 3);
  CHECK(t.at(b).table.empty());
  t.at(b).table = {4, 5};
  t.at(b).len = {7, 8, 6};
  CHECK(t.positions() == 8);  // longest layer of each live sequence
  t.remove(a);
  t.remove(b);
  CHECK_FALSE(t.contains(b));
  CHECK_THROWS_AS((void)t.at(b), shape_error);
  CHECK_THROWS_AS((void)t.at(7), shape_error);
  CHECK(t.positions() == 0);
  const kv::SeqId d = t.add();
  CHECK(d == b);  // last released first
  CHECK(t.at(d).table.empty());  // a reused slot starts empty
  CHECK(t.at(d).len == std::pmr::vector<std::size_t>{0, 0, 0});
  CHECK(t.add() == a);
  CHECK(t.add() == 3);
}

TEST_CASE("paged sequence: known tokens carry their chain hashes; a truncate forgets what the shortest layer lost") {
  kv::PagedSequence s(std::pmr::get_default_resource());
  s.len = {0, 0};
  const std::size_t B = 2;
  const std::vector<Token> t{1, 2, 3, 4, 5};
  s.declare(std::span<const Token>(t).first(3), B);
  CHECK(s.hashes.size() == 1);
  s.declare(std::span<const Token>(t).subspan(3), B);
  REQUIRE(s.hashes.size() == 2);
  CHECK(s.hashes[1] == kv::block_hash(s.hashes[0], std::vector<Token>{3, 4}));
  s.len = {5, 3};
  CHECK(s.shortest() == 3);
  CHECK(s.longest() == 5);
  s.registered = 2;
  s.forget_beyond_shortest(B);
  CHECK(s.tokens.size() == 3);
  CHECK(s.hashes.size() == 1);
  CHECK(s.registered == 1);
  // pages written by appending n positions to every layer: those of [len_l, len_l + n) for some l
  s.len = {9, 2};  // B = 2
  CHECK(s.writes(1, 1, B));   // layer 1 writes position 2
  CHECK_FALSE(s.writes(2, 1, B));  // nobody writes positions 4..7
  CHECK(s.writes(4, 1, B));   // layer 0 writes position 9
  CHECK_FALSE(s.writes(5, 1, B));
}

TEST_CASE("sequence table: every table, length and token array comes from the given resource") {
  CountingResource mem;
  {
    kv::SequenceTable t(4, &mem);
    const std::size_t empty = mem.current();
    const kv::SeqId a = t.add();
    CHECK(mem.current() > empty);
    const std::vector<Token> toks(40, 3);
    t.at(a).declare(toks, 8);
    t.at(a).table.assign(5, 1);
    CHECK(t.at(a).tokens.get_allocator().resource() == &mem);
    CHECK(t.at(a).table.get_allocator().resource() == &mem);
    CHECK(t.at(a).hashes.get_allocator().resource() == &mem);
    t.remove(a);
    CHECK(t.at(t.add()).len.get_allocator().resource() == &mem);
  }
  CHECK(mem.current() == 0);
}
