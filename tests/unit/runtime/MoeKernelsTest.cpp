// CPU mixture-of-experts kernels (runtime/cpu/Moe.cpp) against hand-computed values and a dense
// masked reference: TopKMask's tie rule, dispatch/combine, the grouped GEMMs (both weight
// layouts) computing active rows only, the weights gradients (also accumulating into an
// accumulator, in place or not), and the shape errors.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <cmath>
#include <random>

// Weak: a build without OpenBLAS (MEGAC_BLAS=OFF) runs the kernels on one thread only.
extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

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

// The routed products pack their active rows and scatter the results back on the kernel threads
// (runtime/cpu/Moe.cpp packRows/unpackRows). Enough tokens that the rows split into several
// chunks per thread (grainFor(64) = 512 rows); on 1, 2 and 3 threads every inactive (t, e) row
// is exactly 0 and every active one is its expert's product. Error model: an f32 dot of k terms
// summed in any order is within k * 2^-24 * sum |a_i b_i| (plus one rounding of the result) of
// the exact one; the reference sums in double.
TEST(MoeKernels, RoutedProductsScatterEveryRowOnAnyThreads) {
  if (!openblas_set_num_threads)
    GTEST_SKIP() << "built without OpenBLAS: the kernels run on one thread";
  const int64_t E = 4, T = 2048, in = 64, out = 96;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](std::vector<int64_t> shape) {
    HostTensor t = HostTensor::zeros(DType::f32, shape);
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.data<float>()[i] = u(rng);
    return t;
  };
  // Top 2 of 4 per token, uneven: expert 0 takes every third token, so the experts' row counts
  // (and their chunks' first active rows) differ.
  HostTensor w = HostTensor::zeros(DType::f32, {T, E});
  for (int64_t t = 0; t < T; ++t) {
    int64_t first = t % 3 == 0 ? 0 : 1 + t % 3, second = (first + 1 + t % 2) % E;
    w.data<float>()[t * E + first] = 0.75f;
    w.data<float>()[t * E + second] = 0.25f;
  }
  HostTensor x = random({E, T, in}), W = random({E, out, in}), dy = random({E, T, out});
  int saved = openblas_get_num_threads();
  for (int threads : {1, 2, 3}) {
    openblas_set_num_threads(threads);
    HostTensor y = random({E, T, out}), dW = random({E, out, in}); // garbage: every row written
    ASSERT_TRUE(moeMatmul(refOf(x), refOf(W), refOf(w), false, refOf(y)).isOk());
    ASSERT_TRUE(moeMatmulWeightGrad(refOf(dy), refOf(x), refOf(w), refOf(dW)).isOk());
    for (int64_t e = 0; e < E; ++e)
      for (int64_t t = 0; t < T; ++t) {
        bool active = w.data<float>()[t * E + e] != 0;
        for (int64_t o = 0; o < out; ++o) {
          float got = y.data<float>()[(e * T + t) * out + o];
          if (!active) {
            ASSERT_EQ(got, 0.0f) << "threads " << threads << " expert " << e << " token " << t;
            continue;
          }
          double want = 0, magnitude = 0;
          for (int64_t i = 0; i < in; ++i) {
            double p = double(x.data<float>()[(e * T + t) * in + i]) *
                       double(W.data<float>()[(e * out + o) * in + i]);
            want += p;
            magnitude += std::fabs(p);
          }
          ASSERT_NEAR(got, want, (in + 1) * std::ldexp(magnitude, -24))
              << "threads " << threads << " expert " << e << " token " << t;
        }
      }
    // dW[e] = dy[e]^T x[e] over the expert's active tokens only.
    for (int64_t e = 0; e < E; ++e)
      for (int64_t p = 0; p < out; p += 7)
        for (int64_t q = 0; q < in; q += 5) {
          double want = 0, magnitude = 0;
          for (int64_t t = 0; t < T; ++t)
            if (w.data<float>()[t * E + e] != 0) {
              double v = double(dy.data<float>()[(e * T + t) * out + p]) *
                         double(x.data<float>()[(e * T + t) * in + q]);
              want += v;
              magnitude += std::fabs(v);
            }
          ASSERT_NEAR(dW.data<float>()[(e * out + p) * in + q], want,
                      (T + 1) * std::ldexp(magnitude, -24))
              << "threads " << threads << " expert " << e;
        }
  }
  openblas_set_num_threads(saved);
}
