// Fuzz harness: the GGUF reader (examples/models/gguf.hpp), and what is built on it — the exact fp32
// conversion of every tensor, the writer (a parsed file rewritten through GgufWriter parses to the same
// metadata and tensor bytes) and the llama config, weights and vocabulary (gguf_llama.hpp).
// Input: the bytes of a file. A malformed file must be a barato::format_error naming the file and an
// offset inside it; anything else escaping, a crash, a sanitizer report or a reader-accepted file the
// writer refuses is a defect.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "models/gguf.hpp"
#include "models/gguf_llama.hpp"
#include "models/gguf_writer.hpp"

using namespace barato_examples;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(data);
  std::optional<GgufFile> f;
  try {
    f.emplace(GgufFile::from_bytes("fuzz.gguf", std::vector<std::byte>(p, p + size)));
  } catch (const barato::format_error& e) {
    BARATO_FUZZ_CHECK(e.file() == "fuzz.gguf", "format_error names ", e.file());
    BARATO_FUZZ_CHECK(e.offset() <= size, "offset ", e.offset(), " past the end of a ", size, "-byte file");
    return 0;
  }
  // Every tensor lies inside the data section, with the byte count its type and dims imply.
  std::size_t fp32_budget = std::size_t{1} << 20;  // floats converted per input (keeps executions fast)
  for (const GgufTensor& t : f->tensors()) {
    BARATO_FUZZ_CHECK(t.data.size() == t.size_bytes, "tensor data size");
    BARATO_FUZZ_CHECK(f->data_offset() + t.offset + t.size_bytes <= size, "tensor past the end of the file");
    if (t.elements() <= fp32_budget) {
      fp32_budget -= static_cast<std::size_t>(t.elements());
      try {
        const auto x = gguf_tensor_fp32(t);
        BARATO_FUZZ_CHECK(x.size() == t.elements(), "fp32 conversion size");
      } catch (const barato::error&) {
      }
    }
  }
  // What the reader accepts, the writer writes, and it reads back the same.
  GgufWriter w;
  for (const auto& [key, value] : f->metadata()) w.add(std::string(key), gguf_write_value(value));
  for (const GgufTensor& t : f->tensors()) w.add_tensor(std::string(t.name), static_cast<GgmlType>(t.type), t.ne, t.data);
  const GgufFile g = GgufFile::from_bytes("rewritten.gguf", w.bytes());
  BARATO_FUZZ_CHECK(g.metadata().size() == f->metadata().size(), "metadata count after rewrite");
  BARATO_FUZZ_CHECK(g.tensors().size() == f->tensors().size(), "tensor count after rewrite");
  for (const GgufTensor& t : f->tensors()) {
    const GgufTensor* u = g.tensor(t.name);
    BARATO_FUZZ_CHECK(u != nullptr && u->type == t.type && u->ne == t.ne, "tensor ", std::string(t.name), " after rewrite");
    BARATO_FUZZ_CHECK(std::equal(u->data.begin(), u->data.end(), t.data.begin(), t.data.end()), "tensor bytes after rewrite");
  }
  // As a llama model: any barato::error is a valid answer.
  try {
    const LlamaConfig c = gguf_llama_config(*f);
    const auto weights = load_gguf_llama(*f, c);
    BARATO_FUZZ_CHECK(weights.layers.size() == c.n_layers, "layers");
    const Tokenizer tok = gguf_tokenizer(*f);
    const auto ids = tok.encode("Once upon a time", true);
    (void)tok.decode_text(ids);
  } catch (const barato::error&) {
  }
  return 0;
}
