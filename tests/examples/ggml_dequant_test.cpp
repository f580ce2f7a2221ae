// Tests of ggml's block types as fp32 (examples/models/ggml_dequant.hpp). The oracle is the other
// direction: codes and scales chosen at random are packed into blocks the way ggml's quantizers pack
// them (ggml-quants.c, quantize_row_*: which bit of which byte each code and scale goes to), and every
// decoded element must equal the type's per-element formula (x = d·sc·q − dmin·m, …) bit for bit. A
// few hand-made blocks pin single values; a non-finite scale is a format_error naming its byte; and a
// model whose matrices are stored in every block type loads (file precision) to their exact values.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "barato/core/dtype.hpp"
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

using namespace barato_examples;

namespace {

using Rng = std::mt19937_64;

int uniform(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

/// Random finite fp16 bits: either sign, exponent field `e_lo`…`e_hi` (0 = subnormal).
std::uint16_t random_half(Rng& rng, int e_lo = 1, int e_hi = 20) {
  return static_cast<std::uint16_t>((uniform(rng, 0, 1) << 15) | (uniform(rng, e_lo, e_hi) << 10) | uniform(rng, 0, 1023));
}

void put16(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<std::uint8_t>(v >> 8);
}

float f(int v) { return static_cast<float>(v); }

/// One packed block and the values its per-element formula gives.
struct Block {
  std::vector<std::uint8_t> bytes;
  std::vector<float> expect;
};

/// A random block of type t, packed as ggml's quantizer packs it. `e_hi` bounds the scales' exponent.
Block make_block(GgmlType t, Rng& rng, int e_hi = 20) {
  GgmlTypeTraits tr;
  REQUIRE(ggml_type_traits(static_cast<std::uint32_t>(t), tr));
  Block blk{std::vector<std::uint8_t>(tr.block_bytes, 0), std::vector<float>(tr.block)};
  auto& b = blk.bytes;
  auto& y = blk.expect;
  const std::uint16_t dh = random_half(rng, 0, e_hi), mh = random_half(rng, 0, e_hi);
  const float d = fp16_bits_to_float(dh), m = fp16_bits_to_float(mh);
  std::vector<int> L(tr.block);
  switch (t) {
    case GgmlType::q4_0:
    case GgmlType::q4_1: {
      const bool min = t == GgmlType::q4_1;
      put16(b, 0, dh);
      if (min) put16(b, 2, mh);
      for (auto& l : L) l = uniform(rng, 0, 15);
      for (int j = 0; j < 16; ++j) b[(min ? 4 : 2) + j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
      for (int i = 0; i < 32; ++i) y[i] = min ? f(L[i]) * d + m : f(L[i] - 8) * d;
      break;
    }
    case GgmlType::q5_0:
    case GgmlType::q5_1: {
      const bool min = t == GgmlType::q5_1;
      put16(b, 0, dh);
      if (min) put16(b, 2, mh);
      for (auto& l : L) l = uniform(rng, 0, 31);
      std::uint32_t qh = 0;
      const std::size_t qs = min ? 8 : 6;
      for (int j = 0; j < 16; ++j) {
        b[qs + j] = static_cast<std::uint8_t>((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
        qh |= ((static_cast<std::uint32_t>(L[j]) & 0x10u) >> 4) << j;
        qh |= ((static_cast<std::uint32_t>(L[j + 16]) & 0x10u) >> 4) << (j + 16);
      }
      for (int k = 0; k < 4; ++k) b[qs - 4 + k] = static_cast<std::uint8_t>(qh >> (8 * k));
      for (int i = 0; i < 32; ++i) y[i] = min ? f(L[i]) * d + m : f(L[i] - 16) * d;
      break;
    }
    case GgmlType::q8_0: {
      put16(b, 0, dh);
      for (int i = 0; i < 32; ++i) {
        L[i] = uniform(rng, -128, 127);
        b[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(L[i]));
        y[i] = f(L[i]) * d;
      }
      break;
    }
    case GgmlType::q2_k: {
      int sc[16], mn[16];
      for (int j = 0; j < 16; ++j) {
        sc[j] = uniform(rng, 0, 15);
        mn[j] = uniform(rng, 0, 15);
        b[j] = static_cast<std::uint8_t>(sc[j] | (mn[j] << 4));
      }
      for (auto& l : L) l = uniform(rng, 0, 3);
      for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; ++l)
          b[16 + j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      put16(b, 80, dh);
      put16(b, 82, mh);
      for (int i = 0; i < 256; ++i) y[i] = (d * f(sc[i / 16])) * f(L[i]) - m * f(mn[i / 16]);
      break;
    }
    case GgmlType::q3_k: {
      int sc[16];
      for (int j = 0; j < 16; ++j) {
        sc[j] = uniform(rng, 0, 63);  // stored value; the scale is sc − 32
        int l = sc[j];
        if (j < 8) b[96 + j] = static_cast<std::uint8_t>(l & 0x0F);
        else b[96 + j - 8] = static_cast<std::uint8_t>(b[96 + j - 8] | ((l & 0x0F) << 4));
        l >>= 4;
        b[96 + 8 + j % 4] = static_cast<std::uint8_t>(b[96 + 8 + j % 4] | (l << (2 * (j / 4))));
      }
      for (auto& l : L) l = uniform(rng, 0, 7);  // code + 4
      std::vector<int> low(L);
      int hm_byte = 0, hm_bit = 1;
      for (int j = 0; j < 256; ++j) {
        if (low[j] > 3) {
          b[hm_byte] = static_cast<std::uint8_t>(b[hm_byte] | hm_bit);
          low[j] -= 4;
        }
        if (++hm_byte == 32) {
          hm_byte = 0;
          hm_bit <<= 1;
        }
      }
      for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; ++l)
          b[32 + j / 4 + l] =
              static_cast<std::uint8_t>(low[j + l] | (low[j + l + 32] << 2) | (low[j + l + 64] << 4) | (low[j + l + 96] << 6));
      put16(b, 108, dh);
      for (int i = 0; i < 256; ++i) y[i] = (d * f(sc[i / 16] - 32)) * f(L[i] - 4);
      break;
    }
    case GgmlType::q4_k:
    case GgmlType::q5_k: {
      const bool five = t == GgmlType::q5_k;
      put16(b, 0, dh);
      put16(b, 2, mh);
      int sc[8], mn[8];
      std::uint8_t* s = b.data() + 4;
      for (int j = 0; j < 8; ++j) {
        sc[j] = uniform(rng, 0, 63);
        mn[j] = uniform(rng, 0, 63);
        if (j < 4) {
          s[j] = static_cast<std::uint8_t>(sc[j]);
          s[j + 4] = static_cast<std::uint8_t>(mn[j]);
        } else {
          s[j + 4] = static_cast<std::uint8_t>((sc[j] & 0x0F) | ((mn[j] & 0x0F) << 4));
          s[j - 4] = static_cast<std::uint8_t>(s[j - 4] | ((sc[j] >> 4) << 6));
          s[j] = static_cast<std::uint8_t>(s[j] | ((mn[j] >> 4) << 6));
        }
      }
      for (auto& l : L) l = uniform(rng, 0, five ? 31 : 15);
      if (five) {
        std::uint8_t* qh = b.data() + 16;
        std::uint8_t* ql = b.data() + 48;
        int m1 = 1, m2 = 2;
        for (int n = 0; n < 256; n += 64) {
          for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
              l1 -= 16;
              qh[j] = static_cast<std::uint8_t>(qh[j] | m1);
            }
            if (l2 > 15) {
              l2 -= 16;
              qh[j] = static_cast<std::uint8_t>(qh[j] | m2);
            }
            ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
          }
          m1 <<= 2;
          m2 <<= 2;
          ql += 32;
        }
      } else {
        std::uint8_t* q = b.data() + 16;
        for (int j = 0; j < 256; j += 64, q += 32)
          for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      }
      for (int i = 0; i < 256; ++i) y[i] = (d * f(sc[i / 32])) * f(L[i]) - m * f(mn[i / 32]);
      break;
    }
    case GgmlType::q6_k: {
      for (auto& l : L) l = uniform(rng, 0, 63);  // code + 32
      std::uint8_t* ql = b.data();
      std::uint8_t* qh = b.data() + 128;
      for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
          ql[l] = static_cast<std::uint8_t>((L[j + l] & 0x0F) | ((L[j + l + 64] & 0x0F) << 4));
          ql[l + 32] = static_cast<std::uint8_t>((L[j + l + 32] & 0x0F) | ((L[j + l + 96] & 0x0F) << 4));
          qh[l] = static_cast<std::uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                            ((L[j + l + 96] >> 4) << 6));
        }
      }
      int sc[16];
      for (int j = 0; j < 16; ++j) {
        sc[j] = uniform(rng, -128, 127);
        b[192 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(sc[j]));
      }
      put16(b, 208, dh);
      for (int i = 0; i < 256; ++i) y[i] = (d * f(sc[i / 16])) * f(L[i] - 32);
      break;
    }
    default: FAIL("no packer for this type");
  }
  return blk;
}

const GgmlType kBlockTypes[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0,
                                GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

std::string name(GgmlType t) { return std::string(ggml_type_name(static_cast<std::uint32_t>(t))); }

std::vector<float> decode(GgmlType t, const std::vector<std::uint8_t>& bytes, std::size_t n) {
  std::vector<float> out(n);
  const std::uint64_t ne[] = {n};
  ggml_to_fp32(std::as_bytes(std::span(bytes)), static_cast<std::uint32_t>(t), ne, out);
  return out;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

template <class Linear>
std::vector<int> greedy(const LlamaWeights<Linear>& w, const std::vector<Token>& prompt, std::size_t steps) {
  Llama<barato::kv::Contiguous<float>, Linear> m(w, make_contiguous_caches(w.config, steps), {.threads = 1});
  std::vector<float> logits(m.vocab_size());
  const auto g = generate(m, prompt, {.steps = steps}, logits);
  return {g.generated.begin(), g.generated.end()};
}

}  // namespace

TEST_CASE("ggml dequant: every block type decodes ggml-packed random codes to the per-element formula, bit for bit") {
  Rng rng(20261203);
  for (const GgmlType t : kBlockTypes) {
    INFO(name(t));
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(static_cast<std::uint32_t>(t), tr));
    // three blocks in a row (a block's offset in the tensor must not matter), 200 draws
    for (int draw = 0; draw < 200; ++draw) {
      std::vector<std::uint8_t> bytes;
      std::vector<float> expect;
      for (int k = 0; k < 3; ++k) {
        const Block b = make_block(t, rng, draw % 2 == 0 ? 20 : 30);
        bytes.insert(bytes.end(), b.bytes.begin(), b.bytes.end());
        expect.insert(expect.end(), b.expect.begin(), b.expect.end());
      }
      const auto got = decode(t, bytes, 3 * tr.block);
      std::size_t bad = 0, first = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (!same_bits(got[i], expect[i]) && bad++ == 0) first = i;
      INFO("draw " << draw << ", first mismatch at element " << first << ": " << got[first] << " vs " << expect[first]);
      REQUIRE(bad == 0);
    }
  }
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
    CHECK(y[17] == f((3 | 16) - 16));
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
  LlamaConfig c;
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.vocab_size = 512;
  c.seq_len = 64, c.shared_classifier = false;
  const Tokenizer tok = load_tokenizer(dir / "stories260K/tok512.bin", c.vocab_size);
  const auto f32_bytes = export_llama_gguf(random_llama_weights(c, 11), tok, GgmlType::f32, nullptr).writer.bytes();
  const GgufFile src = GgufFile::from_bytes("random.gguf", f32_bytes);
  // Rewrite: each matrix in the next block type (random codes, scales of ~1/16 of the block's
  // largest code), and an F32 file holding the values those blocks decode to.
  GgufWriter kq, ref;
  for (const auto& [key, v] : src.metadata()) {
    kq.add(std::string(key), gguf_write_value(v));
    ref.add(std::string(key), gguf_write_value(v));
  }
  Rng rng(5);
  std::size_t k = 0;
  std::vector<std::pair<std::string, GgmlType>> types;
  for (const auto& t : src.tensors()) {
    if (t.ne.size() == 1) {
      kq.add_tensor(std::string(t.name), GgmlType::f32, t.ne, t.data);
      ref.add_tensor(std::string(t.name), GgmlType::f32, t.ne, t.data);
      continue;
    }
    const GgmlType type = kBlockTypes[k++ % std::size(kBlockTypes)];
    GgmlTypeTraits tr;
    REQUIRE(ggml_type_traits(static_cast<std::uint32_t>(type), tr));
    std::vector<std::uint8_t> bytes;
    std::vector<float> values;
    for (std::size_t b = 0; b < t.elements() / tr.block; ++b) {
      const Block blk = make_block(type, rng, 11);  // |scales| < 2^-3
      bytes.insert(bytes.end(), blk.bytes.begin(), blk.bytes.end());
      values.insert(values.end(), blk.expect.begin(), blk.expect.end());
    }
    kq.add_tensor(std::string(t.name), type, t.ne, std::as_bytes(std::span(bytes)));
    ref.add_tensor(std::string(t.name), GgmlType::f32, t.ne, std::as_bytes(std::span<const float>(values)));
    types.emplace_back(std::string(t.name), type);
  }
  REQUIRE(k >= std::size(kBlockTypes));  // every type is used by some matrix
  const auto kq_bytes = kq.bytes(), ref_bytes = ref.bytes();
  const GgufFile fk = GgufFile::from_bytes("kquants.gguf", kq_bytes), fr = GgufFile::from_bytes("ref.gguf", ref_bytes);
  for (const auto& [tname, type] : types) {
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
  // Q8_0 / Q4_0 matrices take ggml's kernels (8-bit activations), every other type an fp32 Dense
  std::size_t dense = 0, expect_dense = 0;
  for (const auto& l : native.layers)
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) dense += m->target<barato::nn::Dense<float>>() != nullptr;
  dense += native.classifier.target<barato::nn::Dense<float>>() != nullptr;
  for (const auto& [tname, type] : types)
    expect_dense += tname != "token_embd.weight" && type != GgmlType::q8_0 && type != GgmlType::q4_0;
  CHECK(dense == expect_dense);
  CHECK(expect_dense >= 7);
  // The fp32 path of the block file is the F32 file: the same greedy ids.
  const auto prompt = tok.encode("Once upon a time", true);
  CHECK(greedy(load_gguf_llama_fp32(fk, ck), prompt, 40) == greedy(fp32, prompt, 40));
  CHECK(!greedy(native, prompt, 40).empty());
}
