// The optimizer kernels: AdamW against a direct transcription of torch.optim.AdamW over several
// steps (f64 and f32, in place), GlobalNorm and ClipByNorm in closed form, and dropout on a shard
// drawing the global tensor's mask.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <cmath>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

/// torch.optim.AdamW for one tensor, written out: p, m, v in place.
template <typename T>
void referenceAdamW(std::vector<T> &p, const std::vector<T> &g, std::vector<T> &m,
                    std::vector<T> &v, double lr, int64_t step, const AdamWConfig &c) {
  double bias1 = 1.0 - std::pow(c.beta1, double(step));
  double bias2 = 1.0 - std::pow(c.beta2, double(step));
  for (size_t i = 0; i < p.size(); ++i) {
    double param = double(p[i]) - lr * c.weightDecay * double(p[i]);
    m[i] = T(c.beta1 * double(m[i]) + (1 - c.beta1) * double(g[i]));
    v[i] = T(c.beta2 * double(v[i]) + (1 - c.beta2) * double(g[i]) * double(g[i]));
    param -= lr * (double(m[i]) / bias1) / (std::sqrt(double(v[i]) / bias2) + c.eps);
    p[i] = T(param);
  }
}

template <typename T> void checkAdamWSteps(DType dtype) {
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.1};
  const int64_t n = 12;
  std::vector<T> p = randomValues<T>(n, 1), m(n, T(0)), v(n, T(0));
  std::vector<T> refP = p, refM = m, refV = v;
  HostTensor param = makeTensor(dtype, {3, 4}, p), expAvg = makeTensor(dtype, {3, 4}, m);
  HostTensor expAvgSq = makeTensor(dtype, {3, 4}, v);
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<T> g = randomValues<T>(n, uint32_t(100 + step));
    double lr = 1e-2 * double(step); // a schedule: lr changes every step
    HostTensor grad = makeTensor(dtype, {3, 4}, g);
    HostTensor lrT = makeTensor(dtype, {}, std::vector<T>{T(lr)});
    HostTensor stepT = i64({}, {step});
    // In place: the outputs are the inputs' memory, as codegen plans it.
    Status s = adamw(refOf(param), refOf(grad), refOf(expAvg), refOf(expAvgSq), refOf(lrT),
                     refOf(stepT), config, refOf(param), refOf(expAvg), refOf(expAvgSq));
    ASSERT_TRUE(s.isOk()) << s.message();
    referenceAdamW<T>(refP, g, refM, refV, double(T(lr)), step, config);
    double tol = std::is_same_v<T, double> ? 1e-14 : 1e-6;
    expectClose(valuesOf<T>(param), refP, tol, 0, "param after step " + std::to_string(step));
    expectClose(valuesOf<T>(expAvg), refM, tol, 0, "exp_avg after step " + std::to_string(step));
    expectClose(valuesOf<T>(expAvgSq), refV, tol, 0,
                "exp_avg_sq after step " + std::to_string(step));
  }
}

} // namespace

TEST(Optim, AdamWMatchesTheTranscribedFormulaOverSeveralSteps) {
  checkAdamWSteps<double>(DType::f64);
  checkAdamWSteps<float>(DType::f32);
}

TEST(Optim, AdamWFirstStepInClosedForm) {
  // From m = v = 0 the first step moves every parameter by lr * sign(g) (eps aside), after decay.
  HostTensor p = f64({3}, {1.0, -2.0, 0.5}), g = f64({3}, {0.3, -0.001, 20.0});
  HostTensor m = f64({3}, {0, 0, 0}), v = f64({3}, {0, 0, 0});
  HostTensor pOut = HostTensor::zeros(DType::f64, {3}), mOut = pOut, vOut = pOut;
  AdamWConfig config{0.9, 0.999, 0.0, 0.5};
  ASSERT_TRUE(adamw(refOf(p), refOf(g), refOf(m), refOf(v), refOf(f64({}, {0.1})),
                    refOf(i64({}, {1})), config, refOf(pOut), refOf(mOut), refOf(vOut))
                  .isOk());
  std::vector<double> got = valuesOf<double>(pOut);
  EXPECT_NEAR(got[0], 1.0 * 0.95 - 0.1, 1e-15);
  EXPECT_NEAR(got[1], -2.0 * 0.95 + 0.1, 1e-15);
  EXPECT_NEAR(got[2], 0.5 * 0.95 - 0.1, 1e-15);
  EXPECT_NEAR(valuesOf<double>(mOut)[2], 2.0, 1e-15);
  EXPECT_NEAR(valuesOf<double>(vOut)[2], 0.4, 1e-15);
}

TEST(Optim, AdamWRejectsBadOperands) {
  HostTensor p = f32({2}, {1, 2}), out = p, m = out, v = out;
  AdamWConfig config;
  Status s = adamw(refOf(p), refOf(p), refOf(m), refOf(v), refOf(f32({}, {0.1f})),
                   refOf(i64({}, {0})), config, refOf(out), refOf(m), refOf(v));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "AdamW: step 0 must be >= 1 (steps count from 1)");
  s = adamw(refOf(p), refOf(p), refOf(m), refOf(v), refOf(f32({1}, {0.1f})), refOf(i64({}, {1})),
            config, refOf(out), refOf(m), refOf(v));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "AdamW: lr must be a 0-d tensor, not shape [1]");
  HostTensor wide = f32({3}, {1, 2, 3});
  s = adamw(refOf(p), refOf(wide), refOf(m), refOf(v), refOf(f32({}, {0.1f})), refOf(i64({}, {1})),
            config, refOf(out), refOf(m), refOf(v));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "AdamW: grad has shape [3], expected [2]");
  config.beta2 = 1.0;
  s = adamw(refOf(p), refOf(p), refOf(m), refOf(v), refOf(f32({}, {0.1f})), refOf(i64({}, {1})),
            config, refOf(out), refOf(m), refOf(v));
  EXPECT_FALSE(s.isOk());
}

TEST(Optim, GlobalNormIsTheNormOfEveryElement) {
  HostTensor a = f32({2}, {3, 4}), b = f64({1}, {12}), empty = f32({0}, {});
  HostTensor out = HostTensor::zeros(DType::f32, {});
  std::vector<TensorRef> inputs{refOf(a), refOf(empty), refOf(b)};
  ASSERT_TRUE(globalNorm(inputs, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out)[0], 13.0f);
  HostTensor out64 = HostTensor::zeros(DType::f64, {});
  HostTensor big = f64({3}, {1e200, 1e-200, -2});
  std::vector<TensorRef> one{refOf(big)};
  ASSERT_TRUE(globalNorm(one, refOf(out64)).isOk());
  EXPECT_TRUE(std::isinf(valuesOf<double>(out64)[0])); // overflow is visible, not hidden
  HostTensor ints = i64({1}, {3});
  std::vector<TensorRef> bad{refOf(ints)};
  Status s = globalNorm(bad, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("(input 0)"), std::string::npos) << s.message();
  HostTensor notScalar = HostTensor::zeros(DType::f32, {1});
  EXPECT_FALSE(globalNorm(inputs, refOf(notScalar)).isOk());
}

TEST(Optim, ClipByNormScalesOnlyAboveTheMaximum) {
  HostTensor g = f32({3}, {3, -4, 12});
  HostTensor out = HostTensor::zeros(DType::f32, {3});
  ASSERT_TRUE(clipByNorm(refOf(g), refOf(f32({}, {13})), 1.0, refOf(out)).isOk());
  float coef = 1.0f / (13.0f + 1e-6f);
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{3 * coef, -4 * coef, 12 * coef}));
  // Below the maximum: unchanged; in place.
  ASSERT_TRUE(clipByNorm(refOf(g), refOf(f32({}, {13})), 100.0, refOf(g)).isOk());
  EXPECT_EQ(valuesOf<float>(g), (std::vector<float>{3, -4, 12}));
  HostTensor g64 = f64({2}, {1, 1});
  ASSERT_TRUE(clipByNorm(refOf(g64), refOf(f64({}, {4})), 2.0, refOf(g64)).isOk());
  EXPECT_EQ(valuesOf<double>(g64)[0], 2.0 / (4.0 + 1e-6));
  Status s = clipByNorm(refOf(g), refOf(f32({}, {13})), 0.0, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "ClipByNorm: max_norm 0.000000 must be finite and > 0");
  EXPECT_FALSE(clipByNorm(refOf(g), refOf(f64({}, {13})), 1.0, refOf(out)).isOk());
}

TEST(Optim, DropoutOnAShardDrawsTheGlobalMask) {
  // The global tensor [4, 6] dropped whole, and its shard [2, 3] at (1, 2) dropped alone.
  std::vector<float> whole = randomValues(24, 9, 1, 2);
  HostTensor x = f32({4, 6}, whole), seed = i64({}, {77});
  HostTensor full = HostTensor::zeros(DType::f32, {4, 6});
  ASSERT_TRUE(dropout(refOf(x), refOf(seed), 0.5, 3, refOf(full)).isOk());
  std::vector<float> shardValues;
  for (int r = 1; r < 3; ++r)
    for (int c = 2; c < 5; ++c)
      shardValues.push_back(whole[r * 6 + c]);
  HostTensor shard = f32({2, 3}, shardValues), out = HostTensor::zeros(DType::f32, {2, 3});
  std::vector<int64_t> global{4, 6}, offset{1, 2};
  ASSERT_TRUE(dropoutShard(refOf(shard), refOf(seed), 0.5, 3, global, offset, refOf(out)).isOk());
  std::vector<float> fullValues = valuesOf<float>(full), got = valuesOf<float>(out);
  int dropped = 0;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(got[r * 3 + c], fullValues[(r + 1) * 6 + c + 2]) << r << "," << c;
      dropped += got[r * 3 + c] == 0;
    }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 6);
  std::vector<int64_t> tooFar{3, 2};
  Status s = dropoutShard(refOf(shard), refOf(seed), 0.5, 3, global, tooFar, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("does not fit the global shape [4, 6]"), std::string::npos)
      << s.message();
}
