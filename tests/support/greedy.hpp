#pragma once
// Greedy ids of an example Llama (examples/models/llama.hpp) over a contiguous fp32 KV cache on one
// thread: run.c's `-n steps` generation from `prompt`, the generated ids only (the tests that compare
// two weight sets by their greedy path).

#include <cstddef>
#include <vector>

#include "barato/kv/contiguous.hpp"
#include "models/generate.hpp"
#include "models/llama.hpp"
#include "models/tokenizer.hpp"

namespace barato::test {

template <class Linear>
std::vector<int> greedy_ids(const barato_examples::LlamaWeights<Linear>& w, const std::vector<barato_examples::Token>& prompt,
                            std::size_t steps) {
  barato_examples::Llama<barato::kv::Contiguous<float>, Linear> m(w, barato_examples::make_contiguous_caches(w.config, steps),
                                                                 {.threads = 1});
  std::vector<float> logits(m.vocab_size());
  const auto g = barato_examples::generate(m, prompt, {.steps = steps}, logits);
  return {g.generated.begin(), g.generated.end()};
}

}  // namespace barato::test
