// bf16 and f16 conversions against independent oracles: GCC's _Float16 and exact arithmetic;
// countNonFinite over every float dtype.
#include "support/Float16.h"
#include "support/HostTensor.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace megac;

namespace {

/// The nearest bf16 to f by exhaustive comparison in double (ties to the even mantissa).
uint16_t nearestBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t down = static_cast<uint16_t>(u >> 16); // truncation: toward zero
  uint16_t up = static_cast<uint16_t>(down + 1);  // next magnitude away from zero
  double upValue = bf16ToFloat(up);
  if ((up & 0x7fff) == 0x7f80) // inf: IEEE rounds as if the exponent were unbounded (2^128)
    upValue = std::copysign(std::ldexp(1.0, 128), f);
  double dd = std::fabs(double(bf16ToFloat(down)) - double(f));
  double du = std::fabs(upValue - double(f));
  if (dd < du)
    return down;
  if (du < dd)
    return up;
  return (down & 1) ? up : down;
}

} // namespace

TEST(Float16, HalfToFloatMatchesCompilerForEveryBitPattern) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    _Float16 h = std::bit_cast<_Float16>(static_cast<uint16_t>(bits));
    float want = static_cast<float>(h);
    float got = halfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << bits;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << bits;
  }
}

TEST(Float16, FloatToHalfRoundsLikeTheCompiler) {
  // Every half value, every midpoint between neighbours (the ties) and random floats over the
  // whole range, including subnormals and overflow.
  std::vector<float> probes;
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    float v = halfToFloat(static_cast<uint16_t>(bits));
    float next = halfToFloat(static_cast<uint16_t>(bits + 1));
    for (float s : {1.0f, -1.0f}) {
      probes.push_back(s * v);
      probes.push_back(s * static_cast<float>((double(v) + double(next)) / 2)); // exact tie
      probes.push_back(s * std::nextafter((v + next) / 2, 0.0f));
      probes.push_back(s * std::nextafter((v + next) / 2, 1e9f));
    }
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 200000; ++i)
    probes.push_back(std::bit_cast<float>(static_cast<uint32_t>(gen())));
  probes.push_back(65519.0f);
  probes.push_back(65520.0f);
  probes.push_back(1e30f);
  probes.push_back(INFINITY);
  probes.push_back(-INFINITY);
  for (float f : probes) {
    if (std::isnan(f)) {
      EXPECT_EQ(floatToHalf(f) & 0x7c00, 0x7c00);
      EXPECT_NE(floatToHalf(f) & 0x03ff, 0);
      continue;
    }
    uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(floatToHalf(f), want) << "f = " << f << " bits " << std::bit_cast<uint32_t>(f);
  }
}

TEST(Float16, KnownHalfValues) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);         // rounds up to inf
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 1); // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0); // tie with 0: to even
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 2); // tie between 1 and 2 ulps: to even
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(Float16, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);     // tie: to even (down)
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82); // tie: to even (up)
  EXPECT_EQ(floatToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(floatToBf16(-INFINITY), 0xff80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80); // rounds to inf
  uint16_t nan = floatToBf16(std::nanf(""));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0);
  // A NaN whose payload sits only in the low 16 bits must stay NaN.
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::bit_cast<float>(0x7f800001u)))));

  std::mt19937 gen(11);
  for (int i = 0; i < 500000; ++i) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(gen()));
    if (std::isnan(f) || std::isinf(f))
      continue;
    ASSERT_EQ(floatToBf16(f), nearestBf16(f)) << "f = " << f;
  }
  for (uint32_t bits = 0; bits < 65536; ++bits) { // every bf16 survives the round trip
    float v = bf16ToFloat(static_cast<uint16_t>(bits));
    if (!std::isnan(v)) {
      ASSERT_EQ(floatToBf16(v), bits);
    }
  }
}

// countNonFinite (support/HostTensor.h), which --save-grads uses to refuse NaN/inf gradients:
// every float dtype, NaN and both infinities counted, the largest finite values not.
TEST(CountNonFinite, EveryFloatDtype) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {0.f, -1.5f, nan, inf, -inf, 3.0e38f, 1e-40f};
  const int64_t n = int64_t(values.size());
  HostTensor f32 = HostTensor::zeros(DType::f32, {n});
  HostTensor f64 = HostTensor::zeros(DType::f64, {n});
  HostTensor bf = HostTensor::zeros(DType::bf16, {n});
  HostTensor half = HostTensor::zeros(DType::f16, {n});
  for (int64_t i = 0; i < n; ++i) {
    f32.data<float>()[i] = values[i];
    f64.data<double>()[i] = values[i];
    bf.data<uint16_t>()[i] = floatToBf16(values[i]);
    // 3e38 overflows f16 to inf: f16 counts four.
    half.data<uint16_t>()[i] = floatToHalf(values[i]);
  }
  EXPECT_EQ(countNonFinite(f32), 3);
  EXPECT_EQ(countNonFinite(f64), 3);
  EXPECT_EQ(countNonFinite(bf), 3);
  EXPECT_EQ(countNonFinite(half), 4);
  EXPECT_EQ(countNonFinite(HostTensor::zeros(DType::i32, {4})), 0);
  EXPECT_EQ(countNonFinite(HostTensor::zeros(DType::f32, {0})), 0);
}
