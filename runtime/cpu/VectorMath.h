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

/// The constants of expF32 and erfF32, one definition for the CPU functions below and the CUDA
/// fusion generator, which writes the same functions into fused kernels (runtime/cuda/Fusion.cpp
/// `f32MathSource`: the fused kernels must give the CPU kernels' bits).
struct F32MathConstants {
  // exp: x = n ln2 + r with n = round(x / ln2) by the 1.5 * 2^23 shifter; ln2 = ln2Hi + ln2Lo
  // with ln2Hi exact in 9 bits. Inputs clamp to [expLow, expHigh] (NaN passes through).
  static constexpr float expLow = -104.0f, expHigh = 89.0f;
  static constexpr float log2e = 1.44269502f, shifter = 12582912.0f; // 1.5 * 2^23
  static constexpr float ln2Hi = 0.693359375f, ln2Lo = -2.12194442e-4f;
  /// exp(r) = 1 + r + r^2 q(r), q's coefficients from the highest power: a least-squares fit to
  /// the relative error on [-ln2/2, ln2/2] (3.6e-9 in exact arithmetic).
  static constexpr float expQ[5] = {1.37529697e-3f, 8.36891495e-3f, 4.16695066e-2f, 0.166665182f,
                                    0.499999881f};
  /// erf: |x| clamps to erfHigh (erf(4) rounds to 1 in f32: 1 - 1.5e-8).
  static constexpr float erfHigh = 4.0f;
  /// |x| < 1: erf(x) = x + x a(x^2), a fitted to erf(x)/x - 1 (1.2e-9 relative in exact
  /// arithmetic); highest power first.
  static constexpr float erfSmall[7] = {7.8473051e-05f,  -8.008203e-4f, 5.18810051e-3f,
                                        -2.68536918e-2f, 0.112835824f,  -0.37612626f,
                                        0.128379166f};
  /// 1 <= |x| <= 4: erf(x) = 1 - exp(-x^2 + b(x)), b fitted to log(erfc(x)) + x^2 (its error is
  /// scaled by erfc(x)/erf(x) <= 0.19 into erf); highest power first.
  static constexpr float erfLarge[7] = {1.87357829e-4f, -2.95697618e-3f, 2.18742546e-2f,
                                        -0.1031802f,    0.361937374f,    -1.1271373f,
                                        -3.29979899e-4f};
};

/// exp(x) in f32, within 2 ulp of the exact value for normal results (the test's measured bound),
/// exact 0 below about -103.97 and +inf above about 88.72; NaN stays NaN. Subnormal results are
/// rounded once from a ~1 ulp value.
inline float expF32(float x) {
  // n * ln2Hi is exact for |n| <= 150 and x - n * ln2Hi is exact (Sterbenz); n is rounded by the
  // shifter (no rint, so baseline SSE2 vectorises it too).
  using C = F32MathConstants;
  float xc = x < C::expLow ? C::expLow : (x > C::expHigh ? C::expHigh : x); // NaN passes through
  float t = xc * C::log2e + C::shifter;
  float n = t - C::shifter;
  float r = (xc - n * C::ln2Hi) - n * C::ln2Lo;
  float q = C::expQ[0];
  q = q * r + C::expQ[1];
  q = q * r + C::expQ[2];
  q = q * r + C::expQ[3];
  q = q * r + C::expQ[4];
  float p = 1.0f + (r + r * r * q);
  // 2^n as two normal factors 2^(n/2) 2^(n - n/2), so that results down to 2^-150 (subnormal)
  // and up to 2^128 (overflow to inf) round once, in the last product. n is read from t's low
  // mantissa bits: no float-to-int conversion (a NaN there would be undefined behaviour).
  int32_t ni =
      static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(C::shifter));
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  float y = p * s1 * s2;
  return x != x ? x : y;
}

/// erf(x) in f32, within 2 ulp of the exact value (the test's measured bound); odd, erf(±inf) =
/// ±1, NaN stays NaN.
inline float erfF32(float x) {
  using C = F32MathConstants;
  float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  ax = ax > C::erfHigh ? C::erfHigh : ax;
  float z = ax * ax;
  // The leading x of the small branch is exact, so the rounding sits in the smaller term.
  float a = C::erfSmall[0];
  a = a * z + C::erfSmall[1];
  a = a * z + C::erfSmall[2];
  a = a * z + C::erfSmall[3];
  a = a * z + C::erfSmall[4];
  a = a * z + C::erfSmall[5];
  a = a * z + C::erfSmall[6];
  float small = ax + ax * a;
  float b = C::erfLarge[0];
  b = b * ax + C::erfLarge[1];
  b = b * ax + C::erfLarge[2];
  b = b * ax + C::erfLarge[3];
  b = b * ax + C::erfLarge[4];
  b = b * ax + C::erfLarge[5];
  b = b * ax + C::erfLarge[6];
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
