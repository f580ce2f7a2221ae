// barato_quantize: a llama2.c checkpoint or a GGUF file written as a GGUF v3 file with its matrices in
// F32, F16, Q8_0 or Q4_0 (ggml's formats; the rules are in examples/models/gguf_export.hpp).
//
//   barato_quantize --model stories260K.bin --out stories260K-q8_0.gguf --type q8_0
//   barato_quantize --model model-f32.gguf --out model-q4_0.gguf --type q4_0
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "models/cli.hpp"
#include "models/gguf_export.hpp"
#include "models/gguf_llama.hpp"
#include "models/model_file.hpp"

namespace {

using namespace barato_examples;
namespace fs = std::filesystem;

int tool_main(int argc, const char* const* argv) {
  std::string model_path, tok_path, out_path, type_name;
  bool quiet = false;
  Cli cli("barato_quantize", "Write a model as a GGUF v3 file with its matrices in F32, F16, Q8_0 or Q4_0.");
  cli.option("--model", model_path, "FILE", "llama2.c checkpoint or GGUF file (told apart by the magic; required)")
      .option("--tokenizer", tok_path, "FILE", "llama2.c tokenizer file (default: a GGUF file's own vocabulary, else tok512.bin)")
      .option("--out", out_path, "FILE", "GGUF file to write (required)")
      .option("--type", type_name, "T", "f32 | f16 | q8_0 | q4_0: the type of every matrix (required)")
      .flag("--quiet", quiet, "no summary on stderr")
      .epilog("Norm gains stay F32. A matrix whose width is not a multiple of 32 cannot hold ggml blocks and is\n"
              "written F16 (the tool names it). Q8_0 / Q4_0 data is what ggml's reference quantizer writes for\n"
              "the same F32 values; a GGUF tensor already in the target type is copied as it is. From a GGUF\n"
              "source every metadata key is copied (general.file_type rewritten); from a llama2.c checkpoint the\n"
              "llama.* keys and the vocabulary are written. Exit status: 0 ok, 1 runtime error, 2 usage error.");
  if (!cli.parse(argc, argv)) return 0;
  if (model_path.empty()) throw CliError("--model FILE is required");
  if (out_path.empty()) throw CliError("--out FILE is required");
  if (type_name.empty()) throw CliError("--type T is required (f32, f16, q8_0 or q4_0)");
  GgmlType type{};
  try {
    type = parse_gguf_type(type_name);
  } catch (const barato::value_error& e) {
    throw CliError(e.what());
  }
  if (fs::exists(out_path) && fs::exists(model_path) && fs::equivalent(out_path, model_path))
    throw CliError("--out must not be the --model file (it is read while the output is written)");

  const ModelFile model = ModelFile::open(model_path);
  const Tokenizer tok = model.tokenizer(tok_path, data_dir() / "stories260K/tok512.bin");
  const GgufFile* metadata = tok_path.empty() ? model.gguf_file() : nullptr;
  const std::string name = fs::path(model_path).stem().string();
  // Tensor by tensor while the file is written: the whole fp32 model is never in memory.
  const GgufExport e = model.is_gguf() ? export_gguf_llama_streamed(*model.gguf_file(), model.config(), tok, type, metadata, name)
                                       : export_llama2c_streamed(model_path, tok, type, name);
  // Write to a temporary name first, so a failed run never leaves a partial file under --out.
  const fs::path tmp = out_path + ".tmp";
  try {
    e.writer.write(tmp);
    fs::rename(tmp, out_path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  if (!quiet) {
    for (const auto& f : e.fallbacks) std::fprintf(stderr, "barato_quantize: kept %s\n", f.c_str());
    std::fprintf(stderr, "barato_quantize: wrote %s: %zu tensors (%zu copied from the source), %zu bytes of tensor data, type %s\n",
                 out_path.c_str(), e.tensors, e.copied, e.tensor_bytes, type_name.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Cli::run_tool("barato_quantize", [&] { return tool_main(argc, argv); });
}
