#pragma once
// Blocks of ggml's quantized types packed the way ggml's quantizers pack them (ggml-quants.c,
// quantize_row_*: which bit of which byte each code and scale goes to), from random codes and
// scales, with the values the type's per-element formula gives (x = d·sc·q − dmin·m, …): the oracle
// of examples/models/ggml_dequant.hpp's decoders (tests/examples/ggml_dequant_test.cpp), and a random
// model stored in every block type beside an F32 file of the same values (tool tests).

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/ggml_dequant.hpp"
#include "models/gguf.hpp"
#include "models/gguf_export.hpp"
#include "models/gguf_writer.hpp"
#include "models/llama_weights.hpp"
#include "models/tokenizer.hpp"

namespace barato::test {

using barato_examples::GgmlType;
using barato_examples::GgmlTypeTraits;
using barato_examples::fp16_bits_to_float;
using barato_examples::ggml_type_traits;

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
    case GgmlType::iq4_nl:
    case GgmlType::iq4_xs: {
      // ggml's kvalues_iq4nl, written out again here as the oracle's own copy
      static constexpr int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
      const bool xs = t == GgmlType::iq4_xs;
      put16(b, 0, dh);
      int ls[8] = {32, 32, 32, 32, 32, 32, 32, 32};  // IQ4_NL: the scale is d itself (ls − 32 = 1 below)
      if (xs) {
        std::uint16_t scales_h = 0;
        for (int g = 0; g < 8; ++g) {  // as quantize_row_iq4_xs packs them
          ls[g] = uniform(rng, 0, 63);
          b[4 + g / 2] = static_cast<std::uint8_t>(b[4 + g / 2] | ((ls[g] & 0x0F) << (4 * (g % 2))));
          scales_h = static_cast<std::uint16_t>(scales_h | ((ls[g] >> 4) << (2 * g)));
        }
        put16(b, 2, scales_h);
      }
      for (auto& l : L) l = uniform(rng, 0, 15);
      const std::size_t qs = xs ? 8 : 2;
      for (std::size_t g = 0; g < tr.block / 32; ++g)
        for (std::size_t j = 0; j < 16; ++j)
          b[qs + 16 * g + j] = static_cast<std::uint8_t>(L[32 * g + j] | (L[32 * g + j + 16] << 4));
      for (std::size_t i = 0; i < tr.block; ++i)
        y[i] = xs ? (d * f(ls[i / 32] - 32)) * f(kLevels[L[i]]) : d * f(kLevels[L[i]]);
      break;
    }
    default: FAIL("no packer for this type");
  }
  return blk;
}

inline const GgmlType kBlockTypes[] = {GgmlType::q4_0, GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1, GgmlType::q8_0,
                                GgmlType::q2_k, GgmlType::q3_k, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k,
                                GgmlType::iq4_nl, GgmlType::iq4_xs};


/// A random Llama (dim 256, FFN 512, 2 layers, 4 / 2 heads of 64, vocabulary of `tok`, untied
/// classifier) whose matrices are stored in the block types of kBlockTypes in turn (random codes;
/// scales below 2^-3), and the same model with those matrices' decoded values in F32.
struct BlockTypeModel {
  std::vector<std::byte> blocks;                         ///< the GGUF file with block-type matrices
  std::vector<std::byte> f32;                            ///< the GGUF file with their values in F32
  std::vector<std::pair<std::string, GgmlType>> types;   ///< each matrix's block type
};

inline BlockTypeModel block_type_model(const barato_examples::Tokenizer& tok, std::uint64_t seed) {
  using namespace barato_examples;
  LlamaConfig c;
  c.dim = 256, c.hidden_dim = 512, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64;
  c.vocab_size = tok.vocab_size(), c.seq_len = 64, c.shared_classifier = false;
  const auto f32_bytes = export_llama_gguf(random_llama_weights(c, seed), tok, GgmlType::f32, nullptr).writer.bytes();
  const GgufFile src = GgufFile::from_bytes("random.gguf", f32_bytes);
  GgufWriter kq, ref;
  for (const auto& [key, v] : src.metadata()) {
    kq.add(std::string(key), gguf_write_value(v));
    ref.add(std::string(key), gguf_write_value(v));
  }
  Rng rng(seed);
  std::size_t k = 0;
  BlockTypeModel m;
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
    m.types.emplace_back(std::string(t.name), type);
  }
  m.blocks = kq.bytes();
  m.f32 = ref.bytes();
  return m;
}

}  // namespace barato::test
