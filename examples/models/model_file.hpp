#pragma once
/// \file
/// The model file of the example tools (`--model`, `--tokenizer`, `--context`, `--weights`): a
/// llama2.c checkpoint or a GGUF file, told apart by the file's magic ("GGUF"), not its extension.
///
/// ```cpp
/// const ModelFile m = ModelFile::open(args.model, args.context);       // context 0: the file's
/// const Tokenizer tok = m.tokenizer(args.tokenizer, default_tok512);   // GGUF: its own vocabulary
/// with_model_weights(m, args.weights, &mem, [&](const auto& w) { ... });
/// ```
/// `--weights file` (the tools' default) keeps the file's precision: fp32 for llama2.c versions 0
/// and 1, int8 groups for version 2 (`llama2c_int8_weights`); for GGUF,
/// F16 / BF16 projections as nn::Dense<f16 / bf16> and Q8_0 / Q4_0 in barato's ggml-exact formats
/// (quant::GgmlQ8_0 / GgmlQ4_0, no requantization; models/gguf_llama.hpp, `gguf_linear`). `--weights fp32` dequantizes every projection exactly;
/// any other scheme re-quantizes from those fp32 values (models/weight_formats.hpp) one tensor at a
/// time (`requantized_weights`), so no fp32 model is held beside the quantized one.

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/nn/any_linear.hpp"
#include "barato/nn/dense.hpp"
#include "barato/quant/scheme.hpp"
#include "models/gguf.hpp"
#include "models/gguf_llama.hpp"
#include "models/llama_weights.hpp"
#include "models/llama2c.hpp"
#include "models/llama2c_int8.hpp"
#include "models/tokenizer.hpp"
#include "models/weight_formats.hpp"

namespace barato_examples {

/// A model file opened for the tools: its config (context override applied) and, for GGUF, the
/// mapped file the weights and vocabulary are read from.
class ModelFile {
 public:
  /// Opens `path` (GGUF when it starts with "GGUF", else a llama2.c checkpoint). `context` > 0
  /// overrides the model's context (GGUF `llama.context_length`, llama2.c seq_len). `io_error` when
  /// `path` is missing or not a readable regular file; the readers' errors for a bad file.
  [[nodiscard]] static ModelFile open(const std::filesystem::path& path, std::size_t context = 0) {
    ModelFile m;
    m.path_ = path;
    m.context_ = context;
    // Which format a file holds is read from it, so a file that cannot be read is neither: say so
    // rather than "cannot open llama2.c checkpoint" for a missing x.gguf.
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path, std::ios::binary))
      throw barato::io_error(path.string() + ": cannot open model file (a llama2.c checkpoint or a GGUF file): " +
                             (std::filesystem::exists(path, ec) ? "not a readable regular file" : "no such file"));
    if (is_gguf_file(path)) {
      m.gguf_.emplace(GgufFile::open(path));
      m.config_ = gguf_llama_config(*m.gguf_, context);
    } else {
      const Llama2cLayout L = read_llama2c_layout(path);
      m.llama2c_version_ = L.version;
      m.config_ = llama2c_config(L);
      if (context > 0) m.config_.seq_len = context;
    }
    return m;
  }

  [[nodiscard]] bool is_gguf() const noexcept { return gguf_.has_value(); }
  /// The mapped GGUF file, or null for a llama2.c checkpoint.
  [[nodiscard]] const GgufFile* gguf_file() const noexcept { return gguf_ ? &*gguf_ : nullptr; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] const LlamaConfig& config() const noexcept { return config_; }
  /// A llama2.c checkpoint's export version (0 legacy, 1 fp32, 2 int8 groups); 0 for GGUF.
  [[nodiscard]] int llama2c_version() const noexcept { return llama2c_version_; }

  /// Every projection in fp32 (GGUF: dequantized exactly), from `mr`.
  [[nodiscard]] LlamaWeights<barato::nn::DenseLinear> fp32_weights(std::pmr::memory_resource* mr = std::pmr::get_default_resource()) const {
    if (gguf_) return load_gguf_llama_fp32(*gguf_, config_, mr);
    LlamaWeights<barato::nn::DenseLinear> w = load_llama2c(path_, mr);
    w.config.seq_len = config_.seq_len;
    return w;
  }
  /// GGUF only: the projections in the file's precision (`load_gguf_llama`).
  [[nodiscard]] LlamaWeights<barato::nn::AnyLinear> gguf_weights(std::pmr::memory_resource* mr = std::pmr::get_default_resource()) const {
    barato::require<barato::value_error>(gguf_.has_value(), "ModelFile::gguf_weights: ", path_.string(), " is not a GGUF file");
    return load_gguf_llama(*gguf_, config_, mr);
  }

  /// The tokenizer: the llama2.c tokenizer file `path` when given; else, for GGUF, the file's own
  /// vocabulary, and for a llama2.c checkpoint the file `fallback`.
  [[nodiscard]] Tokenizer tokenizer(const std::string& path, const std::filesystem::path& fallback) const {
    if (!path.empty()) return load_tokenizer(path, config_.vocab_size);
    if (gguf_) {
      Tokenizer t = gguf_tokenizer(*gguf_);
      if (t.vocab_size() != config_.vocab_size)
        throw barato::format_error(path_.string(), gguf_->find("tokenizer.ggml.tokens")->offset,
                                   "tokenizer.ggml.tokens: expected " + std::to_string(config_.vocab_size) +
                                       " tokens (the rows of token_embd.weight), found " + std::to_string(t.vocab_size()));
      return t;
    }
    return load_tokenizer(fallback, config_.vocab_size);
  }

 private:
  ModelFile() = default;
  std::filesystem::path path_;
  std::size_t context_ = 0;
  int llama2c_version_ = 0;
  LlamaConfig config_;
  std::optional<GgufFile> gguf_;
};

/// The `--weights` help line of the tools.
inline constexpr const char* kModelWeightsHelp =
    "weight format of the projections and classifier: file (the file's precision: fp32 for llama2.c,\n"
    "int8 groups for its version-2 export;\n"
    "GGUF F16/BF16 kept, Q8_0/Q4_0 kept in ggml's formats, Q4_1/Q4_K as 4-bit codes with fp32 scales and\n"
    "offsets, the other block types as their exact int8 integers with fp32 scales (and offsets: Q5_1/Q2_K/Q5_K))\n"
    "| fp32 (dequantized exactly) | int8-tensor |\n"
    "int8-row | int4-tensor | int4-row | int4-g128 | nf4 | q8_0 | q4_0 (quantized from the fp32 values at\n"
    "load time; q8_0 and q4_0 are ggml's formats, bit-exact with llama.cpp's quantizer)";

/// The projections and the classifier re-quantized to `scheme` tensor by tensor, so loading never
/// holds an fp32 model beside the quantized one. GGUF: each tensor is dequantized exactly, quantized,
/// and its fp32 values freed before the next (a Q4_K_M 7B file is ~28 GB as fp32; this way the peak is
/// the quantized model, the fp32 embedding and one fp32 matrix). llama2.c: each matrix is read into
/// one reused fp32 scratch matrix and quantized from it (`load_llama2c_with`: the same peak). Bitwise
/// the weights of `quantize_weights(m.fp32_weights(), scheme)`.
[[nodiscard]] inline LlamaWeights<barato::nn::AnyLinear> requantized_weights(const ModelFile& m, barato::quant::Scheme scheme,
                                                                             std::pmr::memory_resource* mr) {
  const GgufFile* f = m.gguf_file();
  if (f == nullptr) {
    auto w = load_llama2c_with(
        m.path(),
        [&](std::span<const float> x, std::size_t rows, std::size_t cols) { return quantized_linear(scheme, rows, cols, x, mr); },
        mr);
    w.config.seq_len = m.config().seq_len;
    return w;
  }
  return load_gguf_llama_with(
      *f, m.config(),
      [&](const GgufTensor& t, std::size_t rows, std::size_t cols) {
        const barato::Buffer<float> x = gguf_tensor_fp32(t, mr, f->file(), f->data_offset() + static_cast<std::size_t>(t.offset));
        return quantized_linear(scheme, rows, cols, x.span(), mr);
      },
      mr);
}

/// A llama2.c version-2 checkpoint in its own precision (`--weights file`): every matrix as
/// `llama2c_int8_linear` keeps it (int8 codes with their scales where rows hold whole groups, else
/// exact fp32), the embedding and the gains in fp32 (the embedding dequantized exactly, as `runq.c`
/// does). `value_error` for a file of another version.
[[nodiscard]] inline LlamaWeights<barato::nn::AnyLinear> llama2c_int8_weights(const ModelFile& m, std::pmr::memory_resource* mr) {
  barato::require<barato::value_error>(!m.is_gguf() && m.llama2c_version() == 2, "llama2c_int8_weights: ", m.path().string(),
                                       " is not a llama2.c version-2 (int8) checkpoint");
  auto w = load_llama2c_with(m.path(), Llama2cFileLinear{mr}, mr);
  w.config.seq_len = m.config().seq_len;
  return w;
}

/// The weights `weights` names (see the file comment), built without holding more than they need:
/// a GGUF file in its own formats never becomes an fp32 model, a re-quantized one never holds it
/// beside the quantized one (`requantized_weights`), and fp32 weights are read into their layers (a
/// GGUF tensor directly, a llama2.c matrix through one scratch matrix), never the whole file beside
/// them. `value_error` ("--weights: …") for an unknown name, before any weight is read.
[[nodiscard]] inline LlamaWeights<barato::nn::AnyLinear> model_weights(const ModelFile& m, std::string_view weights,
                                                                       std::pmr::memory_resource* mr) {
  if (weights == "file" && m.is_gguf()) return m.gguf_weights(mr);
  if (weights == "file" && m.llama2c_version() == 2) return llama2c_int8_weights(m, mr);
  if (weights == "file" || weights == "fp32") return into_any_linear(m.fp32_weights(mr));
  return requantized_weights(m, weight_scheme(weights), mr);
}

/// Calls f(model_weights(m, weights, mr)).
template <class F>
decltype(auto) with_model_weights(const ModelFile& m, std::string_view weights, std::pmr::memory_resource* mr, F&& f) {
  return f(model_weights(m, weights, mr));
}

}  // namespace barato_examples
