// Branch-free f32 exp and erf that the compiler vectorises, and the f32 loops of the CPU kernels
// built on them (GELU, softmax and cross-entropy exponentials). f64 keeps the libm functions.
//
// expF32 and erfF32 are plain inline functions (straight-line arithmetic, selects, bit casts), so
// a loop over them vectorises; the array loops in VectorMath.cpp are compiled once per x86-64
// level (AVX-512F, AVX2, baseline SSE2) and picked at load time. They use no FMA and no
// reassociation, so every level gives the same bits as the scalar functions here.
// tests/unit/runtime/VectorMathTest.cpp measures the error against libm's double exp and erf.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace megac::runtime::cpu::vmath {

/// exp(x) in f32, within 2 ulp of the exact value for normal results (the test's measured bound),
/// exact 0 below about -103.97 and +inf above about 88.72; NaN stays NaN. Subnormal results are
/// rounded once from a ~1 ulp value.
inline float expF32(float x) {
  // x = n ln2 + r, |r| <= ln2/2, with n = round(x / ln2) by the 1.5 * 2^23 trick (no rint, so
  // baseline SSE2 vectorises it too); ln2 = kLn2Hi + kLn2Lo with kLn2Hi exact in 9 bits, so
  // n * kLn2Hi is exact for |n| <= 150 and x - n * kLn2Hi is exact (Sterbenz).
  constexpr float kLog2e = 1.44269502f, kShifter = 12582912.0f; // 1.5 * 2^23
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194442e-4f;
  float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x); // NaN passes through
  float t = xc * kLog2e + kShifter;
  float n = t - kShifter;
  float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  // exp(r) = 1 + r + r^2 q(r): a least-squares fit to the relative error on [-ln2/2, ln2/2]
  // (3.6e-9 in exact arithmetic).
  float q = 1.37529697e-3f;
  q = q * r + 8.36891495e-3f;
  q = q * r + 4.16695066e-2f;
  q = q * r + 0.166665182f;
  q = q * r + 0.499999881f;
  float p = 1.0f + (r + r * r * q);
  // 2^n as two normal factors 2^(n/2) 2^(n - n/2), so that results down to 2^-150 (subnormal)
  // and up to 2^128 (overflow to inf) round once, in the last product. n is read from t's low
  // mantissa bits: no float-to-int conversion (a NaN there would be undefined behaviour).
  int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kShifter));
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  float y = p * s1 * s2;
  return x != x ? x : y;
}

/// erf(x) in f32, within 2 ulp of the exact value (the test's measured bound); odd, erf(±inf) =
/// ±1, NaN stays NaN.
inline float erfF32(float x) {
  float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  ax = ax > 4.0f ? 4.0f : ax; // erf(4) rounds to 1 in f32 (1 - 1.5e-8)
  float z = ax * ax;
  // |x| < 1: erf(x) = x + x a(x^2), a fitted to erf(x)/x - 1 (1.2e-9 relative in exact
  // arithmetic); the leading x is exact, so the rounding sits in the smaller term.
  float a = 7.8473051e-05f;
  a = a * z + -8.008203e-4f;
  a = a * z + 5.18810051e-3f;
  a = a * z + -2.68536918e-2f;
  a = a * z + 0.112835824f;
  a = a * z + -0.37612626f;
  a = a * z + 0.128379166f;
  float small = ax + ax * a;
  // 1 <= |x| <= 4: erf(x) = 1 - exp(-x^2 + b(x)), b fitted to log(erfc(x)) + x^2 (its error is
  // scaled by erfc(x)/erf(x) <= 0.19 into erf).
  float b = 1.87357829e-4f;
  b = b * ax + -2.95697618e-3f;
  b = b * ax + 2.18742546e-2f;
  b = b * ax + -0.1031802f;
  b = b * ax + 0.361937374f;
  b = b * ax + -1.1271373f;
  b = b * ax + -3.29979899e-4f;
  float large = 1.0f - expF32(b - z);
  float y = ax < 1.0f ? small : large;
  y = std::bit_cast<float>(std::bit_cast<uint32_t>(y) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
  return x != x ? x : y;
}

/// y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): the exact (erf) GELU, elementwise; y may be x.
void geluErfF32(const float *x, float *y, int64_t n);

/// dx = dy (Phi(x) + x phi(x)): the exact GELU's gradient, elementwise; dx may be dy or x.
void geluErfGradF32(const float *dy, const float *x, float *dx, int64_t n);

/// y[j] = exp(x[j] - shift) for j < n (y may be x) and returns their sum, in double: 16 lanes
/// (j mod 16) summed in j order, then added lane by lane, then the tail in order. The order
/// depends on n only, never on the machine.
double expShiftSumF32(const float *x, float shift, float *y, int64_t n);

/// y[j] *= scale for j < n.
void scaleF32(float *y, float scale, int64_t n);

/// The largest of x[0..n) (-inf for n = 0), NaN if any is NaN. Exact: no order to keep.
float maxF32(const float *x, int64_t n);

/// rowMax (KernelUtil.h) of a contiguous row, through maxF32 for f32: the same value.
template <typename T> double contiguousRowMax(const T *row, int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    return static_cast<double>(maxF32(row, n));
  else {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j)
      if (row[j] > m || row[j] != row[j])
        m = static_cast<double>(row[j]);
    return m;
  }
}

/// The softmax gradient of one row in place: dp[j] = p[j] (dp[j] - sum_j' p[j'] dp[j']), and
/// exactly 0 where p[j] = 0 (a masked key passes nothing back, whatever dp holds there). The sum
/// is in double, in expShiftSumF32's lane order; the rest in f32.
void softmaxGradRowF32(const float *p, float *dp, int64_t n);

} // namespace megac::runtime::cpu::vmath
