// Tests of the llama2.c checkpoint loader (examples/models/llama2c.hpp): the real stories260K file,
// and crafted bad files (every failure names the file and the byte offset; never an out-of-bounds read).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
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

// ------------------------------------------------------------------------------------------------
// export.py's versioned layouts ("ak42" header): version 1 (fp32, another tensor order) and version 2
// (int8 values with fp32 scales per group of the flattened matrix), written here by the test's own
// writer from a model's tensors in version 0's order.
// ------------------------------------------------------------------------------------------------

namespace {

using barato_examples::Llama2cLayout;
using Id = Llama2cCheckpoint::TensorId;

/// Random tensors in version 0's order for header h (freq_cis included, values unused).
std::vector<float> random_payload(const Llama2cHeader& h, std::uint32_t seed) {
  std::vector<float> p(floats_for(h));
  std::uint32_t s = seed;
  for (float& x : p) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<std::int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
  }
  return p;
}

/// The test's own Q8 rule (export.py's quantize_q80 in fp32): per group of g values, scale =
/// max|w| / 127, q = round-half-even(w / scale) (0 when the scale is 0).
void quantize_q80(std::span<const float> w, std::size_t g, std::vector<std::int8_t>& q, std::vector<float>& s) {
  for (std::size_t k = 0; k < w.size(); k += g) {
    float amax = 0;
    for (std::size_t i = k; i < k + g; ++i) amax = std::max(amax, std::fabs(w[i]));
    const float scale = amax / 127.0f;
    s.push_back(scale);
    for (std::size_t i = k; i < k + g; ++i) q.push_back(scale == 0 ? 0 : static_cast<std::int8_t>(std::nearbyint(w[i] / scale)));
  }
}

/// Writes the model (header h, tensors `p` in version 0's order) as export.py's version 1 or 2.
/// `shared_byte` and `group` are written as given (a test may make them wrong).
fs::path write_versioned(const std::string& name, Llama2cHeader h, std::span<const float> p, int version, std::int32_t group,
                         unsigned char shared_byte) {
  const Llama2cLayout L0 = barato_examples::llama2c_layout(h, "x");
  const fs::path path = temp_dir() / name;
  std::ofstream out(path, std::ios::binary);
  const std::uint32_t magic = 0x616b3432;
  out.write(reinterpret_cast<const char*>(&magic), 4);
  out.write(reinterpret_cast<const char*>(&version), 4);
  h.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  out.write(reinterpret_cast<const char*>(&h), 28);
  out.put(static_cast<char>(shared_byte));
  if (version == 2) out.write(reinterpret_cast<const char*>(&group), 4);
  while (out.tellp() < 256) out.put('\0');
  const auto tensor = [&](Id id) { return p.subspan(L0.tensors[id].offset, L0.tensors[id].floats); };
  const auto fp32 = [&](std::span<const float> x) { out.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size_bytes())); };
  for (const Id id : {Llama2cCheckpoint::kRmsAtt, Llama2cCheckpoint::kRmsFfn, Llama2cCheckpoint::kRmsFinal}) fp32(tensor(id));
  std::vector<Id> mats{Llama2cCheckpoint::kTokenEmbedding, Llama2cCheckpoint::kWq, Llama2cCheckpoint::kWk, Llama2cCheckpoint::kWv,
                       Llama2cCheckpoint::kWo, Llama2cCheckpoint::kW1, Llama2cCheckpoint::kW2, Llama2cCheckpoint::kW3};
  if (!L0.shared_classifier) mats.push_back(Llama2cCheckpoint::kWcls);
  for (const Id id : mats) {
    if (version == 1) {
      fp32(tensor(id));
      continue;
    }
    const std::size_t layers = L0.tensors[id].layers, per = L0.tensors[id].floats / layers;
    for (std::size_t l = 0; l < layers; ++l) {
      std::vector<std::int8_t> q;
      std::vector<float> s;
      quantize_q80(tensor(id).subspan(l * per, per), static_cast<std::size_t>(group), q, s);
      out.write(reinterpret_cast<const char*>(q.data()), static_cast<std::streamsize>(q.size()));
      fp32(s);
    }
  }
  return path;
}

constexpr Llama2cHeader kMid{32, 64, 2, 4, 2, 40, 8};  // head 8, kv_dim 16: every matrix a multiple of 32 values

}  // namespace

TEST_CASE("llama2c: a version-1 file reads as the version-0 file it was written from, tensor for tensor") {
  for (const std::int32_t vocab : {40, -40}) {
    Llama2cHeader h = kMid;
    h.vocab_size = vocab;
    CAPTURE(vocab);
    const std::vector<float> p = random_payload(h, 7);
    const fs::path v1 = write_versioned("v1.bin", h, p, 1, 0, vocab > 0 ? 1 : 0);
    const Llama2cCheckpoint ck = read_llama2c(v1);
    const Llama2cLayout& L = ck.layout();
    CHECK(L.version == 1);
    CHECK(L.header_bytes == 256);
    CHECK(L.shared_classifier == (vocab > 0));
    CHECK(L.file_bytes() == fs::file_size(v1));
    const Llama2cLayout L0 = barato_examples::llama2c_layout(h, "x");
    CHECK(L.total_floats == L0.total_floats - L0.tensors[Llama2cCheckpoint::kFreqCis].floats);  // no freq_cis after version 0
    for (std::size_t i = 0; i < Llama2cLayout::kTensors; ++i) {
      if (i == Llama2cCheckpoint::kFreqCis) continue;
      CAPTURE(i);
      const auto want = std::span<const float>(p).subspan(L0.tensors[i].offset, L0.tensors[i].floats);
      const auto got = ck.tensor(static_cast<Id>(i));
      CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end()));
    }
  }
}

TEST_CASE("llama2c: a version-2 file dequantizes exactly (q · scale) and gives its codes and scales as stored") {
  for (const std::int32_t group : {16, 32, 64}) {
    for (const std::int32_t vocab : {40, -40}) {
      Llama2cHeader h = kMid;
      h.vocab_size = vocab;
      CAPTURE(group);
      CAPTURE(vocab);
      const std::vector<float> p = random_payload(h, static_cast<std::uint32_t>(group));
      const fs::path v2 = write_versioned("v2.bin", h, p, 2, group, vocab > 0 ? 1 : 0);
      const Llama2cLayout L0 = barato_examples::llama2c_layout(h, "x");
      barato_examples::Llama2cReader in(v2);
      const Llama2cLayout& L = in.layout();
      CHECK(L.version == 2);
      CHECK(L.group_size == std::size_t(group));
      CHECK(L.file_bytes() == fs::file_size(v2));
      const Llama2cCheckpoint ck = read_llama2c(v2);
      for (std::size_t i = 0; i < Llama2cLayout::kTensors; ++i) {
        const auto id = static_cast<Id>(i);
        const auto& t = L.tensors[i];
        if (t.floats == 0) continue;
        CAPTURE(t.name);
        const bool gain = id == Llama2cCheckpoint::kRmsAtt || id == Llama2cCheckpoint::kRmsFfn || id == Llama2cCheckpoint::kRmsFinal;
        CHECK(in.is_int8(id) == !gain);
        const auto want = std::span<const float>(p).subspan(L0.tensors[i].offset, L0.tensors[i].floats);
        const auto got = ck.tensor(id);
        REQUIRE(got.size() == want.size());
        if (gain) {
          CHECK(std::equal(got.begin(), got.end(), want.begin()));
          CHECK_THROWS_AS(in.read_int8(id, 0, {}, {}), barato::shape_error);
          continue;
        }
        for (std::size_t l = 0; l < t.layers; ++l) {
          std::vector<std::int8_t> q, q_file(t.layer_floats());
          std::vector<float> s, s_file(t.layer_floats() / std::size_t(group));
          quantize_q80(want.subspan(l * t.layer_floats(), t.layer_floats()), std::size_t(group), q, s);
          in.read_int8(id, l, q_file, s_file);
          CHECK(q_file == q);
          CHECK(s_file == s);
          std::size_t exact = 0;
          for (std::size_t k = 0; k < q.size(); ++k)
            exact += got[l * t.layer_floats() + k] == static_cast<float>(q[k]) * s[k / std::size_t(group)];
          CHECK(exact == q.size());
        }
      }
    }
  }
}

TEST_CASE("llama2c: bad versioned headers name the field and its byte offset") {
  const std::vector<float> p = random_payload(kMid, 3);
  const auto error_of = [](const fs::path& f) {
    const auto e = expect_format_error(f);
    return std::pair<std::size_t, std::string>(e.offset(), e.what());
  };
  const auto patch = [](const fs::path& f, std::size_t at, std::int32_t v) {
    std::fstream io(f, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(at));
    io.write(reinterpret_cast<const char*>(&v), 4);
  };
  SUBCASE("unknown version") {
    const fs::path f = write_versioned("ver.bin", kMid, p, 1, 0, 1);
    patch(f, 4, 3);
    const auto r = error_of(f);
    const std::size_t off = r.first;
    const std::string msg = r.second;
    CHECK(off == 4);
    CHECK_MESSAGE(msg.find("version: expected 1 or 2") != std::string::npos, msg);
    CHECK(msg.find("found 3") != std::string::npos);
  }
  SUBCASE("shared_classifier flag not 0 or 1") {
    const auto r = error_of(write_versioned("shared.bin", kMid, p, 1, 0, 2));
    const std::size_t off = r.first;
    const std::string msg = r.second;
    CHECK(off == 36);
    CHECK_MESSAGE(msg.find("shared_classifier: expected 0 or 1, found 2") != std::string::npos, msg);
  }
  SUBCASE("group size zero, negative, or not dividing a matrix") {
    for (const std::int32_t g : {0, -32}) {
      const fs::path f = write_versioned("group.bin", kMid, p, 2, 32, 1);
      patch(f, 37, g);
      const auto r = error_of(f);
      const std::size_t off = r.first;
      const std::string msg = r.second;
      CHECK(off == 37);
      CHECK_MESSAGE(msg.find("group_size: expected > 0, found " + std::to_string(g)) != std::string::npos, msg);
    }
    const fs::path f = write_versioned("group.bin", kMid, p, 2, 32, 1);
    patch(f, 37, 24);  // divides dim 32? no: the embedding's 40 × 32 = 1280 values are not groups of 24
    const auto r = error_of(f);
    const std::size_t off = r.first;
    const std::string msg = r.second;
    CHECK(off == 37);
    CHECK_MESSAGE(msg.find("group_size: 24 does not divide the 1280 values of token_embedding") != std::string::npos, msg);
  }
  SUBCASE("negative vocab_size (versions 1 and 2 say shared in their flag)") {
    const fs::path f = write_versioned("vocab.bin", kMid, p, 1, 0, 1);
    patch(f, 8 + 20, -40);
    const auto r = error_of(f);
    const std::size_t off = r.first;
    const std::string msg = r.second;
    CHECK(off == 28);
    CHECK_MESSAGE(msg.find("header field vocab_size: expected > 0, found -40") != std::string::npos, msg);
  }
  SUBCASE("truncated header, truncated weights, trailing bytes") {
    Llama2cHeader hu = kMid;
    hu.vocab_size = -40;  // unshared: wcls is the last matrix
    const fs::path f = write_versioned("cut.bin", hu, random_payload(hu, 4), 2, 32, 0);
    const std::size_t size = fs::file_size(f);
    fs::resize_file(f, size + 5);
    auto r = error_of(f);
    std::size_t off = r.first;
    std::string msg = r.second;
    CHECK(off == size);
    CHECK(msg.find("trailing bytes") != std::string::npos);
    fs::resize_file(f, size - 4);  // inside wcls's scales
    std::tie(off, msg) = error_of(f);
    CHECK(off == size - 4);
    CHECK_MESSAGE(msg.find("the file ends inside wcls") != std::string::npos, msg);
    CHECK(msg.find("sized by header field vocab_size (byte 28) = 40") != std::string::npos);
    fs::resize_file(f, 100);
    std::tie(off, msg) = error_of(f);
    CHECK(off == 100);
    CHECK_MESSAGE(msg.find("expected 256 bytes") != std::string::npos, msg);
  }
}

TEST_CASE("llama2c: llama2.c's own version-2 file of stories260K (runq.c's format) reads as the fp32 model quantized") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K_q80.bin");
  if (dir.empty()) return;
  const Llama2cCheckpoint fp = read_llama2c(dir / "stories260K/stories260K.bin");
  const Llama2cCheckpoint q8 = read_llama2c(dir / "stories260K/stories260K_q80.bin");
  const Llama2cLayout& L = q8.layout();
  CHECK(L.version == 2);
  CHECK(L.group_size == 32);
  CHECK(L.shared_classifier);
  CHECK(L.file_bytes() == 294816);
  CHECK(L.dim == 64);
  CHECK(L.hidden_dim == 172);
  // Every value within half a step of the fp32 weight; the gains bit for bit; the whole payload
  // equals the test's own quantization of the fp32 file (the reader's offsets, groups and order).
  barato_examples::Llama2cReader in(dir / "stories260K/stories260K_q80.bin");
  std::size_t values = 0, same = 0;
  for (std::size_t i = 0; i < Llama2cLayout::kTensors; ++i) {
    const auto id = static_cast<Id>(i);
    if (id == Llama2cCheckpoint::kFreqCis || L.tensors[i].floats == 0) continue;
    const auto w = fp.tensor(id), x = q8.tensor(id);
    REQUIRE(w.size() == x.size());
    if (!in.is_int8(id)) {
      CHECK(std::equal(w.begin(), w.end(), x.begin()));
      continue;
    }
    const auto& t = L.tensors[i];
    for (std::size_t l = 0; l < t.layers; ++l) {
      std::vector<std::int8_t> q;
      std::vector<float> s;
      quantize_q80(w.subspan(l * t.layer_floats(), t.layer_floats()), 32, q, s);
      for (std::size_t k = 0; k < q.size(); ++k, ++values) same += x[l * t.layer_floats() + k] == static_cast<float>(q[k]) * s[k / 32];
    }
  }
  CHECK(values == 259328);  // the README: 259,328 int8 values
  CHECK(same == values);
}
