#pragma once
/// \file
/// The `--kv` flag of the example tools: builds one cache per layer of the chosen policy and hands
/// them to a generic callback, so a tool's decoder loop is written once and instantiated per policy.
///
///   contiguous       kv::Contiguous<float>, capacity positions per layer
///   growable[:C]     kv::Growable<float>, chunks of C positions (default 64)
///   paged[:B]        kv::PagedView<float> of one kv::PagedPool (all layers per block, B tokens per block,
///                    default 16), pool of ⌈capacity / B⌉ blocks
///   paged-int8[:B] | paged-int4[:B] | paged-k8v4[:B]
///                    the same pool with quantized pages (kv::QuantizedPages: codes + one fp32 scale per
///                    token and KV head, as int8 / int4 / k8v4 below)
///   window:W[,S]     kv::SlidingWindow<float>, last W positions + S attention sinks (default 4); built for
///                    appends of `max_chunk` tokens (the decoder's prefill chunk), so every query of a
///                    chunk sees exactly its own window: chunked prefill equals token-by-token decoding
///   int8 | int4      kv::Quantized<Int8> / <Int4>: codes + one fp32 scale per token and KV head
///   k8v4             kv::Quantized<Int8, Int4>: 8-bit keys, 4-bit values
///
/// Usage:  with_kv_policy(spec, config, capacity, mr, [&](auto caches) { Llama<…> m(w, std::move(caches)); … });

#include <charconv>
#include <cstddef>
#include <memory_resource>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "barato/core/error.hpp"
#include "barato/kv/contiguous.hpp"
#include "barato/kv/growable.hpp"
#include "barato/kv/paged.hpp"
#include "barato/kv/quantized.hpp"
#include "barato/kv/sliding_window.hpp"
#include "models/llama.hpp"

namespace barato_examples {

/// The values `--kv` accepts (for help texts and error messages).
inline constexpr std::string_view kKvPolicies =
    "contiguous | growable[:C] | paged[:B] | paged-int8[:B] | paged-int4[:B] | paged-k8v4[:B] | window:W[,S] | int8 | int4 | k8v4";

namespace detail {
inline std::size_t parse_kv_number(std::string_view s, std::string_view spec, bool zero_ok = false) {
  std::size_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  barato::require<barato::value_error>(ec == std::errc{} && p == s.data() + s.size() && (v > 0 || zero_ok), "--kv '",
                                       spec, "': expected a ", zero_ok ? "non-negative" : "positive", " integer, got '", s,
                                       "'");
  return v;
}
template <class Cache, class... Args>
std::vector<Cache> per_layer(const LlamaConfig& c, const Args&... args) {
  std::vector<Cache> caches;
  caches.reserve(c.n_layers);
  for (std::size_t l = 0; l < c.n_layers; ++l) caches.emplace_back(args...);
  return caches;
}
}  // namespace detail

/// Builds the per-layer caches `spec` names (for `config`'s KV heads, room for `capacity` positions
/// where the policy is bounded, memory from `mr`, windows exact for appends of up to `max_chunk`
/// tokens — pass the decoder's LlamaOptions::max_chunk) and returns `f(std::vector<Cache>)`. Throws
/// `barato::value_error` for an unknown or malformed spec.
template <class F>
decltype(auto) with_kv_policy(std::string_view spec, const LlamaConfig& config, std::size_t capacity,
                              std::pmr::memory_resource* mr, F&& f, std::size_t max_chunk = LlamaOptions{}.max_chunk) {
  namespace kv = barato::kv;
  const std::size_t H = config.n_kv_heads, d = config.head_dim;
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  auto no_arg = [&] {
    barato::require<barato::value_error>(arg.empty() && colon == std::string_view::npos, "--kv '", spec, "': ", name,
                                         " takes no parameter");
  };
  if (name == "contiguous") {
    no_arg();
    return f(make_contiguous_caches<float>(config, capacity, mr));
  }
  if (name == "growable") {
    const std::size_t chunk = arg.empty() ? 64 : detail::parse_kv_number(arg, spec);
    return f(detail::per_layer<kv::Growable<float>>(config, kv::GrowableConfig{.n_kv_heads = H, .head_dim = d, .chunk_tokens = chunk},
                                                    mr));
  }
  auto paged = [&]<class Pages>() {
    const std::size_t block = arg.empty() ? 16 : detail::parse_kv_number(arg, spec);
    kv::PagedPool<Pages> pool({.n_layers = config.n_layers, .n_kv_heads = H, .head_dim = d, .block_tokens = block,
                               .n_blocks = (capacity + block - 1) / block},
                              mr);
    const kv::SeqId seq = pool.add_sequence();
    std::vector<kv::PagedView<Pages>> views;
    for (std::size_t l = 0; l < config.n_layers; ++l) views.push_back(pool.view(seq, l));
    return f(std::move(views));  // the pool lives until f returns
  };
  if (name == "paged") return paged.template operator()<float>();
  if (name == "paged-int8") return paged.template operator()<kv::QuantizedPages<kv::Int8>>();
  if (name == "paged-int4") return paged.template operator()<kv::QuantizedPages<kv::Int4>>();
  if (name == "paged-k8v4") return paged.template operator()<kv::QuantizedPages<kv::Int8, kv::Int4>>();
  if (name == "window") {
    barato::require<barato::value_error>(!arg.empty(), "--kv '", spec, "': expected window:W or window:W,S");
    const auto comma = arg.find(',');
    const std::size_t W = detail::parse_kv_number(arg.substr(0, comma), spec);
    const std::size_t S = comma == std::string_view::npos ? 4 : detail::parse_kv_number(arg.substr(comma + 1), spec, true);
    return f(detail::per_layer<kv::SlidingWindow<float>>(
        config, kv::SlidingWindowConfig{.n_kv_heads = H, .head_dim = d, .window = W, .sinks = S, .chunk = max_chunk}, mr));
  }
  if (name == "int8") {
    no_arg();
    return f(detail::per_layer<kv::Quantized<kv::Int8>>(config, H, d, capacity, mr));
  }
  if (name == "int4") {
    no_arg();
    return f(detail::per_layer<kv::Quantized<kv::Int4>>(config, H, d, capacity, mr));
  }
  if (name == "k8v4") {
    no_arg();
    return f(detail::per_layer<kv::Quantized<kv::Int8, kv::Int4>>(config, H, d, capacity, mr));
  }
  throw barato::value_error(std::string("--kv: unknown cache policy '") + std::string(spec) + "' (expected " +
                            std::string(kKvPolicies) + ")");
}

}  // namespace barato_examples
