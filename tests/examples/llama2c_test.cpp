// Tests of the llama2.c checkpoint loader (examples/models/llama2c.hpp): the real stories260K file,
// and crafted bad files (every failure names the file and the byte offset; never an out-of-bounds read).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "barato/core/memory.hpp"
#include "models/llama2c.hpp"
#include "support/data.hpp"
#include "support/scratch_dir.hpp"

namespace fs = std::filesystem;
using barato_examples::Llama2cCheckpoint;
using barato_examples::Llama2cHeader;
using barato_examples::read_llama2c;

namespace {

const fs::path& temp_dir() { return barato::test::scratch_dir(); }

/// Writes a header plus `floats` float32 values (value i = i·0.001) and `extra` raw bytes.
fs::path write_file(const std::string& name, const Llama2cHeader& h, std::size_t floats, std::size_t extra = 0) {
  const fs::path p = temp_dir() / name;
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&h), sizeof(h));
  for (std::size_t i = 0; i < floats; ++i) {
    const float v = static_cast<float>(i) * 0.001f;
    out.write(reinterpret_cast<const char*>(&v), 4);
  }
  for (std::size_t i = 0; i < extra; ++i) out.put('x');
  return p;
}

/// Floats a valid file with header h holds.
std::size_t floats_for(const Llama2cHeader& h) { return barato_examples::llama2c_layout(h, "x").total_floats; }

/// Runs read_llama2c and returns the format_error (fails the test if none is thrown).
barato::format_error expect_format_error(const fs::path& p) {
  try {
    (void)read_llama2c(p);
  } catch (const barato::format_error& e) {
    CHECK(e.file() == p.string());
    CHECK(std::string(e.what()).find(p.string()) != std::string::npos);
    return e;
  }
  FAIL("expected barato::format_error for " << p);
  return barato::format_error("", 0, "");
}

constexpr Llama2cHeader kSmall{8, 12, 2, 4, 2, 16, 6};  // head 2, kv_dim 4
/// The checkpoint's fp32 freq_cis table against cos / sin in double: the exporter computed the angles
/// pos·θ in fp32 (error ~pos·u, pos ≤ 300 here), so entries agree to ~10⁻⁵ relative; near a zero of
/// cos or sin the relative error grows, hence 10⁻⁴.
constexpr double kFreqCisRelTol = 1e-4;

}  // namespace

TEST_CASE("llama2c: layout of a small shared-classifier model") {
  const auto L = barato_examples::llama2c_layout(kSmall, "mem");
  CHECK(L.head_size == 2);
  CHECK(L.kv_dim == 4);
  CHECK(L.shared_classifier);
  // emb 16*8 + rms 2*8 + wq 2*64 + wk 2*32 + wv 2*32 + wo 2*64 + rms 2*8 + 3 * 2*12*8 + 8 + freq 6*2 + wcls 0
  const std::size_t expect = 128 + 16 + 128 + 64 + 64 + 128 + 16 + 3 * 192 + 8 + 12;
  CHECK(L.total_floats == expect);
  CHECK(L.file_bytes() == 28 + 4 * expect);
}

TEST_CASE("llama2c: a valid crafted file loads and tensors are where the layout says") {
  const auto p = write_file("ok.bin", kSmall, floats_for(kSmall));
  const Llama2cCheckpoint ck = read_llama2c(p);
  CHECK(ck.layout().vocab == 16);
  CHECK(ck.tensor(Llama2cCheckpoint::kTokenEmbedding)[0] == 0.0f);
  CHECK(ck.tensor(Llama2cCheckpoint::kRmsAtt)[0] == doctest::Approx(128 * 0.001f));
  CHECK(ck.layer(Llama2cCheckpoint::kWq, 1)[0] == doctest::Approx((128 + 16 + 64) * 0.001f));
  CHECK(ck.classifier().data() == ck.tensor(Llama2cCheckpoint::kTokenEmbedding).data());

  // Unshared classifier: wcls is stored after freq_cis.
  Llama2cHeader u = kSmall;
  u.vocab_size = -16;
  const auto pu = write_file("unshared.bin", u, floats_for(u));
  const Llama2cCheckpoint cu = read_llama2c(pu);
  CHECK_FALSE(cu.layout().shared_classifier);
  CHECK(cu.layout().vocab == 16);
  CHECK(cu.classifier().size() == 128);
  CHECK(cu.classifier()[0] == doctest::Approx(static_cast<float>(floats_for(kSmall)) * 0.001f));
}

TEST_CASE("llama2c: truncated header") {
  const fs::path p = temp_dir() / "short_header.bin";
  {
    std::ofstream out(p, std::ios::binary);
    out.write("\x08\x00\x00\x00\x0c\x00", 6);
  }
  const auto e = expect_format_error(p);
  CHECK(e.offset() == 6);
  CHECK(std::string(e.what()).find("expected 28") != std::string::npos);
  const fs::path empty = temp_dir() / "empty.bin";
  { std::ofstream out(empty, std::ios::binary); }
  CHECK(expect_format_error(empty).offset() == 0);
}

TEST_CASE("llama2c: zero / negative dims name the header field offset") {
  struct Case { std::int32_t Llama2cHeader::*field; std::int32_t value; std::size_t offset; };
  const Case cases[] = {
      {&Llama2cHeader::dim, 0, 0},        {&Llama2cHeader::dim, -8, 0},        {&Llama2cHeader::hidden_dim, 0, 4},
      {&Llama2cHeader::n_layers, -1, 8},  {&Llama2cHeader::n_heads, 0, 12},    {&Llama2cHeader::n_kv_heads, 0, 16},
      {&Llama2cHeader::vocab_size, 0, 20}, {&Llama2cHeader::seq_len, 0, 24},   {&Llama2cHeader::seq_len, -5, 24},
  };
  for (const auto& c : cases) {
    Llama2cHeader h = kSmall;
    h.*(c.field) = c.value;
    const auto p = write_file("bad_dim.bin", h, 64);
    const auto e = expect_format_error(p);
    CHECK(e.offset() == c.offset);
    CHECK(std::string(e.what()).find(std::to_string(c.value)) != std::string::npos);
  }
}

TEST_CASE("llama2c: head divisibility") {
  Llama2cHeader h = kSmall;
  h.n_heads = 3;  // does not divide dim 8
  auto e = expect_format_error(write_file("heads.bin", h, 64));
  CHECK(e.offset() == 12);
  CHECK(std::string(e.what()).find("divisor of dim") != std::string::npos);
  h = kSmall;
  h.n_kv_heads = 3;  // does not divide n_heads 4
  e = expect_format_error(write_file("kvheads.bin", h, 64));
  CHECK(e.offset() == 16);
  CHECK(std::string(e.what()).find("divisor of n_heads") != std::string::npos);
  h = kSmall;
  h.n_kv_heads = 8;  // more KV heads than query heads
  CHECK(expect_format_error(write_file("kvheads2.bin", h, 64)).offset() == 16);
  h = kSmall;
  h.n_heads = 8;  // head size 1: RoPE needs pairs
  CHECK(expect_format_error(write_file("odd.bin", h, 64)).offset() == 12);
}

TEST_CASE("llama2c: file size disagreeing with the header") {
  const std::size_t n = floats_for(kSmall);
  SUBCASE("truncated weights") {
    const auto e = expect_format_error(write_file("trunc.bin", kSmall, n - 10));
    CHECK(e.offset() == 28 + 4 * (n - 10));
    CHECK(std::string(e.what()).find("expected a file of " + std::to_string(28 + 4 * n) + " bytes") != std::string::npos);
    CHECK(std::string(e.what()).find("found " + std::to_string(28 + 4 * (n - 10))) != std::string::npos);
    CHECK(std::string(e.what()).find("freq_cis") != std::string::npos);  // the last 12 floats are freq_cis
  }
  SUBCASE("truncated in the middle of a float") {
    const auto e = expect_format_error(write_file("trunc2.bin", kSmall, 100, 2));
    CHECK(e.offset() == 28 + 400 + 2);
  }
  SUBCASE("trailing bytes") {
    const auto e = expect_format_error(write_file("trail.bin", kSmall, n, 3));
    CHECK(e.offset() == 28 + 4 * n);
    CHECK(std::string(e.what()).find("trailing") != std::string::npos);
    CHECK(std::string(e.what()).find("expected a file of " + std::to_string(28 + 4 * n) + " bytes") != std::string::npos);
  }
  SUBCASE("header claiming a huge model") {
    Llama2cHeader h = kSmall;
    h.dim = 1 << 20;
    h.hidden_dim = 1 << 20;
    h.n_heads = 2;
    h.n_kv_heads = 1;
    h.n_layers = 1 << 10;
    const auto e = expect_format_error(write_file("huge.bin", h, 16));
    CHECK(e.offset() == 28 + 64);  // no allocation attempted: the size check comes first
  }
  SUBCASE("header whose sizes overflow") {
    Llama2cHeader h = kSmall;
    h.dim = 1 << 30;
    h.hidden_dim = 1 << 30;
    h.n_heads = 2;
    h.n_kv_heads = 1;
    h.n_layers = 1 << 30;
    const auto e = expect_format_error(write_file("overflow.bin", h, 16));
    CHECK(std::string(e.what()).find("overflow") != std::string::npos);
  }
  SUBCASE("unshared classifier missing") {
    Llama2cHeader h = kSmall;
    h.vocab_size = -16;
    const auto e = expect_format_error(write_file("nowcls.bin", h, n));
    CHECK(std::string(e.what()).find("wcls") != std::string::npos);
  }
}

TEST_CASE("llama2c: a hostile vocab_size or seq_len in a 1 MiB file is refused before any allocation, naming the field") {
  // The stories260K shapes with one field blown up; the file is 1 MiB of header + zeros.
  const Llama2cHeader base{64, 172, 5, 8, 4, 512, 512};
  const std::size_t floats = ((std::size_t{1} << 20) - 28) / 4;
  struct Case {
    const char* field;
    Llama2cHeader h;
    std::string value;
  };
  Llama2cHeader vocab = base, seq = base;
  vocab.vocab_size = 1 << 30;
  seq.seq_len = 2147483647;
  for (const Case& c : {Case{"vocab_size (byte 20)", vocab, "1073741824"}, Case{"seq_len (byte 24)", seq, "2147483647"}}) {
    CAPTURE(c.field);
    const fs::path p = write_file("hostile.bin", c.h, floats);
    barato::CountingResource mem;
    try {
      (void)read_llama2c(p, &mem);
      FAIL("expected barato::format_error");
    } catch (const barato::format_error& e) {
      const std::string msg = e.what();
      CHECK(e.file() == p.string());
      CHECK(e.offset() == std::size_t{1} << 20);  // where the file ends
      CHECK_MESSAGE(msg.find(std::string("header field ") + c.field + " = " + c.value) != std::string::npos, msg);
      CHECK_MESSAGE(msg.find("found 1048576 bytes") != std::string::npos, msg);  // expected vs found
    }
    CHECK(mem.peak() == 0);  // nothing was allocated for the payload
  }
}

TEST_CASE("llama2c: missing file is an io_error") {
  CHECK_THROWS_AS((void)read_llama2c(temp_dir() / "does_not_exist.bin"), barato::io_error);
}

TEST_CASE("llama2c: the real stories260K checkpoint") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K.bin");
  if (dir.empty()) return;
  const auto ck = read_llama2c(dir / "stories260K/stories260K.bin");
  const auto& L = ck.layout();
  CHECK(L.dim == 64);
  CHECK(L.hidden_dim == 172);
  CHECK(L.n_layers == 5);
  CHECK(L.n_heads == 8);
  CHECK(L.n_kv_heads == 4);
  CHECK(L.vocab == 512);
  CHECK(L.seq_len == 512);
  CHECK(L.shared_classifier);
  CHECK(L.total_floats == 264128);
  CHECK(L.file_bytes() == 1056540);
  // The README: the legacy freq_cis block holds RoPE cos/sin with theta 10000 (real part first).
  const auto fc = ck.tensor(Llama2cCheckpoint::kFreqCis);
  REQUIRE(fc.size() == 4096);
  const std::size_t half = L.head_size / 2;
  for (std::size_t pos : {0u, 1u, 7u, 300u})
    for (std::size_t i = 0; i < half; ++i) {
      const double freq = std::pow(10000.0, -static_cast<double>(2 * i) / static_cast<double>(L.head_size));
      CHECK(fc[pos * half + i] == doctest::Approx(std::cos(pos * freq)).epsilon(kFreqCisRelTol));
      CHECK(fc[L.seq_len * half + pos * half + i] == doctest::Approx(std::sin(pos * freq)).epsilon(kFreqCisRelTol));
    }
  // The tensors used (all but freq_cis) add up to the README's 260,032 parameters.
  CHECK(L.total_floats - fc.size() == 260032);
}

TEST_CASE("llama2c: Llama2cReader reads each tensor and layer where the checkpoint holds it") {
  using barato_examples::Llama2cReader;
  Llama2cHeader u = kSmall;
  u.vocab_size = -16;  // an unshared classifier too
  const auto p = write_file("reader.bin", u, floats_for(u));
  const Llama2cCheckpoint ck = read_llama2c(p);
  Llama2cReader in(p);
  CHECK(in.layout().total_floats == ck.layout().total_floats);
  for (std::size_t id = 0; id < barato_examples::Llama2cLayout::kTensors; ++id) {
    const auto t = static_cast<Llama2cCheckpoint::TensorId>(id);
    CAPTURE(id);
    std::vector<float> whole(in.floats(t));
    in.read(t, whole);
    CHECK(std::equal(whole.begin(), whole.end(), ck.tensor(t).begin(), ck.tensor(t).end()));
  }
  for (const auto t : {Llama2cCheckpoint::kWq, Llama2cCheckpoint::kW2, Llama2cCheckpoint::kRmsFfn})
    for (std::size_t l = 0; l < ck.layout().n_layers; ++l) {
      std::vector<float> x(in.layer_floats(t));
      in.read(t, l, x);
      CHECK(std::equal(x.begin(), x.end(), ck.layer(t, l).begin(), ck.layer(t, l).end()));
    }
  std::vector<float> wrong(in.layer_floats(Llama2cCheckpoint::kWq) + 1);
  CHECK_THROWS_AS(in.read(Llama2cCheckpoint::kWq, 0, wrong), barato::shape_error);
  CHECK_THROWS_AS(in.read(Llama2cCheckpoint::kWq, ck.layout().n_layers, std::span<float>(wrong).first(in.layer_floats(Llama2cCheckpoint::kWq))),
                  barato::shape_error);
  // A file that shrinks after it was opened: a format_error at the byte where the read came up short
  // (w1 starts past the new end: its first byte).
  fs::resize_file(p, 28 + 4 * 100);
  std::vector<float> w1(in.layer_floats(Llama2cCheckpoint::kW1));
  try {
    in.read(Llama2cCheckpoint::kW1, 0, w1);
    FAIL("expected barato::format_error");
  } catch (const barato::format_error& e) {
    CHECK(e.file() == p.string());
    CHECK(e.offset() == 28 + 4 * in.layout().tensors[Llama2cCheckpoint::kW1].offset);
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("the file shrank while reading w1 (layer 0) (expected " +
                           std::to_string(4 * in.layer_floats(Llama2cCheckpoint::kW1)) + " bytes, found 0)") != std::string::npos,
                  msg);
  }
}
