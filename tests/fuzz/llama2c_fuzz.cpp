// Fuzz harness: the llama2.c checkpoint loader (examples/models/llama2c.hpp, llama_weights.hpp).
// Input: the bytes of a checkpoint, written to a temporary file (the loader reads files). A bad
// file must be a barato::format_error (or io_error); any other exception, a crash, a sanitizer
// report or an allocation the file size does not justify (libFuzzer's -rss_limit_mb / -malloc_limit_mb)
// is a defect. When it loads, the weights must have the header's shapes, and the decoder runs a
// two-token prefill and a decode step on them (any float values, NaN included, must not crash).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "barato/kv/contiguous.hpp"
#include "fuzz/fuzz_support.hpp"
#include "models/llama.hpp"
#include "models/llama2c.hpp"
#include "models/llama_weights.hpp"
#include "models/llama2c_int8.hpp"
#include "support/scratch_dir.hpp"

namespace {

/// The process's temporary checkpoint, in the scratch directory removed when the fuzzer exits.
const std::filesystem::path& temp_file() {
  static const std::filesystem::path f = barato::test::scratch_dir() / "llama2c.bin";
  return f;
}

/// A two-token prefill and a decode step on `w` (any float values, NaN included, must not crash).
template <class Linear>
void run_model(const barato_examples::LlamaWeights<Linear>& w, std::size_t size) {
  const barato_examples::LlamaConfig& c = w.config;
  BARATO_FUZZ_CHECK(barato_examples::kLlama2cHeaderBytes + c.vocab_size * c.dim <= size, "embedding larger than the file");
  const std::size_t positions = std::min<std::size_t>(c.seq_len, 4);
  barato_examples::Llama<barato::kv::Contiguous<float>, Linear> model(
      w, barato_examples::make_contiguous_caches<float>(c, positions), {.threads = 1, .max_chunk = 2, .max_positions = positions});
  std::vector<float> logits(2 * c.vocab_size);
  const barato::Token prompt[2] = {0, static_cast<barato::Token>(c.vocab_size - 1)};
  const std::size_t n = std::min<std::size_t>(positions, 2);
  model.forward(std::span<const barato::Token>(prompt, n), std::span<float>(logits.data(), n * c.vocab_size));
  if (positions > n) model.forward(std::span<const barato::Token>(prompt, 1), std::span<float>(logits.data(), c.vocab_size));
  BARATO_FUZZ_CHECK(model.size() == std::min<std::size_t>(positions, n + 1), "model size ", model.size());
}

/// The file's weights as `--weights file` keeps a version-2 file (`llama2c_int8_linear`).
barato_examples::LlamaWeights<barato::nn::AnyLinear> load_int8() {
  return barato_examples::load_llama2c_with(temp_file(), barato_examples::Llama2cFileLinear{});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(temp_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto w = barato_examples::load_llama2c(temp_file());
    run_model(w, size);
    // A version-2 file in its own precision too: int8 codes where rows hold whole groups.
    if (barato_examples::read_llama2c_layout(temp_file()).version == 2) run_model(load_int8(), size);
  } catch (const barato::format_error& e) {
    BARATO_FUZZ_CHECK(e.file() == temp_file().string(), "format_error names another file: ", e.what());
  }
  return 0;
}

