#pragma once
/// \file
/// Writer of GGUF v3 files (the layout is described in models/gguf.hpp): metadata of every value
/// type (scalars, strings, arrays of scalars / strings / arrays), tensor infos, padding to the
/// alignment (`general.alignment` when set, else 32) and the tensor data.
///
/// ```cpp
/// GgufWriter w;
/// w.add("general.architecture", GgufWriteValue::string("llama"));
/// w.add("llama.block_count", GgufWriteValue::u32(5));
/// w.add_tensor("token_embd.weight", GgmlType::f32, {64, 512}, bytes);   // ne0 first
/// w.write("out.gguf");                                                  // or w.bytes()
/// ```
/// A value is serialised when it is made (`GgufWriteValue` holds its type tag and payload bytes), so
/// nested arrays are arrays of values of one type. Tensor bytes are copied into the writer.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "barato/core/error.hpp"
#include "models/gguf.hpp"

namespace barato_examples {

/// One serialised metadata value: its type tag and its payload bytes (what follows the tag).
class GgufWriteValue {
 public:
  [[nodiscard]] static GgufWriteValue u8(std::uint8_t v) { return scalar(GgufValueType::u8, v); }
  [[nodiscard]] static GgufWriteValue i8(std::int8_t v) { return scalar(GgufValueType::i8, v); }
  [[nodiscard]] static GgufWriteValue u16(std::uint16_t v) { return scalar(GgufValueType::u16, v); }
  [[nodiscard]] static GgufWriteValue i16(std::int16_t v) { return scalar(GgufValueType::i16, v); }
  [[nodiscard]] static GgufWriteValue u32(std::uint32_t v) { return scalar(GgufValueType::u32, v); }
  [[nodiscard]] static GgufWriteValue i32(std::int32_t v) { return scalar(GgufValueType::i32, v); }
  [[nodiscard]] static GgufWriteValue u64(std::uint64_t v) { return scalar(GgufValueType::u64, v); }
  [[nodiscard]] static GgufWriteValue i64(std::int64_t v) { return scalar(GgufValueType::i64, v); }
  [[nodiscard]] static GgufWriteValue f32(float v) { return scalar(GgufValueType::f32, v); }
  [[nodiscard]] static GgufWriteValue f64(double v) { return scalar(GgufValueType::f64, v); }
  [[nodiscard]] static GgufWriteValue boolean(bool v) { return scalar(GgufValueType::boolean, static_cast<std::uint8_t>(v ? 1 : 0)); }
  [[nodiscard]] static GgufWriteValue string(std::string_view s) {
    GgufWriteValue v(GgufValueType::string);
    v.put_string(s);
    return v;
  }
  /// An array of `elem_type`; every item must have that type (throws `value_error` otherwise).
  [[nodiscard]] static GgufWriteValue array(GgufValueType elem_type, std::span<const GgufWriteValue> items) {
    GgufWriteValue v(GgufValueType::array);
    v.put(static_cast<std::uint32_t>(elem_type));
    v.put(static_cast<std::uint64_t>(items.size()));
    for (std::size_t i = 0; i < items.size(); ++i) {
      barato::require<barato::value_error>(items[i].type_ == elem_type, "GgufWriteValue::array: item ", i, " has type ",
                                           gguf_value_type_name(items[i].type_), ", expected ",
                                           gguf_value_type_name(elem_type));
      v.bytes_.insert(v.bytes_.end(), items[i].bytes_.begin(), items[i].bytes_.end());
    }
    return v;
  }
  [[nodiscard]] static GgufWriteValue array(GgufValueType elem_type, std::initializer_list<GgufWriteValue> items) {
    return array(elem_type, std::span<const GgufWriteValue>(items.begin(), items.size()));
  }
  /// An array of strings.
  [[nodiscard]] static GgufWriteValue strings(std::span<const std::string> items) {
    GgufWriteValue v(GgufValueType::array);
    v.put(static_cast<std::uint32_t>(GgufValueType::string));
    v.put(static_cast<std::uint64_t>(items.size()));
    for (const auto& s : items) v.put_string(s);
    return v;
  }
  /// An array of arithmetic scalars stored as `elem_type` (T must have that type's size).
  template <class T>
  [[nodiscard]] static GgufWriteValue numbers(GgufValueType elem_type, std::span<const T> items) {
    barato::require<barato::value_error>(gguf_scalar_bytes(elem_type) == sizeof(T), "GgufWriteValue::numbers: ",
                                         gguf_value_type_name(elem_type), " elements are not ", sizeof(T), " bytes");
    GgufWriteValue v(GgufValueType::array);
    v.put(static_cast<std::uint32_t>(elem_type));
    v.put(static_cast<std::uint64_t>(items.size()));
    for (const T& x : items) v.put(x);
    return v;
  }

  [[nodiscard]] GgufValueType type() const noexcept { return type_; }
  /// The payload (what follows the type tag in the file).
  [[nodiscard]] std::span<const std::byte> payload() const noexcept { return bytes_; }

 private:
  explicit GgufWriteValue(GgufValueType t) : type_(t) {}
  template <class T>
  static GgufWriteValue scalar(GgufValueType t, T x) {
    GgufWriteValue v(t);
    v.put(x);
    return v;
  }
  template <class T>
  void put(const T& x) {
    // resize + memcpy rather than insert of a pointer range: GCC 12 at -O2 warns falsely
    // (-Wstringop-overflow) on the latter for a fresh vector, which -Werror builds would reject.
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &x, sizeof(T));
  }
  void put_string(std::string_view s) {
    put(static_cast<std::uint64_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes_.insert(bytes_.end(), p, p + s.size());
  }

  GgufValueType type_;
  std::vector<std::byte> bytes_;
};

/// A value read from a GGUF file, serialised again (to copy metadata from one file to another).
[[nodiscard]] inline GgufWriteValue gguf_write_value(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::u8: return GgufWriteValue::u8(static_cast<std::uint8_t>(v.bits));
    case GgufValueType::i8: return GgufWriteValue::i8(static_cast<std::int8_t>(v.as_i64()));
    case GgufValueType::u16: return GgufWriteValue::u16(static_cast<std::uint16_t>(v.bits));
    case GgufValueType::i16: return GgufWriteValue::i16(static_cast<std::int16_t>(v.as_i64()));
    case GgufValueType::u32: return GgufWriteValue::u32(static_cast<std::uint32_t>(v.bits));
    case GgufValueType::i32: return GgufWriteValue::i32(static_cast<std::int32_t>(v.as_i64()));
    case GgufValueType::u64: return GgufWriteValue::u64(v.bits);
    case GgufValueType::i64: return GgufWriteValue::i64(v.as_i64());
    case GgufValueType::f32: return GgufWriteValue::f32(static_cast<float>(v.as_f64()));
    case GgufValueType::f64: return GgufWriteValue::f64(v.as_f64());
    case GgufValueType::boolean: return GgufWriteValue::boolean(v.bits != 0);
    case GgufValueType::string: return GgufWriteValue::string(v.str);
    case GgufValueType::array: break;
  }
  if (gguf_scalar_bytes(v.elem_type) != 0) {
    std::vector<GgufWriteValue> items;
    items.reserve(static_cast<std::size_t>(v.count));
    for (std::size_t i = 0; i < v.count; ++i) items.push_back(gguf_write_value(v.element(i)));
    return GgufWriteValue::array(v.elem_type, items);
  }
  std::vector<GgufWriteValue> items;
  items.reserve(v.items.size());
  for (const auto& x : v.items) items.push_back(gguf_write_value(x));
  return GgufWriteValue::array(v.elem_type, items);
}

/// Collects metadata and tensors, then writes a GGUF v3 file. Keys and tensor names must be unique;
/// a tensor's byte count must match its type and dims (`value_error` / `shape_error` otherwise).
class GgufWriter {
 public:
  /// Adds metadata `key` = `value`. `general.alignment` must be a u32 power of two.
  GgufWriter& add(std::string key, GgufWriteValue value) {
    barato::require<barato::value_error>(!keys_.contains(key), "GgufWriter: duplicate key \"", key, "\"");
    if (key == "general.alignment") {
      std::uint32_t a = 0;
      barato::require<barato::value_error>(value.type() == GgufValueType::u32, "GgufWriter: general.alignment must be u32");
      std::memcpy(&a, value.payload().data(), 4);
      barato::require<barato::value_error>(a != 0 && (a & (a - 1)) == 0, "GgufWriter: general.alignment must be a power of two, got ", a);
      alignment_ = a;
    }
    keys_.insert(key);  // only once the value is accepted
    kv_.emplace_back(std::move(key), std::move(value));
    return *this;
  }

  /// Adds a tensor of ggml type `type` with dims `ne` (ne0 = fastest-varying first, 1–4 dims) and
  /// its bytes (copied).
  GgufWriter& add_tensor(std::string name, GgmlType type, std::vector<std::uint64_t> ne, std::span<const std::byte> data) {
    const std::uint64_t bytes = checked_bytes(name, type, ne);
    barato::require(data.size() == bytes, "GgufWriter: tensor \"", name, "\" of type ", ggml_type_name(static_cast<std::uint32_t>(type)),
                    " needs ", bytes, " bytes, got ", data.size());
    names_.insert(name);  // only once the tensor is accepted
    tensors_.push_back(Tensor{std::move(name), type, std::move(ne), bytes, std::vector<std::byte>(data.begin(), data.end()), {}});
    return *this;
  }
  /// An F32 tensor from floats.
  GgufWriter& add_tensor_f32(std::string name, std::vector<std::uint64_t> ne, std::span<const float> data) {
    return add_tensor(std::move(name), GgmlType::f32, std::move(ne), std::as_bytes(data));
  }
  /// Adds a tensor whose bytes `produce()` makes when the file is written (`bytes`, `write`), and
  /// which are dropped once written: `write` then holds one such tensor's bytes at a time. The
  /// header is written before any producer runs (offsets come from `type` and `ne`); a producer that
  /// returns the wrong byte count, or throws, fails the write. Whatever `produce` refers to must
  /// outlive the writing.
  GgufWriter& add_tensor_deferred(std::string name, GgmlType type, std::vector<std::uint64_t> ne,
                                  std::function<std::vector<std::byte>()> produce) {
    barato::require<barato::value_error>(static_cast<bool>(produce), "GgufWriter: tensor \"", name, "\" has no producer");
    const std::uint64_t bytes = checked_bytes(name, type, ne);
    names_.insert(name);
    tensors_.push_back(Tensor{std::move(name), type, std::move(ne), bytes, {}, std::move(produce)});
    return *this;
  }

  /// The data bytes a tensor of `type` and dims `ne` takes (`value_error` / `shape_error` as `add_tensor`).
  [[nodiscard]] static std::uint64_t tensor_bytes(GgmlType type, std::span<const std::uint64_t> ne) {
    GgmlTypeTraits tr;
    barato::require<barato::value_error>(ggml_type_traits(static_cast<std::uint32_t>(type), tr), "GgufWriter: ggml type ",
                                         static_cast<std::uint32_t>(type), " is not one barato writes");
    barato::require(!ne.empty() && ne[0] % tr.block == 0, "GgufWriter: ne0 is not a multiple of ", tr.block);
    std::uint64_t n = 1;
    for (const auto d : ne) n *= d;
    return n / tr.block * tr.block_bytes;
  }

  /// The whole file.
  [[nodiscard]] std::vector<std::byte> bytes() const {
    std::vector<std::byte> out;
    emit([&](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); });
    return out;
  }

  /// Writes the file, header first, then each tensor's bytes (deferred ones made then, one at a
  /// time); throws `barato::io_error` when it cannot be written, and what a producer throws.
  void write(const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw barato::io_error(path.string() + ": cannot create GGUF file");
    emit([&](std::span<const std::byte> b) {
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
      if (!out) throw barato::io_error(path.string() + ": write failed");
    });
    out.flush();
    if (!out) throw barato::io_error(path.string() + ": write failed");
  }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<std::uint64_t> ne;
    std::uint64_t bytes;                               // data bytes (from type and ne)
    std::vector<std::byte> data;                       // the bytes, or empty when deferred
    std::function<std::vector<std::byte>()> produce;   // set when deferred
  };

  /// Checks a new tensor's name, dims and type with messages naming it; returns its byte count
  /// (`tensor_bytes`, whose own checks then pass).
  std::uint64_t checked_bytes(const std::string& name, GgmlType type, std::span<const std::uint64_t> ne) const {
    barato::require<barato::value_error>(!names_.contains(name), "GgufWriter: duplicate tensor \"", name, "\"");
    barato::require(!ne.empty() && ne.size() <= kGgufMaxDims, "GgufWriter: tensor \"", name, "\" has ", ne.size(),
                    " dims, expected 1..4");
    GgmlTypeTraits tr;
    barato::require<barato::value_error>(ggml_type_traits(static_cast<std::uint32_t>(type), tr), "GgufWriter: tensor \"", name,
                                         "\" has ggml type ", static_cast<std::uint32_t>(type), ", not one barato writes");
    barato::require(ne[0] % tr.block == 0, "GgufWriter: tensor \"", name, "\" ne0 = ", ne[0], " is not a multiple of ", tr.block);
    return tensor_bytes(type, ne);
  }

  /// Passes the file to `sink` in pieces, in order.
  template <class Sink>
  void emit(Sink&& sink) const {
    std::vector<std::byte> head;
    const auto put = [&](const auto& x) {
      const auto* p = reinterpret_cast<const std::byte*>(&x);
      head.insert(head.end(), p, p + sizeof(x));
    };
    const auto put_string = [&](std::string_view s) {
      put(static_cast<std::uint64_t>(s.size()));
      const auto* p = reinterpret_cast<const std::byte*>(s.data());
      head.insert(head.end(), p, p + s.size());
    };
    const auto padding = [&](std::uint64_t n) { return static_cast<std::size_t>((alignment_ - n % alignment_) % alignment_); };
    head.insert(head.end(), reinterpret_cast<const std::byte*>(kGgufMagic.data()),
                reinterpret_cast<const std::byte*>(kGgufMagic.data()) + 4);
    put(std::uint32_t{3});
    put(static_cast<std::uint64_t>(tensors_.size()));
    put(static_cast<std::uint64_t>(kv_.size()));
    for (const auto& [key, v] : kv_) {
      put_string(key);
      put(static_cast<std::uint32_t>(v.type()));
      head.insert(head.end(), v.payload().begin(), v.payload().end());
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      put_string(t.name);
      put(static_cast<std::uint32_t>(t.ne.size()));
      for (const auto d : t.ne) put(d);
      put(static_cast<std::uint32_t>(t.type));
      put(offset);
      offset += t.bytes + padding(t.bytes);
    }
    head.resize(head.size() + padding(head.size()), std::byte{0});
    sink(std::span<const std::byte>(head));
    const std::vector<std::byte> zeros(alignment_, std::byte{0});
    for (const auto& t : tensors_) {
      if (t.produce) {
        const std::vector<std::byte> b = t.produce();
        barato::require(b.size() == t.bytes, "GgufWriter: tensor \"", t.name, "\" of type ", ggml_type_name(static_cast<std::uint32_t>(t.type)),
                        " needs ", t.bytes, " bytes, its producer made ", b.size());
        sink(std::span<const std::byte>(b));
      } else {
        sink(std::span<const std::byte>(t.data));
      }
      sink(std::span<const std::byte>(zeros).first(padding(t.bytes)));
    }
  }

  std::vector<std::pair<std::string, GgufWriteValue>> kv_;
  std::set<std::string, std::less<>> keys_, names_;
  std::vector<Tensor> tensors_;
  std::uint64_t alignment_ = kGgufDefaultAlignment;
};

}  // namespace barato_examples
