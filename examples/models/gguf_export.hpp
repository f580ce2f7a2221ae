#pragma once
/// \file
/// A Llama decoder written back as a GGUF v3 file (what `barato_quantize` does): the llama metadata,
/// the tokenizer and every tensor in a requested type — F32, F16, Q8_0 or Q4_0 — with llama.cpp's
/// tensor names (models/gguf_llama.hpp reads them back).
///
/// Rules:
///  - 1-D tensors (norm gains) stay F32, as llama.cpp's quantizer keeps them.
///  - A matrix whose width (ne0, the input columns) is not a multiple of 32 cannot hold Q8_0 / Q4_0
///    blocks: it is written F16 and listed in `GgufExport::fallbacks` (for an F32 target it stays F32).
///  - Q8_0 / Q4_0 data is `quant::quantize_ggml_blocks` of the fp32 values: byte for byte what ggml's
///    reference quantizer writes for the same F32 tensor. When the model comes from a GGUF file whose
///    tensor already has the target type, its bytes are copied (re-quantizing dequantized blocks need
///    not reproduce them).
///  - The classifier is written as `output.weight` unless the config says it is tied to the embedding.
///  - Metadata: from a GGUF source every key is copied except `general.file_type` (rewritten for the
///    new type); from a llama2.c checkpoint the `llama.*` keys come from the config and the vocabulary
///    from the llama2.c tokenizer: a space in a piece becomes "▁" (U+2581), ids 0 / 1 / 2 become
///    `<unk>` / `<s>` / `</s>` (llama2.c's files store BOS / EOS as "\n<s>\n" / "\n</s>\n"), token
///    types unknown / control / byte / normal (and `add_space_prefix` / `add_bos_token` = false when
///    the tokenizer has them off). Reading the file back gives the same encode / decode.
///
/// Two ways in, one file out: `export_llama_gguf` takes a model in memory and makes every tensor's
/// bytes at once; `export_gguf_llama_streamed` (a GGUF file) and `export_llama2c_streamed` (a llama2.c
/// checkpoint) make each tensor while the writer writes (deferred tensors), so only one tensor is ever
/// read, converted and held at a time.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/ggml.hpp"
#include "barato/quant/ggml_blocks.hpp"
#include "models/gguf.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_writer.hpp"
#include "models/llama_weights.hpp"
#include "models/tokenizer.hpp"

namespace barato_examples {

/// The `--type` of barato_quantize: "f32", "f16", "q8_0" or "q4_0"; `value_error` otherwise.
[[nodiscard]] inline GgmlType parse_gguf_type(std::string_view name) {
  if (name == "f32") return GgmlType::f32;
  if (name == "f16") return GgmlType::f16;
  if (name == "q8_0") return GgmlType::q8_0;
  if (name == "q4_0") return GgmlType::q4_0;
  throw barato::value_error("--type: unknown tensor type '" + std::string(name) + "' (expected f32, f16, q8_0 or q4_0)");
}

/// llama.cpp's `general.file_type` of a file whose matrices are mostly `t` (ALL_F32 0, MOSTLY_F16 1,
/// MOSTLY_Q4_0 2, MOSTLY_Q8_0 7).
[[nodiscard]] constexpr std::uint32_t gguf_file_type(GgmlType t) noexcept {
  switch (t) {
    case GgmlType::f16: return 1;
    case GgmlType::q4_0: return 2;
    case GgmlType::q8_0: return 7;
    default: return 0;
  }
}

/// A GGUF file to be written and what the conversion did.
struct GgufExport {
  GgufWriter writer;                       ///< metadata and tensors, ready to `write`
  std::vector<std::string> fallbacks;      ///< matrices not in the target type, with the reason
  std::size_t tensors = 0;                 ///< tensors written
  std::size_t copied = 0;                  ///< tensors copied byte for byte from the source file
  std::size_t tensor_bytes = 0;            ///< bytes of tensor data
};

namespace detail {

/// The bytes of fp32 `w` ([rows, cols]) as ggml type `t`.
inline std::vector<std::byte> gguf_encode(GgmlType t, std::size_t rows, std::size_t cols, std::span<const float> w) {
  std::vector<std::byte> out;
  switch (t) {
    case GgmlType::f32: {
      const auto b = std::as_bytes(w);
      out.assign(b.begin(), b.end());
      break;
    }
    case GgmlType::f16: {
      out.resize(w.size() * 2);
      for (std::size_t i = 0; i < w.size(); ++i) {
        const auto h = barato::from_float<barato::f16>(w[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    }
    case GgmlType::q8_0:
    case GgmlType::q4_0: {
      const auto encode = [&](auto format) {
        using F = decltype(format);
        out.resize(barato::quant::ggml_bytes<F>(rows, cols));
        barato::quant::quantize_ggml_blocks<F>(rows, cols, w,
                                               std::span(reinterpret_cast<std::uint8_t*>(out.data()), out.size()));
      };
      if (t == GgmlType::q8_0) encode(barato::quant::GgmlQ8_0{});
      else encode(barato::quant::GgmlQ4_0{});
      break;
    }
    default: throw barato::value_error("gguf_encode: unsupported target type " + std::string(ggml_type_name(static_cast<std::uint32_t>(t))));
  }
  return out;
}

/// The llama2.c tokenizer's vocabulary as `tokenizer.ggml.*` metadata (rules in the file comment).
inline void add_llama2c_vocabulary(GgufWriter& w, const Tokenizer& tok) {
  std::vector<GgufWriteValue> tokens, scores, types;
  tokens.reserve(tok.vocab_size());
  for (std::size_t i = 0; i < tok.vocab_size(); ++i) {
    const auto id = static_cast<Token>(i);
    std::string piece;
    GgufTokenType type = GgufTokenType::normal;
    if (id == 0) {
      piece = "<unk>", type = GgufTokenType::unknown;
    } else if (id == kBos) {
      piece = "<s>", type = GgufTokenType::control;
    } else if (id == kEos) {
      piece = "</s>", type = GgufTokenType::control;
    } else {
      for (const char c : tok.piece(id)) {
        if (c == ' ') piece += kSentencePieceSpace;
        else piece += c;
      }
      if (Tokenizer::byte_piece_value(tok.piece(id)) >= 0) type = GgufTokenType::byte;
    }
    tokens.push_back(GgufWriteValue::string(piece));
    scores.push_back(GgufWriteValue::f32(tok.score(id)));
    types.push_back(GgufWriteValue::i32(static_cast<std::int32_t>(type)));
  }
  w.add("tokenizer.ggml.model", GgufWriteValue::string("llama"))
      .add("tokenizer.ggml.tokens", GgufWriteValue::array(GgufValueType::string, tokens))
      .add("tokenizer.ggml.scores", GgufWriteValue::array(GgufValueType::f32, scores))
      .add("tokenizer.ggml.token_type", GgufWriteValue::array(GgufValueType::i32, types))
      .add("tokenizer.ggml.bos_token_id", GgufWriteValue::u32(static_cast<std::uint32_t>(kBos)))
      .add("tokenizer.ggml.eos_token_id", GgufWriteValue::u32(static_cast<std::uint32_t>(kEos)))
      .add("tokenizer.ggml.unknown_token_id", GgufWriteValue::u32(0));
  // Written only when off, so a default vocabulary's metadata stays llama.cpp's converter's.
  if (!tok.dummy_prefix()) w.add("tokenizer.ggml.add_space_prefix", GgufWriteValue::boolean(false));
  if (!tok.add_bos()) w.add("tokenizer.ggml.add_bos_token", GgufWriteValue::boolean(false));
}

/// The metadata of the exported file: `source`'s keys (general.file_type rewritten), or the llama
/// keys of `c` and the vocabulary of `tok` when `source` is null.
inline void add_llama_metadata(GgufWriter& out, const LlamaConfig& c, const Tokenizer& tok, GgmlType type, const GgufFile* source,
                               std::string_view name) {
  barato::require<barato::value_error>(c.rope_style == RopeStyle::adjacent,
                                       "export_llama_gguf: a GGUF llama uses adjacent-pair RoPE; this model does not");
  barato::require<barato::value_error>(tok.vocab_size() == c.vocab_size, "export_llama_gguf: tokenizer of ", tok.vocab_size(),
                                       " pieces for a vocabulary of ", c.vocab_size);
  if (source != nullptr) {
    for (const auto& [key, value] : source->metadata())
      if (key != "general.file_type") out.add(std::string(key), gguf_write_value(value));
    out.add("general.file_type", GgufWriteValue::u32(gguf_file_type(type)));
    return;
  }
  const auto u32 = [](std::size_t v) { return GgufWriteValue::u32(static_cast<std::uint32_t>(v)); };
  out.add("general.architecture", GgufWriteValue::string("llama"))
      .add("general.name", GgufWriteValue::string(name))
      .add("general.file_type", GgufWriteValue::u32(gguf_file_type(type)))
      .add("llama.context_length", u32(c.seq_len))
      .add("llama.embedding_length", u32(c.dim))
      .add("llama.block_count", u32(c.n_layers))
      .add("llama.feed_forward_length", u32(c.hidden_dim))
      .add("llama.rope.dimension_count", u32(c.head_dim))
      .add("llama.attention.head_count", u32(c.n_heads))
      .add("llama.attention.head_count_kv", u32(c.n_kv_heads))
      .add("llama.attention.layer_norm_rms_epsilon", GgufWriteValue::f32(c.norm_eps))
      .add("llama.rope.freq_base", GgufWriteValue::f32(c.rope_base));
  add_llama2c_vocabulary(out, tok);
}

/// Adds tensor `slot` to `e` in the type the rules give it: `source`'s bytes when its tensor of that
/// name already has the type, else `encode` of `values()` (the fp32 values, [rows · cols]). Deferred:
/// the bytes are made when the writer writes (`values` and `source` must live until then).
template <bool Deferred, class Values>
void add_llama_tensor(GgufExport& e, const LlamaTensorSlot& slot, GgmlType type, const GgufFile* source, Values values) {
  GgmlType t = slot.matrix ? type : GgmlType::f32;
  if ((t == GgmlType::q8_0 || t == GgmlType::q4_0) && slot.cols % 32 != 0) {
    t = GgmlType::f16;
    e.fallbacks.push_back(slot.name + ": " + std::to_string(slot.cols) + " columns, not a multiple of 32 (ggml's block): F16");
  }
  std::vector<std::uint64_t> ne = slot.matrix ? std::vector<std::uint64_t>{slot.cols, slot.rows} : std::vector<std::uint64_t>{slot.cols};
  const GgufTensor* src = source != nullptr ? source->tensor(slot.name) : nullptr;
  const bool copy = src != nullptr && src->type == static_cast<std::uint32_t>(t);
  const auto make = [t, copy, src, rows = slot.rows, cols = slot.cols, values]() -> std::vector<std::byte> {
    if (copy) return std::vector<std::byte>(src->data.begin(), src->data.end());
    const auto x = values();
    return gguf_encode(t, rows, cols, std::span<const float>(x.data(), x.size()));
  };
  e.copied += copy;
  e.tensor_bytes += GgufWriter::tensor_bytes(t, ne);
  if constexpr (Deferred) {
    e.writer.add_tensor_deferred(slot.name, t, std::move(ne), make);
  } else {
    e.writer.add_tensor(slot.name, t, std::move(ne), make());
  }
  ++e.tensors;
}

}  // namespace detail

/// The GGUF file of `w` (fp32 values: a llama2.c checkpoint, or a GGUF file dequantized exactly) with
/// its matrices in `type`; `source` is the GGUF file `w` was read from (metadata and same-type tensors
/// copied) or null, in which case `tok` supplies the vocabulary and `name` the `general.name`.
/// The tensors' bytes are made here (the export holds the output's tensor data).
[[nodiscard]] inline GgufExport export_llama_gguf(const LlamaWeights<barato::nn::DenseLinear>& w, const Tokenizer& tok,
                                                  GgmlType type, const GgufFile* source, std::string_view name = "barato") {
  const LlamaConfig& c = w.config;
  GgufExport e;
  detail::add_llama_metadata(e.writer, c, tok, type, source, name);
  std::vector<std::span<const float>> values{w.token_embedding.span()};
  for (const auto& L : w.layers)
    for (const auto v : {L.rms_att.span(), L.wq.weights(), L.wk.weights(), L.wv.weights(), L.wo.weights(), L.rms_ffn.span(),
                         L.w1.weights(), L.w2.weights(), L.w3.weights()})
      values.push_back(v);
  values.push_back(w.rms_final.span());
  if (!c.shared_classifier) values.push_back(w.classifier.weights());
  const auto slots = detail::llama_tensor_slots(c);
  barato::require(values.size() == slots.size(), "export_llama_gguf: ", values.size(), " tensors for ", slots.size(), " slots");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    barato::require(values[i].size() == slots[i].rows * slots[i].cols, "export_llama_gguf: ", slots[i].name, " has ",
                    values[i].size(), " values, expected ", slots[i].rows * slots[i].cols);
    detail::add_llama_tensor<false>(e, slots[i], type, source, [v = values[i]] { return v; });
  }
  return e;
}

/// The same file as `export_llama_gguf(load_gguf_llama_fp32(f, c), tok, type, metadata, name)` for a
/// GGUF model `f`, made tensor by tensor when the writer writes: each tensor is dequantized from `f`,
/// encoded, written and freed, so neither the fp32 model nor the output's tensor data is ever held
/// (peak: one tensor's fp32 values and bytes; what makes a model larger than memory convertible).
/// `metadata` is `&f` (its keys copied, and its tensors already in their target type copied byte
/// for byte) or null (`tok` and `name` as in `export_llama_gguf`; every tensor encoded). Every
/// tensor's presence and shape is checked here (`format_error` naming it); `f` must outlive the
/// writing. `mr` holds the fp32 values.
[[nodiscard]] inline GgufExport export_gguf_llama_streamed(const GgufFile& f, const LlamaConfig& c, const Tokenizer& tok, GgmlType type,
                                                           const GgufFile* metadata, std::string_view name = "barato",
                                                           std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  GgufExport e;
  detail::add_llama_metadata(e.writer, c, tok, type, metadata, name);
  for (const auto& slot : detail::llama_tensor_slots(c)) {
    const GgufTensor& t = slot.matrix ? detail::gguf_tensor(f, slot.name, {slot.cols, slot.rows})
                                      : detail::gguf_tensor(f, slot.name, {slot.cols});
    detail::add_llama_tensor<true>(e, slot, type, metadata, [&f, &t, mr] {
      return gguf_tensor_fp32(t, mr, f.file(), f.data_offset() + static_cast<std::size_t>(t.offset));
    });
  }
  return e;
}

/// The same file as `export_llama_gguf(load_llama2c(path), tok, type, nullptr, name)` for a llama2.c
/// checkpoint, made tensor by tensor when the writer writes: each tensor's floats are read from the
/// file (one read at its offset), encoded, written and freed, so the checkpoint is never held whole
/// (peak: one tensor's fp32 values and bytes). The header and the file's size are checked here, as
/// `read_llama2c_layout` does (`format_error`); a file that shrinks before a tensor is read is a
/// `format_error` naming the tensor, and an unreadable one an `io_error`. `mr` holds the fp32 values.
[[nodiscard]] inline GgufExport export_llama2c_streamed(const std::filesystem::path& path, const Tokenizer& tok, GgmlType type,
                                                        std::string_view name = "barato",
                                                        std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  Llama2cHeader h;
  const Llama2cLayout L = read_llama2c_layout(path, &h);
  const LlamaConfig c = llama2c_config(L);
  GgufExport e;
  detail::add_llama_metadata(e.writer, c, tok, type, nullptr, name);
  // The checkpoint's tensor of each slot, in llama_tensor_slots' order: (id, layer) with layer n_layers
  // for a tensor that is not one of a per-layer stack.
  using T = Llama2cCheckpoint;
  const std::size_t whole = L.n_layers;
  std::vector<std::pair<T::TensorId, std::size_t>> from{{T::kTokenEmbedding, whole}};
  for (std::size_t l = 0; l < c.n_layers; ++l)
    for (const T::TensorId id : {T::kRmsAtt, T::kWq, T::kWk, T::kWv, T::kWo, T::kRmsFfn, T::kW1, T::kW2, T::kW3})
      from.emplace_back(id, l);
  from.emplace_back(T::kRmsFinal, whole);
  if (!c.shared_classifier) from.emplace_back(T::kWcls, whole);
  const auto slots = detail::llama_tensor_slots(c);
  barato::require(from.size() == slots.size(), "export_llama2c_streamed: ", from.size(), " tensors for ", slots.size(), " slots");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const T::TensorId id = from[i].first;
    const std::size_t layer = from[i].second == whole ? 0 : from[i].second;
    const std::size_t n = slots[i].rows * slots[i].cols;
    const std::size_t per = L.tensors[id].layer_floats();
    barato::require(per == n, "export_llama2c_streamed: ", slots[i].name, " has ", per, " values, expected ", n);
    detail::add_llama_tensor<true>(e, slots[i], type, nullptr, [path, L, h, id, layer, n, mr] {
      std::pmr::vector<float> x(n, mr);
      Llama2cReader in(path, L, h);
      in.read(id, layer, x);
      return x;
    });
  }
  return e;
}

}  // namespace barato_examples
