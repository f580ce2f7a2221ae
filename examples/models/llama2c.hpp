#pragma once
/// \file
/// Loader for llama2.c checkpoints (Karpathy's `run.c` "version 0" format): a 7-int32 header
///   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
/// followed by fp32 tensors, all little-endian, every matrix row-major [out][in]:
///   token_embedding [vocab, dim] · rms_att [L, dim] · wq [L, dim, dim] · wk [L, kv_dim, dim] ·
///   wv [L, kv_dim, dim] · wo [L, dim, dim] · rms_ffn [L, dim] · w1 [L, hidden, dim] ·
///   w2 [L, dim, hidden] · w3 [L, hidden, dim] · rms_final [dim] ·
///   legacy freq_cis real + imag [seq_len, head_size/2] each (unused) · wcls [vocab, dim] only when
///   vocab_size < 0 (an unshared classifier).
/// with head_size = dim / n_heads and kv_dim = n_kv_heads · head_size.
///
/// Every read is length-checked: a bad file throws `barato::format_error` naming the file, the byte
/// offset and what was expected vs found (truncated header or weights, a size that disagrees with the
/// header, zero/negative dims, n_heads not dividing dim, n_kv_heads not dividing n_heads, trailing
/// bytes). A file that cannot be opened throws `barato::io_error`.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"

namespace barato_examples {

static_assert(std::endian::native == std::endian::little, "the llama2.c loader assumes a little-endian host");

/// The 7 int32 values at the start of a llama2.c checkpoint, as stored.
struct Llama2cHeader {
  std::int32_t dim = 0;         ///< model width
  std::int32_t hidden_dim = 0;  ///< FFN width
  std::int32_t n_layers = 0;
  std::int32_t n_heads = 0;     ///< query heads
  std::int32_t n_kv_heads = 0;  ///< key/value heads (GQA when < n_heads)
  std::int32_t vocab_size = 0;  ///< negative: the classifier is stored separately (unshared)
  std::int32_t seq_len = 0;     ///< maximum context the model was trained for
};

/// Bytes of the header.
inline constexpr std::size_t kLlama2cHeaderBytes = 7 * sizeof(std::int32_t);

/// Where each tensor sits in the float payload after the header (offsets and sizes in floats).
/// Built from a validated header by `llama2c_layout`; per-layer tensors are [n_layers, ...] stacks.
struct Llama2cLayout {
  std::size_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab = 0, seq_len = 0;
  std::size_t head_size = 0, kv_dim = 0;
  bool shared_classifier = true;
  struct Tensor {
    const char* name = "";
    std::size_t offset = 0;  ///< first float
    std::size_t floats = 0;  ///< total floats (all layers)
  };
  static constexpr std::size_t kTensors = 13;
  /// token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls.
  std::array<Tensor, kTensors> tensors{};
  std::size_t total_floats = 0;  ///< payload floats
  /// Expected file size in bytes.
  [[nodiscard]] std::size_t file_bytes() const noexcept { return kLlama2cHeaderBytes + total_floats * sizeof(float); }
};

namespace detail {

/// a·b with overflow → format_error (a header whose sizes overflow is a bad file, not UB).
inline std::size_t checked_mul(std::size_t a, std::size_t b, const std::string& file) {
  std::size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw barato::format_error(file, 0, "header sizes overflow size_t (" + std::to_string(a) + " x " + std::to_string(b) + ")");
  return r;
}
inline std::size_t checked_add(std::size_t a, std::size_t b, const std::string& file) {
  std::size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw barato::format_error(file, 0, "header sizes overflow size_t");
  return r;
}

}  // namespace detail

/// Validates `h` (read from `file`) and computes the tensor layout. Throws `format_error` with the
/// byte offset of the offending header field: dims ≤ 0 (vocab_size 0), n_heads not dividing dim,
/// n_kv_heads not dividing n_heads, an odd head size (RoPE rotates pairs), sizes overflowing size_t.
[[nodiscard]] inline Llama2cLayout llama2c_layout(const Llama2cHeader& h, const std::string& file) {
  using barato::format_error;
  const auto positive = [&](std::int32_t v, std::size_t field, const char* name) {
    if (v <= 0)
      throw format_error(file, field * 4, std::string("header field ") + name + ": expected > 0, found " + std::to_string(v));
  };
  positive(h.dim, 0, "dim");
  positive(h.hidden_dim, 1, "hidden_dim");
  positive(h.n_layers, 2, "n_layers");
  positive(h.n_heads, 3, "n_heads");
  positive(h.n_kv_heads, 4, "n_kv_heads");
  if (h.vocab_size == 0 || h.vocab_size == std::numeric_limits<std::int32_t>::min())
    throw format_error(file, 20, "header field vocab_size: expected a nonzero value (negative = unshared classifier), found " +
                                     std::to_string(h.vocab_size));
  positive(h.seq_len, 6, "seq_len");
  if (h.dim % h.n_heads != 0)
    throw format_error(file, 12, "header field n_heads: expected a divisor of dim (" + std::to_string(h.dim) + "), found " +
                                     std::to_string(h.n_heads));
  if (h.n_heads % h.n_kv_heads != 0)
    throw format_error(file, 16, "header field n_kv_heads: expected a divisor of n_heads (" + std::to_string(h.n_heads) +
                                     "), found " + std::to_string(h.n_kv_heads));
  if ((h.dim / h.n_heads) % 2 != 0)
    throw format_error(file, 12, "header: head size dim/n_heads = " + std::to_string(h.dim / h.n_heads) +
                                     ", expected an even number (RoPE rotates pairs)");

  Llama2cLayout L;
  L.dim = static_cast<std::size_t>(h.dim);
  L.hidden_dim = static_cast<std::size_t>(h.hidden_dim);
  L.n_layers = static_cast<std::size_t>(h.n_layers);
  L.n_heads = static_cast<std::size_t>(h.n_heads);
  L.n_kv_heads = static_cast<std::size_t>(h.n_kv_heads);
  L.shared_classifier = h.vocab_size > 0;
  L.vocab = static_cast<std::size_t>(h.vocab_size > 0 ? h.vocab_size : -h.vocab_size);
  L.seq_len = static_cast<std::size_t>(h.seq_len);
  L.head_size = L.dim / L.n_heads;
  L.kv_dim = L.n_kv_heads * L.head_size;

  const auto mul = [&](std::size_t a, std::size_t b) { return detail::checked_mul(a, b, file); };
  const std::size_t layers_dd = mul(L.n_layers, mul(L.dim, L.dim));
  const std::size_t layers_kd = mul(L.n_layers, mul(L.kv_dim, L.dim));
  const std::size_t layers_hd = mul(L.n_layers, mul(L.hidden_dim, L.dim));
  const std::size_t sizes[Llama2cLayout::kTensors] = {
      mul(L.vocab, L.dim),             // token_embedding
      mul(L.n_layers, L.dim),          // rms_att
      layers_dd,                       // wq
      layers_kd,                       // wk
      layers_kd,                       // wv
      layers_dd,                       // wo
      mul(L.n_layers, L.dim),          // rms_ffn
      layers_hd,                       // w1
      layers_hd,                       // w2
      layers_hd,                       // w3
      L.dim,                           // rms_final
      mul(L.seq_len, L.head_size),     // freq_cis real + imag: 2 · seq_len · head_size/2
      L.shared_classifier ? 0 : mul(L.vocab, L.dim),  // wcls
  };
  static constexpr const char* kNames[Llama2cLayout::kTensors] = {
      "token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final", "freq_cis", "wcls"};
  std::size_t off = 0;
  for (std::size_t i = 0; i < Llama2cLayout::kTensors; ++i) {
    L.tensors[i] = {kNames[i], off, sizes[i]};
    off = detail::checked_add(off, sizes[i], file);
  }
  L.total_floats = off;
  detail::checked_add(kLlama2cHeaderBytes, mul(off, sizeof(float)), file);
  return L;
}

/// A loaded llama2.c checkpoint: the header, its layout and the whole fp32 payload (one buffer from
/// the caller's memory resource). Tensor accessors return views into the payload.
class Llama2cCheckpoint {
 public:
  enum TensorId : std::size_t {
    kTokenEmbedding, kRmsAtt, kWq, kWk, kWv, kWo, kRmsFfn, kW1, kW2, kW3, kRmsFinal, kFreqCis, kWcls
  };

  Llama2cCheckpoint(Llama2cHeader header, Llama2cLayout layout, barato::Buffer<float> payload)
      : header_(header), layout_(layout), payload_(std::move(payload)) {}

  [[nodiscard]] const Llama2cHeader& header() const noexcept { return header_; }
  [[nodiscard]] const Llama2cLayout& layout() const noexcept { return layout_; }
  /// All floats after the header, [layout().total_floats].
  [[nodiscard]] std::span<const float> payload() const noexcept { return payload_.span(); }

  /// The whole tensor (all layers for per-layer stacks).
  [[nodiscard]] std::span<const float> tensor(TensorId id) const noexcept {
    const auto& t = layout_.tensors[id];
    return payload_.span().subspan(t.offset, t.floats);
  }
  /// Layer `layer` of a per-layer stack (rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3).
  [[nodiscard]] std::span<const float> layer(TensorId id, std::size_t layer) const {
    barato::require(layer < layout_.n_layers, "Llama2cCheckpoint::layer: layer ", layer, " >= n_layers ", layout_.n_layers);
    const auto all = tensor(id);
    const std::size_t per = all.size() / layout_.n_layers;
    return all.subspan(layer * per, per);
  }
  /// The classifier [vocab, dim]: wcls when unshared, else the token embedding.
  [[nodiscard]] std::span<const float> classifier() const noexcept {
    return layout_.shared_classifier ? tensor(kTokenEmbedding) : tensor(kWcls);
  }

 private:
  Llama2cHeader header_;
  Llama2cLayout layout_;
  barato::Buffer<float> payload_;  // [total_floats]
};

/// The validated header and layout of a llama2.c checkpoint, weights not read: the header is checked
/// and the file size must equal the size the header implies (a vocab_size of 2^30 or a seq_len of
/// 2^31 − 1 in a small file is a `format_error` naming the field), before anything is allocated.
/// Throws `barato::io_error` when the file cannot be opened, `barato::format_error` for a bad file.
[[nodiscard]] inline Llama2cLayout read_llama2c_layout(const std::filesystem::path& path, Llama2cHeader* header = nullptr) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw barato::io_error(file + ": cannot open llama2.c checkpoint");
  std::error_code ec;
  const auto fsize = std::filesystem::file_size(path, ec);
  if (ec) throw barato::io_error(file + ": cannot determine the file size: " + ec.message());
  const auto size = static_cast<std::size_t>(fsize);

  std::array<char, kLlama2cHeaderBytes> raw{};
  if (size < kLlama2cHeaderBytes)
    throw barato::format_error(file, size, "truncated header: expected " + std::to_string(kLlama2cHeaderBytes) +
                                               " bytes (7 int32), found " + std::to_string(size));
  in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (in.gcount() != static_cast<std::streamsize>(raw.size()))
    throw barato::format_error(file, static_cast<std::size_t>(in.gcount()), "truncated header: read failed");
  Llama2cHeader h;
  std::memcpy(&h, raw.data(), sizeof(h));
  static_assert(sizeof(Llama2cHeader) == kLlama2cHeaderBytes);

  const Llama2cLayout L = llama2c_layout(h, file);
  const std::size_t expected = L.file_bytes();
  if (size < expected) {
    // Name the tensor the file ends inside of.
    const std::size_t have = (size - kLlama2cHeaderBytes) / sizeof(float);
    std::string where = "?";
    for (const auto& t : L.tensors)
      if (t.floats != 0 && have < t.offset + t.floats) {
        const std::size_t per_layer = (t.floats % L.n_layers == 0 && t.floats / L.n_layers > 0) ? t.floats / L.n_layers : t.floats;
        where = std::string(t.name) + " (starts at byte " + std::to_string(kLlama2cHeaderBytes + t.offset * 4) +
                ", float " + std::to_string(have - std::min(have, t.offset)) + " of " + std::to_string(t.floats) +
                (per_layer != t.floats ? ", " + std::to_string(per_layer) + " per layer" : std::string()) + ")";
        // The header field that sizes that tensor beyond the file (a hostile vocab_size or seq_len).
        const std::string_view name = t.name;
        if (name == "token_embedding" || name == "wcls")
          where += ", sized by header field vocab_size (byte 20) = " + std::to_string(h.vocab_size);
        else if (name == "freq_cis")
          where += ", sized by header field seq_len (byte 24) = " + std::to_string(h.seq_len);
        break;
      }
    throw barato::format_error(file, size, "truncated weights: expected a file of " + std::to_string(expected) +
                                               " bytes (from the header), found " + std::to_string(size) + " bytes; the file ends inside " + where);
  }
  if (size > expected)
    throw barato::format_error(file, expected, "trailing bytes: expected a file of " + std::to_string(expected) +
                                                   " bytes (from the header), found " + std::to_string(size) + " (" +
                                                   std::to_string(size - expected) + " extra)");
  if (header != nullptr) *header = h;
  return L;
}

/// A llama2.c checkpoint opened for reading tensor by tensor: `read_llama2c_layout`'s checks on
/// opening, then any tensor (or one layer of a per-layer stack) into the caller's storage, so a loader
/// can hold one matrix at a time instead of the whole payload (`load_llama2c_with`). Throws
/// `barato::io_error` when the file cannot be opened, `barato::format_error` for a bad file (one that
/// shrinks while it is read included).
class Llama2cReader {
 public:
  using TensorId = Llama2cCheckpoint::TensorId;

  explicit Llama2cReader(const std::filesystem::path& path)
      : file_(path.string()), layout_(read_llama2c_layout(path, &header_)), in_(path, std::ios::binary) {
    if (!in_) throw barato::io_error(file_ + ": cannot open llama2.c checkpoint");
  }

  [[nodiscard]] const Llama2cHeader& header() const noexcept { return header_; }
  [[nodiscard]] const Llama2cLayout& layout() const noexcept { return layout_; }
  /// Floats of tensor `id` (all layers of a per-layer stack).
  [[nodiscard]] std::size_t floats(TensorId id) const noexcept { return layout_.tensors[id].floats; }
  /// Floats of one layer of the per-layer stack `id`.
  [[nodiscard]] std::size_t layer_floats(TensorId id) const noexcept { return floats(id) / layout_.n_layers; }

  /// The whole tensor `id` into `out` (`floats(id)` values).
  void read(TensorId id, std::span<float> out) { read_at(layout_.tensors[id].offset, floats(id), out, layout_.tensors[id].name); }
  /// Layer `layer` of the per-layer stack `id` into `out` (`layer_floats(id)` values).
  void read(TensorId id, std::size_t layer, std::span<float> out) {
    barato::require(layer < layout_.n_layers, "Llama2cReader::read: layer ", layer, " >= n_layers ", layout_.n_layers);
    read_at(layout_.tensors[id].offset + layer * layer_floats(id), layer_floats(id), out,
            std::string(layout_.tensors[id].name) + " (layer " + std::to_string(layer) + ")");
  }
  /// All floats after the header into `out` (`layout().total_floats` values).
  void read_payload(std::span<float> out) { read_at(0, layout_.total_floats, out, "the weights"); }

 private:
  /// `n` floats from float `first` of the payload into out (out.size() must be n); `what` names them
  /// in the error.
  void read_at(std::size_t first, std::size_t n, std::span<float> out, const std::string& what) {
    barato::require(out.size() == n, "Llama2cReader: expected a destination of ", n, " floats, got ", out.size());
    const std::size_t start = kLlama2cHeaderBytes + first * sizeof(float);
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(start));
    // In chunks: streamsize is signed and a single huge read is not portable.
    constexpr std::size_t kChunk = std::size_t{1} << 26;
    auto* dst = reinterpret_cast<char*>(out.data());
    const std::size_t bytes = n * sizeof(float);
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t k = std::min(kChunk, bytes - done);
      in_.read(dst + done, static_cast<std::streamsize>(k));
      const auto got = static_cast<std::size_t>(in_.gcount());
      if (got != k)
        throw barato::format_error(file_, start + done + got,
                                   "truncated weights: the file shrank while reading " + what + " (expected " +
                                       std::to_string(bytes) + " bytes, found " + std::to_string(done + got) + ")");
      done += k;
    }
  }

  std::string file_;
  Llama2cHeader header_;
  Llama2cLayout layout_;
  std::ifstream in_;
};

/// Reads a llama2.c checkpoint: `read_llama2c_layout`'s checks, then the weights into one buffer from
/// `mr`. Throws `barato::io_error` when the file cannot be opened, `barato::format_error` for a bad file.
[[nodiscard]] inline Llama2cCheckpoint read_llama2c(const std::filesystem::path& path,
                                                    std::pmr::memory_resource* mr = std::pmr::get_default_resource()) {
  Llama2cReader in(path);
  barato::Buffer<float> payload(in.layout().total_floats, mr);  // [total_floats]
  in.read_payload(payload.span());
  return Llama2cCheckpoint(in.header(), in.layout(), std::move(payload));
}

}  // namespace barato_examples
