// CPU mixture-of-experts kernels (runtime/cpu/Moe.cpp) against hand-computed values and a dense
// masked reference: TopKMask's tie rule, dispatch/combine, the grouped GEMMs (both weight
// layouts) computing active rows only, the weights gradients (also accumulating into an
// accumulator, in place or not), and the shape errors.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <random>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

HostTensor f64Random(std::vector<int64_t> shape, std::mt19937 &rng) {
  HostTensor t = HostTensor::zeros(DType::f64, shape);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<double>()[i] = u(rng);
  return t;
}

// 3 tokens, 4 experts: token 0 -> {0, 2}, token 1 -> {1, 2}, token 2 -> {0, 3} (experts 1 and
// 3 have one token each).
const std::vector<double> kGates = {0.6, 0, 0.4, 0, 0, 0.3, 0.7, 0, 0.9, 0, 0, 0.1};

} // namespace

TEST(MoeKernels, TopKMaskBreaksTiesByLowerIndex) {
  HostTensor x = f32({3, 4}, {0.1f, 0.5f, 0.5f, 0.2f, 1, 1, 1, 1, -1, NAN, 3, -2});
  HostTensor out = HostTensor::zeros(DType::f32, {3, 4});
  ASSERT_TRUE(topkMask(refOf(x), 2, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out),
            (std::vector<float>{0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0})); // NaN ranks last
  EXPECT_FALSE(topkMask(refOf(x), 5, refOf(out)).isOk());
  EXPECT_FALSE(topkMask(refOf(x), 0, refOf(out)).isOk());
}

TEST(MoeKernels, DispatchAndCombineAreAdjoint) {
  HostTensor x = f64({3, 2}, {1, 2, 3, 4, 5, 6}), w = f64({3, 4}, kGates);
  HostTensor routed = HostTensor::zeros(DType::f64, {4, 3, 2});
  ASSERT_TRUE(moeDispatch(refOf(x), refOf(w), refOf(routed)).isOk());
  // Row (e, t) = w[t, e] x[t]: expert 0 holds tokens 0 and 2, expert 3 token 2 only.
  std::vector<double> want = {0.6, 1.2, 0, 0, 4.5, 5.4,  0,   0, 0.9, 1.2, 0,   0,
                              0.4, 0.8, 2.1, 2.8, 0, 0, 0, 0, 0, 0, 0.5, 0.6};
  std::vector<double> got = valuesOf<double>(routed);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  // <dispatch(x), y> = <x, combine(y)> for any y.
  std::mt19937 rng(3);
  HostTensor y = f64Random({4, 3, 2}, rng), back = HostTensor::zeros(DType::f64, {3, 2});
  ASSERT_TRUE(moeCombine(refOf(y), refOf(w), refOf(back)).isOk());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < routed.numElements(); ++i)
    lhs += routed.data<double>()[i] * y.data<double>()[i];
  for (int64_t i = 0; i < x.numElements(); ++i)
    rhs += x.data<double>()[i] * back.data<double>()[i];
  EXPECT_NEAR(lhs, rhs, 1e-13);
}

TEST(MoeKernels, GroupedGemmMatchesTheDenseMaskedProduct) {
  std::mt19937 rng(5);
  const int64_t E = 4, T = 3, in = 5, out = 6;
  HostTensor w = f64({T, E}, kGates);
  HostTensor x = f64Random({E, T, in}, rng);
  for (bool transposed : {false, true}) {
    HostTensor W = transposed ? f64Random({E, in, out}, rng) : f64Random({E, out, in}, rng);
    HostTensor y = HostTensor::zeros(DType::f64, {E, T, out});
    ASSERT_TRUE(moeMatmul(refOf(x), refOf(W), refOf(w), transposed, refOf(y)).isOk());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t o = 0; o < out; ++o) {
          double want = 0;
          if (w.data<double>()[t * E + e] != 0)
            for (int64_t i = 0; i < in; ++i)
              want += x.data<double>()[(e * T + t) * in + i] *
                      W.data<double>()[transposed ? (e * in + i) * out + o : (e * out + o) * in + i];
          EXPECT_NEAR(y.data<double>()[(e * T + t) * out + o], want, 1e-13);
        }
  }
  // The weight gradient sums active rows only: an inactive row's garbage never counts.
  HostTensor a = f64Random({E, T, out}, rng), dW = HostTensor::zeros(DType::f64, {E, out, in});
  ASSERT_TRUE(moeMatmulWeightGrad(refOf(a), refOf(x), refOf(w), refOf(dW)).isOk());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t p = 0; p < out; ++p)
      for (int64_t q = 0; q < in; ++q) {
        double want = 0;
        for (int64_t t = 0; t < T; ++t)
          if (w.data<double>()[t * E + e] != 0)
            want += a.data<double>()[(e * T + t) * out + p] * x.data<double>()[(e * T + t) * in + q];
        EXPECT_NEAR(dW.data<double>()[(e * out + p) * in + q], want, 1e-13);
      }
  // Accumulating (gradient-accumulation fusion, beta = 1): out = acc + the sums, into a separate
  // output and in place over the accumulator. Idle experts keep acc (here none is idle: every
  // expert has a token). Error model: the sums of 2 products of values <= 1 plus acc <= 1 in
  // f64, 3 roundings of <= 2^-53 relative each: 1e-13 leaves room.
  HostTensor acc = f64Random({E, out, in}, rng), summed = HostTensor::zeros(DType::f64, {E, out, in});
  HostTensor inPlace = acc;
  TensorRef accRef = refOf(acc), inPlaceRef = refOf(inPlace);
  ASSERT_TRUE(moeMatmulWeightGrad(refOf(a), refOf(x), refOf(w), refOf(summed), &accRef).isOk());
  ASSERT_TRUE(moeMatmulWeightGrad(refOf(a), refOf(x), refOf(w), inPlaceRef, &inPlaceRef).isOk());
  for (int64_t i = 0; i < dW.numElements(); ++i) {
    double want = acc.data<double>()[i] + dW.data<double>()[i];
    EXPECT_NEAR(summed.data<double>()[i], want, 1e-13) << i;
    EXPECT_EQ(inPlace.data<double>()[i], summed.data<double>()[i]) << i;
  }
  HostTensor shortAcc = HostTensor::zeros(DType::f64, {E, out, in - 1});
  TensorRef shortRef = refOf(shortAcc);
  Status bad = moeMatmulWeightGrad(refOf(a), refOf(x), refOf(w), refOf(summed), &shortRef);
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("accumulator"), std::string::npos) << bad.message();
  HostTensor z = f64Random({T, in}, rng), dots = HostTensor::zeros(DType::f64, {T, E});
  ASSERT_TRUE(moeRowDot(refOf(x), refOf(z), refOf(w), refOf(dots)).isOk());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) {
      double want = 0;
      if (w.data<double>()[t * E + e] != 0)
        for (int64_t i = 0; i < in; ++i)
          want += x.data<double>()[(e * T + t) * in + i] * z.data<double>()[t * in + i];
      EXPECT_NEAR(dots.data<double>()[t * E + e], want, 1e-13);
    }
}

TEST(MoeKernels, ShapeErrorsNameTheOpAndTheOperand) {
  HostTensor x = f64({3, 2}, {1, 2, 3, 4, 5, 6}), w = f64({3, 4}, kGates);
  HostTensor wrong = HostTensor::zeros(DType::f64, {4, 2, 2});
  Status s = moeDispatch(refOf(x), refOf(w), refOf(wrong));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MoeDispatch: output"), std::string::npos) << s.message();
  HostTensor routed = HostTensor::zeros(DType::f64, {4, 3, 2});
  HostTensor W = HostTensor::zeros(DType::f64, {4, 7, 3}), y = HostTensor::zeros(DType::f64, {4, 3, 7});
  s = moeMatmul(refOf(routed), refOf(W), refOf(w), false, refOf(y));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("MoeMatmul: weight"), std::string::npos) << s.message();
  HostTensor x32 = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_FALSE(moeDispatch(refOf(x32), refOf(w), refOf(routed)).isOk());
}
