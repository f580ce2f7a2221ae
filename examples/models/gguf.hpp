#pragma once
/// \file
/// Reader of GGUF files (the model container of ggml / llama.cpp), versions 2 and 3, little-endian.
///
/// Layout (every integer little-endian):
///   header:       "GGUF" · u32 version · u64 n_tensors · u64 n_kv
///   metadata:     n_kv × (string key · u32 value type · value)
///   tensor infos: n_tensors × (string name · u32 n_dims · u64 ne[n_dims] · u32 ggml type · u64 offset)
///   padding to `general.alignment` (u32 key, default 32), then the data section; each tensor's
///   offset is relative to the data section and a multiple of the alignment.
/// A string is u64 length + bytes (no NUL); an array is u32 element type · u64 count · elements
/// (elements of an array of strings are strings, of an array of arrays are u32 type · u64 count · …).
/// ne0 is the fastest-varying dimension: a matrix [rows, cols] row-major has ne = {cols, rows}.
///
/// The file is mapped read-only (or held in one caller-supplied buffer); tensors and strings are views
/// into it, nothing is copied. Every length, count, dimension, offset and type is checked before it is
/// used or allocated: a bad file throws `barato::format_error` naming the file, the byte offset, the field,
/// expected vs found. What the reader allocates (the parsed metadata and tensor tables) is charged to a
/// budget of the file's size plus 1 MiB (`detail::kGgufTableSlack`) and checked before each
/// allocation, so a hostile count (an array of 2⁶⁰ elements) is an error before anything is reserved.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"

namespace barato_examples {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

// ================================================================================================
// Types
// ================================================================================================

/// Type tag of a GGUF metadata value (the u32 after each key).
enum class GgufValueType : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10, i64 = 11,
  f64 = 12
};

/// Name of a metadata value type ("u32", "string", …; "unknown" for an invalid tag).
[[nodiscard]] inline const char* gguf_value_type_name(GgufValueType t) noexcept {
  static constexpr const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

/// Bytes of one scalar of type `t` (0 for string, array and unknown tags).
[[nodiscard]] inline constexpr std::size_t gguf_scalar_bytes(GgufValueType t) noexcept {
  switch (t) {
    case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
    case GgufValueType::u16: case GgufValueType::i16: return 2;
    case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
    case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
    default: return 0;
  }
}

/// ggml tensor types this reader accepts (the ids are ggml's `enum ggml_type`; their values:
/// models/ggml_dequant.hpp).
enum class GgmlType : std::uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13,
  q6_k = 14, iq4_nl = 20, iq4_xs = 23, bf16 = 30
};

/// ggml's name of type id `id` ("F32", "Q4_K", …), or "" when ggml defines no such id.
[[nodiscard]] inline std::string_view ggml_type_name(std::uint32_t id) noexcept {
  static constexpr std::array<std::string_view, 40> kNames = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "",       "",       "Q5_0",   "Q5_1",    "Q8_0",    "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",    "I16",    "I32",    "I64",     "F64",     "IQ1_M",
      "BF16",    "",       "",        "",      "TQ1_0",  "TQ2_0",  "",       "",        "",        "MXFP4"};
  return id < kNames.size() ? kNames[id] : std::string_view();
}

/// Storage facts of a readable tensor type: elements per block and bytes per block.
struct GgmlTypeTraits {
  std::size_t block = 1;        ///< elements per block (ne0 must be a multiple)
  std::size_t block_bytes = 4;  ///< bytes per block
};

/// Facts of a readable type; `ok` is false for every other id.
[[nodiscard]] inline bool ggml_type_traits(std::uint32_t id, GgmlTypeTraits& out) noexcept {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::f32: out = {1, 4}; return true;
    case GgmlType::f16: out = {1, 2}; return true;
    case GgmlType::bf16: out = {1, 2}; return true;
    case GgmlType::q8_0: out = {32, 34}; return true;   // fp16 d + 32 int8
    case GgmlType::q4_0: out = {32, 18}; return true;   // fp16 d + 16 bytes of nibbles
    case GgmlType::q4_1: out = {32, 20}; return true;   // fp16 d, m + 16 bytes of nibbles
    case GgmlType::q5_0: out = {32, 22}; return true;   // fp16 d + u32 fifth bits + 16 bytes of nibbles
    case GgmlType::q5_1: out = {32, 24}; return true;   // fp16 d, m + u32 fifth bits + nibbles
    case GgmlType::q2_k: out = {256, 84}; return true;  // 16 scale bytes, 64 code bytes, fp16 d, dmin
    case GgmlType::q3_k: out = {256, 110}; return true; // 32 high-bit bytes, 64 code bytes, 12 scale bytes, fp16 d
    case GgmlType::q4_k: out = {256, 144}; return true; // fp16 d, dmin, 12 scale bytes, 128 code bytes
    case GgmlType::q5_k: out = {256, 176}; return true; // fp16 d, dmin, 12 scale bytes, 32 high-bit bytes, 128 code bytes
    case GgmlType::q6_k: out = {256, 210}; return true; // 128 low-nibble bytes, 64 high-bit bytes, 16 int8 scales, fp16 d
    case GgmlType::iq4_nl: out = {32, 18}; return true; // fp16 d + 16 bytes of nibbles (indices into a 16-level table)
    case GgmlType::iq4_xs: out = {256, 136}; return true; // fp16 d, u16 high scale bits, 4 low scale bytes, 128 bytes of nibbles
    default: return false;
  }
}

/// GGUF's default data alignment (when `general.alignment` is absent).
inline constexpr std::uint64_t kGgufDefaultAlignment = 32;
/// ggml's maximum number of tensor dimensions.
inline constexpr std::uint32_t kGgufMaxDims = 4;
/// The magic: the bytes "GGUF".
inline constexpr std::array<char, 4> kGgufMagic = {'G', 'G', 'U', 'F'};

/// True when the file at `path` starts with the GGUF magic (false when it cannot be read).
[[nodiscard]] inline bool is_gguf_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::array<char, 4> m{};
  const auto n = ::read(fd, m.data(), m.size());
  ::close(fd);
  return n == 4 && m == kGgufMagic;
}

/// One metadata value: a view into the file's bytes. Scalars are widened (`as_u64`, `as_i64`,
/// `as_f64`); strings are views; an array of scalars keeps its raw little-endian element bytes
/// (`raw`), an array of strings or arrays has one parsed `items` entry per element.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  std::size_t offset = 0;  ///< byte offset of the value in the file (after its type tag)
  std::uint64_t bits = 0;  ///< scalars: the stored bytes zero-extended (f32/f64 as their bit patterns)
  std::string_view str;    ///< string: its bytes
  GgufValueType elem_type = GgufValueType::u8;  ///< array: element type
  std::uint64_t count = 0;                      ///< array: element count
  std::span<const std::byte> raw;               ///< array of scalars: count · scalar bytes
  std::vector<GgufValue> items;                 ///< array of strings / arrays: the elements

  [[nodiscard]] bool is_integer() const noexcept {
    return gguf_scalar_bytes(type) != 0 && type != GgufValueType::f32 && type != GgufValueType::f64 &&
           type != GgufValueType::boolean;
  }
  [[nodiscard]] bool is_signed() const noexcept {
    return type == GgufValueType::i8 || type == GgufValueType::i16 || type == GgufValueType::i32 || type == GgufValueType::i64;
  }
  /// A signed integer sign-extended (any integer type; unsigned ones as stored).
  [[nodiscard]] std::int64_t as_i64() const noexcept {
    switch (type) {
      case GgufValueType::i8: return static_cast<std::int8_t>(bits);
      case GgufValueType::i16: return static_cast<std::int16_t>(bits);
      case GgufValueType::i32: return static_cast<std::int32_t>(bits);
      default: return static_cast<std::int64_t>(bits);
    }
  }
  /// f32 / f64 as double (integers converted).
  [[nodiscard]] double as_f64() const noexcept {
    if (type == GgufValueType::f32) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (type == GgufValueType::f64) return std::bit_cast<double>(bits);
    return is_signed() ? static_cast<double>(as_i64()) : static_cast<double>(bits);
  }
  /// Element i of an array of scalars, as a value of the element type.
  [[nodiscard]] GgufValue element(std::size_t i) const {
    barato::require<barato::value_error>(type == GgufValueType::array && gguf_scalar_bytes(elem_type) != 0 && i < count,
                                         "GgufValue::element: not an array of scalars or index ", i, " >= count ", count);
    GgufValue v;
    v.type = elem_type;
    const std::size_t n = gguf_scalar_bytes(elem_type);
    v.offset = offset + 12 + i * n;
    std::memcpy(&v.bits, raw.data() + i * n, n);
    return v;
  }
};

/// One tensor: name, ggml type, dims (ne0 first) and its bytes (a view into the file).
struct GgufTensor {
  std::string_view name;
  std::uint32_t type = 0;                  ///< ggml type id (one of GgmlType)
  std::vector<std::uint64_t> ne;           ///< dims, fastest-varying first (1–4 of them)
  std::uint64_t offset = 0;                ///< relative to the data section
  std::size_t info_offset = 0;             ///< file offset of the tensor info (for messages)
  std::uint64_t size_bytes = 0;            ///< bytes of the data (elements / block · block bytes)
  std::span<const std::byte> data;         ///< the tensor's bytes in the file
  [[nodiscard]] std::uint64_t elements() const noexcept {
    std::uint64_t n = 1;
    for (const auto d : ne) n *= d;
    return n;
  }
};

// ================================================================================================
// The file
// ================================================================================================

namespace detail {

/// Bytes of parsed tables a file may cost beyond its own size (small files with many small keys).
inline constexpr std::size_t kGgufTableSlack = std::size_t{1} << 20;

/// A read-only mapping of a whole file (or nothing, for an empty file).
class FileMapping {
 public:
  explicit FileMapping(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw barato::io_error(path.string() + ": cannot open GGUF file");
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw barato::io_error(path.string() + ": cannot stat GGUF file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw barato::io_error(path.string() + ": cannot map GGUF file");
      }
      data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);
  }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Bounds-checked little-endian cursor over the file's bytes; every failure is a format_error.
class GgufCursor {
 public:
  GgufCursor(std::span<const std::byte> b, const std::string& file) : b_(b), file_(file), budget_(b.size() + kGgufTableSlack) {}

  [[nodiscard]] std::size_t pos() const noexcept { return pos_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return b_.size() - pos_; }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return b_; }

  [[noreturn]] void fail(std::size_t at, const std::string& msg) const { throw barato::format_error(file_, at, msg); }

  void need(std::size_t n, const std::string& field) const {
    if (remaining() < n)
      fail(pos_, "truncated " + field + ": expected " + std::to_string(n) + " bytes, found " + std::to_string(remaining()));
  }
  template <class T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> take(std::size_t n, const std::string& field) {
    need(n, field);
    const auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view string(const std::string& field) {
    const std::size_t at = pos_;
    const auto len = read<std::uint64_t>(field + " length");
    if (len > remaining())
      fail(at, field + " length: expected at most the " + std::to_string(remaining()) + " bytes left in the file, found " +
                   std::to_string(len));
    const auto s = take(static_cast<std::size_t>(len), field);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  /// Charges `n` bytes of parsed tables to the budget (the file's size) before they are allocated.
  void charge(std::uint64_t count, std::size_t each, std::size_t at, const std::string& field) {
    std::uint64_t n = 0;
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(each), &n) || n > budget_)
      fail(at, field + ": " + std::to_string(count) + " entries would need more memory than the file's " +
                   std::to_string(b_.size()) + " bytes");
    budget_ -= n;
  }

 private:
  std::span<const std::byte> b_;
  const std::string& file_;
  std::size_t pos_ = 0;
  std::uint64_t budget_;
};

/// Smallest number of file bytes an element of type t occupies (for count checks).
inline std::size_t gguf_min_element_bytes(GgufValueType t) noexcept {
  if (t == GgufValueType::string) return 8;
  if (t == GgufValueType::array) return 12;
  return gguf_scalar_bytes(t);
}

inline bool gguf_valid_value_type(std::uint32_t t) noexcept { return t <= 12; }

inline GgufValue parse_gguf_value(GgufCursor& c, GgufValueType type, std::size_t type_at, const std::string& field,
                                  int depth) {
  GgufValue v;
  v.type = type;
  v.offset = c.pos();
  if (const std::size_t n = gguf_scalar_bytes(type); n != 0) {
    const auto s = c.take(n, field + " (" + gguf_value_type_name(type) + ")");
    std::memcpy(&v.bits, s.data(), n);
    if (type == GgufValueType::boolean && v.bits > 1)
      c.fail(v.offset, field + ": expected a bool (0 or 1), found " + std::to_string(v.bits));
    return v;
  }
  if (type == GgufValueType::string) {
    v.str = c.string(field);
    return v;
  }
  // array
  if (depth > 8) c.fail(type_at, field + ": arrays nested deeper than 8 levels");
  const std::size_t et_at = c.pos();
  const auto et = c.read<std::uint32_t>(field + " element type");
  if (!gguf_valid_value_type(et))
    c.fail(et_at, field + " element type: expected a GGUF value type 0..12, found " + std::to_string(et));
  v.elem_type = static_cast<GgufValueType>(et);
  const std::size_t count_at = c.pos();
  v.count = c.read<std::uint64_t>(field + " count");
  const std::size_t min_bytes = gguf_min_element_bytes(v.elem_type);
  if (v.count > c.remaining() / min_bytes)
    c.fail(count_at, field + " count: " + std::to_string(v.count) + " elements of " + gguf_value_type_name(v.elem_type) +
                         " need at least " + std::to_string(min_bytes) + " bytes each, but only " +
                         std::to_string(c.remaining()) + " bytes are left in the file");
  if (const std::size_t n = gguf_scalar_bytes(v.elem_type); n != 0) {
    v.raw = c.take(static_cast<std::size_t>(v.count) * n, field + " elements");
    if (v.elem_type == GgufValueType::boolean)
      for (std::size_t i = 0; i < v.raw.size(); ++i)
        if (static_cast<unsigned>(v.raw[i]) > 1)
          c.fail(v.offset + 12 + i, field + " element " + std::to_string(i) + ": expected a bool (0 or 1), found " +
                                        std::to_string(static_cast<unsigned>(v.raw[i])));
    return v;
  }
  c.charge(v.count, sizeof(GgufValue), count_at, field + " count");
  v.items.reserve(static_cast<std::size_t>(v.count));
  for (std::uint64_t i = 0; i < v.count; ++i)
    v.items.push_back(parse_gguf_value(c, v.elem_type, et_at, field + "[" + std::to_string(i) + "]", depth + 1));
  return v;
}

}  // namespace detail

/// A parsed GGUF file: version, metadata (by key), tensors (in file order, and by name), alignment
/// and the data section's offset. Owns the mapping (or buffer) every view points into; move-only.
class GgufFile {
 public:
  /// Maps and parses `path`. Throws `barato::io_error` (cannot open) or `barato::format_error`.
  [[nodiscard]] static GgufFile open(const std::filesystem::path& path) {
    auto m = std::make_shared<detail::FileMapping>(path);
    const auto bytes = m->bytes();
    return GgufFile(path.string(), std::move(m), bytes);
  }
  /// Parses `bytes` (kept alive by the returned object); `name` is used in error messages.
  [[nodiscard]] static GgufFile from_bytes(std::string name, std::vector<std::byte> bytes) {
    auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
    const std::span<const std::byte> view(*owner);
    return GgufFile(std::move(name), std::move(owner), view);
  }
  /// Parses `bytes` without copying or owning them: the caller keeps them alive and unchanged for the
  /// returned object's lifetime (a buffer or mapping of its own). `name` is used in error messages.
  [[nodiscard]] static GgufFile from_view(std::string name, std::span<const std::byte> bytes) {
    return GgufFile(std::move(name), nullptr, bytes);
  }

  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
  [[nodiscard]] std::uint64_t alignment() const noexcept { return alignment_; }
  /// File offset of the data section.
  [[nodiscard]] std::size_t data_offset() const noexcept { return data_offset_; }
  /// Metadata in file order (key, value).
  [[nodiscard]] const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const noexcept { return kv_; }
  [[nodiscard]] const std::vector<GgufTensor>& tensors() const noexcept { return tensors_; }

  /// The value of `key`, or nullptr.
  [[nodiscard]] const GgufValue* find(std::string_view key) const noexcept {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
  }
  /// The tensor named `name`, or nullptr.
  [[nodiscard]] const GgufTensor* tensor(std::string_view name) const noexcept {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }

 private:
  GgufFile(std::string file, std::shared_ptr<const void> owner, std::span<const std::byte> bytes)
      : file_(std::move(file)), owner_(std::move(owner)) {
    parse(bytes);
  }

  void parse(std::span<const std::byte> bytes) {
    detail::GgufCursor c(bytes, file_);
    const auto magic = c.take(4, "header (magic)");
    if (std::memcmp(magic.data(), kGgufMagic.data(), 4) != 0) {
      std::string found;
      for (const auto b : magic) found += (std::isprint(static_cast<int>(b)) != 0) ? static_cast<char>(b) : '?';
      c.fail(0, "magic: expected \"GGUF\", found \"" + found + "\"");
    }
    version_ = c.read<std::uint32_t>("header (version)");
    if (version_ != 2 && version_ != 3) {
      const std::uint32_t swapped = __builtin_bswap32(version_);
      const std::string hint = swapped == 2 || swapped == 3
                                   ? " (a big-endian GGUF file; only little-endian files are read)"
                                   : (version_ == 1 ? " (GGUF v1 used 32-bit counts and is not read)" : "");
      c.fail(4, "version: expected 2 or 3, found " + std::to_string(version_) + hint);
    }
    const std::size_t nt_at = c.pos();
    const auto n_tensors = c.read<std::uint64_t>("header (n_tensors)");
    const std::size_t nkv_at = c.pos();
    const auto n_kv = c.read<std::uint64_t>("header (n_kv)");
    // Each key/value needs ≥ 8 (key length) + 4 (type) + 1 bytes; each tensor info ≥ 8 + 4 + 8 + 4 + 8.
    if (n_kv > c.remaining() / 13)
      c.fail(nkv_at, "n_kv: " + std::to_string(n_kv) + " key/value pairs cannot fit in the " + std::to_string(c.remaining()) +
                         " bytes left");
    if (n_tensors > c.remaining() / 32)
      c.fail(nt_at, "n_tensors: " + std::to_string(n_tensors) + " tensor infos cannot fit in the " +
                        std::to_string(c.remaining()) + " bytes left");
    c.charge(n_kv, sizeof(std::pair<std::string_view, GgufValue>) + 64, nkv_at, "n_kv");
    c.charge(n_tensors, sizeof(GgufTensor) + 64 + 32, nt_at, "n_tensors");

    kv_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      const std::size_t key_at = c.pos();
      const std::string field = "metadata " + std::to_string(i);
      const std::string_view key = c.string(field + " key");
      if (kv_index_.contains(key)) c.fail(key_at, field + ": duplicate key \"" + std::string(key) + "\"");
      const std::size_t type_at = c.pos();
      const auto t = c.read<std::uint32_t>(field + " (\"" + std::string(key) + "\") type");
      if (!detail::gguf_valid_value_type(t))
        c.fail(type_at, "metadata \"" + std::string(key) + "\" type: expected a GGUF value type 0..12, found " + std::to_string(t));
      kv_.emplace_back(key, detail::parse_gguf_value(c, static_cast<GgufValueType>(t), type_at,
                                                     "metadata \"" + std::string(key) + "\"", 0));
      kv_index_.emplace(key, kv_.size() - 1);
    }

    if (const GgufValue* a = find("general.alignment")) {
      if (a->type != GgufValueType::u32)
        c.fail(a->offset, std::string("metadata \"general.alignment\": expected type u32, found ") + gguf_value_type_name(a->type));
      if (a->bits == 0 || (a->bits & (a->bits - 1)) != 0)
        c.fail(a->offset, "metadata \"general.alignment\": expected a nonzero power of two, found " + std::to_string(a->bits));
      alignment_ = a->bits;
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensor t;
      t.info_offset = c.pos();
      const std::string field = "tensor info " + std::to_string(i);
      t.name = c.string(field + " name");
      const std::string tn = field + " (\"" + std::string(t.name) + "\")";
      if (tensor_index_.contains(t.name)) c.fail(t.info_offset, tn + ": duplicate tensor name");
      const std::size_t nd_at = c.pos();
      const auto n_dims = c.read<std::uint32_t>(tn + " n_dims");
      if (n_dims == 0 || n_dims > kGgufMaxDims)
        c.fail(nd_at, tn + " n_dims: expected 1.." + std::to_string(kGgufMaxDims) + ", found " + std::to_string(n_dims));
      std::uint64_t elements = 1;
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        const std::size_t d_at = c.pos();
        const auto ne = c.read<std::uint64_t>(tn + " ne[" + std::to_string(d) + "]");
        if (ne == 0) c.fail(d_at, tn + " ne[" + std::to_string(d) + "]: expected >= 1, found 0");
        if (__builtin_mul_overflow(elements, ne, &elements) || elements > (std::uint64_t{1} << 62))
          c.fail(d_at, tn + " ne[" + std::to_string(d) + "] = " + std::to_string(ne) + ": the element count overflows");
        t.ne.push_back(ne);
      }
      const std::size_t type_at = c.pos();
      t.type = c.read<std::uint32_t>(tn + " type");
      GgmlTypeTraits tr;
      if (!ggml_type_traits(t.type, tr)) {
        const auto known = ggml_type_name(t.type);
        c.fail(type_at, tn + " type: expected F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL or IQ4_XS, found " +
                            (known.empty() ? "unknown type id " + std::to_string(t.type)
                                           : std::string(known) + " (ggml type " + std::to_string(t.type) + ")"));
      }
      if (t.ne[0] % tr.block != 0)
        c.fail(nd_at + 4, tn + " ne[0]: expected a multiple of " + std::to_string(tr.block) + " for " +
                              std::string(ggml_type_name(t.type)) + ", found " + std::to_string(t.ne[0]));
      const std::size_t off_at = c.pos();
      t.offset = c.read<std::uint64_t>(tn + " offset");
      if (t.offset % alignment_ != 0)
        c.fail(off_at, tn + " offset: expected a multiple of the alignment " + std::to_string(alignment_) + ", found " +
                           std::to_string(t.offset));
      // elements ≤ 2^62 and block_bytes ≤ 34 keep this product in range.
      const std::uint64_t size = elements / tr.block * tr.block_bytes;
      t.size_bytes = size;  // t.data is placed below, once the data section is known
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
      tensor_off_at_.push_back(off_at);
    }

    const std::size_t header_end = c.pos();
    const std::uint64_t data = (header_end + alignment_ - 1) / alignment_ * alignment_;
    if (!tensors_.empty() && data > bytes.size())
      c.fail(header_end, "data section: expected it to start at byte " + std::to_string(data) + " (aligned to " +
                             std::to_string(alignment_) + "), but the file has " + std::to_string(bytes.size()) + " bytes");
    data_offset_ = static_cast<std::size_t>(std::min<std::uint64_t>(data, bytes.size()));
    const std::uint64_t data_size = bytes.size() - data_offset_;

    // Place every tensor; then check that no two overlap (sorted by offset).
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      GgufTensor& t = tensors_[i];
      const std::uint64_t size = t.size_bytes;
      if (t.offset > data_size || size > data_size - t.offset)
        c.fail(tensor_off_at_[i], "tensor \"" + std::string(t.name) + "\": its " + std::to_string(size) +
                                      " bytes at data offset " + std::to_string(t.offset) + " (file byte " +
                                      std::to_string(data_offset_ + t.offset) + ") end past the end of the file (" +
                                      std::to_string(bytes.size()) + " bytes)");
      t.data = bytes.subspan(data_offset_ + static_cast<std::size_t>(t.offset), static_cast<std::size_t>(size));
      order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& p = tensors_[order[k - 1]];
      const GgufTensor& t = tensors_[order[k]];
      if (t.offset < p.offset + p.data.size())
        c.fail(tensor_off_at_[order[k]], "tensor \"" + std::string(t.name) + "\" at data offset " + std::to_string(t.offset) +
                                             " overlaps tensor \"" + std::string(p.name) + "\" (data offsets " +
                                             std::to_string(p.offset) + ".." + std::to_string(p.offset + p.data.size()) + ")");
    }
  }

  std::string file_;
  std::shared_ptr<const void> owner_;  // the mapping or buffer all views point into
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = kGgufDefaultAlignment;
  std::size_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GgufValue>> kv_;
  std::map<std::string_view, std::size_t, std::less<>> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::vector<std::size_t> tensor_off_at_;  // file offset of each tensor's offset field
  std::map<std::string_view, std::size_t, std::less<>> tensor_index_;
};

}  // namespace barato_examples
