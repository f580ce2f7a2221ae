#pragma once
// Named tolerances shared by the tests, each with where its value comes from. (Test-specific bounds
// are named where they are used, with the same kind of comment.) u = 2⁻²⁴ ≈ 6·10⁻⁸ is the unit
// roundoff of fp32.

namespace barato::test {

/// An fp32 kernel against a double reference, relative to max |ref|. A sum of n fp32 terms is off by
/// at most n·u·Σ|terms| and typically √n·u; the tests' sums (dot products of d ≤ 128, softmax sums over
/// ≤ 4096 keys, rows of ≤ a few thousand columns) stay below ~4·10⁻⁶, so 10⁻⁵ has headroom yet fails on
/// any real error (a wrong row, a lost rescale or a dropped tail are ≥ 10⁻³).
inline constexpr double kFp32RelTol = 1e-5;
/// The absolute counterpart for values of magnitude ≤ 1: a few fp32 ulps of 1 (2u ≈ 1.2·10⁻⁷ each).
inline constexpr double kFp32AbsTol = 1e-6;
/// Half an fp32 ulp of a value of magnitude ≤ 1 (u ≈ 6·10⁻⁸), rounded up: what storing such a
/// value in fp32 may change it by.
inline constexpr double kFp32UnitRounding = 1e-7;
/// Relative slack on a bound that is itself computed in fp32 (a quantization step s = absmax / q_max,
/// its half step s/2, a product q·s): a few roundings of u each; 10⁻⁵ is generous and still negligible
/// against the step.
inline constexpr double kStepRoundingSlack = 1e-5;
/// Logits of the same model computed with a different block split (prefill chunks, pages): only the
/// summation order differs, through ~10 chained fp32 reductions of ≤ 512 terms per forward pass;
/// relative to max |logit|.
inline constexpr double kLogitReorderRelTol = 2e-5;
/// Guard of relative comparisons against a zero denominator (not a tolerance).
inline constexpr double kTiny = 1e-30;

}  // namespace barato::test
