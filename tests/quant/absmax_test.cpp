#include "barato/quant/absmax.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "barato/quant/quantized_matrix.hpp"
#include "support/data.hpp"

using namespace barato;
using namespace barato::quant;

TEST_CASE("AbsMax carries its facts") {
  CHECK(AbsMax<8, PerRow>::kQMax == 127);
  CHECK(AbsMax<8, PerRow>::kQMin == -128);
  CHECK(AbsMax<4, PerGroup<128>>::kBitsPerWeight == 4.125);
  CHECK(AbsMax<4, PerGroup<128>, float>::kBitsPerWeight == 4.25);
  CHECK(AbsMax<4, PerGroup<32>>::kBlockSize == 32);
  CHECK(AbsMax<4, PerRow>::kBlockSize == 0);
}

TEST_CASE_TEMPLATE("encode(level(c)) == c for every integer; rounding is half to even and clamped", F, AbsMax<8, PerRow>,
                   AbsMax<7, PerRow>, AbsMax<5, PerRow>, AbsMax<4, PerRow>, AbsMax<3, PerRow>, AbsMax<2, PerRow>) {
  for (int q = F::kQMin; q <= F::kQMax; ++q) {
    const auto c = F::code_of(q);
    CHECK(F::integer(c) == q);
    CHECK(F::encode(F::level(c)) == c);
  }
  CHECK(F::integer(F::encode(0.5f)) == 0);
  CHECK(F::integer(F::encode(-0.5f)) == 0);
  CHECK(F::integer(F::encode(1.5f)) == (F::kQMax >= 2 ? 2 : 1));
  CHECK(F::integer(F::encode(1e6f)) == F::kQMax);
  CHECK(F::integer(F::encode(-1e6f)) == F::kQMin);
  CHECK(F::level(F::kZeroCode) == 0.0f);
}

namespace {
std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
template <class T>
T read_at(const std::vector<char>& b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}
}  // namespace

TEST_CASE("per-group int8 (G = 32, fp32 scales) over each flattened tensor reproduces llama2.c's stories260K_q80.bin") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/stories260K_q80.bin");
  if (dir.empty()) return;
  const auto fp = read_all(dir / "stories260K/stories260K.bin");
  const auto q8 = read_all(dir / "stories260K/stories260K_q80.bin");
  // fp32 checkpoint: 7 int32 header values, then the weights (layout in the data folder's README).
  const int dim = read_at<std::int32_t>(fp, 0), hidden = read_at<std::int32_t>(fp, 4), layers = read_at<std::int32_t>(fp, 8);
  const int heads = read_at<std::int32_t>(fp, 12), kv_heads = read_at<std::int32_t>(fp, 16), vocab = read_at<std::int32_t>(fp, 20);
  REQUIRE(dim == 64);
  REQUIRE(read_at<std::uint32_t>(q8, 0) == 0x616b3432u);  // "ak42"
  REQUIRE(read_at<std::int32_t>(q8, 4) == 2);
  const std::size_t D = std::size_t(dim), H = std::size_t(hidden), L = std::size_t(layers);
  const std::size_t kv = D * std::size_t(kv_heads) / std::size_t(heads);
  const std::size_t group = std::size_t(read_at<std::int32_t>(q8, 4 + 4 * 8 + 1));
  REQUIRE(group == 32);

  const float* w = reinterpret_cast<const float*>(fp.data() + 28);
  std::size_t off = 0;
  const std::size_t emb = off;
  off += std::size_t(vocab) * D;
  off += L * D;  // rms_att
  const std::size_t wq = off;
  off += L * D * D;
  const std::size_t wk = off;
  off += L * kv * D;
  const std::size_t wv = off;
  off += L * kv * D;
  const std::size_t wo = off;
  off += L * D * D;
  off += L * D;  // rms_ffn
  const std::size_t w1 = off;
  off += L * H * D;
  const std::size_t w2 = off;
  off += L * D * H;
  const std::size_t w3 = off;

  struct Tensor { std::size_t start, n; };
  std::vector<Tensor> order{{emb, std::size_t(vocab) * D}};
  for (auto [base, n] : {Tensor{wq, D * D}, Tensor{wk, kv * D}, Tensor{wv, kv * D}, Tensor{wo, D * D}, Tensor{w1, H * D},
                         Tensor{w2, D * H}, Tensor{w3, H * D}})
    for (std::size_t l = 0; l < L; ++l) order.push_back({base + l * n, n});

  std::size_t pos = 256 + (2 * L * D + D) * 4;  // header, then rms_att, rms_ffn, rms_final
  std::size_t codes = 0, code_diff = 0, scales = 0, scale_diff = 0;
  for (const auto& t : order) {
    const QuantizedMatrix<AbsMax<8, PerGroup<32>, float>> m(1, t.n, std::span<const float>(w + t.start, t.n));
    REQUIRE(pos + t.n + t.n / group * 4 <= q8.size());
    for (std::size_t i = 0; i < t.n; ++i, ++codes)
      code_diff += static_cast<std::int8_t>(m.codes()[i]) != static_cast<std::int8_t>(q8[pos + i]);
    pos += t.n;
    for (std::size_t g = 0; g < t.n / group; ++g, ++scales) {
      const float s = read_at<float>(q8, pos + 4 * g);
      scale_diff += std::memcmp(&s, &m.scales()[g], 4) != 0;
    }
    pos += t.n / group * 4;
  }
  CHECK(pos == q8.size());
  CHECK(codes == 259328);
  CHECK(scales == 8104);
  CHECK(code_diff == 0);
  CHECK(scale_diff == 0);
}
