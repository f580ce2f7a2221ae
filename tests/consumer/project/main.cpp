// The smallest program a user of the installed barato package writes: a contiguous KV cache for
// one layer (2 KV heads, GQA with 4 query heads), a few appended tokens, one decode step.
// Exits 0 iff the output is a convex combination of the cached values, as attention must be.
#include <barato/attention/attend.hpp>
#include <barato/barato.hpp>  // the installed umbrella header must compile on its own
#include <barato/kv/contiguous.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const barato::attention::Heads heads{.n_q = 4, .n_kv = 2, .head_dim = 8};
  barato::kv::Contiguous<float> cache(heads.n_kv, heads.head_dim, /*capacity=*/16);

  // Token t stores k = v = t + 1 in every dim of every KV head, so outputs must lie in [1, n].
  const std::size_t n = 5;
  for (std::size_t t = 0; t < n; ++t) {
    std::vector<float> row(heads.kv_dim(), static_cast<float>(t + 1));
    cache.append(row, row);
  }
  std::vector<float> q(heads.q_dim(), 0.25f), out(heads.q_dim());
  barato::attention::decode(q, cache, heads, out);

  bool sane = cache.size() == n;
  for (float x : out) sane = sane && std::isfinite(x) && x >= 1.0f && x <= static_cast<float>(n);
  std::printf("barato consumer: decode over %zu cached tokens -> out[0] = %.6f (%s)\n", cache.size(),
              static_cast<double>(out[0]), sane ? "ok" : "WRONG");
  return sane ? 0 : 1;
}
