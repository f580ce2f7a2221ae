#include "barato/kv/memory.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "barato/core/memory.hpp"
#include "barato/kv/contiguous.hpp"

using namespace barato;

namespace {

struct Shape {
  const char* name;
  std::size_t layers, kv_heads, head_dim;
};

/// Bytes a whole model's contiguous caches (one per layer) take for `tokens` positions, measured.
template <Element T>
std::size_t measured_bytes(const Shape& s, std::size_t tokens) {
  CountingResource mr;
  std::vector<kv::Contiguous<T>> caches;
  for (std::size_t l = 0; l < s.layers; ++l) caches.emplace_back(s.kv_heads, s.head_dim, tokens, &mr);
  return mr.current();
}

template <Element T>
void check_shape(const Shape& s) {
  CAPTURE(s.name); CAPTURE(dtype_name(dtype_of<T>));
  const std::size_t per_token = kv::bytes_per_token(s.layers, s.kv_heads, s.head_dim, dtype_of<T>);
  CHECK(per_token == 2 * s.layers * s.kv_heads * s.head_dim * sizeof(T));
  // one token's worth, and the growth from 3 to 4 tokens, as the allocator measures them
  CHECK(measured_bytes<T>(s, 1) == per_token);
  CHECK(measured_bytes<T>(s, 4) - measured_bytes<T>(s, 3) == per_token);
  CHECK(measured_bytes<T>(s, 5) == kv::kv_bytes(s.layers, s.kv_heads, s.head_dim, dtype_of<T>, 5));
  CHECK(kv::kv_bytes(s.layers, s.kv_heads, s.head_dim, dtype_of<T>, 5, 3) == 15 * per_token);
}

}  // namespace

TEST_CASE("bytes_per_token equals the counting allocator's measurement (fp32, fp16, bf16; MHA, GQA, MQA)") {
  const Shape shapes[] = {
      {"stories260K-like MHA", 5, 8, 8},
      {"Llama-2-7B MHA", 32, 32, 128},
      {"Llama-3-8B GQA", 32, 8, 128},
      {"MQA", 24, 1, 128},
      {"small GQA d=64", 6, 2, 64},
      {"odd d", 3, 3, 37},
  };
  for (const Shape& s : shapes) {
    check_shape<float>(s);
    check_shape<f16>(s);
    check_shape<bf16>(s);
  }
  // the Llama-2-7B figure everyone quotes: 0.5 MiB per token in fp16
  CHECK(kv::bytes_per_token(32, 32, 128, DType::f16) == 512 * 1024);
}
