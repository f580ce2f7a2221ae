// Tests of ggml's block types as fp32 (examples/models/ggml_dequant.hpp). The oracle is the other
// direction: codes and scales chosen at random are packed into blocks the way ggml's quantizers pack
// them (ggml-quants.c, quantize_row_*: which bit of which byte each code and scale goes to), and every
// decoded element must equal the type's per-element formula (x = d·sc·q − dmin·m, …) bit for bit. A
// few hand-made blocks pin single values; a non-finite scale is a format_error naming its byte; and a
// model whose matrices are stored in every block type loads (file precision) to their exact values.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/linear.hpp"
#include "barato/quant/offset_linear.hpp"
#include "models/generate.hpp"
#include "models/ggml_dequant.hpp"
#include "models/gguf.hpp"
#include "models/gguf_export.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_writer.hpp"
#include "models/llama.hpp"
#include "models/llama_weights.hpp"
#include "models/tokenizer.hpp"
#include "support/data.hpp"
#include "support/greedy.hpp"
#include "support/ggml_pack.hpp"

using namespace barato_examples;
using barato::test::Block;
using barato::test::kBlockTypes;
using barato::test::make_block;
using barato::test::Rng;

using barato::test::greedy_ids;

namespace {

std::string name(GgmlType t) { return std::string(ggml_type_name(static_cast<std::uint32_t>(t))); }

std::vector<float> decode(GgmlType t, const std::vector<std::uint8_t>& bytes, std::size_t n) {
  std::vector<float> out(n);
  const std::uint64_t ne[] = {n};
  ggml_to_fp32(std::as_bytes(std::span(bytes)), static_cast<std::uint32_t>(t), ne, out);
  return out;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

/// Three random blocks of type t in a row (a block's place in the tensor must not matter): their bytes
/// and the values their per-element formula gives; even draws with smaller scales.
Block three_blocks(GgmlType t, Rng& rng, int draw) {
  Block out;
  for (int k = 0; k < 3; ++k) {
    const Block b = make_block(t, rng, draw % 2 == 0 ? 20 : 30);
    out.bytes.insert(out.bytes.end(), b.bytes.begin(), b.bytes.end());
    out.expect.insert(out.expect.end(), b.expect.begin(), b.expect.end());
  }
  return out;
}


}  // namespace

TEST_CASE("ggml dequant: every block type decodes ggml-packed random codes to the per-element formula, bit for bit") {
  Rng rng(20261203);
  for (const GgmlType t : kBlockTypes) {
    INFO(name(t));
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(static_cast<std::uint32_t>(t), tr));
    for (int draw = 0; draw < 200; ++draw) {
      const Block blocks = three_blocks(t, rng, draw);  // (a named Block: clang 14's INFO cannot capture bindings)
      const std::vector<float>& expect = blocks.expect;
      const auto got = decode(t, blocks.bytes, 3 * tr.block);
      std::size_t bad = 0, first = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (!same_bits(got[i], expect[i]) && bad++ == 0) first = i;
      INFO("draw " << draw << ", first mismatch at element " << first << ": " << got[first] << " vs " << expect[first]);
      REQUIRE(bad == 0);
    }
  }
}

TEST_CASE("ggml dequant: Q5_0 / Q3_K / Q6_K / IQ4_NL / IQ4_XS as integers and group scales, whose products are the fp32 values bit for bit") {
  Rng rng(20261204);
  std::size_t int_types = 0;
  for (const GgmlType t : kBlockTypes) {
    INFO(name(t));
    const auto type = static_cast<std::uint32_t>(t);
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(type, tr));
    const std::size_t n = 3 * tr.block;
    const std::uint64_t ne[] = {n};
    const bool ints = t == GgmlType::q5_0 || t == GgmlType::q3_k || t == GgmlType::q6_k || t == GgmlType::iq4_nl ||
                      t == GgmlType::iq4_xs;
    CHECK(ggml_int_groups(type) == ints);
    std::vector<std::int8_t> q(n);
    if (!ints) {  // a per-group offset (or a Q8_0 / Q4_0, which load as ggml's own formats): refused
      std::vector<float> s(n / 16);
      const std::vector<std::uint8_t> raw(3 * tr.block_bytes, 0);
      CHECK_THROWS_AS(ggml_to_int_groups(std::as_bytes(std::span(raw)), type, ne, q, s), barato::value_error);
      continue;
    }
    ++int_types;
    const std::size_t g = ggml_int_group(type);
    CHECK(g == (t == GgmlType::q3_k || t == GgmlType::q6_k ? 16u : 32u));
    std::vector<float> s(n / g);
    for (int draw = 0; draw < 100; ++draw) {
      const std::vector<std::uint8_t> bytes = three_blocks(t, rng, draw).bytes;
      ggml_to_int_groups(std::as_bytes(std::span(bytes)), type, ne, q, s);
      const auto want = decode(t, bytes, n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += !same_bits(s[i / g] * static_cast<float>(q[i]), want[i]);
      REQUIRE(bad == 0);
    }
    // the sizes must agree; a non-finite scale names its block and byte offset, as ggml_to_fp32
    std::vector<float> short_s(n / g - 1);
    const std::vector<std::uint8_t> zero(3 * tr.block_bytes, 0);
    CHECK_THROWS_AS(ggml_to_int_groups(std::as_bytes(std::span(zero)), type, ne, q, short_s), barato::shape_error);
    std::vector<std::uint8_t> bad = zero;
    const std::size_t at = 2 * tr.block_bytes + ggml_blocks::codec(type).scales[0];
    bad[at + 1] = 0x7C;  // +inf in the third block
    try {
      ggml_to_int_groups(std::as_bytes(std::span(bad)), type, ne, q, s, "y.gguf", 64);
      FAIL("no error");
    } catch (const barato::format_error& e) {
      CHECK(e.offset() == 64 + at);
      CHECK(std::string(e.what()).find("block 2: scale") != std::string::npos);
    }
  }
  CHECK(int_types == 5);
}

TEST_CASE("ggml dequant: Q4_1 / Q5_1 / Q2_K / Q4_K / Q5_K as integers, group scales and offsets: s·q + o is the fp32 value") {
  Rng rng(20261206);
  std::size_t offset_types = 0;
  for (const GgmlType t : kBlockTypes) {
    INFO(name(t));
    const auto type = static_cast<std::uint32_t>(t);
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(type, tr));
    const std::size_t n = 3 * tr.block;
    const std::uint64_t ne[] = {n};
    const bool offsets = t == GgmlType::q4_1 || t == GgmlType::q5_1 || t == GgmlType::q2_k || t == GgmlType::q4_k ||
                         t == GgmlType::q5_k;
    CHECK(ggml_offset_groups(type) == offsets);
    CHECK(!(offsets && ggml_int_groups(type)));  // each block type has one integer reading at most
    std::vector<std::int8_t> q(n);
    if (!offsets) {
      std::vector<float> s(n / 16), o(n / 16);
      const std::vector<std::uint8_t> raw(3 * tr.block_bytes, 0);
      CHECK_THROWS_AS(ggml_to_offset_groups(std::as_bytes(std::span(raw)), type, ne, q, s, o), barato::value_error);
      continue;
    }
    ++offset_types;
    const std::size_t g = ggml_offset_group(type);
    CHECK(g == (t == GgmlType::q2_k ? 16u : 32u));
    const int levels = t == GgmlType::q2_k ? 4 : (t == GgmlType::q5_1 || t == GgmlType::q5_k) ? 32 : 16;
    std::vector<float> s(n / g), o(n / g);
    std::vector<bool> seen(static_cast<std::size_t>(levels), false);
    for (int draw = 0; draw < 100; ++draw) {
      const std::vector<std::uint8_t> bytes = three_blocks(t, rng, draw).bytes;
      ggml_to_offset_groups(std::as_bytes(std::span(bytes)), type, ne, q, s, o);
      const auto want = decode(t, bytes, n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE((q[i] >= 0 && q[i] < levels));
        seen[static_cast<std::size_t>(q[i])] = true;
        volatile float product = s[i / g] * static_cast<float>(q[i]);  // exact; one rounding in the add
        bad += !same_bits(product + o[i / g], want[i]);
      }
      REQUIRE(bad == 0);
    }
    CHECK(std::count(seen.begin(), seen.end(), true) == levels);  // every code value was exercised
    // sizes must agree; a non-finite scale or min names its block and byte offset
    std::vector<float> short_o(n / g - 1);
    const std::vector<std::uint8_t> zero(3 * tr.block_bytes, 0);
    CHECK_THROWS_AS(ggml_to_offset_groups(std::as_bytes(std::span(zero)), type, ne, q, s, short_o), barato::shape_error);
    for (std::size_t which = 0; which < 2; ++which) {
      std::vector<std::uint8_t> bad = zero;
      const std::size_t at = 2 * tr.block_bytes + ggml_blocks::codec(type).scales[which];
      bad[at + 1] = 0x7E;  // NaN in the third block
      try {
        ggml_to_offset_groups(std::as_bytes(std::span(bad)), type, ne, q, s, o, "z.gguf", 96);
        FAIL("no error");
      } catch (const barato::format_error& e) {
        CHECK(e.offset() == 96 + at);
        CHECK(std::string(e.what()).find("block 2: scale") != std::string::npos);
      }
    }
  }
  CHECK(offset_types == 5);
}

TEST_CASE("ggml dequant: hand-made blocks give the values worked out by hand") {
  const std::uint16_t one = 0x3C00, half = 0x3800, two = 0x4000;  // 1.0, 0.5, 2.0
  {  // Q6_K: element 0 = d·sc0·((ql[0] & 15 | (qh[0] & 3) << 4) − 32); element 200 is in half 1 (l = 8, k = 2)
    std::vector<std::uint8_t> b(210, 0);
    b[0] = 0x05;
    b[128] = 0x02;              // code 5 | 2 << 4 = 37
    b[192] = 3;                 // sc0 = 3
    b[64 + 8] = 0x90;           // half 1, ql[8] high nibble 9 (k = 2: element 128 + 64 + 8 = 200)
    b[128 + 32 + 8] = 0x30;     // qh bits 4–5 = 3: code 9 | 48 = 57
    b[192 + 12] = 0xFE;         // sub-block 200 / 16 = 12: sc = −2
    b[208] = one & 0xFF;
    b[209] = one >> 8;
    const auto y = decode(GgmlType::q6_k, b, 256);
    CHECK(y[0] == 3.0f * 5.0f);
    CHECK(y[200] == -2.0f * 25.0f);
    CHECK(y[1] == 3.0f * -32.0f);     // code 0 in sub-block 0
    CHECK(y[16] == 0.0f);             // sub-block 1 has scale 0
  }
  {  // Q4_K: d = 2, dmin = 0.5; sub-block 5 (elements 160–191: the high nibbles of qs[64..95])
    std::vector<std::uint8_t> b(144, 0);
    b[0] = two & 0xFF, b[1] = two >> 8, b[2] = half & 0xFF, b[3] = half >> 8;
    // sub-block 5: scale = (s[9] & 15) | (s[1] >> 6) << 4, min = (s[9] >> 4) | (s[5] >> 6) << 4
    b[4 + 9] = 0x73;            // scale low 3, min low 7
    b[4 + 1] = 0x40;            // scale high bits 1: scale 3 + 16 = 19
    b[4 + 5] = 0x80;            // min high bits 2: min 7 + 32 = 39
    b[16 + 64 + 4] = 0xB0;      // element 160 + 4: high nibble 11
    const auto y = decode(GgmlType::q4_k, b, 256);
    CHECK(y[164] == 2.0f * 19.0f * 11.0f - 0.5f * 39.0f);
    CHECK(y[160] == -0.5f * 39.0f);
    CHECK(y[68] == 0.0f);  // sub-block 2 (low nibble of the same byte: 0, scale 0, min 0)
  }
  {  // Q5_0: element 17 = d·((qs[1] >> 4 | bit 17 of qh << 4) − 16)
    std::vector<std::uint8_t> b(22, 0);
    b[0] = one & 0xFF, b[1] = one >> 8;
    b[2 + 2] = 0x02;  // qh bit 17
    b[6 + 1] = 0x30;
    const auto y = decode(GgmlType::q5_0, b, 32);
    CHECK(y[17] == 3.0f);  // (3 | 16) − 16
    CHECK(y[1] == -16.0f);
  }
  {  // Q3_K: element 0 = d·(sc0 − 32)·((qs[0] & 3) − 4·[hmask[0] bit 0 clear])
    std::vector<std::uint8_t> b(110, 0);
    b[96] = 0x05;   // sc0 low 4 bits 5
    b[96 + 8] = 0x02;  // sc0 high 2 bits 2: 37 − 32 = 5
    b[32] = 0x03;   // q 3
    b[108] = one & 0xFF, b[109] = one >> 8;
    auto y = decode(GgmlType::q3_k, b, 256);
    CHECK(y[0] == 5.0f * (3.0f - 4.0f));
    b[0] = 0x01;  // high bit set: no −4
    y = decode(GgmlType::q3_k, b, 256);
    CHECK(y[0] == 5.0f * 3.0f);
  }
  {  // IQ4_NL: element j = d·L[low nibble of qs[j]], element j + 16 = d·L[high nibble]
    std::vector<std::uint8_t> b(18, 0);
    b[0] = half & 0xFF, b[1] = half >> 8;
    b[2 + 3] = 0xF8;  // element 3: code 8 → level 1; element 19: code 15 → level 113
    const auto y = decode(GgmlType::iq4_nl, b, 32);
    CHECK(y[3] == 0.5f);
    CHECK(y[19] == 56.5f);
    CHECK(y[0] == -63.5f);  // code 0 → level −127
  }
  {  // IQ4_XS: sub-block 5 (elements 160–191) has ls = (scales_l[2] >> 4) | ((scales_h >> 10) & 3) << 4
    std::vector<std::uint8_t> b(136, 0);
    b[0] = two & 0xFF, b[1] = two >> 8;
    b[2] = 0x00, b[3] = 0x08;   // scales_h = 0x0800: bits 10–11 = 2 → ls high 2 bits 2
    b[4 + 2] = 0x30;            // scales_l[2] high nibble 3: ls = 3 | 2 << 4 = 35, scale 2·(35 − 32) = 6
    b[8 + 16 * 5 + 1] = 0x2D;   // element 161: code 13 → 69; element 177: code 2 → −83
    const auto y = decode(GgmlType::iq4_xs, b, 256);
    CHECK(y[161] == 6.0f * 69.0f);
    CHECK(y[177] == 6.0f * -83.0f);
    CHECK(y[160] == 6.0f * -127.0f);
    CHECK(y[0] == 2.0f * -32.0f * -127.0f);  // sub-block 0: ls = 0, scale −64
  }
}

TEST_CASE("ggml dequant: a non-finite scale is a format_error naming the scale's byte offset") {
  for (const GgmlType t : kBlockTypes) {
    INFO(name(t));
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(static_cast<std::uint32_t>(t), tr));
    const ggml_blocks::Codec c = ggml_blocks::codec(static_cast<std::uint32_t>(t));
    REQUIRE(static_cast<bool>(c.decode));
    for (std::size_t s = 0; s < c.n_scales; ++s) {
      std::vector<std::uint8_t> b(2 * tr.block_bytes, 0);
      const std::size_t at = tr.block_bytes + c.scales[s];  // the second block's scale s
      b[at] = 0x00;
      b[at + 1] = 0x7C;  // +inf
      std::vector<float> out(2 * tr.block);
      const std::uint64_t ne[] = {2 * tr.block};
      try {
        ggml_to_fp32(std::as_bytes(std::span(b)), static_cast<std::uint32_t>(t), ne, out, "x.gguf", 1000);
        FAIL("no error");
      } catch (const barato::format_error& e) {
        CHECK(e.file() == "x.gguf");
        CHECK(e.offset() == 1000 + at);
        CHECK(std::string(e.what()).find("block 1: scale (fp16 bits 31744) is not finite") != std::string::npos);
      }
    }
  }
}

TEST_CASE("ggml dequant: a model whose matrices use every block type loads to their exact values (file precision)") {
  const auto dir = barato::test::data_dir_or_skip("stories260K/tok512.bin");
  if (dir.empty()) return;
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", 512);
  const barato::test::BlockTypeModel model = barato::test::block_type_model(tok, 11);
  std::vector<bool> used(std::size(kBlockTypes), false);
  for (const auto& [tname, type] : model.types)
    for (std::size_t i = 0; i < used.size(); ++i) used[i] = used[i] || kBlockTypes[i] == type;
  CHECK(std::count(used.begin(), used.end(), true) == std::ssize(kBlockTypes));  // every type is used
  const GgufFile fk = GgufFile::from_bytes("kquants.gguf", model.blocks), fr = GgufFile::from_bytes("ref.gguf", model.f32);
  for (const auto& entry : model.types) {
    // (named copies, not a structured binding: clang 14 cannot capture bindings in INFO's lambda)
    const std::string& tname = entry.first;
    const GgmlType type = entry.second;
    INFO(tname << " " << name(type));
    const GgufTensor* a = fk.tensor(tname);
    const GgufTensor* b = fr.tensor(tname);
    REQUIRE((a != nullptr && b != nullptr));
    CHECK(a->type == static_cast<std::uint32_t>(type));
    const auto x = gguf_tensor_fp32(*a), y = gguf_tensor_fp32(*b);
    CHECK(std::equal(x.begin(), x.end(), y.begin(), y.end(), same_bits));
  }
  const LlamaConfig ck = gguf_llama_config(fk, 0);
  const auto native = load_gguf_llama(fk, ck);
  const auto fp32 = load_gguf_llama_fp32(fr, gguf_llama_config(fr, 0));
  // Q8_0 / Q4_0 matrices take ggml's kernels (8-bit activations); Q5_0 / Q3_K / Q6_K int8 codes with
  // fp32 group scales (32 / 16), their exact values; Q4_1 / Q5_1 / Q4_K / Q5_K / Q2_K the same plus
  // fp32 offsets per group (quant::OffsetLinear), their exact numbers — except Q4_1 / Q4_K, held as
  // Q4_0F32's centred 4-bit codes with the offset o + 8s rounded to fp32 once; no block type an fp32 Dense
  using G32 = barato::quant::Linear<barato::quant::AbsMax<8, barato::quant::PerGroup<32>, float>>;
  using G16 = barato::quant::Linear<barato::quant::AbsMax<8, barato::quant::PerGroup<16>, float>>;
  using O32 = barato::quant::OffsetLinear<barato::quant::AbsMax<8, barato::quant::PerGroup<32>, float>>;
  using O16 = barato::quant::OffsetLinear<barato::quant::AbsMax<8, barato::quant::PerGroup<16>, float>>;
  using O4 = barato::quant::OffsetLinear<barato::quant::Q4_0F32>;
  const auto linear = [&](const std::string& t) -> const barato::nn::AnyLinear* {
    if (t == "output.weight") return &native.classifier;
    for (std::size_t i = 0; i < native.layers.size(); ++i) {
      const auto& l = native.layers[i];
      const std::string p = "blk." + std::to_string(i) + ".";
      const std::pair<std::string, const barato::nn::AnyLinear*> names[] = {
          {"attn_q", &l.wq}, {"attn_k", &l.wk}, {"attn_v", &l.wv}, {"attn_output", &l.wo},
          {"ffn_gate", &l.w1}, {"ffn_down", &l.w2}, {"ffn_up", &l.w3}};
      for (const auto& n : names)
        if (t == p + n.first + ".weight") return n.second;
    }
    return nullptr;
  };
  std::size_t dense = 0, ints = 0, offsets = 0;
  for (const auto& entry : model.types) {
    const std::string& tname = entry.first;
    const GgmlType type = entry.second;
    if (tname == "token_embd.weight") continue;
    INFO(tname << " " << name(type));
    const barato::nn::AnyLinear* m = linear(tname);
    REQUIRE(m != nullptr);
    dense += m->target<barato::nn::Dense<float>>() != nullptr;
    const bool int_groups = type == GgmlType::q5_0 || type == GgmlType::q3_k || type == GgmlType::q6_k ||
                            type == GgmlType::iq4_nl || type == GgmlType::iq4_xs;
    const auto want = gguf_tensor_fp32(*fk.tensor(tname));
    std::vector<float> got(want.size());
    if (ggml_offset_groups(static_cast<std::uint32_t>(type))) {
      ++offsets;
      const auto check_offsets = [&](const auto* lin, std::size_t g, double bits) {
        REQUIRE(lin != nullptr);
        lin->codes().matrix().dequantize(got);  // s·q, exact
        for (std::size_t i = 0; i < got.size(); ++i) {
          volatile float product = got[i];
          got[i] = product + lin->offset(i / lin->cols(), i % lin->cols() / g);
        }
        CHECK(lin->bits_per_weight() == bits);
        CHECK(lin->bytes() == barato_examples::gguf_linear_bytes(static_cast<std::uint32_t>(type), lin->rows(), lin->cols()));
      };
      if (type == GgmlType::q4_1 || type == GgmlType::q4_k) {
        const auto* lin = m->target<O4>();
        check_offsets(lin, 32, 6.0);
        // s·(u − 8) + fl(o + 8s) against the file's fl(s·u + o): the offset's rounding and the sum's
        std::size_t off = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const double o = std::fabs(double(lin->offset(i / lin->cols(), i % lin->cols() / 32)));
          off += std::fabs(double(got[i]) - double(want[i])) > std::ldexp(o + std::fabs(double(want[i])), -23);
        }
        CHECK(off == 0);
        continue;
      }
      if (type == GgmlType::q2_k)
        check_offsets(m->target<O16>(), 16, 12.0);
      else
        check_offsets(m->target<O32>(), 32, 10.0);
      CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end(), same_bits));  // the exact values
      continue;
    }
    if (!int_groups) continue;
    ++ints;
    if (type == GgmlType::q5_0 || type == GgmlType::iq4_nl || type == GgmlType::iq4_xs) {
      REQUIRE(m->target<G32>() != nullptr);
      m->target<G32>()->matrix().dequantize(got);
      CHECK(m->target<G32>()->bits_per_weight() == 9.0);
    } else {
      REQUIRE(m->target<G16>() != nullptr);
      m->target<G16>()->matrix().dequantize(got);
      CHECK(m->target<G16>()->bits_per_weight() == 10.0);
    }
    CHECK(std::equal(got.begin(), got.end(), want.begin(), want.end(), same_bits));  // the exact values
  }
  CHECK(dense == 0);
  CHECK(ints >= 5);
  CHECK(offsets >= 5);
  // The fp32 path of the block file is the F32 file: the same greedy ids.
  const auto prompt = tok.encode("Once upon a time", true);
  CHECK(greedy_ids(load_gguf_llama_fp32(fk, ck), prompt, 40) == greedy_ids(fp32, prompt, 40));
  CHECK(!greedy_ids(native, prompt, 40).empty());
}
