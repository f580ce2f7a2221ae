#pragma once
/// \file
/// The int8-activation path (W8A8, as in LLM.int8() and SmoothQuant): each activation vector (token)
/// is quantized with its own absmax scale to int8, multiplied with int8 per-row (or per-tensor)
/// weights with int32 accumulation, and the int32 dot products are scaled back once per output:
/// y_r = s_r · s_x · Σ_c q_rc · x8_c. Unlike the weight-only kernels (quant/gemv.hpp), the
/// activations lose precision here (8 bits per token), which is what activation outliers break
/// (see quant/outliers.hpp).
///
/// Kernels: `Int8Dot<Arch>` — the portable int32 loop, and an AVX-512 VNNI specialization
/// (`vpdpbusd`, weights with the sign bit flipped to unsigned, the offset removed with Σ x8).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "barato/core/error.hpp"
#include "barato/core/memory.hpp"
#include "barato/core/parallel.hpp"
#include "barato/core/prefetch.hpp"
#include "barato/nn/linear_layer.hpp"
#include "barato/quant/absmax.hpp"
#include "barato/quant/amx.hpp"
#include "barato/quant/format.hpp"
#include "barato/quant/gemv.hpp"
#include "barato/quant/quantized_matrix.hpp"
#include "barato/quant/scratch.hpp"
#include "barato/simd/arch.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace barato::quant {

/// Quantizes x to int8 with one absmax scale (per token): q = round(x / s), s = max|x| / 127.
/// Returns s (0 for an all-zero x, whose codes are all 0). Throws `shape_error` when q.size() !=
/// x.size() and `value_error` for NaN / Inf in x (naming the first). O(n); with AVX-512 16 elements
/// per instruction, the same codes as the scalar loop (an exact maximum, an IEEE division, rounding
/// to nearest even, the same clamp).
inline float quantize_activation(std::span<const float> x, std::span<std::int8_t> q) {
  require(q.size() == x.size(), "quant::quantize_activation: q has ", q.size(), " elements, x has ", x.size());
  const std::size_t n = x.size();
  float m = 0.f;
  std::size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
  {
    __m512 vm = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x.data() + i);
      bad |= _mm512_fpclass_ps_mask(v, 0x99);  // QNaN, +Inf, −Inf, SNaN
      vm = _mm512_max_ps(vm, _mm512_abs_ps(v));
    }
    if (bad != 0) i = 0;  // the scalar loop names the first non-finite element
    else m = _mm512_reduce_max_ps(vm);
  }
#endif
  for (; i < n; ++i) {
    require<value_error>(std::isfinite(x[i]), "quant::quantize_activation: x[", i, "] = ", x[i], " is not finite");
    m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  }
  const float s = m / 127.0f;
  std::size_t k = 0;
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
  if (s != 0.f) {
    const __m512 vs = _mm512_set1_ps(s), hi = _mm512_set1_ps(127.f), lo = _mm512_set1_ps(-127.f);
    for (; k + 16 <= n; k += 16) {
      __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x.data() + k), vs),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q.data() + k), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)));
    }
  }
#endif
  for (; k < n; ++k) {
    float v = s == 0.f ? 0.f : std::nearbyint(x[k] / s);
    v = v > 127.f ? 127.f : (v < -127.f ? -127.f : v);
    q[k] = static_cast<std::int8_t>(v);
  }
  return s;
}

/// One activation vector quantized to int8 (a view): codes, scale and the sum of the codes.
struct Int8Activation {
  const std::int8_t* q = nullptr;  // [cols] codes
  float sx = 0.f;                  // per-token scale: x ≈ sx · q
  std::int32_t sum = 0;            // Σ q (the VNNI kernel's offset correction)
};

/// Σ w[i] · x[i] over n int8 pairs in int32 (exact for n < 2^17). Portable loop. `dot_n<N>` does N
/// activation vectors against the same weights (integer sums: the same for every N).
template <class Arch>
struct Int8Dot {
  static constexpr const char* kName = "scalar-int32";
  /// out[i · N + j] = row w[i] · a[j] for R rows and N vectors (`stop`, the prefetch bound of the
  /// VNNI kernel, is not used).
  template <std::size_t R, std::size_t N>
  static void dot_rows(const std::int8_t* const* w, const Int8Activation* a, std::size_t n, std::int32_t* out,
                       const std::int8_t* /*stop*/) noexcept {
    for (std::size_t i = 0; i < R; ++i) dot_n<N>(w[i], a, n, out + i * N);
  }
  template <std::size_t N>
  static void dot_n(const std::int8_t* w, const Int8Activation* a, std::size_t n, std::int32_t* out) noexcept {
    for (std::size_t j = 0; j < N; ++j) out[j] = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < N; ++j) out[j] += std::int32_t{w[i]} * std::int32_t{a[j].q[i]};
  }
  [[nodiscard]] static std::int32_t dot(const std::int8_t* w, const std::int8_t* x, std::size_t n,
                                        std::int32_t sum_x) noexcept {
    const Int8Activation a{x, 0.f, sum_x};
    std::int32_t out;
    dot_n<1>(w, &a, n, &out);
    return out;
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/// VNNI: 64 int8 products per `vpdpbusd`; w enters as w + 128 (sign bit flipped), so the result is
/// corrected by 128 · Σ x (`sum_x`, computed once per vector). `dot_n<N>` loads each 64 weights once
/// for N vectors.
template <class Arch>
  requires(simd::kHasAvx512bw<Arch>)
struct Int8Dot<Arch> {
  static constexpr const char* kName = "avx512-vnni";

  /// out[i · N + j] = row w[i] · a[j] (i < R rows of n int8 weights, j < N vectors): two int32
  /// accumulators per (row, vector), so each chain takes one `vpdpbusd` per 128 columns; each 64
  /// weights loaded once for the N vectors and each 64 activation codes once for the R rows. Lanes
  /// wrap modulo 2³², which is harmless: the corrected total fits int32 for n < 2^17. The codes are
  /// prefetched into L2 kCodePrefetchBytes ahead while that stays below `stop` (null: no prefetch).
  template <std::size_t R, std::size_t N>
  static void dot_rows(const std::int8_t* const* w, const Int8Activation* a, std::size_t n, std::int32_t* out,
                       const std::int8_t* stop) noexcept {
    constexpr std::size_t NP = (N + 3) / 4 * 4;
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i acc[R][NP][2];
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < NP; ++j) acc[i][j][0] = acc[i][j][1] = _mm512_setzero_si512();
    std::size_t c = 0;
    for (; c + 128 <= n; c += 128) {
      __m512i u[R][2];
      for (std::size_t i = 0; i < R; ++i) {
        if (stop != nullptr) {  // offsets, so no pointer is formed past the codes
          const auto ahead = static_cast<std::size_t>(stop - (w[i] + c));
          if (ahead > detail::kCodePrefetchBytes) prefetch_l2(w[i] + c + detail::kCodePrefetchBytes, 1);
          if (ahead > detail::kCodePrefetchBytes + 64) prefetch_l2(w[i] + c + detail::kCodePrefetchBytes + 64, 1);
        }
        u[i][0] = _mm512_xor_si512(_mm512_loadu_si512(w[i] + c), flip);
        u[i][1] = _mm512_xor_si512(_mm512_loadu_si512(w[i] + c + 64), flip);
      }
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t k = 0; k < 2; ++k) {
          __m512i x = _mm512_loadu_si512(a[j].q + c + 64 * k);
          if constexpr (R > 1) simd::pin(x);  // one load, shared by the rows (simd::pin says why)
          for (std::size_t i = 0; i < R; ++i) acc[i][j][k] = _mm512_dpbusd_epi32(acc[i][j][k], u[i][k], x);
        }
    }
    for (; c < n; c += 64) {  // masked tail: x is 0 in masked lanes, so their (flipped) w does not count
      const std::size_t left = n - c;
      const __mmask64 m = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
      for (std::size_t i = 0; i < R; ++i) {
        const __m512i u = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w[i] + c), flip);
        for (std::size_t j = 0; j < N; ++j)
          acc[i][j][0] = _mm512_dpbusd_epi32(acc[i][j][0], u, _mm512_maskz_loadu_epi8(m, a[j].q + c));
      }
    }
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < NP; j += 4) {
        std::int32_t t[4];
        lane_totals4(_mm512_add_epi32(acc[i][j][0], acc[i][j][1]), _mm512_add_epi32(acc[i][j + 1][0], acc[i][j + 1][1]),
                     _mm512_add_epi32(acc[i][j + 2][0], acc[i][j + 2][1]), _mm512_add_epi32(acc[i][j + 3][0], acc[i][j + 3][1]), t);
        for (std::size_t k = 0; k < 4 && j + k < N; ++k) out[i * N + j + k] = t[k] - 128 * a[j + k].sum;
      }
  }

  /// The lane totals of a, b, c, d (int32, modulo 2³²) by a transposing tree.
  static void lane_totals4(__m512i a, __m512i b, __m512i c, __m512i d, std::int32_t* out) noexcept {
    const __m512i ab = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xEE));
    const __m512i cd = _mm512_add_epi32(_mm512_shuffle_i32x4(c, d, 0x44), _mm512_shuffle_i32x4(c, d, 0xEE));
    __m512i x = _mm512_add_epi32(_mm512_shuffle_i32x4(ab, cd, 0x88), _mm512_shuffle_i32x4(ab, cd, 0xDD));
    x = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
    x = _mm512_add_epi32(x, _mm512_shuffle_epi32(x, _MM_PERM_CDAB));
    alignas(64) std::int32_t lanes[16];
    _mm512_store_si512(lanes, x);
    for (std::size_t j = 0; j < 4; ++j) out[j] = lanes[4 * j];
  }

  /// Row w against N vectors (`dot_rows<1, N>`, no prefetch).
  template <std::size_t N>
  static void dot_n(const std::int8_t* w, const Int8Activation* a, std::size_t n, std::int32_t* out) noexcept {
    dot_rows<1, N>(&w, a, n, out, nullptr);
  }
  [[nodiscard]] static std::int32_t dot(const std::int8_t* w, const std::int8_t* x, std::size_t n,
                                        std::int32_t sum_x) noexcept {
    const Int8Activation a{x, 0.f, sum_x};
    std::int32_t out;
    dot_n<1>(w, &a, n, &out);
    return out;
  }
};
#endif

namespace detail {
/// y[(j0 + j) · rows + r] = s_r · sx_j · (row r · a[j]) for rows [r0, r1) and j < m ≤ kVecTile: two
/// rows per `Int8Dot::dot_rows` call, the last odd row alone (the integer sums are exact, so the
/// grouping changes nothing).
template <class Arch, class View>
inline void w8a8_rows(const View& w, std::size_t r0, std::size_t r1, const Int8Activation* a, std::size_t m, float* y,
                      std::size_t j0) noexcept {
  using D = Int8Dot<Arch>;
  // only the first vector group of a pass brings the rows in: the later ones find them in L1 / L2
  const auto* stop = j0 % kVecBlock == 0 ? reinterpret_cast<const std::int8_t*>(w.codes + w.rows * w.row_bytes) : nullptr;
  for (std::size_t r = r0; r < r1;) {
    const std::size_t k = r + 2 <= r1 ? 2 : 1;  // rows in this call
    const std::int8_t* rows[2] = {reinterpret_cast<const std::int8_t*>(w.row(r)),
                                  reinterpret_cast<const std::int8_t*>(w.row(r + k - 1))};
    std::int32_t d[2 * kVecTile];
    auto call = [&]<std::size_t R>() {
      switch (m) {
        case 4: D::template dot_rows<R, 4>(rows, a, w.cols, d, stop); break;
        case 3: D::template dot_rows<R, 3>(rows, a, w.cols, d, stop); break;
        case 2: D::template dot_rows<R, 2>(rows, a, w.cols, d, stop); break;
        default: D::template dot_rows<R, 1>(rows, a, w.cols, d, stop); break;
      }
    };
    if (k == 2) call.template operator()<2>();
    else call.template operator()<1>();
    for (std::size_t i = 0; i < k; ++i) {
      const float s = to_float(w.row_scales(r + i)[0]);
      for (std::size_t j = 0; j < m; ++j) y[(j0 + j) * w.rows + r + i] = s * a[j].sx * static_cast<float>(d[i * m + j]);
    }
    r += k;
  }
}

#if defined(BARATO_AMX_COMPILED)
/// `gemv_w8a8_batch` by AMX tiles (quant/amx.hpp): the n vectors' codes (`stride` bytes apart) packed
/// into `pack` (amx_pack_bytes(n, cols / 64, 1) bytes), each thread's rows 32 at a time × 16 vectors at a
/// time by `amx_rows<1>`, the columns past the last 64 added in int32, then y = s_r · sx · d as
/// `w8a8_rows` does it — the integer d is the same, so the bits are; rows past a thread's last 32 by
/// `w8a8_rows`.
template <class Arch, class View>
void w8a8_amx(const View& w, const Int8Activation* a, std::size_t n, float* y, int threads, std::ptrdiff_t stride,
              std::int8_t* pack) {
  const std::size_t chunks = w.cols / kAmxChunk, full = chunks * kAmxChunk;
  const std::size_t groups = (n + kAmxVectors - 1) / kAmxVectors;
  const std::int8_t* first[1] = {a[0].q};
  amx_pack_planes<1>(first, stride, n, chunks, pack);
  amx_row_passes(
      w.rows, useful_threads(w.rows, w.cols, n, w.row_bytes, threads),
      [&](std::size_t r) {
        alignas(64) std::int32_t sums[2][16][16];
        for (std::size_t g = 0; g < groups; ++g) {
          amx_rows<1>(w.row(r), w.row_bytes, pack, g, chunks, sums);
          const std::size_t m = amx_group_vectors(n, g);
          for (std::size_t i = 0; i < kAmxRows; ++i) {
            const auto* q = reinterpret_cast<const std::int8_t*>(w.row(r + i));
            const float s = to_float(w.row_scales(r + i)[0]);
            for (std::size_t v = 0; v < m; ++v) {
              const Int8Activation& x = a[g * kAmxVectors + v];
              std::int32_t d = sums[i / 16][i % 16][v];
              for (std::size_t c = full; c < w.cols; ++c) d += std::int32_t{q[c]} * x.q[c];
              y[(g * kAmxVectors + v) * w.rows + r + i] = s * x.sx * static_cast<float>(d);
            }
          }
        }
      },
      [&](std::size_t r, std::size_t hi) {
        walk_rows(w.row_bytes, n, r, hi, [&](std::size_t r0, std::size_t r1, std::size_t j, std::size_t m) {
          w8a8_rows<Arch>(w, r0, r1, a + j, m, y, j);
        });
      });
}
#endif

/// Y = dequant(W) · dequant(A) for n quantized vectors a [n], rows split between threads. With `pack`
/// (amx_pack_bytes(n, cols / 64, 1) bytes; the codes of vector t at a[0].q + t · stride), batches of
/// kAmxMinVectors or more take AMX tiles where the build and the kernel allow them (same bits).
template <class Arch, class View>
void gemv_w8a8_batch(const View& w, const Int8Activation* a, std::size_t n, float* y, int threads,
                     std::ptrdiff_t stride = 0, std::int8_t* pack = nullptr) {
#if defined(BARATO_AMX_COMPILED)
  if constexpr (simd::kHasAvx512bw<Arch>) {
    if (pack != nullptr && amx_takes(n, w.rows, w.cols, kAmxChunk)) {
      w8a8_amx<Arch>(w, a, n, y, threads, stride, pack);
      return;
    }
  }
#else
  (void)stride;
  (void)pack;
#endif
  parallel_for(
      w.rows, useful_threads(w.rows, w.cols, n, w.row_bytes, threads),
      [&](std::size_t lo, std::size_t hi) {
        walk_rows(w.row_bytes, n, lo, hi,
                  [&](std::size_t r0, std::size_t r1, std::size_t j, std::size_t m) { w8a8_rows<Arch>(w, r0, r1, a + j, m, y, j); });
      },
      kRowGrain);
}
}  // namespace detail

/// y_r = s_r · sx · Σ_c q_rc · xq_c for int8 weights with one scale per row or per tensor.
/// xq [cols], y [rows]. Throws `shape_error` on mismatched sizes. O(rows·cols); allocates nothing.
template <class Arch = simd::DefaultArch, Granularity Gran, Element S>
  requires(std::is_same_v<Gran, PerRow> || std::is_same_v<Gran, PerTensor>)
void gemv_w8a8(const QuantizedView<AbsMax<8, Gran, S>>& w, std::span<const std::int8_t> xq, float sx,
               std::span<float> y, int threads = 1) {
  require(xq.size() == w.cols, "quant::gemv_w8a8: xq has ", xq.size(), " elements, expected cols = ", w.cols);
  require(y.size() == w.rows, "quant::gemv_w8a8: y has ", y.size(), " elements, expected rows = ", w.rows);
  Int8Activation a{xq.data(), sx, 0};
  for (auto v : xq) a.sum += v;
  detail::gemv_w8a8_batch<Arch>(w, &a, 1, y.data(), threads);
}

/// A W8A8 linear layer: int8 per-row weights, activations quantized per token on the fly.
/// `apply_batch` quantizes the n tokens once per call into the calling thread's `ActivationArena`
/// (quant/scratch.hpp: n · (cols rounded to 64) bytes of codes + the scales) and walks the rows as
/// `gemv_batch` does: each weight is read from memory once per call, each 64 weights are loaded once
/// for 4 tokens (`Int8Dot::dot_n<4>`), and row t equals `apply` of token t bit for bit (the integer
/// dot products are exact; y = s_r · sx_t · d in the same order). Error: per token, x is rounded to
/// sx / 2 (sx = max |x| / 127), so |y_r − Ŵ_r·x| ≤ (sx / 2) Σ_c |Ŵ_rc| plus one fp32 rounding.
/// Allocates nothing once the arena holds the largest batch (`reserve`); `apply` may run from several
/// threads at once. On AMX hosts batches of `kAmxMinVectors` or more run on AMX tiles (quant/amx.hpp;
/// the same integer products, so the same bits).
template <Element S = f16, class Arch = simd::DefaultArch>
class W8A8Linear {
 public:
  using format = AbsMax<8, PerRow, S>;

  W8A8Linear(std::size_t rows, std::size_t cols, std::span<const float> w,
             std::pmr::memory_resource* mr = std::pmr::get_default_resource())
      : m_(rows, cols, w, mr) {}

  [[nodiscard]] std::size_t rows() const noexcept { return m_.rows(); }
  [[nodiscard]] std::size_t cols() const noexcept { return m_.cols(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return m_.bytes(); }
  [[nodiscard]] const QuantizedMatrix<format>& matrix() const noexcept { return m_; }

  /// Grows the calling thread's arena for batches of up to n tokens (then nothing allocates).
  void reserve(std::size_t n) const { ActivationArena::local().reserve(scratch_bytes(n)); }

  /// y = Ŵ · dequant(quant(x)): `apply_batch` with n = 1. Throws `shape_error` / `value_error` (non-finite x).
  void apply(std::span<const float> x, std::span<float> y, int threads = 1) const {
    require(x.size() == cols(), "quant::W8A8Linear::apply: x has ", x.size(), " elements, expected cols = ", cols());
    require(y.size() == rows(), "quant::W8A8Linear::apply: y has ", y.size(), " elements, expected rows = ", rows());
    run(x, y, 1, threads);
  }
  /// Y = Ŵ · dequant(quant(X)) for n tokens (X [n, cols], Y [n, rows]); see the class comment.
  void apply_batch(std::span<const float> x, std::span<float> y, std::size_t n, int threads = 1) const {
    require(x.size() == n * cols() && y.size() == n * rows(), "quant::W8A8Linear::apply_batch: expected x [", n, ", ",
            cols(), "] and y [", n, ", ", rows(), "], got ", x.size(), " and ", y.size(), " elements");
    run(x, y, n, threads);
  }

 private:
  [[nodiscard]] std::size_t scratch_bytes(std::size_t n) const noexcept {
    return scratch_round(n * sizeof(Int8Activation)) + n * scratch_round(cols()) +
           (kAmxCompiled ? amx_pack_bytes(n, cols() / kAmxChunk, 1) : 0);
  }
  void run(std::span<const float> x, std::span<float> y, std::size_t n, int threads) const {
    if (n == 0) return;
    const std::size_t c = cols(), head = scratch_round(n * sizeof(Int8Activation));
    std::byte* s = ActivationArena::local().get(scratch_bytes(n));
    for (std::size_t t = 0; t < n; ++t) ::new (s + t * sizeof(Int8Activation)) Int8Activation{};
    auto* acts = std::launder(reinterpret_cast<Int8Activation*>(s));  // [n], then the codes [n, cols (rounded)]
    for (std::size_t t = 0; t < n; ++t) {
      auto* q = reinterpret_cast<std::int8_t*>(s + head + t * scratch_round(c));
      acts[t].q = q;
      acts[t].sx = quantize_activation(x.subspan(t * c, c), std::span<std::int8_t>(q, c));
      for (std::size_t i = 0; i < c; ++i) acts[t].sum += q[i];
    }
    detail::gemv_w8a8_batch<Arch>(m_.view(), acts, n, y.data(), threads, static_cast<std::ptrdiff_t>(scratch_round(c)),
                                  kAmxCompiled ? reinterpret_cast<std::int8_t*>(s + head + n * scratch_round(c)) : nullptr);
  }

  QuantizedMatrix<format> m_;
};

static_assert(nn::LinearLayer<W8A8Linear<>>);

}  // namespace barato::quant
