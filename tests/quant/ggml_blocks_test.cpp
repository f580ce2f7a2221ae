// quant/ggml_blocks.hpp: ggml block bytes ↔ QuantizedMatrix<GgmlQ8_0 / GgmlQ4_0> without requantizing
// (bytes out == bytes in, dequantized values from the bytes), the size and scale errors, and — when the
// shared data is present — barato's quantizer against llama.cpp's own Q8_0 / Q4_0 files, tensor by
// tensor, from the F32 file of the same model.
#include "barato/quant/ggml_blocks.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "barato/quant/gemv.hpp"
#include "quant/reference.hpp"
#include "support/reference.hpp"
#include "support/data.hpp"

using namespace barato;
using namespace barato::quant;

namespace {

/// Random ggml bytes of a [rows, cols] matrix of F: random codes, finite random fp16 scales.
template <class F>
std::vector<std::uint8_t> random_blocks(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> bytes(ggml_bytes<F>(rows, cols));
  for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
  for (std::size_t b = 0; b < rows * cols / 32; ++b) {
    // fp16 bits with exponent field < 31 (finite), either sign
    const auto bits = static_cast<std::uint16_t>((rng() & 0x83FF) | ((rng() % 31) << 10));
    bytes[b * F::kGgmlBlockBytes] = static_cast<std::uint8_t>(bits & 0xFF);
    bytes[b * F::kGgmlBlockBytes + 1] = static_cast<std::uint8_t>(bits >> 8);
  }
  return bytes;
}

/// Weight (r, c) as ggml defines it from the block bytes.
template <class F>
float ggml_weight(const std::vector<std::uint8_t>& bytes, std::size_t cols, std::size_t r, std::size_t c) {
  const std::uint8_t* blk = bytes.data() + (r * cols + c) / 32 * F::kGgmlBlockBytes;
  std::uint16_t bits = 0;
  std::memcpy(&bits, blk, 2);
  const float d = static_cast<float>(std::bit_cast<f16>(bits));
  const std::size_t j = c % 32;
  if constexpr (std::is_same_v<F, GgmlQ8_0>) return d * float(static_cast<std::int8_t>(blk[2 + j]));
  else return d * float((j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8);
}

}  // namespace

TEST_CASE_TEMPLATE("from_ggml_blocks then to_ggml_blocks gives back the bytes; the matrix holds ggml's weights", F,
                   GgmlQ8_0, GgmlQ4_0) {
  const std::size_t rows = 9, cols = 160;
  const auto bytes = random_blocks<F>(rows, cols, 7);
  const auto m = from_ggml_blocks<F>(rows, cols, bytes);
  CHECK(m.rows() == rows);
  CHECK(m.cols() == cols);
  CHECK(m.bytes() == bytes.size());  // the same storage, split into codes and scales
  std::vector<std::uint8_t> back(bytes.size(), 0);
  to_ggml_blocks(m.view(), std::span<std::uint8_t>(back));
  CHECK(back == bytes);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) REQUIRE(m.view().at(r, c) == ggml_weight<F>(bytes, cols, r, c));
}

TEST_CASE_TEMPLATE("a loaded matrix multiplies like a quantized one (gemv over the converted codes)", F, GgmlQ8_0, GgmlQ4_0) {
  const std::size_t rows = 24, cols = 384;
  const auto w = barato::test::quant_ref::normal_vector(rows * cols, 3, 0.05f);
  const QuantizedMatrix<F> q(rows, cols, w);
  std::vector<std::uint8_t> bytes(ggml_bytes<F>(rows, cols));
  to_ggml_blocks(q.view(), std::span<std::uint8_t>(bytes));
  const auto loaded = from_ggml_blocks<F>(rows, cols, bytes);
  const auto x = barato::test::random_vector(cols, 4, -1.0f, 1.0f);
  std::vector<float> y1(rows), y2(rows);
  gemv(q.view(), x, y1);
  gemv(loaded.view(), x, y2);
  CHECK(y1 == y2);
}

TEST_CASE_TEMPLATE("ggml block conversion: sizes, widths and scales are checked", F, GgmlQ8_0, GgmlQ4_0) {
  const auto bytes = random_blocks<F>(2, 64, 1);
  CHECK_THROWS_AS((void)from_ggml_blocks<F>(2, 64, std::span(bytes).first(bytes.size() - 1)), shape_error);
  CHECK_THROWS_AS((void)from_ggml_blocks<F>(3, 64, bytes), shape_error);
  CHECK_THROWS_WITH_AS((void)from_ggml_blocks<F>(4, 48, std::span(bytes).first(ggml_bytes<F>(4, 32))),
                       doctest::Contains("multiple of 32"), shape_error);
  auto bad = bytes;
  const std::size_t off = 3 * F::kGgmlBlockBytes;  // block 3: row 1, columns 32…63
  bad[off] = 0x00;
  bad[off + 1] = 0x7C;  // +inf
  // (the message built through a stream: GCC 12 -O3 can warn falsely, -Warray-bounds, on literal + std::string)
  std::ostringstream want;
  want << "at byte offset " << 100 + off;
  CHECK_THROWS_WITH_AS((void)from_ggml_blocks<F>(2, 64, bad, {.file = "w.gguf", .offset = 100}),
                       doctest::Contains(doctest::String(want.str().c_str())), format_error);
  bad[off] = 0x01;  // NaN
  CHECK_THROWS_AS((void)from_ggml_blocks<F>(2, 64, bad), format_error);
  const auto m = from_ggml_blocks<F>(2, 64, bytes);
  std::vector<std::uint8_t> small(bytes.size() - 2);
  CHECK_THROWS_AS(to_ggml_blocks(m.view(), std::span<std::uint8_t>(small)), shape_error);
  const QuantizedMatrix<F> odd(2, 45, std::vector<float>(90, 0.25f));
  std::vector<std::uint8_t> out(ggml_bytes<F>(2, 32));
  CHECK_THROWS_AS(to_ggml_blocks(odd.view(), std::span<std::uint8_t>(out)), shape_error);
  std::vector<float> w(2 * 64, 0.5f);
  CHECK_THROWS_AS(quantize_ggml_blocks<F>(2, 64, std::span(w).first(127), std::span<std::uint8_t>(out)), shape_error);
}

// ---- llama.cpp's files ------------------------------------------------------------------------------

namespace {

/// A throwaway reader of just what this test needs from a GGUF v3 file (little-endian): the name,
/// ggml type and data bytes of each tensor. No checks beyond staying inside the file: the real
/// reader lives in examples/models.
struct TinyGguf {
  struct Tensor {
    std::uint32_t type = 0;
    std::vector<std::uint64_t> dims;
    std::span<const std::uint8_t> data;
  };
  std::vector<std::uint8_t> file;
  std::map<std::string, Tensor> tensors;

  explicit TinyGguf(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), {});
    REQUIRE(file.size() > 24);
    REQUIRE(std::memcmp(file.data(), "GGUF", 4) == 0);
    pos = 4;
    REQUIRE(u32() == 3);
    const std::uint64_t n_tensors = u64(), n_kv = u64();
    std::uint64_t alignment = 32;
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      const std::string key = str();
      const std::uint32_t type = u32();
      if (key == "general.alignment" && type == 4) alignment = u32();
      else skip_value(type);
    }
    std::vector<std::pair<std::string, std::uint64_t>> offsets;
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      const std::string name = str();
      Tensor t;
      t.dims.resize(u32());
      for (auto& d : t.dims) d = u64();
      t.type = u32();
      offsets.emplace_back(name, u64());
      tensors[name] = t;
    }
    const std::size_t data = (pos + alignment - 1) / alignment * alignment;
    for (const auto& [name, off] : offsets) {
      Tensor& t = tensors[name];
      std::uint64_t n = 1;
      for (auto d : t.dims) n *= d;
      const std::size_t bytes = t.type == 0 ? n * 4 : t.type == 8 ? n / 32 * 34 : t.type == 2 ? n / 32 * 18 : 0;
      REQUIRE(data + off + bytes <= file.size());
      t.data = std::span<const std::uint8_t>(file.data() + data + off, bytes);
    }
  }

 private:
  std::size_t pos = 0;
  template <class T>
  T get() {
    REQUIRE(pos + sizeof(T) <= file.size());
    T v;
    std::memcpy(&v, file.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::uint32_t u32() { return get<std::uint32_t>(); }
  std::uint64_t u64() { return get<std::uint64_t>(); }
  std::string str() {
    const std::uint64_t n = u64();
    REQUIRE(pos + n <= file.size());
    std::string s(reinterpret_cast<const char*>(file.data() + pos), n);
    pos += n;
    return s;
  }
  void skip_value(std::uint32_t type) {
    constexpr std::size_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};  // by GGUF value type
    REQUIRE(type <= 12);
    if (type == 8) {
      (void)str();
    } else if (type == 9) {
      const std::uint32_t elem = u32();
      const std::uint64_t n = u64();
      for (std::uint64_t i = 0; i < n; ++i) skip_value(elem);
    } else {
      REQUIRE(pos + kSize[type] <= file.size());
      pos += kSize[type];
    }
  }
};

}  // namespace

TEST_CASE("barato's quantizer writes llama.cpp's Q8_0 and Q4_0 tensor bytes for stories260K-h192") {
  const auto root = barato::test::data_dir_or_skip("stories260K/stories260K-h192-f32.gguf");
  if (root.empty()) return;
  const auto dir = root / "stories260K";
  const TinyGguf f32(dir / "stories260K-h192-f32.gguf");
  // GGML types: 8 = Q8_0, 2 = Q4_0 (llama-quantize keeps the q4_0 file's output.weight in Q8_0)
  for (const std::string suffix : {"q8_0", "q4_0"}) {
    CAPTURE(suffix);
    const TinyGguf q(dir / ("stories260K-h192-" + suffix + ".gguf"));
    std::size_t compared = 0;
    for (const auto& entry : q.tensors) {
      const std::string name = entry.first;
      const TinyGguf::Tensor& t = entry.second;
      const std::uint32_t type = t.type;
      if (type != 8 && type != 2) continue;  // tensors kept in F32 (norms)
      CAPTURE(name);
      const auto& src = f32.tensors.at(name);
      REQUIRE(src.type == 0);
      const std::size_t cols = t.dims[0], rows = t.data.size() / (cols / 32) / (type == 8 ? 34 : 18);
      std::vector<float> w(rows * cols);
      std::memcpy(w.data(), src.data.data(), w.size() * 4);
      std::vector<std::uint8_t> mine(t.data.size());
      if (type == 8) quantize_ggml_blocks<GgmlQ8_0>(rows, cols, w, mine);
      else quantize_ggml_blocks<GgmlQ4_0>(rows, cols, w, mine);
      std::size_t first_diff = mine.size();
      for (std::size_t i = 0; i < mine.size() && first_diff == mine.size(); ++i)
        if (mine[i] != t.data[i]) first_diff = i;
      CAPTURE(first_diff);
      CHECK(first_diff == mine.size());
      // and the file's bytes load and write back unchanged
      std::vector<std::uint8_t> back(t.data.size());
      if (type == 8) to_ggml_blocks(from_ggml_blocks<GgmlQ8_0>(rows, cols, t.data).view(), std::span<std::uint8_t>(back));
      else to_ggml_blocks(from_ggml_blocks<GgmlQ4_0>(rows, cols, t.data).view(), std::span<std::uint8_t>(back));
      CHECK(std::equal(back.begin(), back.end(), t.data.begin()));
      ++compared;
    }
    const std::string note = suffix + ": " + std::to_string(compared) + " tensors compared";
    MESSAGE(note);
    CHECK(compared == 37);  // every projection of the 5 layers, the embedding and the classifier
  }
}
