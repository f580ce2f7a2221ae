#pragma once
/// \file
/// ggml's tensor types as fp32 values: the one place the examples turn GGUF tensor data into floats
/// (`ggml_to_fp32`, used by models/gguf_llama.hpp). Every type ggml's CPU backend dequantizes with a
/// plain formula is read: F32, F16, BF16, the 32-element blocks Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
/// 256-element "k-quant" super-blocks Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (what llama-quantize writes for
/// its Q4_K_M, Q5_K_M, Q6_K, … mixes, and for the classifier of a Q4_0 file whose width is a multiple
/// of 256), and IQ4_NL / IQ4_XS (16 fixed non-uniform levels times a scale: what llama-quantize writes
/// for IQ4_NL and IQ4_XS files). The other IQ types (lattice codebooks) are not: a file holding one is
/// an error naming it.
/// The types whose values are a scale times a small integer, with no offset — Q5_0, Q3_K, Q6_K, IQ4_NL
/// and IQ4_XS (the integer being the code's level) — can
/// also be read as those integers and scales (`ggml_to_int_groups`), which barato's int8 group formats
/// hold exactly; each fp32 decoder of them is that product. The types whose values add a per-group
/// offset — Q4_1, Q5_1, Q2_K, Q4_K, Q5_K — can be read as integers, scales and offsets
/// (`ggml_to_offset_groups`), which `quant::OffsetLinear` over an int8 group format holds exactly.
///
/// **Exactness.** Each value equals ggml's `dequantize_row_*` for the same block bit for bit: every
/// product in those formulas (an fp16 scale times a 4–8-bit integer, times a code of ≤ 6 bits; for
/// IQ4_XS an fp16 times a 6-bit integer times a level of ≤ 7 bits) has at most 24 significant bits,
/// so it is exact in fp32, and a value is at most one rounded fp32 sum (scale · q − min, or d · q + m). That also makes the result the same whether or not a compiler
/// fuses the multiply and the add.
///
/// Layouts (byte offsets in a block; fp16 = IEEE binary16, little-endian; facts from ggml-common.h and
/// ggml-quants.c, llama.cpp):
///  - Q4_0  18 B: d fp16 · qs[16];            x_j = d·(lo_j − 8), x_{j+16} = d·(hi_j − 8)
///  - Q4_1  20 B: d · m fp16 · qs[16];        x = d·q + m (q the nibble, as Q4_0's order)
///  - Q5_0  22 B: d · qh u32 · qs[16];        q = nibble | bit j (j + 16 for the high nibble) of qh << 4;
///                                            x = d·(q − 16)
///  - Q5_1  24 B: d · m · qh u32 · qs[16];    x = d·q + m
///  - Q8_0  34 B: d · qs int8[32];            x = d·q
///  - Q2_K  84 B: scales[16] · qs[64] · d · dmin; 16 sub-blocks of 16: scale byte s = (min << 4) | sc,
///                x = (d·sc)·q − dmin·min, q 2 bits: element 128n + 32j + l (l < 32) is bits 2j of
///                qs[32n + l], sub-block 8n + 2j + l / 16
///  - Q3_K 110 B: hmask[32] · qs[64] · scales[12] · d; 16 sub-blocks of 16 with 6-bit scales
///                (low 4 bits: byte j, or the high nibble of byte j − 8; high 2 bits: bits 2·(j / 4) of
///                byte 8 + j % 4), x = (d·(sc − 32))·(q − 4·[high bit clear]), q's low 2 bits as Q2_K,
///                its high bit bit 4n + j of hmask[l]
///  - Q4_K 144 B: d · dmin · scales[12] · qs[128]; 8 sub-blocks of 32 with 6-bit scale and min
///                (`k4_scale_min`), x = (d·sc)·q − dmin·min; element 64j + l is the low nibble of
///                qs[32j + l], 64j + 32 + l its high nibble
///  - Q5_K 176 B: d · dmin · scales[12] · qh[32] · qs[128]; as Q4_K plus a fifth bit: bit 2j of qh[l] for
///                the low nibble, bit 2j + 1 for the high
///  - Q6_K 210 B: ql[128] · qh[64] · scales int8[16] · d; 16 sub-blocks of 16, x = (d·sc)·(q − 32),
///                q = 4 bits of ql | 2 bits of qh << 4 (`q6_k`)
///  - IQ4_NL 18 B: d fp16 · qs[16];           x = d·L[code], codes in Q4_0's order, L = `kIq4Levels`
///  - IQ4_XS 136 B: d · scales_h u16 · scales_l[4] · qs[128]; 8 sub-blocks of 32 with 6-bit scales
///                (low 4 bits: nibble g % 2 of scales_l[g / 2]; high 2 bits: bits 2g of scales_h),
///                x = (d·(ls − 32))·L[code]; sub-block g's codes in qs[16g…16g + 16), Q4_0's order
/// A block whose fp16 scale (d, m or dmin) is not finite is a `format_error` naming the file, the byte
/// offset of that scale and its bits.

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "barato/core/error.hpp"
#include "models/gguf.hpp"

namespace barato_examples {

/// IEEE binary16 bits → float (exact).
[[nodiscard]] inline float fp16_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man · 2^-24
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

/// bfloat16 bits → float (exact).
[[nodiscard]] inline float bf16_bits_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

namespace ggml_blocks {

/// Little-endian u16 / u32 at b.
[[nodiscard]] inline std::uint16_t u16(const std::uint8_t* b) noexcept {
  std::uint16_t v;
  std::memcpy(&v, b, 2);
  return v;
}
[[nodiscard]] inline std::uint32_t u32(const std::uint8_t* b) noexcept {
  std::uint32_t v;
  std::memcpy(&v, b, 4);
  return v;
}
[[nodiscard]] inline float half(const std::uint8_t* b) noexcept { return fp16_bits_to_float(u16(b)); }
inline float fl(int v) noexcept { return static_cast<float>(v); }

inline void q4_0(const std::uint8_t* b, float* y) noexcept {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = fl((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = fl((b[2 + j] >> 4) - 8) * d;
  }
}

inline void q4_1(const std::uint8_t* b, float* y) noexcept {
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = fl(b[4 + j] & 0x0F) * d + m;
    y[j + 16] = fl(b[4 + j] >> 4) * d + m;
  }
}

/// The 5-bit codes of a Q5_0 / Q5_1 block: nibbles of qs, fifth bits from the u32 qh.
inline void q5_codes(std::uint32_t qh, const std::uint8_t* qs, int* q) noexcept {
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

/// Q5_0 as integers and scale: q[j] = code − 16 (−16…15), s[0] = d.
inline void q5_0_ints(const std::uint8_t* b, std::int8_t* q, float* s) noexcept {
  s[0] = half(b);
  int c[32];
  q5_codes(u32(b + 2), b + 6, c);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<std::int8_t>(c[j] - 16);
}

inline void q5_0(const std::uint8_t* b, float* y) noexcept {
  std::int8_t q[32];
  float d;
  q5_0_ints(b, q, &d);
  for (int j = 0; j < 32; ++j) y[j] = fl(q[j]) * d;
}

inline void q5_1(const std::uint8_t* b, float* y) noexcept {
  const float d = half(b), m = half(b + 2);
  int q[32];
  q5_codes(u32(b + 4), b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = fl(q[j]) * d + m;
}

inline void q8_0(const std::uint8_t* b, float* y) noexcept {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = fl(static_cast<std::int8_t>(b[2 + j])) * d;
}

inline void q2_k(const std::uint8_t* b, float* y) noexcept {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {  // sub-block 8n + 2j + h: elements 128n + 32j + 16h + l
        const std::uint8_t s = scales[8 * n + 2 * j + h];
        const float dl = d * fl(s & 0x0F), ml = dmin * fl(s >> 4);
        for (int l = 0; l < 16; ++l) y[128 * n + 32 * j + 16 * h + l] = dl * fl((qs[32 * n + 16 * h + l] >> (2 * j)) & 3) - ml;
      }
    }
  }
}

/// The 16 six-bit scales of a Q3_K block (before the −32), from its 12 packed bytes.
inline void q3_k_scales(const std::uint8_t* s, int* sc) noexcept {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? s[j] & 0x0F : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = lo | (hi << 4);
  }
}

/// Q3_K as integers and scales: q[i] (−4…3) and the scale s[g] = d·(sc − 32) of each sub-block of 16.
inline void q3_k_ints(const std::uint8_t* b, std::int8_t* q, float* s) noexcept {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const float d = half(b + 108);
  int sc[16];
  q3_k_scales(b + 96, sc);
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      const unsigned bit = 1u << (4 * n + j);
      for (int h = 0; h < 2; ++h) {
        s[8 * n + 2 * j + h] = d * fl(sc[8 * n + 2 * j + h] - 32);  // elements 128n + 32j + 16h …
        for (int l = 16 * h; l < 16 * h + 16; ++l)
          q[128 * n + 32 * j + l] = static_cast<std::int8_t>(((qs[32 * n + l] >> (2 * j)) & 3) - ((hmask[l] & bit) != 0 ? 0 : 4));
      }
    }
  }
}

inline void q3_k(const std::uint8_t* b, float* y) noexcept {
  std::int8_t q[256];
  float s[16];
  q3_k_ints(b, q, s);
  for (int i = 0; i < 256; ++i) y[i] = s[i / 16] * fl(q[i]);
}

/// Scale and min of sub-block j (0…7) of a Q4_K / Q5_K block from its 12 packed bytes: six bits each;
/// sub-blocks 0–3 in the low 6 bits of bytes j and j + 4, sub-blocks 4–7 in the nibbles of byte
/// j + 4 with their top two bits in the high bits of bytes j − 4 (scale) and j (min).
inline void k4_scale_min(int j, const std::uint8_t* s, int& sc, int& m) noexcept {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// Q4_K (fifth = false) and Q5_K (fifth = true).
template <bool Fifth>
inline void k4(const std::uint8_t* b, float* y) noexcept {
  const float d = half(b), dmin = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = Fifth ? b + 48 : b + 16;
  for (int j = 0; j < 4; ++j) {
    for (int h = 0; h < 2; ++h) {  // sub-block 2j + h: elements 64j + 32h + l
      int sc, m;
      k4_scale_min(2 * j + h, scales, sc, m);
      const float dl = d * fl(sc), ml = dmin * fl(m);
      for (int l = 0; l < 32; ++l) {
        int q = h == 0 ? qs[32 * j + l] & 0x0F : qs[32 * j + l] >> 4;
        if constexpr (Fifth) q |= ((qh[l] >> (2 * j + h)) & 1) << 4;
        y[64 * j + 32 * h + l] = dl * fl(q) - ml;
      }
    }
  }
}

/// The 6-bit code (0…63) of element i of a Q6_K block: in each half n of 128 elements, element
/// 128n + 32k + l (k < 4, l < 32) takes the low nibble (k = 0, 1) or high nibble (k = 2, 3) of
/// ql[64n + 32·(k % 2) + l] and bits 2k…2k+1 of qh[32n + l].
[[nodiscard]] inline int q6_k_code(const std::uint8_t* ql, const std::uint8_t* qh, int i) noexcept {
  const int n = i / 128, k = (i % 128) / 32, l = i % 32;
  const std::uint8_t lo = ql[64 * n + 32 * (k % 2) + l];
  return (k < 2 ? lo & 0x0F : lo >> 4) | (((qh[32 * n + l] >> (2 * k)) & 3) << 4);
}

/// Q6_K as integers and scales: q[i] = code − 32 (−32…31) and the scale s[g] = d·sc_g (sc int8) of
/// each sub-block of 16.
inline void q6_k_ints(const std::uint8_t* b, std::int8_t* q, float* s) noexcept {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const float d = half(b + 208);
  for (int g = 0; g < 16; ++g) s[g] = d * fl(static_cast<std::int8_t>(b[192 + g]));
  for (int i = 0; i < 256; ++i) q[i] = static_cast<std::int8_t>(q6_k_code(ql, qh, i) - 32);
}

inline void q6_k(const std::uint8_t* b, float* y) noexcept {
  std::int8_t q[256];
  float s[16];
  q6_k_ints(b, q, s);
  for (int i = 0; i < 256; ++i) y[i] = s[i / 16] * fl(q[i]);
}

/// The 16 levels of IQ4_NL and IQ4_XS (ggml's `kvalues_iq4nl`), indexed by the 4-bit code: a
/// non-uniform grid, denser near zero, in int8.
inline constexpr std::array<std::int8_t, 16> kIq4Levels = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                           1,    13,   25,  38,  53,  69,  89,  113};

/// The levels of the 32 codes in qs[0…16) (Q4_0's nibble order: element j the low nibble of qs[j],
/// element j + 16 its high nibble).
inline void iq4_levels32(const std::uint8_t* qs, std::int8_t* q) noexcept {
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4Levels[qs[j] & 0x0F];
    q[j + 16] = kIq4Levels[qs[j] >> 4];
  }
}

/// IQ4_NL as integers and scale: q = the levels of the codes, s[0] = d.
inline void iq4_nl_ints(const std::uint8_t* b, std::int8_t* q, float* s) noexcept {
  s[0] = half(b);
  iq4_levels32(b + 2, q);
}

/// IQ4_XS as integers and scales: the levels of the codes and, per sub-block g of 32, s[g] = d·(ls − 32)
/// with ls's low 4 bits the nibble g % 2 of scales_l[g / 2] and its high 2 bits bits 2g of scales_h.
inline void iq4_xs_ints(const std::uint8_t* b, std::int8_t* q, float* s) noexcept {
  const float d = half(b);
  const std::uint16_t scales_h = u16(b + 2);
  const std::uint8_t* scales_l = b + 4;
  for (int g = 0; g < 8; ++g) {
    const int ls = ((scales_l[g / 2] >> (4 * (g % 2))) & 0x0F) | (((scales_h >> (2 * g)) & 3) << 4);
    s[g] = d * fl(ls - 32);
    iq4_levels32(b + 8 + 16 * g, q + 32 * g);
  }
}

inline void iq4_nl(const std::uint8_t* b, float* y) noexcept {
  std::int8_t q[32];
  float d;
  iq4_nl_ints(b, q, &d);
  for (int j = 0; j < 32; ++j) y[j] = d * fl(q[j]);
}

inline void iq4_xs(const std::uint8_t* b, float* y) noexcept {
  std::int8_t q[256];
  float s[8];
  iq4_xs_ints(b, q, s);
  for (int i = 0; i < 256; ++i) y[i] = s[i / 32] * fl(q[i]);
}

/// A block type's decoder and the byte offsets of its fp16 scales (checked finite).
struct Codec {
  void (*decode)(const std::uint8_t*, float*) = nullptr;
  std::array<std::uint8_t, 2> scales{};
  std::size_t n_scales = 0;
};

/// The codec of a block type, or one with decode = null for F32 / F16 / BF16 and unreadable types.
[[nodiscard]] inline Codec codec(std::uint32_t type) noexcept {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::q4_0: return {q4_0, {0, 0}, 1};
    case GgmlType::q4_1: return {q4_1, {0, 2}, 2};
    case GgmlType::q5_0: return {q5_0, {0, 0}, 1};
    case GgmlType::q5_1: return {q5_1, {0, 2}, 2};
    case GgmlType::q8_0: return {q8_0, {0, 0}, 1};
    case GgmlType::q2_k: return {q2_k, {80, 82}, 2};
    case GgmlType::q3_k: return {q3_k, {108, 0}, 1};
    case GgmlType::q4_k: return {k4<false>, {0, 2}, 2};
    case GgmlType::q5_k: return {k4<true>, {0, 2}, 2};
    case GgmlType::q6_k: return {q6_k, {208, 0}, 1};
    case GgmlType::iq4_nl: return {iq4_nl, {0, 0}, 1};
    case GgmlType::iq4_xs: return {iq4_xs, {0, 0}, 1};
    default: return {};
  }
}

/// The integer decoder of a block type whose values are a scale times a small integer, with no
/// offset (Q5_0, Q3_K, Q6_K, IQ4_NL, IQ4_XS): `decode(block, q, s)` writes the block's integers and
/// the scale of each group of `group` consecutive elements. decode = null for the other types.
struct IntCodec {
  void (*decode)(const std::uint8_t*, std::int8_t*, float*) = nullptr;
  std::size_t group = 0;
};

[[nodiscard]] inline IntCodec int_codec(std::uint32_t type) noexcept {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::q5_0: return {q5_0_ints, 32};
    case GgmlType::q3_k: return {q3_k_ints, 16};
    case GgmlType::q6_k: return {q6_k_ints, 16};
    case GgmlType::iq4_nl: return {iq4_nl_ints, 32};
    case GgmlType::iq4_xs: return {iq4_xs_ints, 32};
    default: return {};
  }
}

/// The blocks whose values add a per-group offset to a scale times a small unsigned integer
/// (x = s·q + o): Q4_1 / Q5_1 (s = d, o = m, groups of 32), Q4_K / Q5_K (s = d·sc, o = −dmin·m,
/// sub-blocks of 32), Q2_K (s = d·sc, o = −dmin·m, sub-blocks of 16). Every s·q is exact in fp32
/// (an fp16 times at most 6 + 5 bits of integers), so s·q + o is the decoder's value bit for bit.
inline void q4_1_offsets(const std::uint8_t* b, std::int8_t* q, float* s, float* o) noexcept {
  s[0] = half(b);
  o[0] = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<std::int8_t>(b[4 + j] & 0x0F);
    q[j + 16] = static_cast<std::int8_t>(b[4 + j] >> 4);
  }
}

inline void q5_1_offsets(const std::uint8_t* b, std::int8_t* q, float* s, float* o) noexcept {
  s[0] = half(b);
  o[0] = half(b + 2);
  int c[32];
  q5_codes(u32(b + 4), b + 8, c);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<std::int8_t>(c[j]);
}

inline void q2_k_offsets(const std::uint8_t* b, std::int8_t* q, float* s, float* o) noexcept {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  for (int n = 0; n < 2; ++n)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {  // sub-block g = 8n + 2j + h: elements 16g … 16g + 15
        const int g = 8 * n + 2 * j + h;
        s[g] = d * fl(scales[g] & 0x0F);
        o[g] = -(dmin * fl(scales[g] >> 4));
        for (int l = 0; l < 16; ++l) q[16 * g + l] = static_cast<std::int8_t>((qs[32 * n + 16 * h + l] >> (2 * j)) & 3);
      }
}

template <bool Fifth>
inline void k4_offsets(const std::uint8_t* b, std::int8_t* q, float* s, float* o) noexcept {
  const float d = half(b), dmin = half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = Fifth ? b + 48 : b + 16;
  for (int j = 0; j < 4; ++j)
    for (int h = 0; h < 2; ++h) {  // sub-block g = 2j + h: elements 32g … 32g + 31
      const int g = 2 * j + h;
      int sc, m;
      k4_scale_min(g, scales, sc, m);
      s[g] = d * fl(sc);
      o[g] = -(dmin * fl(m));
      for (int l = 0; l < 32; ++l) {
        int c = h == 0 ? qs[32 * j + l] & 0x0F : qs[32 * j + l] >> 4;
        if constexpr (Fifth) c |= ((qh[l] >> g) & 1) << 4;
        q[32 * g + l] = static_cast<std::int8_t>(c);
      }
    }
}

/// The decoder of a block type with per-group offsets (above): `decode(block, q, s, o)` writes the
/// block's integers and the scale and offset of each group of `group` consecutive elements.
/// decode = null for the other types.
struct OffsetCodec {
  void (*decode)(const std::uint8_t*, std::int8_t*, float*, float*) = nullptr;
  std::size_t group = 0;
  unsigned bits = 0;  ///< the integers are 0 … 2^bits − 1
};

[[nodiscard]] inline OffsetCodec offset_codec(std::uint32_t type) noexcept {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::q4_1: return {q4_1_offsets, 32, 4};
    case GgmlType::q5_1: return {q5_1_offsets, 32, 5};
    case GgmlType::q2_k: return {q2_k_offsets, 16, 2};
    case GgmlType::q4_k: return {k4_offsets<false>, 32, 4};
    case GgmlType::q5_k: return {k4_offsets<true>, 32, 5};
    default: return {};
  }
}

/// Throws the `format_error` of block b when one of its fp16 scales is not finite.
inline void check_scales(const std::uint8_t* blk, const Codec& c, std::size_t b, std::size_t block_bytes, std::uint32_t type,
                         std::string_view file, std::size_t file_offset) {
  for (std::size_t i = 0; i < c.n_scales; ++i) {
    const std::uint16_t bits = u16(blk + c.scales[i]);
    if (!std::isfinite(fp16_bits_to_float(bits)))
      throw barato::format_error(std::string(file), file_offset + b * block_bytes + c.scales[i],
                                 std::string(ggml_type_name(type)) + " block " + std::to_string(b) + ": scale (fp16 bits " +
                                     std::to_string(bits) + ") is not finite; expected a finite fp16 scale");
  }
}

/// The shared walk of `ggml_to_int_groups` and `ggml_to_offset_groups`: checks that `raw` holds the
/// product(ne) elements of `type`, that `q` has one integer per element and each of `per_group` one
/// value per `group` elements (`what` names the caller and `names` those arrays in the error), then
/// checks every block's fp16 scales and calls `decode(block bytes, index of the block's first element)`.
template <class Decode>
inline void decode_int_blocks(std::string_view what, std::span<const std::byte> raw, std::uint32_t type,
                              std::span<const std::uint64_t> ne, std::size_t q_size, std::size_t group,
                              std::initializer_list<std::size_t> per_group, std::string_view names, std::string_view file,
                              std::size_t file_offset, Decode&& decode) {
  std::uint64_t n = 1;
  for (const auto d : ne) n *= d;
  GgmlTypeTraits tr;
  barato::require<barato::value_error>(ggml_type_traits(type, tr), what, ": unsupported ggml type ", type);
  bool sizes_ok = q_size == n && !ne.empty() && ne[0] % tr.block == 0 && raw.size() == n / tr.block * tr.block_bytes;
  std::string got;
  for (const std::size_t size : per_group) {
    sizes_ok = sizes_ok && size == n / group;
    got += ", " + std::to_string(size);
  }
  barato::require(sizes_ok, what, ": ", n, " elements of ", ggml_type_name(type), " need ", n / tr.block * tr.block_bytes,
                  " bytes, ", n, " integers and ", n / group, " ", names, ", got ", raw.size(), ", ", q_size, got);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(raw.data());
  const Codec c = codec(type);
  for (std::size_t b = 0; b < n / tr.block; ++b) {
    const std::uint8_t* blk = bytes + b * tr.block_bytes;
    check_scales(blk, c, b, tr.block_bytes, type, file, file_offset);
    decode(blk, b * tr.block);
  }
}
}  // namespace ggml_blocks

/// The conversion point of GGUF tensor data to fp32: `raw` holds product(ne) elements of ggml type
/// `type` (dims ne, ne0 first); `out` receives them in storage order, exact for every readable type
/// (file comment). `file` and `file_offset` (the tensor data's offset in the file) name a block with a
/// non-finite scale in the `format_error`; `shape_error` when the sizes disagree, `value_error` for a
/// type this reader does not read.
inline void ggml_to_fp32(std::span<const std::byte> raw, std::uint32_t type, std::span<const std::uint64_t> ne,
                         std::span<float> out, std::string_view file = "<gguf>", std::size_t file_offset = 0) {
  std::uint64_t n = 1;
  for (const auto d : ne) n *= d;
  GgmlTypeTraits tr;
  barato::require<barato::value_error>(ggml_type_traits(type, tr), "ggml_to_fp32: unsupported ggml type ", type);
  barato::require(out.size() == n && !ne.empty() && ne[0] % tr.block == 0 && raw.size() == n / tr.block * tr.block_bytes,
                  "ggml_to_fp32: ", n, " elements of ", ggml_type_name(type), " need ", n / tr.block * tr.block_bytes,
                  " bytes and ", n, " outputs, got ", raw.size(), " bytes and ", out.size(), " outputs");
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(raw.data());
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32:
      std::memcpy(out.data(), raw.data(), raw.size());
      return;
    case GgmlType::f16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = fp16_bits_to_float(ggml_blocks::u16(bytes + 2 * i));
      return;
    case GgmlType::bf16:
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_bits_to_float(ggml_blocks::u16(bytes + 2 * i));
      return;
    default: break;
  }
  const ggml_blocks::Codec c = ggml_blocks::codec(type);
  barato::require<barato::value_error>(c.decode != nullptr, "ggml_to_fp32: no decoder for ", ggml_type_name(type));
  for (std::size_t b = 0; b < out.size() / tr.block; ++b) {
    const std::uint8_t* blk = bytes + b * tr.block_bytes;
    ggml_blocks::check_scales(blk, c, b, tr.block_bytes, type, file, file_offset);
    c.decode(blk, out.data() + b * tr.block);
  }
}

/// True when ggml type `type` holds a scale times a small integer per group with no offset (Q5_0,
/// IQ4_NL, IQ4_XS: groups of 32; Q3_K, Q6_K: 16): what `ggml_to_int_groups` reads.
[[nodiscard]] inline bool ggml_int_groups(std::uint32_t type) noexcept { return ggml_blocks::int_codec(type).decode != nullptr; }
/// Elements per scale of such a type (0 for the others).
[[nodiscard]] inline std::size_t ggml_int_group(std::uint32_t type) noexcept { return ggml_blocks::int_codec(type).group; }

/// The integers and group scales of GGUF tensor data of a `ggml_int_groups` type: `q` receives the
/// product(ne) integers in storage order, `scales` one scale per `ggml_int_group(type)` elements.
/// Exact: scales[i / group] · q[i] is `ggml_to_fp32`'s value i bit for bit (the same fp32 product).
/// Errors as `ggml_to_fp32` (a non-finite fp16 scale names its block and byte offset).
inline void ggml_to_int_groups(std::span<const std::byte> raw, std::uint32_t type, std::span<const std::uint64_t> ne,
                               std::span<std::int8_t> q, std::span<float> scales, std::string_view file = "<gguf>",
                               std::size_t file_offset = 0) {
  const ggml_blocks::IntCodec ic = ggml_blocks::int_codec(type);
  barato::require<barato::value_error>(ic.decode != nullptr, "ggml_to_int_groups: ", ggml_type_name(type),
                                       " is not a scale-times-integer type");
  ggml_blocks::decode_int_blocks("ggml_to_int_groups", raw, type, ne, q.size(), ic.group, {scales.size()}, "scales", file,
                                 file_offset, [&](const std::uint8_t* blk, std::size_t i) {
                                   ic.decode(blk, q.data() + i, scales.data() + i / ic.group);
                                 });
}

/// True when ggml type `type` holds a scale times a small unsigned integer plus an offset per group
/// (Q4_1, Q5_1, Q4_K, Q5_K: groups of 32; Q2_K: 16): what `ggml_to_offset_groups` reads.
[[nodiscard]] inline bool ggml_offset_groups(std::uint32_t type) noexcept { return ggml_blocks::offset_codec(type).decode != nullptr; }
/// Elements per scale and offset of such a type (0 for the others).
[[nodiscard]] inline std::size_t ggml_offset_group(std::uint32_t type) noexcept { return ggml_blocks::offset_codec(type).group; }
/// Bits of such a type's integers (0 … 2^bits − 1): Q4_1 / Q4_K 4, Q5_1 / Q5_K 5, Q2_K 2 (0 for the others).
[[nodiscard]] inline unsigned ggml_offset_bits(std::uint32_t type) noexcept { return ggml_blocks::offset_codec(type).bits; }

/// The integers, group scales and group offsets of GGUF tensor data of a `ggml_offset_groups` type:
/// `q` receives the product(ne) integers (0 … 2^bits − 1) in storage order, `scales` and `offsets` one
/// each per `ggml_offset_group(type)` elements. Exact: scales[i / group] · q[i] + offsets[i / group] is
/// `ggml_to_fp32`'s value i bit for bit (the product is exact, so one rounding either way). Errors as
/// `ggml_to_fp32`.
inline void ggml_to_offset_groups(std::span<const std::byte> raw, std::uint32_t type, std::span<const std::uint64_t> ne,
                                  std::span<std::int8_t> q, std::span<float> scales, std::span<float> offsets,
                                  std::string_view file = "<gguf>", std::size_t file_offset = 0) {
  const ggml_blocks::OffsetCodec oc = ggml_blocks::offset_codec(type);
  barato::require<barato::value_error>(oc.decode != nullptr, "ggml_to_offset_groups: ", ggml_type_name(type),
                                       " is not a scale-times-integer-plus-offset type");
  ggml_blocks::decode_int_blocks("ggml_to_offset_groups", raw, type, ne, q.size(), oc.group, {scales.size(), offsets.size()},
                                 "scales and offsets", file, file_offset, [&](const std::uint8_t* blk, std::size_t i) {
                                   oc.decode(blk, q.data() + i, scales.data() + i / oc.group, offsets.data() + i / oc.group);
                                 });
}

}  // namespace barato_examples
