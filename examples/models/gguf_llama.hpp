#pragma once
/// \file
/// A Llama decoder's config, weights and tokenizer from a GGUF file (`general.architecture = "llama"`).
///
/// Hyper-parameters come from the `llama.*` keys (context_length, embedding_length, block_count,
/// feed_forward_length, attention.head_count, attention.head_count_kv (default: head_count),
/// attention.layer_norm_rms_epsilon, rope.freq_base (default 10000, as llama.cpp), rope.dimension_count
/// (default: the head size; partial rotary embeddings are not supported)); RoPE scaling
/// (`llama.rope.scaling.type` other than "none", a `rope_freqs` tensor) is an error, not ignored. Tensors come by name:
/// token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
/// ffn_down}, output_norm and output (absent: tied to token_embd), all `.weight`. GGUF lists dims
/// fastest-varying first, so a matrix [rows, cols] has ne = {cols, rows}.
///
/// RoPE: llama.cpp runs `llama` models with ggml's "normal" RoPE, which rotates adjacent pairs
/// (2i, 2i+1) as llama2.c does; its converters store Q and K in that layout (the HF converter undoes
/// the rotate-half permutation of HF checkpoints, the llama2.c converter copies them as they are). So
/// a GGUF llama is run with `RopeStyle::adjacent` and its weights as stored — no un-permutation.
///
/// Weight conversion goes through one function, `ggml_to_fp32` (models/ggml_dequant.hpp: raw bytes,
/// type, dims → fp32, bit-exact with ggml's dequantization for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, Q2_K … Q6_K, IQ4_NL, IQ4_XS), and the projections through `gguf_linear`, which keeps F16 /
/// BF16 in their precision (nn::Dense<f16 / bf16>) and Q8_0 / Q4_0 in barato's ggml-exact formats
/// (quant::GgmlQ8_0 / GgmlQ4_0, loaded without requantizing); Q5_0, Q3_K, Q6_K, IQ4_NL and IQ4_XS
/// become int8 codes with fp32 group scales (their exact values, `ggml_to_int_groups`); Q4_1, Q5_1,
/// Q2_K, Q4_K and Q5_K (a per-group offset) become codes and scales plus fp32 offsets
/// (quant::OffsetLinear, `ggml_to_offset_groups`; Q4_1 / Q4_K 4-bit codes with fp32 scales,
/// quant::Q4_0F32, the others the int8 codes above; `--weights` can re-quantize them).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/ggml_blocks.hpp"
#include "models/ggml_dequant.hpp"
#include "models/gguf.hpp"
#include "models/llama_config.hpp"
#include "models/llama_weights.hpp"
#include "models/tokenizer.hpp"

namespace barato_examples {

// ================================================================================================
// Tensor conversion
// ================================================================================================

/// A GGUF tensor as fp32 values (`ggml_to_fp32`, models/ggml_dequant.hpp), in a buffer from `mr`;
/// `file` and `file_offset` (the tensor data's offset in the file) name a bad block in the error.
[[nodiscard]] inline barato::Buffer<float> gguf_tensor_fp32(const GgufTensor& t,
                                                            std::pmr::memory_resource* mr = std::pmr::get_default_resource(),
                                                            std::string_view file = "<gguf>", std::size_t file_offset = 0) {
  barato::Buffer<float> b(static_cast<std::size_t>(t.elements()), mr);
  ggml_to_fp32(t.data, t.type, t.ne, b.span(), file, file_offset);
  return b;
}

/// A GGUF matrix [rows, cols] as an fp32 `nn::Dense` of its exact values (`ggml_to_fp32`), converted
/// straight into the layer's storage from `mr`: no fp32 temporary per tensor (freed temporaries left
/// glibc's heap fragmented, 1.4× the model's bytes resident for a 100M-parameter F32 file).
[[nodiscard]] inline barato::nn::DenseLinear gguf_dense_fp32(const GgufTensor& t, std::size_t rows, std::size_t cols,
                                                             std::pmr::memory_resource* mr, std::string_view file,
                                                             std::size_t file_offset) {
  barato::nn::DenseLinear d(rows, cols, mr);
  ggml_to_fp32(t.data, t.type, t.ne, d.weights(), file, file_offset);
  return d;
}

/// A GGUF matrix [rows, cols] as a linear layer in the file's precision: F32 → Dense<float>, F16 →
/// Dense<f16>, BF16 → Dense<bf16> (all exact), Q8_0 / Q4_0 → quant::Linear<GgmlQ8_0 / GgmlQ4_0> built
/// from the file's block bytes without requantizing (`quant::from_ggml_blocks`; `file` and
/// `file_offset`, the tensor's data offset, name a bad block in its error); Q5_0, Q3_K, Q6_K, IQ4_NL
/// and IQ4_XS (a scale times a small integer per group — for the IQ4 types the level of a 4-bit code —
/// `ggml_to_int_groups`) → quant::Linear of int8 codes with fp32 scales per group of 32 (Q5_0, IQ4_NL,
/// IQ4_XS) or 16 (Q3_K, Q6_K): their exact values at 9 or 10 bits per weight (IQ4: twice the file's
/// 4.25–4.5), on the VNNI kernel (15-bit activations); Q4_1, Q5_1, Q4_K, Q5_K and Q2_K (a scale times a
/// small unsigned integer plus an offset per group, `ggml_to_offset_groups`) → quant::OffsetLinear with
/// fp32 offsets per group: Q4_1 / Q4_K over quant::Q4_0F32 (the 4-bit integers centred, u − 8, with
/// fp32 scales; the offset o + 8s rounded to fp32 once; ggml's product on int8 activations) at 6 bits
/// per weight, Q5_1 / Q5_K / Q2_K over the same int8 codes and fp32 scales as above per group of 32
/// (16 for Q2_K), their exact numbers at 10 (12) bits per weight — against the file's 4.5–6
/// (`--weights int4-g128`, `q4_0`, … re-quantize them).
/// Defined in gguf_llama.cpp (the example models' compiled part, ARCHITECTURE.md): it instantiates
/// the kernels of every format above, once for all the programs that load a GGUF model.
[[nodiscard]] barato::nn::AnyLinear gguf_linear(const GgufTensor& t, std::size_t rows, std::size_t cols,
                                                std::pmr::memory_resource* mr = std::pmr::get_default_resource(),
                                                std::string_view file = "<gguf>", std::size_t file_offset = 0);

/// Bytes `gguf_linear` holds for a [rows, cols] tensor of ggml type `type` (codes and scales; what
/// its `bytes()` reports), from the type alone: nothing is read or converted. F32 and the block types
/// without a barato format 4 per weight, F16 / BF16 2, Q8_0 34 and Q4_0 18 per 32, Q5_0 / IQ4_NL /
/// IQ4_XS 1 + 4/32, Q3_K / Q6_K 1 + 4/16, Q4_1 / Q4_K 1/2 + 8/32, Q5_1 / Q5_K 1 + 8/32, Q2_K 1 + 8/16.
[[nodiscard]] inline std::size_t gguf_linear_bytes(std::uint32_t type, std::size_t rows, std::size_t cols) noexcept {
  const std::size_t n = rows * cols;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f16:
    case GgmlType::bf16: return 2 * n;
    case GgmlType::q8_0: return barato::quant::ggml_bytes<barato::quant::GgmlQ8_0>(rows, cols);
    case GgmlType::q4_0: return barato::quant::ggml_bytes<barato::quant::GgmlQ4_0>(rows, cols);
    default: break;
  }
  if (ggml_int_groups(type)) return n + n / ggml_int_group(type) * sizeof(float);
  if (ggml_offset_groups(type)) return (ggml_offset_bits(type) == 4 ? n / 2 : n) + 2 * (n / ggml_offset_group(type)) * sizeof(float);
  return n * sizeof(float);
}

// ================================================================================================
// Config
// ================================================================================================

namespace detail {

inline std::uint64_t gguf_uint(const GgufFile& f, std::string_view key, const std::uint64_t* fallback = nullptr) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (fallback != nullptr) return *fallback;
    throw barato::format_error(f.file(), 0, "metadata \"" + std::string(key) + "\": missing (required for a llama model)");
  }
  if (!v->is_integer() || (v->is_signed() && v->as_i64() < 0))
    throw barato::format_error(f.file(), v->offset, "metadata \"" + std::string(key) + "\": expected a non-negative integer, found " +
                                                        (v->is_integer() ? std::to_string(v->as_i64()) : std::string("type ") +
                                                                                                             gguf_value_type_name(v->type)));
  return v->is_signed() ? static_cast<std::uint64_t>(v->as_i64()) : v->bits;
}

inline double gguf_float(const GgufFile& f, std::string_view key, const double* fallback = nullptr) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    if (fallback != nullptr) return *fallback;
    throw barato::format_error(f.file(), 0, "metadata \"" + std::string(key) + "\": missing (required for a llama model)");
  }
  if (v->type != GgufValueType::f32 && v->type != GgufValueType::f64)
    throw barato::format_error(f.file(), v->offset, "metadata \"" + std::string(key) + "\": expected f32 or f64, found " +
                                                        gguf_value_type_name(v->type));
  return v->as_f64();
}

inline std::string_view gguf_string(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) throw barato::format_error(f.file(), 0, "metadata \"" + std::string(key) + "\": missing");
  if (v->type != GgufValueType::string)
    throw barato::format_error(f.file(), v->offset, "metadata \"" + std::string(key) + "\": expected a string, found " +
                                                        gguf_value_type_name(v->type));
  return v->str;
}

/// The tensor `name`, checked to have dims `ne` (ne0 first). Missing or mis-shaped → format_error.
inline const GgufTensor& gguf_tensor(const GgufFile& f, const std::string& name, std::initializer_list<std::uint64_t> ne) {
  const GgufTensor* t = f.tensor(name);
  if (t == nullptr) throw barato::format_error(f.file(), 0, "tensor \"" + name + "\": missing (required for a llama model)");
  const auto dims = [](auto&& d) {
    std::string s = "[";
    for (const auto x : d) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
    return s + "]";
  };
  if (!std::equal(t->ne.begin(), t->ne.end(), ne.begin(), ne.end()))
    throw barato::format_error(f.file(), t->info_offset, "tensor \"" + name + "\": expected ne = " + dims(ne) +
                                                             " (from the llama.* hyper-parameters), found " + dims(t->ne));
  return *t;
}

}  // namespace detail

/// The LlamaConfig of a GGUF llama file (see the file comment). `context` > 0 overrides
/// `llama.context_length` (as llama.cpp's `-c`). Throws `format_error` naming a missing or bad key.
[[nodiscard]] inline LlamaConfig gguf_llama_config(const GgufFile& f, std::size_t context = 0) {
  const std::string_view arch = detail::gguf_string(f, "general.architecture");
  if (arch != "llama")
    throw barato::format_error(f.file(), f.find("general.architecture")->offset,
                               "general.architecture: expected \"llama\" (the only architecture read), found \"" +
                                   std::string(arch) + "\"");
  LlamaConfig c;
  const auto u = [&](const char* key) { return static_cast<std::size_t>(detail::gguf_uint(f, key)); };
  c.dim = u("llama.embedding_length");
  c.hidden_dim = u("llama.feed_forward_length");
  c.n_layers = u("llama.block_count");
  c.n_heads = u("llama.attention.head_count");
  const std::uint64_t heads = c.n_heads;
  c.n_kv_heads = static_cast<std::size_t>(detail::gguf_uint(f, "llama.attention.head_count_kv", &heads));
  c.seq_len = context > 0 ? context : u("llama.context_length");
  const double eps = detail::gguf_float(f, "llama.attention.layer_norm_rms_epsilon");
  const double base_default = 10000.0;
  const double base = detail::gguf_float(f, "llama.rope.freq_base", &base_default);
  c.norm_eps = static_cast<float>(eps);
  c.rope_base = static_cast<float>(base);
  c.rope_style = RopeStyle::adjacent;
  const auto bad = [&](const char* key, const std::string& msg) {
    const GgufValue* v = f.find(key);
    throw barato::format_error(f.file(), v != nullptr ? v->offset : 0, std::string("metadata \"") + key + "\": " + msg);
  };
  if (c.n_heads == 0 || c.dim % c.n_heads != 0)
    bad("llama.attention.head_count", "expected a nonzero divisor of embedding_length " + std::to_string(c.dim) + ", found " +
                                          std::to_string(c.n_heads));
  c.head_dim = c.dim / c.n_heads;
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    bad("llama.attention.head_count_kv", "expected a nonzero divisor of head_count " + std::to_string(c.n_heads) +
                                             ", found " + std::to_string(c.n_kv_heads));
  const std::uint64_t head = c.head_dim;
  if (const auto k = detail::gguf_uint(f, "llama.attention.key_length", &head); k != head)
    bad("llama.attention.key_length", "expected embedding_length / head_count = " + std::to_string(head) + ", found " + std::to_string(k));
  if (const auto r = detail::gguf_uint(f, "llama.rope.dimension_count", &head); r != head)
    bad("llama.rope.dimension_count", "expected the head size " + std::to_string(head) +
                                          " (partial rotary embeddings are not supported), found " + std::to_string(r));
  if (const GgufValue* sc = f.find("llama.rope.scaling.type"); sc != nullptr && !(sc->type == GgufValueType::string && sc->str == "none"))
    bad("llama.rope.scaling.type", "expected absent or \"none\" (RoPE scaling is not supported), found " +
                                       (sc->type == GgufValueType::string ? "\"" + std::string(sc->str) + "\"" : std::string("a non-string")));
  if (const GgufTensor* rf = f.tensor("rope_freqs.weight"))
    throw barato::format_error(f.file(), rf->info_offset, "tensor \"rope_freqs.weight\": per-dimension RoPE frequency factors "
                                                          "(Llama 3.1-style scaling) are not supported");
  if (!(eps > 0.0)) bad("llama.attention.layer_norm_rms_epsilon", "expected > 0, found " + std::to_string(eps));
  if (!(base > 0.0)) bad("llama.rope.freq_base", "expected > 0, found " + std::to_string(base));
  const GgufTensor* emb = f.tensor("token_embd.weight");
  if (emb == nullptr) throw barato::format_error(f.file(), 0, "tensor \"token_embd.weight\": missing (required for a llama model)");
  if (emb->ne.size() != 2 || emb->ne[0] != c.dim)
    throw barato::format_error(f.file(), emb->info_offset, "tensor \"token_embd.weight\": expected ne = [" + std::to_string(c.dim) +
                                                               ", vocab], found " + std::to_string(emb->ne.size()) + " dims");
  c.vocab_size = static_cast<std::size_t>(emb->ne[1]);
  c.shared_classifier = f.tensor("output.weight") == nullptr;
  try {
    c.validate();
  } catch (const barato::error& e) {
    throw barato::format_error(f.file(), 0, std::string("llama hyper-parameters: ") + e.what());
  }
  return c;
}

// ================================================================================================
// Weights
// ================================================================================================

/// Llama weights from a GGUF file with every projection made by `make_linear(tensor, rows, cols)`;
/// embedding and norm gains in fp32. Every tensor's shape is checked against `config`.
template <class MakeLinear>
[[nodiscard]] auto load_gguf_llama_with(const GgufFile& f, const LlamaConfig& c, MakeLinear make_linear,
                                        std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  using L = std::remove_cvref_t<std::invoke_result_t<MakeLinear&, const GgufTensor&, std::size_t, std::size_t>>;
  const auto mat = [&](const std::string& name, std::size_t rows, std::size_t cols) {
    return make_linear(detail::gguf_tensor(f, name, {cols, rows}), rows, cols);
  };
  const auto fp32 = [&](const GgufTensor& t) {
    return gguf_tensor_fp32(t, mr, f.file(), f.data_offset() + static_cast<std::size_t>(t.offset));
  };
  const auto vec = [&](const std::string& name, std::size_t n) { return fp32(detail::gguf_tensor(f, name, {n})); };
  std::vector<LlamaLayerWeights<L>> layers;
  // Reserve no more blocks than the file's tensors can hold (9 each): a hostile block_count must not
  // size an allocation; the loop below names the first missing tensor.
  layers.reserve(std::min<std::size_t>(c.n_layers, f.tensors().size() / 9));
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    layers.push_back(LlamaLayerWeights<L>{
        vec(p + "attn_norm.weight", c.dim), vec(p + "ffn_norm.weight", c.dim), mat(p + "attn_q.weight", c.q_dim(), c.dim),
        mat(p + "attn_k.weight", c.kv_dim(), c.dim), mat(p + "attn_v.weight", c.kv_dim(), c.dim),
        mat(p + "attn_output.weight", c.dim, c.q_dim()), mat(p + "ffn_gate.weight", c.hidden_dim, c.dim),
        mat(p + "ffn_down.weight", c.dim, c.hidden_dim), mat(p + "ffn_up.weight", c.hidden_dim, c.dim)});
  }
  const GgufTensor& emb = detail::gguf_tensor(f, "token_embd.weight", {c.dim, c.vocab_size});
  L classifier = f.tensor("output.weight") != nullptr ? mat("output.weight", c.vocab_size, c.dim)
                                                      : make_linear(emb, c.vocab_size, c.dim);
  LlamaWeights<L> w{c, fp32(emb), std::move(layers), vec("output_norm.weight", c.dim), std::move(classifier)};
  detail::check_weights(w);
  return w;
}

namespace detail {

/// One tensor of a llama GGUF file: its name, [rows, cols] (a 1-D tensor has rows = 1) and whether
/// it is a matrix (written in the target type) or a norm gain (F32).
struct LlamaTensorSlot {
  std::string name;
  std::size_t rows = 0, cols = 0;
  bool matrix = false;
};

/// The tensors of a llama model in the order barato writes them (llama.cpp's converter's order;
/// models/gguf_export.hpp writes them so):
/// token_embd, each block's attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
/// ffn_down, ffn_up, then output_norm and (when not tied) output.
[[nodiscard]] inline std::vector<LlamaTensorSlot> llama_tensor_slots(const LlamaConfig& c) {
  std::vector<LlamaTensorSlot> s;
  s.push_back({"token_embd.weight", c.vocab_size, c.dim, true});
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    s.push_back({p + "attn_norm.weight", 1, c.dim, false});
    s.push_back({p + "attn_q.weight", c.q_dim(), c.dim, true});
    s.push_back({p + "attn_k.weight", c.kv_dim(), c.dim, true});
    s.push_back({p + "attn_v.weight", c.kv_dim(), c.dim, true});
    s.push_back({p + "attn_output.weight", c.dim, c.q_dim(), true});
    s.push_back({p + "ffn_norm.weight", 1, c.dim, false});
    s.push_back({p + "ffn_gate.weight", c.hidden_dim, c.dim, true});
    s.push_back({p + "ffn_down.weight", c.dim, c.hidden_dim, true});
    s.push_back({p + "ffn_up.weight", c.hidden_dim, c.dim, true});
  }
  s.push_back({"output_norm.weight", 1, c.dim, false});
  if (!c.shared_classifier) s.push_back({"output.weight", c.vocab_size, c.dim, true});
  return s;
}

}  // namespace detail

/// Bytes of the weights `load_gguf_llama(f, c)` holds (`--weights file`), from the tensor infos alone:
/// the projections and the classifier as `gguf_linear_bytes` (a tied classifier is its own copy of
/// token_embd in token_embd's type), the embedding and the norm gains in fp32. Every tensor's presence
/// and shape is checked as the loader checks them (`format_error`).
[[nodiscard]] inline std::size_t gguf_llama_loaded_bytes(const GgufFile& f, const LlamaConfig& c) {
  std::size_t bytes = 0;
  for (const auto& s : detail::llama_tensor_slots(c)) {
    const GgufTensor& t = s.matrix ? detail::gguf_tensor(f, s.name, {s.cols, s.rows}) : detail::gguf_tensor(f, s.name, {s.cols});
    if (!s.matrix || s.name == "token_embd.weight") bytes += s.rows * s.cols * sizeof(float);  // norm gains, the lookup table
    if (s.matrix && (s.name != "token_embd.weight" || c.shared_classifier)) bytes += gguf_linear_bytes(t.type, s.rows, s.cols);
  }
  return bytes;
}

/// Llama weights with every projection dequantized exactly to fp32 (`--weights fp32`, and the input
/// of re-quantization to barato's formats).
[[nodiscard]] inline LlamaWeights<barato::nn::DenseLinear> load_gguf_llama_fp32(
    const GgufFile& f, const LlamaConfig& c, std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  return load_gguf_llama_with(
      f, c,
      [&](const GgufTensor& t, std::size_t rows, std::size_t cols) {
        return gguf_dense_fp32(t, rows, cols, mr, f.file(), f.data_offset() + static_cast<std::size_t>(t.offset));
      },
      mr);
}

/// Llama weights in the file's precision (`gguf_linear`: F16 / BF16 kept, Q8_0 / Q4_0 in ggml's formats).
[[nodiscard]] inline LlamaWeights<barato::nn::AnyLinear> load_gguf_llama(
    const GgufFile& f, const LlamaConfig& c, std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  return load_gguf_llama_with(
      f, c,
      [&](const GgufTensor& t, std::size_t rows, std::size_t cols) {
        return gguf_linear(t, rows, cols, mr, f.file(), f.data_offset() + static_cast<std::size_t>(t.offset));
      },
      mr);
}

// ================================================================================================
// Tokenizer
// ================================================================================================

/// The "▁" (U+2581) SentencePiece uses for a space, in UTF-8.
inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";

/// SentencePiece token types of `tokenizer.ggml.token_type` (llama.cpp's values).
enum class GgufTokenType : std::int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

/// The llama2.c-style tokenizer of a GGUF file's metadata (`tokenizer.ggml.model = "llama"`: tokens,
/// scores, token_type; bos id 1 and eos id 2, which is what barato's Tokenizer encodes). "▁" in a
/// piece becomes a space, as llama2.c's tokenizer files store it; byte pieces "<0xXX>" stay as they
/// are and must sit at ids 3..258 (byte b = id b + 3, the Tokenizer's byte fallback). Unknown,
/// control and unused tokens (`<unk>`, `<s>`, `</s>`) never come from text in SentencePiece: their
/// score becomes `kNoMergeScore`, so no merge produces them. `tokenizer.ggml.add_space_prefix`
/// (bool, default true) turns the dummy prefix on or off, and `tokenizer.ggml.add_bos_token` (bool,
/// default true) whether a prompt starts with BOS (`Tokenizer::add_bos`), as llama.cpp does. The
/// encode / decode then equal llama2.c's for the same vocabulary. Throws `format_error`.
[[nodiscard]] inline Tokenizer gguf_tokenizer(const GgufFile& f) {
  const std::string_view model = detail::gguf_string(f, "tokenizer.ggml.model");
  if (model != "llama")
    throw barato::format_error(f.file(), f.find("tokenizer.ggml.model")->offset,
                               "tokenizer.ggml.model: expected \"llama\" (SentencePiece BPE), found \"" + std::string(model) + "\"");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  if (tokens == nullptr || tokens->type != GgufValueType::array || tokens->elem_type != GgufValueType::string)
    throw barato::format_error(f.file(), tokens != nullptr ? tokens->offset : 0,
                               "tokenizer.ggml.tokens: expected an array of strings");
  if (scores == nullptr || scores->type != GgufValueType::array || scores->elem_type != GgufValueType::f32 ||
      scores->count != tokens->count)
    throw barato::format_error(f.file(), scores != nullptr ? scores->offset : 0,
                               "tokenizer.ggml.scores: expected an array of " + std::to_string(tokens->count) + " f32");
  const std::uint64_t one = 1, two = 2;
  if (const auto bos = detail::gguf_uint(f, "tokenizer.ggml.bos_token_id", &one); bos != static_cast<std::uint64_t>(kBos))
    throw barato::format_error(f.file(), f.find("tokenizer.ggml.bos_token_id")->offset,
                               "tokenizer.ggml.bos_token_id: expected 1 (llama2.c's), found " + std::to_string(bos));
  if (const auto eos = detail::gguf_uint(f, "tokenizer.ggml.eos_token_id", &two); eos != static_cast<std::uint64_t>(kEos))
    throw barato::format_error(f.file(), f.find("tokenizer.ggml.eos_token_id")->offset,
                               "tokenizer.ggml.eos_token_id: expected 2 (llama2.c's), found " + std::to_string(eos));
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  if (types != nullptr && (types->type != GgufValueType::array || types->elem_type != GgufValueType::i32 ||
                           types->count != tokens->count))
    throw barato::format_error(f.file(), types->offset,
                               "tokenizer.ggml.token_type: expected an array of " + std::to_string(tokens->count) + " i32");
  if (tokens->items.size() < 259)
    throw barato::format_error(f.file(), tokens->offset, "tokenizer.ggml.tokens: expected >= 259 tokens (3 special + 256 byte "
                                                         "pieces), found " + std::to_string(tokens->items.size()));
  for (std::size_t b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string want = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    const GgufValue& t = tokens->items[b + static_cast<std::size_t>(kByteFallbackOffset)];
    if (t.str != want)
      throw barato::format_error(f.file(), t.offset, "tokenizer.ggml.tokens[" + std::to_string(b + 3) + "]: expected the byte piece \"" +
                                                         want + "\" (byte b at id b + 3), found \"" + std::string(t.str) + "\"");
  }
  std::vector<std::string> pieces;
  std::vector<float> sc;
  pieces.reserve(tokens->items.size());
  sc.reserve(tokens->items.size());
  std::size_t max_len = 1;
  for (std::size_t i = 0; i < tokens->items.size(); ++i) {
    std::string p;
    const std::string_view s = tokens->items[i].str;
    for (std::size_t k = 0; k < s.size();) {
      if (s.substr(k).starts_with(kSentencePieceSpace)) {
        p += ' ';
        k += kSentencePieceSpace.size();
      } else {
        p += s[k++];
      }
    }
    max_len = std::max(max_len, p.size());
    pieces.push_back(std::move(p));
    const auto type = types != nullptr ? static_cast<GgufTokenType>(types->element(i).as_i64()) : GgufTokenType::normal;
    const bool from_text = type != GgufTokenType::unknown && type != GgufTokenType::control && type != GgufTokenType::unused;
    sc.push_back(from_text ? static_cast<float>(scores->element(i).as_f64()) : kNoMergeScore);
  }
  // Optional bools, llama.cpp's defaults for "llama" vocabularies when absent: SentencePiece's
  // add_dummy_prefix, and BOS before a prompt.
  const auto flag = [&f](const char* key) {
    const GgufValue* v = f.find(key);
    if (v == nullptr) return true;
    if (v->type != GgufValueType::boolean)
      throw barato::format_error(f.file(), v->offset, std::string(key) + ": expected a bool, found " + gguf_value_type_name(v->type));
    return v->bits != 0;
  };
  const bool dummy_prefix = flag("tokenizer.ggml.add_space_prefix");
  const bool add_bos = flag("tokenizer.ggml.add_bos_token");
  try {
    Tokenizer t(std::move(pieces), std::move(sc), max_len);
    t.set_dummy_prefix(dummy_prefix);
    t.set_add_bos(add_bos);
    return t;
  } catch (const barato::value_error& e) {
    throw barato::format_error(f.file(), tokens->offset, std::string("tokenizer.ggml.tokens: ") + e.what());
  }
}

}  // namespace barato_examples
