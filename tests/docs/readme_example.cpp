#include <barato/attention/attend.hpp>
#include <barato/attention/rope.hpp>
#include <barato/kv/contiguous.hpp>
#include <barato/nn/dense.hpp>
#include <barato/nn/residual.hpp>
#include <barato/nn/rmsnorm.hpp>
#include <barato/nn/swiglu.hpp>
#include <cstddef>
#include <vector>

int main() {
  namespace att = barato::attention;
  namespace nn = barato::nn;
  // One Llama-style layer: 8 query heads over 2 KV heads of dim 64 (GQA), width 512, 4096 positions.
  const att::Heads heads{.n_q = 8, .n_kv = 2, .head_dim = 64};
  const std::size_t dim = 512, hidden = 1408, max_pos = 4096;
  barato::kv::Contiguous<barato::f16> cache(heads.n_kv, heads.head_dim, max_pos);  // fp16 storage
  const att::RopeTable rope(heads.head_dim, max_pos);                              // cos/sin, θ = 10000
  // Weights [out, in], zero here (fill them through weights()); nn::Dense<bf16> or
  // quant::Linear<quant::Int4Group<128>> in their place change nothing below.
  const nn::Dense<float> wq(heads.q_dim(), dim), wk(heads.kv_dim(), dim), wv(heads.kv_dim(), dim);
  const nn::Dense<float> wo(dim, heads.q_dim()), w1(hidden, dim), w2(dim, hidden), w3(hidden, dim);
  const std::vector<float> attn_norm(dim, 1.0f), ffn_norm(dim, 1.0f);  // RMSNorm gains

  std::vector<float> x(dim, 0.1f), xn(dim), q(heads.q_dim()), k(heads.kv_dim()), v(heads.kv_dim());
  std::vector<float> a(heads.q_dim()), o(dim), h1(hidden), h3(hidden);
  for (std::size_t pos = 0; pos < 100; ++pos) {  // one decode step per token; allocates nothing
    nn::rms_norm(x, attn_norm, xn);
    wq.apply(xn, q);
    wk.apply(xn, k);
    wv.apply(xn, v);
    rope.apply(q, k, heads, pos);     // the token's queries and keys in one call
    cache.append(k, v);               // throws capacity_error when full, cache unchanged
    att::decode(q, cache, heads, a);  // fused online-softmax kernel, K/V read once per GQA group
    wo.apply(a, o);
    nn::add_inplace(x, o);            // residual
    nn::rms_norm(x, ffn_norm, xn);
    w1.apply(xn, h1);
    w3.apply(xn, h3);
    nn::swiglu(h1, h3);               // h1 = silu(h1) ⊙ h3
    w2.apply(h1, o);
    nn::add_inplace(x, o);
  }
  // A prompt of P tokens is the same code on [P, …] rows: apply_batch(x, y, P), rope.apply and
  // att::attend(q, cache, heads, out) with P queries (decode is attend's one-query case).
  cache.truncate(90);  // roll back 10 tokens (speculative decoding)
  return cache.size() == 90 ? 0 : 1;
}
