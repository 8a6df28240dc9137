// The vectorised f32 exp and erf (runtime/cpu/VectorMath.h) against libm's double exp and erf over
// a sweep of every float exponent, and the array loops built on them against the scalar functions.
//
// Error model. expF32: x = n ln2 + r with n * ln2hi and x - n * ln2hi exact, so the reduction
// adds only n * ln2lo's rounding (|n| <= 150: < 2e-9 absolute in r, i.e. relative in exp); the
// polynomial's own error is 3.6e-9 relative; the Horner steps round 5 times at r^2 scale and the
// final 1 + (...) once; 2^n is applied in two exact-power products, the last rounding once. So
// about 0.5 ulp of rounding plus 0.1 ulp of approximation: 2 ulp is the bound (measured: under
// 1.5). Subnormal results round once from that value: 1 ulp of 2^-149.
// erfF32: |x| < 1 is x + x a(x^2) (fit 1.2e-9 relative, the exact x carries the leading bits:
// measured 1.26 ulp in a float simulation); 1 <= |x| <= 4 is 1 - exp(b(x) - x^2), where x^2's
// rounding (up to 0.5 ulp of 16), b's fit and expF32's error are relative errors of erfc, scaled
// by erfc/erf <= 0.19 into erf: measured 1.3 ulp. Bound 2 ulp.
#include "runtime/cpu/VectorMath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

using namespace megac::runtime::cpu;

namespace {

/// The f32 ulp at the (double) value v: the spacing of floats with v's exponent (2^-149 for
/// subnormals).
double ulpAt(double v) {
  int e = std::max(std::ilogb(std::fabs(v)), -126);
  return std::ldexp(1.0, e - 23);
}

/// Error of got in f32 ulps of the exact value ref; 0 when both are the same infinity.
double ulpError(float got, double ref) {
  if (std::isinf(ref) || std::fabs(ref) > std::numeric_limits<float>::max())
    return std::isinf(got) && (got > 0) == (ref > 0) ? 0.0 : INFINITY;
  return std::fabs(static_cast<double>(got) - ref) / ulpAt(ref);
}

/// Every float with a stride of 131 bit patterns (33 million, each exponent many times), both
/// signs, and the values around the branch points and limits.
std::vector<float> sweep() {
  std::vector<float> xs;
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 131)
    xs.push_back(std::bit_cast<float>(uint32_t(bits)));
  for (float edge : {0.0f, 1.0f, 4.0f, 88.7228394f, -87.3365479f, -103.972076f, -104.0f, 89.0f,
                     0.34657359f, std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::min(), std::numeric_limits<float>::max()}) {
    float up = edge, down = edge;
    for (int i = 0; i < 64; ++i) {
      xs.push_back(up), xs.push_back(-up), xs.push_back(down), xs.push_back(-down);
      up = std::nextafter(up, INFINITY), down = std::nextafter(down, -INFINITY);
    }
  }
  return xs;
}

} // namespace

TEST(VectorMath, ExpIsWithinTwoUlpOfLibmEverywhere) {
  double worst = 0.0;
  float worstAt = 0.0f;
  for (float x : sweep()) {
    float got = vmath::expF32(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got)) << "exp(NaN) is " << got;
      continue;
    }
    double err = ulpError(got, std::exp(static_cast<double>(x)));
    ASSERT_LE(err, 2.0) << "exp(" << x << ") = " << got << ", libm " << std::exp(double(x));
    if (err > worst)
      worst = err, worstAt = x;
  }
  EXPECT_EQ(vmath::expF32(INFINITY), INFINITY);
  EXPECT_EQ(vmath::expF32(-INFINITY), 0.0f);
  EXPECT_EQ(vmath::expF32(0.0f), 1.0f);
  EXPECT_EQ(vmath::expF32(-103.0f), float(std::exp(-103.0))); // subnormal, rounded once
  std::printf("expF32: worst %.3f ulp at %.9g\n", worst, double(worstAt));
}

TEST(VectorMath, ErfIsWithinTwoUlpOfLibmEverywhere) {
  double worst = 0.0;
  float worstAt = 0.0f;
  for (float x : sweep()) {
    float got = vmath::erfF32(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got)) << "erf(NaN) is " << got;
      continue;
    }
    double err = ulpError(got, std::erf(static_cast<double>(x)));
    ASSERT_LE(err, 2.0) << "erf(" << x << ") = " << got << ", libm " << std::erf(double(x));
    if (err > worst)
      worst = err, worstAt = x;
  }
  EXPECT_EQ(vmath::erfF32(INFINITY), 1.0f);
  EXPECT_EQ(vmath::erfF32(-INFINITY), -1.0f);
  EXPECT_TRUE(std::signbit(vmath::erfF32(-0.0f)));
  std::printf("erfF32: worst %.3f ulp at %.9g\n", worst, double(worstAt));
}

// The array loops run blocks of 16 through the vectorised code and the tail through the scalar
// functions; both must give the scalar functions' bits, in place or not, for every tail length.
TEST(VectorMath, ArrayLoopsGiveTheScalarFunctionsBits) {
  std::vector<float> x(1008), dy(1008);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::ldexp(float(int(i * 7919 % 2001) - 1000), -7); // [-7.8, 7.8]
    dy[i] = float(int(i * 104729 % 17) - 8) / 8.0f;
  }
  x[3] = NAN, x[5] = INFINITY, x[6] = -INFINITY, x[7] = -0.0f;
  const float kRsqrt2 = static_cast<float>(std::numbers::sqrt2 / 2);
  const float kInvSqrt2Pi =
      static_cast<float>(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
  for (int64_t n : {0, 1, 15, 16, 17, 31, 33, 1000}) {
    std::vector<float> y(static_cast<size_t>(n)), inPlace(x.begin(), x.begin() + n);
    vmath::geluErfF32(x.data(), y.data(), n);
    vmath::geluErfF32(inPlace.data(), inPlace.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float v = x[size_t(i)], expected = v * 0.5f * (1.0f + vmath::erfF32(v * kRsqrt2));
      ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(y[size_t(i)]))
          << "gelu n " << n << " i " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(inPlace[size_t(i)]));
    }
    vmath::geluErfGradF32(dy.data(), x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float v = x[size_t(i)];
      float slope = 0.5f * (1.0f + vmath::erfF32(v * kRsqrt2)) +
                    v * kInvSqrt2Pi * vmath::expF32(-0.5f * v * v);
      float expected = dy[size_t(i)] * slope;
      ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(y[size_t(i)]))
          << "gelu grad n " << n << " i " << i;
    }
    std::vector<float> finite(x.begin() + 8, x.begin() + 8 + n);
    std::vector<float> e(finite);
    double sum = vmath::expShiftSumF32(finite.data(), 2.5f, e.data(), n);
    double lane[16] = {}, expectedSum = 0.0;
    int64_t body = n / 16 * 16;
    for (int64_t i = 0; i < n; ++i) {
      float expected = vmath::expF32(finite[size_t(i)] - 2.5f);
      ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(e[size_t(i)]))
          << "exp n " << n << " i " << i;
      if (i < body)
        lane[i % 16] += double(expected);
    }
    for (double l : lane)
      expectedSum += l;
    for (int64_t i = body; i < n; ++i)
      expectedSum += double(e[size_t(i)]);
    EXPECT_EQ(expectedSum, sum) << "the lane-ordered sum, n " << n;

    float best = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
      best = std::max(best, finite[size_t(i)]);
    EXPECT_EQ(best, vmath::maxF32(finite.data(), n)) << "max, n " << n;
    if (n > 9) {
      EXPECT_TRUE(std::isnan(vmath::maxF32(x.data(), n))) << "a NaN in the row, n " << n;
    }

    // The softmax gradient row: p with zeros (masked keys, where dp is NaN: still 0 out).
    std::vector<float> p(e), dp(y.size());
    for (int64_t i = 0; i < n; ++i) {
      dp[size_t(i)] = dy[size_t(i)];
      if (i % 5 == 2)
        p[size_t(i)] = 0.0f, dp[size_t(i)] = NAN;
    }
    std::vector<float> ds(dp);
    vmath::softmaxGradRowF32(p.data(), ds.data(), n);
    double dotLane[16] = {}, dot = 0.0;
    for (int64_t i = 0; i < body; ++i)
      if (p[size_t(i)] != 0.0f)
        dotLane[i % 16] += double(p[size_t(i)]) * double(dp[size_t(i)]);
    for (double l : dotLane)
      dot += l;
    for (int64_t i = body; i < n; ++i)
      if (p[size_t(i)] != 0.0f)
        dot += double(p[size_t(i)]) * double(dp[size_t(i)]);
    for (int64_t i = 0; i < n; ++i) {
      float pi = p[size_t(i)];
      float expected = pi != 0.0f ? pi * (dp[size_t(i)] - float(dot)) : 0.0f;
      ASSERT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(ds[size_t(i)]))
          << "softmax gradient n " << n << " i " << i;
    }
  }
}

// GELU through the f32 erf against the exact GELU in double: y = 0.5 v (1 + erf(v / sqrt 2)),
// where erf's 2 ulp (<= 2^-23 absolute below 1) and the rounding of 1 + erf (2^-24) reach y
// scaled by 0.5 |v|, plus the roundings of the products: |y - exact| <= |v| 2^-23 + 2 ulp(y).
// (For v << 0 the 1 + erf cancels: the absolute bound still holds, the relative one does not,
// as for any f32 evaluation of this formula.)
TEST(VectorMath, GeluErfIsWithinItsErrorBound) {
  for (float v = -12.0f; v <= 12.0f; v += 0.00390625f * 0.37f) {
    float got;
    vmath::geluErfF32(&v, &got, 1);
    double exact = 0.5 * double(v) * (1.0 + std::erf(double(v) / std::numbers::sqrt2));
    double bound = std::fabs(double(v)) * std::ldexp(1.0, -23) + 2 * ulpAt(exact);
    ASSERT_LE(std::fabs(double(got) - exact), bound) << "gelu(" << v << ")";
  }
}
