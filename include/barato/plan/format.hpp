#pragma once
/// \file
/// What the memory planner needs to know of storage formats: bits per weight of a weight format
/// (from a barato quant format type, or any figure), the bytes a KV-cache format stores per token
/// and KV head (codes, plus the fp32 scales of the quantized caches — exactly what `kv::Quantized`
/// and `kv::QuantizedPages` allocate), and byte sizes as people write them ("16GiB", "1.5 GB").
/// "GB" means GiB here, as in the tables that ask the question.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "barato/core/dtype.hpp"
#include "barato/core/error.hpp"
#include "barato/kv/kv_format.hpp"
#include "barato/kv/memory.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/scheme.hpp"

namespace barato::plan {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;  ///< 1,024 bytes
inline constexpr std::size_t kMiB = std::size_t{1} << 20;  ///< 1,048,576 bytes
inline constexpr std::size_t kGiB = std::size_t{1} << 30;  ///< 1,073,741,824 bytes ("GB" in the tables)

// ---- weights -----------------------------------------------------------------------------------

/// A weight storage format as the planner sees it: a name and its storage bits per weight, scales included.
struct WeightFormat {
  std::string name;             ///< "fp16", "int8", "int4", "nf4", a quant format's kName, or the bits as written
  double bits_per_weight = 16;  ///< storage bits per weight (int4 with fp16 scales per group of 128: 4.125)

  /// This format, or `value_error` unless 0 < bits ≤ 64 and finite.
  [[nodiscard]] const WeightFormat& checked() const {
    require<value_error>(std::isfinite(bits_per_weight) && bits_per_weight > 0 && bits_per_weight <= 64,
                         "plan::WeightFormat '", name, "': bits per weight must be in (0, 64], got ", bits_per_weight);
    return *this;
  }
};

/// The planner's view of a barato quant format type: its name and `kBitsPerWeight` (codes + scales
/// of full groups; per-row formats count their codes only — a row's scale is < 0.1 % of it).
template <quant::Format F>
[[nodiscard]] WeightFormat weight_format() {
  return {.name = std::string(F::kName), .bits_per_weight = F::kBitsPerWeight};
}

/// The named weight formats: fp32 = 32, fp16 = bf16 = 16, int8 = 8, int4 = 4.125 (group 128, fp16
/// scales), nf4 = 4.25 (group 64, fp16 scales, as `quant::Nf4<>`).
[[nodiscard]] inline std::array<WeightFormat, 6> named_weight_formats() {
  return {{{"fp32", 32}, {"fp16", 16}, {"bf16", 16}, {"int8", 8}, {"int4", 4.125}, {"nf4", 4.25}}};
}

/// A named weight format (case-sensitive names of `named_weight_formats`), a quant scheme name of the
/// tools' `--weights` (int8-tensor, int8-row, q8_0, int4-tensor, int4-row, int4-g128, q4_0, nf4: the format type's
/// `kBitsPerWeight`), or a number of bits per weight ("5.5"); `value_error` otherwise.
[[nodiscard]] inline WeightFormat parse_weight_format(std::string_view s) {
  for (const WeightFormat& f : named_weight_formats())
    if (f.name == s) return f;
  for (const quant::Scheme q : quant::kSchemes)
    if (quant::scheme_name(q) == s)
      return quant::visit_scheme(q, [&](auto format) {
        WeightFormat f = weight_format<decltype(format)>();
        f.name = std::string(s);
        return f;
      });
  const std::string str(s);
  std::size_t used = 0;
  double bits = 0;
  try {
    bits = std::stod(str, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  require<value_error>(!str.empty() && used == str.size(), "plan: unknown weight format '", s,
                       "' (expected fp32, fp16, bf16, int8, int4, nf4, a scheme such as int4-g128 or int8-row, or "
                       "bits per weight such as 4.5)");
  return WeightFormat{.name = str, .bits_per_weight = bits}.checked();
}

/// Bytes of `parameters` weights at `f.bits_per_weight` (rounded up to whole bytes).
[[nodiscard]] inline std::size_t weight_bytes(double parameters, const WeightFormat& f) {
  return static_cast<std::size_t>(std::ceil(parameters * f.checked().bits_per_weight / 8.0));
}

// ---- KV cache ----------------------------------------------------------------------------------

/// The KV-cache storage formats barato has: element rows (`kv::Contiguous<T>`, `PagedPool<T>`) or
/// quantized codes with one fp32 scale per row (`kv::Quantized<KF, VF>`, `QuantizedPages<KF, VF>`).
enum class KvStorage { fp32, fp16, bf16, int8, int4, k8v4 };

/// A KV-cache format: what one token of one KV head of one layer costs, K and V together.
struct KvCacheFormat {
  KvStorage storage = KvStorage::fp16;  ///< which cache

  /// "fp32", "fp16", "bf16", "int8", "int4" or "k8v4".
  [[nodiscard]] constexpr std::string_view name() const noexcept {
    constexpr std::array<std::string_view, 6> names = {"fp32", "fp16", "bf16", "int8", "int4", "k8v4"};
    return names[static_cast<std::size_t>(storage)];
  }
  /// True for the quantized caches (codes + scales).
  [[nodiscard]] constexpr bool quantized() const noexcept {
    return storage == KvStorage::int8 || storage == KvStorage::int4 || storage == KvStorage::k8v4;
  }
  /// Bytes of the K and V rows of one token and KV head as barato stores them, scales included:
  /// `kv::bytes_per_token` for element rows, `kv::Quantized<KF, VF>::bytes_per_token` for codes.
  [[nodiscard]] constexpr std::size_t row_bytes(std::size_t head_dim) const noexcept {
    switch (storage) {
      case KvStorage::fp32: return kv::bytes_per_token(1, 1, head_dim, DType::f32);
      case KvStorage::fp16: return kv::bytes_per_token(1, 1, head_dim, DType::f16);
      case KvStorage::bf16: return kv::bytes_per_token(1, 1, head_dim, DType::bf16);
      case KvStorage::int8: return kv::Quantized<kv::Int8>::bytes_per_token(1, head_dim);
      case KvStorage::int4: return kv::Quantized<kv::Int4>::bytes_per_token(1, head_dim);
      case KvStorage::k8v4: return kv::Quantized<kv::Int8, kv::Int4>::bytes_per_token(1, head_dim);
    }
    return 0;
  }
  /// The scale bytes inside `row_bytes`: two fp32 scales (K and V) for the quantized caches, 0 otherwise.
  [[nodiscard]] constexpr std::size_t scale_bytes() const noexcept { return quantized() ? 2 * sizeof(float) : 0; }
  /// `row_bytes` without the scales: the code (or element) bytes alone.
  [[nodiscard]] constexpr std::size_t code_bytes(std::size_t head_dim) const noexcept {
    return row_bytes(head_dim) - scale_bytes();
  }
};

/// Every KV-cache format, widest first.
inline constexpr std::array<KvCacheFormat, 6> kKvCacheFormats = {
    {{KvStorage::fp32}, {KvStorage::fp16}, {KvStorage::bf16}, {KvStorage::int8}, {KvStorage::k8v4}, {KvStorage::int4}}};

/// A KV-cache format by name; `value_error` listing the names otherwise.
[[nodiscard]] inline KvCacheFormat parse_kv_format(std::string_view s) {
  for (const KvCacheFormat& f : kKvCacheFormats)
    if (f.name() == s) return f;
  detail::fail<value_error>("plan: unknown KV-cache format '", s, "' (expected fp32, fp16, bf16, int8, int4 or k8v4)");
}

// ---- byte sizes --------------------------------------------------------------------------------

/// Bytes from "16GiB", "16 GB", "1.5GiB", "512MiB", "4096" (bytes), "64KiB": a non-negative number
/// and an optional unit B, KiB/KB/K, MiB/MB/M, GiB/GB/G, TiB/TB/T (all powers of 1,024; "GB" = GiB;
/// case-insensitive). Fractions round down to whole bytes. `value_error` for a negative, non-finite
/// or unparsable size, naming what was given.
[[nodiscard]] inline std::size_t parse_bytes(std::string_view s) {
  const std::string str(s);
  const auto bad = [&](const char* why) {
    detail::fail<value_error>("plan: bad size '", s, "': ", why, " (expected e.g. 16GiB, 1.5GB, 512MiB or bytes)");
  };
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(str, &used);
  } catch (const std::exception&) {
    bad("not a number");
  }
  if (!std::isfinite(x)) bad("not finite");
  if (x < 0 || str.find('-') != std::string::npos) bad("negative");
  std::string unit;
  for (std::size_t i = used; i < str.size(); ++i)
    if (str[i] != ' ') unit += (str[i] >= 'A' && str[i] <= 'Z') ? char(str[i] - 'A' + 'a') : str[i];
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kib" || unit == "kb" || unit == "k") scale = double(kKiB);
  else if (unit == "mib" || unit == "mb" || unit == "m") scale = double(kMiB);
  else if (unit == "gib" || unit == "gb" || unit == "g") scale = double(kGiB);
  else if (unit == "tib" || unit == "tb" || unit == "t") scale = double(kGiB) * 1024.0;
  else bad("unknown unit");
  const double bytes = std::floor(x * scale);
  if (bytes >= 0x1p63) bad("too large");
  return static_cast<std::size_t>(bytes);
}

/// "12.34 GiB", "512.00 MiB", "4096 B": bytes in the largest binary unit ≥ 1, two decimals.
[[nodiscard]] inline std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = double(bytes);
  std::size_t u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s", x, units[u]);
  return buf;
}

}  // namespace barato::plan
