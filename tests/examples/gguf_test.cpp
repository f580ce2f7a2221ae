// Tests of the GGUF reader (examples/models/gguf.hpp) and writer (examples/models/gguf_writer.hpp):
// write → read round trips of every value type and readable tensor type; every reader error path
// (truncation at every byte, bad magic / version, hostile lengths and counts, bad dims and types,
// misaligned / overlapping / out-of-file tensors, duplicates), each a format_error naming the offset.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/gguf.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_writer.hpp"
#include "support/data.hpp"
#include "support/scratch_dir.hpp"

using namespace barato_examples;
using V = GgufWriteValue;
using T = GgufValueType;

namespace {

/// Little-endian byte builder for hand-made (hostile) files.
struct Bytes {
  std::vector<std::byte> b;
  template <class X>
  Bytes& put(X x) {
    const auto* p = reinterpret_cast<const std::byte*>(&x);
    b.insert(b.end(), p, p + sizeof(X));
    return *this;
  }
  Bytes& u32(std::uint32_t x) { return put(x); }
  Bytes& u64(std::uint64_t x) { return put(x); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    for (const char c : s) b.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Bytes& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    for (const char c : std::string("GGUF")) b.push_back(static_cast<std::byte>(c));
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& tensor_info(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (const auto d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(std::size_t a = 32) {
    b.resize((b.size() + a - 1) / a * a, std::byte{0});
    return *this;
  }
  Bytes& zeros(std::size_t n) {
    b.resize(b.size() + n, std::byte{0});
    return *this;
  }
};

/// Parses `b` expecting a format_error whose message contains `needle`; returns its offset.
std::size_t expect_error(const std::vector<std::byte>& b, const std::string& needle) {
  try {
    (void)GgufFile::from_bytes("hostile.gguf", b);
  } catch (const barato::format_error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.find("hostile.gguf") != std::string::npos);
    CHECK(msg.find(needle) != std::string::npos);
    return e.offset();
  }
  FAIL("expected a format_error containing \"" << needle << "\"");
  return 0;
}

std::uint16_t fp16_bits(float x) { return std::bit_cast<std::uint16_t>(barato::f16(x)); }

/// A small valid file: metadata of every type (nested arrays, string arrays) and one tensor of each
/// readable type.
GgufWriter small_writer(std::uint32_t alignment = 0) {
  GgufWriter w;
  if (alignment != 0) w.add("general.alignment", V::u32(alignment));
  w.add("k.u8", V::u8(200)).add("k.i8", V::i8(-100)).add("k.u16", V::u16(60000)).add("k.i16", V::i16(-30000));
  w.add("k.u32", V::u32(4000000000u)).add("k.i32", V::i32(-2000000000)).add("k.u64", V::u64(std::uint64_t{1} << 60));
  w.add("k.i64", V::i64(-(std::int64_t{1} << 60))).add("k.f32", V::f32(0.25f)).add("k.f64", V::f64(-1.0e300));
  w.add("k.bool", V::boolean(true)).add("k.str", V::string("héllo ▁world"));
  const std::vector<std::string> strs = {"a", "", "<0x0A>", "▁the"};
  w.add("k.strs", V::strings(strs));
  const std::vector<float> fl = {1.5f, -2.0f, 3.25f};
  w.add("k.f32s", V::numbers<float>(T::f32, fl));
  w.add("k.nested", V::array(T::array, {V::array(T::i32, {V::i32(1), V::i32(-2)}), V::array(T::i32, {})}));
  w.add("k.nested_strs", V::array(T::array, {V::strings(strs)}));
  std::vector<float> f32(3 * 5);
  for (std::size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.5f - 3.0f;
  w.add_tensor_f32("t.f32", {5, 3}, f32);
  std::vector<std::uint16_t> f16 = {fp16_bits(1.0f), fp16_bits(-0.5f), 0x0001, 0x7bff};  // incl. a subnormal and max
  w.add_tensor("t.f16", GgmlType::f16, {4}, std::as_bytes(std::span<const std::uint16_t>(f16)));
  std::vector<std::uint16_t> bf = {0x3f80, 0xc040};  // 1, -3
  w.add_tensor("t.bf16", GgmlType::bf16, {2}, std::as_bytes(std::span<const std::uint16_t>(bf)));
  std::vector<std::byte> q8(34);
  const std::uint16_t d = fp16_bits(0.5f);
  std::memcpy(q8.data(), &d, 2);
  for (std::size_t j = 0; j < 32; ++j) q8[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(static_cast<int>(j) - 16));
  w.add_tensor("t.q8_0", GgmlType::q8_0, {32}, q8);
  std::vector<std::byte> q4(18);
  std::memcpy(q4.data(), &d, 2);
  for (std::size_t j = 0; j < 16; ++j) q4[2 + j] = static_cast<std::byte>((j & 0xf) | ((15 - j) << 4));
  w.add_tensor("t.q4_0", GgmlType::q4_0, {32}, q4);
  return w;
}

}  // namespace

TEST_CASE("gguf: write -> read round trip of every metadata type and tensor type") {
  for (const std::uint32_t align : {0u, 64u}) {
    const auto bytes = small_writer(align).bytes();
    const GgufFile f = GgufFile::from_bytes("small.gguf", bytes);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == (align == 0 ? 32u : align));
    CHECK(f.data_offset() % f.alignment() == 0);
    CHECK(f.find("k.u8")->bits == 200);
    CHECK(f.find("k.i8")->as_i64() == -100);
    CHECK(f.find("k.u16")->bits == 60000);
    CHECK(f.find("k.i16")->as_i64() == -30000);
    CHECK(f.find("k.u32")->bits == 4000000000u);
    CHECK(f.find("k.i32")->as_i64() == -2000000000);
    CHECK(f.find("k.u64")->bits == (std::uint64_t{1} << 60));
    CHECK(f.find("k.i64")->as_i64() == -(std::int64_t{1} << 60));
    CHECK(f.find("k.f32")->as_f64() == 0.25);
    CHECK(f.find("k.f64")->as_f64() == -1.0e300);
    CHECK(f.find("k.bool")->type == T::boolean);
    CHECK(f.find("k.bool")->bits == 1);
    CHECK(f.find("k.str")->str == "héllo ▁world");
    const GgufValue* s = f.find("k.strs");
    REQUIRE(s->items.size() == 4);
    CHECK(s->items[1].str.empty());
    CHECK(s->items[3].str == "▁the");
    const GgufValue* fl = f.find("k.f32s");
    REQUIRE(fl->count == 3);
    CHECK(fl->element(2).as_f64() == 3.25);
    const GgufValue* n = f.find("k.nested");
    REQUIRE(n->items.size() == 2);
    CHECK(n->items[0].elem_type == T::i32);
    CHECK(n->items[0].element(1).as_i64() == -2);
    CHECK(n->items[1].count == 0);
    CHECK(f.find("k.nested_strs")->items[0].items[2].str == "<0x0A>");
    CHECK(f.find("missing") == nullptr);
    REQUIRE(f.tensors().size() == 5);
    const GgufTensor* t = f.tensor("t.f32");
    REQUIRE(t != nullptr);
    CHECK(t->ne == std::vector<std::uint64_t>{5, 3});
    CHECK(t->offset % f.alignment() == 0);
    const auto f32 = gguf_tensor_fp32(*t);
    CHECK(f32[0] == -3.0f);
    CHECK(f32[14] == 4.0f);
    const auto f16 = gguf_tensor_fp32(*f.tensor("t.f16"));
    CHECK(f16[0] == 1.0f);
    CHECK(f16[1] == -0.5f);
    CHECK(f16[2] == std::ldexp(1.0f, -24));
    CHECK(f16[3] == 65504.0f);
    const auto bf = gguf_tensor_fp32(*f.tensor("t.bf16"));
    CHECK(bf[0] == 1.0f);
    CHECK(bf[1] == -3.0f);
    const auto q8 = gguf_tensor_fp32(*f.tensor("t.q8_0"));
    for (std::size_t j = 0; j < 32; ++j) CHECK(q8[j] == 0.5f * static_cast<float>(static_cast<int>(j) - 16));
    const auto q4 = gguf_tensor_fp32(*f.tensor("t.q4_0"));
    for (std::size_t j = 0; j < 16; ++j) {
      CHECK(q4[j] == 0.5f * static_cast<float>(static_cast<int>(j) - 8));
      CHECK(q4[j + 16] == 0.5f * static_cast<float>(static_cast<int>(15 - j) - 8));
    }
    // The tensor bytes are views into the buffer, not copies.
    CHECK(f.tensor("t.q4_0")->data.size() == 18);
  }
}

TEST_CASE("gguf: a file truncated at any byte is a format_error, never a crash") {
  const auto bytes = small_writer().bytes();
  const GgufFile full = GgufFile::from_bytes("t.gguf", bytes);
  std::size_t end = 0;  // end of the last tensor's data: past it only padding is cut
  for (const auto& t : full.tensors()) end = std::max<std::size_t>(end, full.data_offset() + t.offset + t.data.size());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    if (n < end) {
      bool thrown = false;
      try {
        (void)GgufFile::from_bytes("t.gguf", cut);
      } catch (const barato::format_error& e) {
        thrown = true;
        CHECK(e.offset() <= n);
      }
      INFO("truncated to " << n << " of " << bytes.size() << " bytes");
      CHECK(thrown);
    } else {
      CHECK_NOTHROW((void)GgufFile::from_bytes("t.gguf", cut));
    }
  }
}

TEST_CASE("gguf: llama.cpp's stories260K-f32.gguf truncated anywhere in its header and tables, or randomly corrupted") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K-f32.gguf");
  if (dir.empty()) return;
  std::ifstream in(dir / "stories260K/stories260K-f32.gguf", std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  const GgufFile full = GgufFile::from_bytes("s.gguf", bytes);
  CHECK(full.tensors().size() == 48);
  CHECK(full.find("tokenizer.ggml.tokens")->items.size() == 512);
  {  // from_view parses the caller's bytes in place: the same file, tensor data pointing into them
    const GgufFile view = GgufFile::from_view("s.gguf", bytes);
    REQUIRE(view.tensors().size() == full.tensors().size());
    CHECK(view.data_offset() == full.data_offset());
    for (std::size_t i = 0; i < view.tensors().size(); ++i) {
      const GgufTensor& t = view.tensors()[i];
      CHECK(t.name == full.tensors()[i].name);
      CHECK(t.data.data() == bytes.data() + view.data_offset() + t.offset);
      CHECK(std::ranges::equal(t.data, full.tensors()[i].data));
    }
  }
  std::size_t errors = 0;
  for (std::size_t n = 0; n < full.data_offset() + 64; ++n) {
    try {
      (void)GgufFile::from_view("s.gguf", std::span<const std::byte>(bytes).first(n));
    } catch (const barato::format_error&) {
      ++errors;
    }
  }
  CHECK(errors == full.data_offset() + 64);
  // Random byte corruption of the header and tables: a parse or a format_error, nothing else. Each
  // trial corrupts one buffer in place and parses it as a view (`from_view`: the 1.2 MB file is not
  // copied 3,000 times), then puts the three bytes back, last written first.
  std::mt19937 rng(14);
  std::size_t parsed = 0, rejected = 0;
  auto b = bytes;
  for (int trial = 0; trial < 3000; ++trial) {
    std::array<std::pair<std::size_t, std::byte>, 3> saved{};
    for (auto& [at, was] : saved) {
      at = rng() % full.data_offset();
      was = b[at];
      b[at] = static_cast<std::byte>(rng() & 0xff);
    }
    try {
      (void)GgufFile::from_view("s.gguf", b);
      ++parsed;
    } catch (const barato::format_error&) {
      ++rejected;
    }
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) b[it->first] = it->second;
  }
  CHECK(b == bytes);
  CHECK(parsed + rejected == 3000);
  CHECK(rejected > 0);
}

TEST_CASE("gguf: bad magic and versions") {
  Bytes b;
  b.header(0, 0);
  auto bad = b.b;
  bad[0] = std::byte{'g'};
  CHECK(expect_error(bad, "magic: expected \"GGUF\", found \"gGUF\"") == 0);
  for (const std::uint32_t v : {1u, 4u, 0x03000000u}) {
    Bytes h;
    h.header(0, 0, v);
    CHECK(expect_error(h.b, "version: expected 2 or 3, found " + std::to_string(v)) == 4);
  }
  Bytes be;
  be.header(0, 0, 0x03000000u);
  expect_error(be.b, "big-endian");
  Bytes v2;
  v2.header(0, 0, 2);
  CHECK(GgufFile::from_bytes("v2.gguf", v2.b).version() == 2);
}

TEST_CASE("gguf: hostile lengths and counts are errors before any allocation") {
  {  // n_kv / n_tensors of 2^60
    Bytes b;
    b.header(0, std::uint64_t{1} << 60);
    CHECK(expect_error(b.b, "n_kv") == 16);
    Bytes t;
    t.header(std::uint64_t{1} << 60, 0);
    CHECK(expect_error(t.b, "n_tensors") == 8);
  }
  {  // a key longer than the file
    Bytes b;
    b.header(0, 1).u64(1000).zeros(8);
    CHECK(expect_error(b.b, "key length: expected at most the 8 bytes left in the file, found 1000") == 24);
  }
  {  // a string value longer than the rest of the file
    Bytes b;
    b.header(0, 1).str("k").u32(8).u64(std::uint64_t{1} << 62).str("abc");
    CHECK(expect_error(b.b, "metadata \"k\" length") == 24 + 9 + 4);
  }
  for (const std::uint32_t et : {0u, 8u, 9u}) {  // arrays of u8 / strings / arrays with 2^60 elements
    Bytes b;
    b.header(0, 1).str("arr").u32(9).u32(et).u64(std::uint64_t{1} << 60).zeros(64);
    CHECK(expect_error(b.b, "metadata \"arr\" count: 1152921504606846976 elements") == 24 + 11 + 4 + 4);
  }
  {  // a nested array whose inner count is hostile
    Bytes b;
    b.header(0, 1).str("n").u32(9).u32(9).u64(1).u32(6).u64(std::uint64_t{1} << 61).zeros(16);
    expect_error(b.b, "metadata \"n\"[0] count");
  }
  {  // invalid value types
    Bytes b;
    b.header(0, 1).str("k").u32(13).zeros(8);
    CHECK(expect_error(b.b, "type: expected a GGUF value type 0..12, found 13") == 24 + 9);
    Bytes a;
    a.header(0, 1).str("k").u32(9).u32(77).u64(0);
    expect_error(a.b, "element type: expected a GGUF value type 0..12, found 77");
  }
  {  // a bool that is neither 0 nor 1
    Bytes b;
    b.header(0, 1).str("k").u32(7).put(std::uint8_t{2});
    expect_error(b.b, "expected a bool (0 or 1), found 2");
  }
  {  // duplicate key
    Bytes b;
    b.header(0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2);
    CHECK(expect_error(b.b, "duplicate key \"k\"") == 24 + 17);
  }
  {  // bad alignment values
    Bytes b;
    b.header(0, 1).str("general.alignment").u32(4).u32(48);
    expect_error(b.b, "expected a nonzero power of two, found 48");
    Bytes c;
    c.header(0, 1).str("general.alignment").u32(10).u64(64);
    expect_error(c.b, "expected type u32, found u64");
  }
}

TEST_CASE("gguf: bad tensor infos: dims, types, offsets, overlaps, duplicates") {
  const auto one = [](std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset, std::size_t data) {
    Bytes b;
    b.header(1, 0).tensor_info("w", std::move(ne), type, offset).pad().zeros(data);
    return b.b;
  };
  CHECK_NOTHROW((void)GgufFile::from_bytes("ok.gguf", one({4, 2}, 0, 0, 32)));
  expect_error(one({}, 0, 0, 32), "n_dims: expected 1..4, found 0");
  expect_error(one({1, 1, 1, 1, 1}, 0, 0, 32), "n_dims: expected 1..4, found 5");
  expect_error(one({4, 0}, 0, 0, 32), "ne[1]: expected >= 1, found 0");
  expect_error(one({std::uint64_t{1} << 32, std::uint64_t{1} << 32}, 0, 0, 32), "the element count overflows");
  expect_error(one({4, 2}, 21, 0, 32), "found IQ3_S (ggml type 21)");
  expect_error(one({4, 2}, 15, 0, 32), "found Q8_K (ggml type 15)");
  expect_error(one({128}, 12, 0, 32), "expected a multiple of 256 for Q4_K, found 128");
  expect_error(one({4, 2}, 99, 0, 32), "found unknown type id 99");
  expect_error(one({33}, 8, 0, 64), "expected a multiple of 32 for Q8_0, found 33");
  expect_error(one({4, 2}, 0, 8, 64), "offset: expected a multiple of the alignment 32, found 8");
  expect_error(one({4, 2}, 0, 0, 31), "end past the end of the file");
  expect_error(one({4, 2}, 0, std::uint64_t{1} << 62, 32), "end past the end of the file");
  expect_error(one({std::uint64_t{1} << 40}, 0, 0, 32), "end past the end of the file");
  {  // data section past the file
    Bytes b;
    b.header(1, 0).tensor_info("w", {1}, 0, 0);
    expect_error(b.b, "data section");
  }
  {  // overlapping tensors
    Bytes b;
    b.header(2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {8}, 0, 32).pad().zeros(96);
    expect_error(b.b, "tensor \"b\" at data offset 32 overlaps tensor \"a\" (data offsets 0..64)");
  }
  {  // duplicate names
    Bytes b;
    b.header(2, 0).tensor_info("a", {8}, 0, 0).tensor_info("a", {8}, 0, 32).pad().zeros(64);
    expect_error(b.b, "duplicate tensor name");
  }
}

TEST_CASE("gguf writer: rejects bad descriptions") {
  GgufWriter w;
  w.add("a", V::u8(1));
  CHECK_THROWS_AS(w.add("a", V::u8(2)), barato::value_error);
  CHECK_THROWS_AS(w.add("general.alignment", V::u32(24)), barato::value_error);
  const std::vector<float> x(8);
  w.add_tensor_f32("t", {8}, x);
  CHECK_THROWS_AS(w.add_tensor_f32("t", {8}, x), barato::value_error);
  CHECK_THROWS_AS(w.add_tensor_f32("u", {4}, x), barato::shape_error);
  CHECK_THROWS_AS(w.add_tensor_f32("v", {1, 1, 1, 1, 8}, x), barato::shape_error);
  CHECK_THROWS_AS((void)V::array(T::u8, {V::u16(1)}), barato::value_error);
  CHECK_THROWS_AS(w.add_tensor("q", static_cast<GgmlType>(21), {8}, std::as_bytes(std::span<const float>(x))), barato::value_error);  // IQ3_S: not read
  CHECK_THROWS_AS(w.add_tensor("q", GgmlType::q8_0, {8}, std::as_bytes(std::span<const float>(x))), barato::shape_error);
  // A rejected tensor or key leaves no trace: the name can be used again.
  CHECK_NOTHROW(w.add_tensor_f32("q", {8}, x));
  CHECK_NOTHROW(w.add("general.alignment", V::u32(64)));
}

TEST_CASE("gguf writer: deferred tensors are made at write time and give the same file") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, y = {-1, 0.5f, 2, 4};
  const auto bytes_of = [](const std::vector<float>& v) {
    const auto b = std::as_bytes(std::span<const float>(v));
    return std::vector<std::byte>(b.begin(), b.end());
  };
  GgufWriter eager, lazy;
  for (GgufWriter* w : {&eager, &lazy}) w->add("general.alignment", V::u32(64)).add("k", V::string("v"));
  eager.add_tensor_f32("a", {8}, x).add_tensor_f32("b", {2, 2}, y);
  int calls = 0;
  lazy.add_tensor_deferred("a", GgmlType::f32, {8}, [&] { ++calls; return bytes_of(x); });
  lazy.add_tensor_f32("b", {2, 2}, y);
  CHECK(calls == 0);  // nothing is made before the file is
  const auto want = eager.bytes();
  CHECK(lazy.bytes() == want);
  CHECK(calls == 1);
  const auto p = barato::test::scratch_dir() / "deferred.gguf";
  lazy.write(p);
  CHECK(calls == 2);
  {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(std::equal(file.begin(), file.end(), reinterpret_cast<const char*>(want.data()),
                     reinterpret_cast<const char*>(want.data()) + want.size()));
  }
  CHECK(GgufWriter::tensor_bytes(GgmlType::q8_0, std::vector<std::uint64_t>{64, 3}) == 6 * 34);
  // A producer's wrong byte count or exception fails the write; a bad description fails at once.
  GgufWriter bad;
  bad.add_tensor_deferred("short", GgmlType::f32, {8}, [&] { return bytes_of(y); });
  CHECK_THROWS_WITH_AS((void)bad.bytes(), doctest::Contains("needs 32 bytes, its producer made 16"), barato::shape_error);
  GgufWriter throws;
  throws.add_tensor_deferred("t", GgmlType::f32, {8}, []() -> std::vector<std::byte> { throw barato::format_error("src.gguf", 7, "bad block"); });
  CHECK_THROWS_AS((void)throws.bytes(), barato::format_error);
  CHECK_THROWS_AS(throws.add_tensor_deferred("t", GgmlType::f32, {8}, [&] { return bytes_of(x); }), barato::value_error);
  CHECK_THROWS_AS(throws.add_tensor_deferred("u", GgmlType::f32, {8}, {}), barato::value_error);
  CHECK_THROWS_AS(throws.add_tensor_deferred("v", GgmlType::q4_0, {8}, [&] { return bytes_of(x); }), barato::shape_error);
}

TEST_CASE("gguf: is_gguf_file reads the magic, not the extension") {
  const auto p = barato::test::scratch_dir() / "magic.bin";
  small_writer().write(p);
  CHECK(is_gguf_file(p));
  CHECK(GgufFile::open(p).tensors().size() == 5);
  {
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << "GGU";
  }
  CHECK_FALSE(is_gguf_file(p));
  CHECK_THROWS_AS((void)GgufFile::open(p), barato::format_error);
  std::filesystem::remove(p);
  CHECK_FALSE(is_gguf_file(p));
  CHECK_THROWS_AS((void)GgufFile::open(p), barato::io_error);
}
