#pragma once
/// \file
/// Loader for llama2.c checkpoints, in the three layouts llama2.c's `export.py` writes:
///  - version 0 (legacy, Karpathy's `run.c`; the tinyllamas files): a 7-int32 header
///      dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
///    followed by fp32 tensors, every matrix row-major [out][in]:
///      token_embedding [vocab, dim] · rms_att [L, dim] · wq [L, dim, dim] · wk [L, kv_dim, dim] ·
///      wv [L, kv_dim, dim] · wo [L, dim, dim] · rms_ffn [L, dim] · w1 [L, hidden, dim] ·
///      w2 [L, dim, hidden] · w3 [L, hidden, dim] · rms_final [dim] ·
///      legacy freq_cis real + imag [seq_len, head_size/2] each (unused) · wcls [vocab, dim] only when
///      vocab_size < 0 (an unshared classifier);
///  - version 1 (`--version 1`): a 256-byte header — uint32 magic 0x616b3432 ("ak42"), int32 version,
///    the same 7 int32 (vocab_size positive), uint8 shared_classifier, zero padding — then fp32
///    tensors in another order, without freq_cis: rms_att · rms_ffn · rms_final · token_embedding ·
///    wq · wk · wv · wo · w1 · w2 · w3 · wcls (unshared only);
///  - version 2 (`--version 2`, read by `runq.c`): the version-1 header plus an int32 group_size at
///    byte 37; the norm gains in fp32 (rms_att · rms_ffn · rms_final), then each matrix of
///    token_embedding · wq · wk · wv · wo · w1 · w2 · w3 · wcls (unshared only), layer by layer, as
///    its int8 values followed by its fp32 scales, one per group_size consecutive values of the
///    flattened matrix (x = q · scale; groups may cross rows when a row is not a multiple of the
///    group). `Llama2cReader::read` dequantizes them exactly (q · scale in fp32, as `runq.c`'s
///    `dequantize`); `read_int8` returns the codes and scales as stored.
/// with head_size = dim / n_heads and kv_dim = n_kv_heads · head_size. All little-endian.
///
/// Every read is length-checked: a bad file throws `barato::format_error` naming the file, the byte
/// offset and what was expected vs found (truncated header or weights, a size that disagrees with the
/// header, zero/negative dims, n_heads not dividing dim, n_kv_heads not dividing n_heads, an unknown
/// version, a bad shared_classifier flag or group size, trailing bytes). A file that cannot be opened
/// throws `barato::io_error`.

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
#include <vector>

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

/// Bytes of the version-0 header (the 7 int32).
inline constexpr std::size_t kLlama2cHeaderBytes = 7 * sizeof(std::int32_t);
/// The magic of export.py's versioned files ("ak42" as a little-endian uint32) and their header size.
inline constexpr std::uint32_t kLlama2cMagic = 0x616b3432;
inline constexpr std::size_t kLlama2cVersionedHeaderBytes = 256;

/// Where each tensor sits, in two coordinates: `offset` / `floats` place it in the fp32 payload that
/// `read_llama2c` returns (version 0's order for every version; freq_cis is empty after version 0),
/// `byte_offset` / `layer_bytes` in the file. Built from a validated header by `llama2c_layout`;
/// per-layer tensors are [n_layers, ...] stacks.
struct Llama2cLayout {
  std::size_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab = 0, seq_len = 0;
  std::size_t head_size = 0, kv_dim = 0;
  bool shared_classifier = true;
  int version = 0;                                   ///< export.py's version: 0, 1 or 2
  std::size_t header_bytes = kLlama2cHeaderBytes;    ///< 28, or 256 for versions 1 and 2
  std::size_t group_size = 0;                        ///< version 2: values per int8 scale; else 0
  struct Tensor {
    const char* name = "";
    std::size_t offset = 0;       ///< first float in the fp32 payload
    std::size_t floats = 0;       ///< total floats (all layers)
    std::size_t layers = 1;       ///< n_layers for per-layer stacks, else 1
    std::size_t byte_offset = 0;  ///< the file position of its first layer
    std::size_t layer_bytes = 0;  ///< bytes one layer takes in the file (int8 values + scales when `int8`)
    bool int8 = false;            ///< version 2 matrices: int8 values, then fp32 scales per group
    [[nodiscard]] std::size_t layer_floats() const noexcept { return floats / layers; }
  };
  static constexpr std::size_t kTensors = 13;
  /// token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls.
  std::array<Tensor, kTensors> tensors{};
  std::size_t total_floats = 0;  ///< payload floats
  std::size_t bytes = 0;         ///< the file size the header implies
  /// Expected file size in bytes.
  [[nodiscard]] std::size_t file_bytes() const noexcept { return bytes; }
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

/// What a versioned header adds to the 7 int32 (export.py versions 1 and 2).
struct Llama2cVersion {
  int version = 0;              ///< 0: legacy (no magic); 1: fp32; 2: int8 groups
  bool shared_classifier = true;  ///< versions 1 and 2 (version 0 uses vocab_size's sign)
  std::size_t group_size = 0;   ///< version 2
};

/// Validates `h` (read from `file`; `v` says which layout follows it) and computes the tensor layout.
/// Throws `format_error` with the byte offset of the offending header field: dims ≤ 0 (vocab_size 0;
/// negative after version 0), n_heads not dividing dim, n_kv_heads not dividing n_heads, an odd head
/// size (RoPE rotates pairs), a version-2 matrix whose size is not a multiple of the group, sizes
/// overflowing size_t.
[[nodiscard]] inline Llama2cLayout llama2c_layout(const Llama2cHeader& h, const std::string& file, Llama2cVersion v = {}) {
  using barato::format_error;
  const std::size_t base = v.version == 0 ? 0 : 8;  // the 7 int32 follow the magic and version
  if (v.version == 2 && v.group_size == 0) throw format_error(file, 37, "header field group_size: expected > 0, found 0");
  const auto positive = [&](std::int32_t x, std::size_t field, const char* name) {
    if (x <= 0)
      throw format_error(file, base + field * 4, std::string("header field ") + name + ": expected > 0, found " + std::to_string(x));
  };
  positive(h.dim, 0, "dim");
  positive(h.hidden_dim, 1, "hidden_dim");
  positive(h.n_layers, 2, "n_layers");
  positive(h.n_heads, 3, "n_heads");
  positive(h.n_kv_heads, 4, "n_kv_heads");
  if (v.version != 0) positive(h.vocab_size, 5, "vocab_size");
  if (h.vocab_size == 0 || h.vocab_size == std::numeric_limits<std::int32_t>::min())
    throw format_error(file, 20, "header field vocab_size: expected a nonzero value (negative = unshared classifier), found " +
                                     std::to_string(h.vocab_size));
  positive(h.seq_len, 6, "seq_len");
  if (h.dim % h.n_heads != 0)
    throw format_error(file, base + 12, "header field n_heads: expected a divisor of dim (" + std::to_string(h.dim) + "), found " +
                                            std::to_string(h.n_heads));
  if (h.n_heads % h.n_kv_heads != 0)
    throw format_error(file, base + 16, "header field n_kv_heads: expected a divisor of n_heads (" + std::to_string(h.n_heads) +
                                            "), found " + std::to_string(h.n_kv_heads));
  if ((h.dim / h.n_heads) % 2 != 0)
    throw format_error(file, base + 12, "header: head size dim/n_heads = " + std::to_string(h.dim / h.n_heads) +
                                            ", expected an even number (RoPE rotates pairs)");

  Llama2cLayout L;
  L.dim = static_cast<std::size_t>(h.dim);
  L.hidden_dim = static_cast<std::size_t>(h.hidden_dim);
  L.n_layers = static_cast<std::size_t>(h.n_layers);
  L.n_heads = static_cast<std::size_t>(h.n_heads);
  L.n_kv_heads = static_cast<std::size_t>(h.n_kv_heads);
  L.shared_classifier = v.version == 0 ? h.vocab_size > 0 : v.shared_classifier;
  L.vocab = static_cast<std::size_t>(h.vocab_size > 0 ? h.vocab_size : -h.vocab_size);
  L.seq_len = static_cast<std::size_t>(h.seq_len);
  L.head_size = L.dim / L.n_heads;
  L.kv_dim = L.n_kv_heads * L.head_size;
  L.version = v.version;
  L.header_bytes = v.version == 0 ? kLlama2cHeaderBytes : kLlama2cVersionedHeaderBytes;
  L.group_size = v.version == 2 ? v.group_size : 0;

  const auto mul = [&](std::size_t a, std::size_t b) { return detail::checked_mul(a, b, file); };
  const auto add = [&](std::size_t a, std::size_t b) { return detail::checked_add(a, b, file); };
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
      v.version == 0 ? mul(L.seq_len, L.head_size) : 0,  // freq_cis real + imag: 2 · seq_len · head_size/2
      L.shared_classifier ? 0 : mul(L.vocab, L.dim),     // wcls
  };
  static constexpr const char* kNames[Llama2cLayout::kTensors] = {
      "token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final", "freq_cis", "wcls"};
  using Id = std::size_t;
  constexpr Id kEmb = 0, kRmsAtt = 1, kRmsFfn = 6, kRmsFinal = 10, kWcls = 12;
  std::size_t off = 0;
  for (Id i = 0; i < Llama2cLayout::kTensors; ++i) {
    const bool stacked = i != kEmb && i != kRmsFinal && i != 11 && i != kWcls;
    L.tensors[i] = {.name = kNames[i], .offset = off, .floats = sizes[i], .layers = stacked ? L.n_layers : 1};
    off = add(off, sizes[i]);
  }
  L.total_floats = off;
  // The file: tensors in the version's order, each layer `layer_bytes` long.
  static constexpr Id kOrder0[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  static constexpr Id kOrder12[] = {1, 6, 10, 0, 2, 3, 4, 5, 7, 8, 9, 12};
  const std::span<const Id> order = v.version == 0 ? std::span<const Id>(kOrder0) : std::span<const Id>(kOrder12);
  std::size_t pos = L.header_bytes;
  for (const Id i : order) {
    auto& t = L.tensors[i];
    const std::size_t per = t.layer_floats();
    t.int8 = v.version == 2 && i != kRmsAtt && i != kRmsFfn && i != kRmsFinal;
    if (t.int8 && per % L.group_size != 0)
      throw format_error(file, 37, "header field group_size: " + std::to_string(L.group_size) + " does not divide the " +
                                       std::to_string(per) + " values of " + t.name + (t.layers > 1 ? " (per layer)" : ""));
    t.layer_bytes = t.int8 ? add(per, mul(per / L.group_size, sizeof(float))) : mul(per, sizeof(float));
    t.byte_offset = pos;
    pos = add(pos, mul(t.layers, t.layer_bytes));
  }
  L.bytes = pos;
  return L;
}

/// One version-2 matrix as the file stores it: int8 values and an fp32 scale per `group` consecutive
/// values of the flattened matrix (value i = q[i] · scales[i / group]).
struct Llama2cInt8Matrix {
  std::span<const std::int8_t> q;
  std::span<const float> scales;
  std::size_t group = 0;
};

/// The row groups a version-2 matrix of `cols` columns keeps its codes in when loaded in its own
/// precision (`llama2c_int8_linear`): 32 or 16 when each row holds whole groups of `group` values and
/// `group` is a multiple of it (each scale then repeats over group / 32 or group / 16 row groups); 0
/// when the file's groups cross rows (the matrix is then loaded as exact fp32 values).
[[nodiscard]] constexpr std::size_t llama2c_row_group(std::size_t cols, std::size_t group) noexcept {
  if (group == 0 || cols % group != 0) return 0;
  return group % 32 == 0 ? 32 : (group % 16 == 0 ? 16 : 0);
}

/// Bytes a `rows` × `cols` version-2 matrix takes loaded in its own precision: one byte per value
/// and an fp32 scale per row group, or fp32 values when its groups cross rows (`llama2c_row_group`).
[[nodiscard]] constexpr std::size_t llama2c_int8_loaded_bytes(std::size_t rows, std::size_t cols, std::size_t group) noexcept {
  const std::size_t sub = llama2c_row_group(cols, group);
  return sub == 0 ? 4 * rows * cols : rows * cols + 4 * (rows * cols / sub);
}

/// A loaded llama2.c checkpoint: the header, its layout and the whole fp32 payload (one buffer from
/// the caller's memory resource; version 0's tensor order whatever the file's version, version-2
/// matrices dequantized). Tensor accessors return views into the payload.
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

/// The validated header and layout of a llama2.c checkpoint of any version (told apart by the
/// "ak42" magic), weights not read: the header is checked and the file size must equal the size the
/// header implies (a vocab_size of 2^30 or a seq_len of 2^31 − 1 in a small file is a `format_error`
/// naming the field), before anything is allocated. Throws `barato::io_error` when the file cannot
/// be opened, `barato::format_error` for a bad file.
[[nodiscard]] inline Llama2cLayout read_llama2c_layout(const std::filesystem::path& path, Llama2cHeader* header = nullptr) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw barato::io_error(file + ": cannot open llama2.c checkpoint");
  std::error_code ec;
  const auto fsize = std::filesystem::file_size(path, ec);
  if (ec) throw barato::io_error(file + ": cannot determine the file size: " + ec.message());
  const auto size = static_cast<std::size_t>(fsize);

  std::array<char, kLlama2cVersionedHeaderBytes> raw{};
  in.read(raw.data(), static_cast<std::streamsize>(std::min(size, raw.size())));
  const auto got = static_cast<std::size_t>(in.gcount());
  if (got != std::min(size, raw.size())) throw barato::format_error(file, got, "truncated header: read failed");
  std::uint32_t magic = 0;
  if (got >= 4) std::memcpy(&magic, raw.data(), 4);
  Llama2cVersion v;
  Llama2cHeader h;
  static_assert(sizeof(Llama2cHeader) == kLlama2cHeaderBytes);
  if (magic == kLlama2cMagic) {
    if (size < kLlama2cVersionedHeaderBytes)
      throw barato::format_error(file, size, "truncated header: expected " + std::to_string(kLlama2cVersionedHeaderBytes) +
                                                 " bytes (llama2.c's \"ak42\" header), found " + std::to_string(size));
    std::int32_t version = 0;
    std::memcpy(&version, raw.data() + 4, 4);
    if (version != 1 && version != 2)
      throw barato::format_error(file, 4, "header field version: expected 1 or 2 (export.py's fp32 and int8 exports), found " +
                                              std::to_string(version));
    v.version = version;
    std::memcpy(&h, raw.data() + 8, sizeof(h));
    const auto shared = static_cast<unsigned char>(raw[36]);
    if (shared > 1)
      throw barato::format_error(file, 36, "header field shared_classifier: expected 0 or 1, found " + std::to_string(shared));
    v.shared_classifier = shared == 1;
    if (version == 2) {
      std::int32_t gs = 0;
      std::memcpy(&gs, raw.data() + 37, 4);
      if (gs <= 0) throw barato::format_error(file, 37, "header field group_size: expected > 0, found " + std::to_string(gs));
      v.group_size = static_cast<std::size_t>(gs);
    }
  } else {
    if (size < kLlama2cHeaderBytes)
      throw barato::format_error(file, size, "truncated header: expected " + std::to_string(kLlama2cHeaderBytes) +
                                                 " bytes (7 int32), found " + std::to_string(size));
    std::memcpy(&h, raw.data(), sizeof(h));
  }

  const Llama2cLayout L = llama2c_layout(h, file, v);
  const std::size_t expected = L.file_bytes();
  if (size < expected) {
    // Name the tensor the file ends inside of.
    std::string where = "?";
    for (const auto& t : L.tensors)
      if (t.floats != 0 && size < t.byte_offset + t.layers * t.layer_bytes) {
        const std::size_t into = size - std::min(size, t.byte_offset);
        where = std::string(t.name) + " (starts at byte " + std::to_string(t.byte_offset) + ", " + std::to_string(into) + " of its " +
                std::to_string(t.layers * t.layer_bytes) + " bytes" +
                (t.layers > 1 ? ", " + std::to_string(t.layer_bytes) + " per layer" : std::string()) + ")";
        // The header field that sizes that tensor beyond the file (a hostile vocab_size or seq_len).
        const std::string_view name = t.name;
        const std::size_t base = L.version == 0 ? 0 : 8;
        if (name == "token_embedding" || name == "wcls")
          where += ", sized by header field vocab_size (byte " + std::to_string(base + 20) + ") = " + std::to_string(h.vocab_size);
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
/// can hold one matrix at a time instead of the whole payload (`load_llama2c_with`). Version-2 int8
/// matrices are dequantized exactly by `read` (q · scale) or returned as stored by `read_int8`.
/// Throws `barato::io_error` when the file cannot be opened, `barato::format_error` for a bad file
/// (one that shrinks while it is read included).
class Llama2cReader {
 public:
  using TensorId = Llama2cCheckpoint::TensorId;

  explicit Llama2cReader(const std::filesystem::path& path)
      : file_(path.string()), layout_(read_llama2c_layout(path, &header_)), in_(path, std::ios::binary) {
    if (!in_) throw barato::io_error(file_ + ": cannot open llama2.c checkpoint");
  }
  /// Opens `path` as the file `read_llama2c_layout` described earlier (`layout`, `header`), without
  /// reading its header again: a later reader of one checked file (a file that has shrunk since is
  /// still a `format_error` when a read comes up short).
  Llama2cReader(const std::filesystem::path& path, const Llama2cLayout& layout, const Llama2cHeader& header)
      : file_(path.string()), header_(header), layout_(layout), in_(path, std::ios::binary) {
    if (!in_) throw barato::io_error(file_ + ": cannot open llama2.c checkpoint");
  }

  [[nodiscard]] const Llama2cHeader& header() const noexcept { return header_; }
  [[nodiscard]] const Llama2cLayout& layout() const noexcept { return layout_; }
  /// Floats of tensor `id` (all layers of a per-layer stack).
  [[nodiscard]] std::size_t floats(TensorId id) const noexcept { return layout_.tensors[id].floats; }
  /// Floats of one layer of the per-layer stack `id`.
  [[nodiscard]] std::size_t layer_floats(TensorId id) const noexcept { return floats(id) / layout_.n_layers; }
  /// True when the file stores `id` as int8 values with fp32 group scales (version 2 matrices).
  [[nodiscard]] bool is_int8(TensorId id) const noexcept { return layout_.tensors[id].int8; }

  /// The whole tensor `id` into `out` (`floats(id)` values).
  void read(TensorId id, std::span<float> out) {
    const auto& t = layout_.tensors[id];
    barato::require(out.size() == t.floats, "Llama2cReader: expected a destination of ", t.floats, " floats, got ", out.size());
    for (std::size_t l = 0; l < t.layers; ++l) read_layer(t, l, out.subspan(l * t.layer_floats(), t.layer_floats()));
  }
  /// Layer `layer` of the per-layer stack `id` into `out` (`layer_floats(id)` values).
  void read(TensorId id, std::size_t layer, std::span<float> out) {
    barato::require(layer < layout_.n_layers, "Llama2cReader::read: layer ", layer, " >= n_layers ", layout_.n_layers);
    read_layer(layout_.tensors[id], layer, out);
  }
  /// The int8 values and fp32 scales (one per `layout().group_size` values) of layer `layer` of the
  /// version-2 matrix `id` as stored (`layer` 0 for the embedding and wcls). `shape_error` for a
  /// tensor the file does not store as int8 or destinations of the wrong size.
  void read_int8(TensorId id, std::size_t layer, std::span<std::int8_t> q, std::span<float> scales) {
    const auto& t = layout_.tensors[id];
    barato::require(t.int8, "Llama2cReader::read_int8: ", t.name, " is not stored as int8 in ", file_);
    barato::require(layer < t.layers, "Llama2cReader::read_int8: layer ", layer, " >= ", t.layers);
    const std::size_t n = t.layer_floats();
    barato::require(q.size() == n && scales.size() == n / layout_.group_size, "Llama2cReader::read_int8: expected ", n,
                    " values and ", n / layout_.group_size, " scales, got ", q.size(), " and ", scales.size());
    const std::size_t at = t.byte_offset + layer * t.layer_bytes;
    const std::string what = std::string(t.name) + (t.layers > 1 ? " (layer " + std::to_string(layer) + ")" : std::string());
    read_bytes(at, {reinterpret_cast<char*>(q.data()), n}, what);
    read_bytes(at + n, {reinterpret_cast<char*>(scales.data()), scales.size_bytes()}, what + " scales");
  }
  /// All tensors into `out` (`layout().total_floats` values, each at its `offset`).
  void read_payload(std::span<float> out) {
    barato::require(out.size() == layout_.total_floats, "Llama2cReader: expected a destination of ", layout_.total_floats,
                    " floats, got ", out.size());
    for (std::size_t i = 0; i < Llama2cLayout::kTensors; ++i) {
      const auto& t = layout_.tensors[i];
      read(static_cast<TensorId>(i), out.subspan(t.offset, t.floats));
    }
  }

 private:
  /// Layer `l` of tensor `t` into out (`t.layer_floats()` values), dequantized when stored as int8.
  void read_layer(const Llama2cLayout::Tensor& t, std::size_t l, std::span<float> out) {
    const std::size_t n = t.layer_floats();
    barato::require(out.size() == n, "Llama2cReader: expected a destination of ", n, " floats, got ", out.size());
    if (n == 0) return;
    const std::string what = std::string(t.name) + (t.layers > 1 ? " (layer " + std::to_string(l) + ")" : std::string());
    const std::size_t at = t.byte_offset + l * t.layer_bytes;
    if (!t.int8) {
      read_bytes(at, {reinterpret_cast<char*>(out.data()), out.size_bytes()}, what);
      return;
    }
    // int8 values into the front of `out` (read back to front below, so none is overwritten before
    // it is used), the scales into a small buffer.
    const std::size_t gs = layout_.group_size;
    auto* q = reinterpret_cast<std::int8_t*>(out.data());
    read_bytes(at, {reinterpret_cast<char*>(q), n}, what);
    std::vector<float> s(n / gs);
    read_bytes(at + n, {reinterpret_cast<char*>(s.data()), s.size() * sizeof(float)}, what + " scales");
    for (std::size_t i = n; i-- > 0;) {
      std::int8_t qi = 0;
      std::memcpy(&qi, reinterpret_cast<const char*>(out.data()) + i, 1);
      out[i] = static_cast<float>(qi) * s[i / gs];
    }
  }

  /// `dst.size()` bytes from file position `start`; `what` names them in the error.
  void read_bytes(std::size_t start, std::span<char> dst, const std::string& what) {
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(start));
    // In chunks: streamsize is signed and a single huge read is not portable.
    constexpr std::size_t kChunk = std::size_t{1} << 26;
    for (std::size_t done = 0; done < dst.size();) {
      const std::size_t k = std::min(kChunk, dst.size() - done);
      in_.read(dst.data() + done, static_cast<std::streamsize>(k));
      const auto got = static_cast<std::size_t>(in_.gcount());
      if (got != k)
        throw barato::format_error(file_, start + done + got,
                                   "truncated weights: the file shrank while reading " + what + " (expected " +
                                       std::to_string(dst.size()) + " bytes, found " + std::to_string(done + got) + ")");
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
