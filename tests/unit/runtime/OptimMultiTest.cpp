// The multi-tensor AdamW (cpu::adamwMulti, plan opcode AdamWMulti) against the per-tensor kernel
// (cpu::adamw): the same bits for every tensor over several steps, f32 and f64 tensors of many
// sizes (one element to more than the threading grain) in one call, each its own weight decay,
// in place as codegen plans it, on 1 and 2 threads; the clip folded in (clipByNorm then adamw,
// bit for bit); and its errors.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <cmath>
#include <cstring>

extern "C" void openblas_set_num_threads(int threads) __attribute__((weak));
extern "C" int openblas_get_num_threads(void) __attribute__((weak));

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

struct Tensors {
  HostTensor p, m, v;
};

HostTensor randomTensor(DType dtype, std::vector<int64_t> shape, uint32_t seed, double lo = -1.0) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (dtype == DType::f64)
    return makeTensor(dtype, shape, randomValues<double>(size_t(n), seed, lo, 1.0));
  return makeTensor(dtype, shape, randomValues<float>(size_t(n), seed, lo, 1.0));
}

bool sameBytes(const HostTensor &a, const HostTensor &b) {
  return a.bytes.size() == b.bytes.size() &&
         std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

void checkAgainstPerTensor() {
  // Sizes around the SSE pairs (odd counts), a 0-d tensor, and two past the 8192-element grain
  // so a thread's chunk ends inside a tensor and another starts mid-tensor.
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {1}, {}, {97, 101}, {7}, {16384}, {2}};
  const AdamWConfig config{0.9, 0.95, 1e-8, 0.0};
  std::vector<Tensors> multi, single;
  std::vector<DType> dtypes;
  for (size_t k = 0; k < shapes.size(); ++k) {
    DType dtype = k % 3 == 1 ? DType::f64 : DType::f32;
    dtypes.push_back(dtype);
    Tensors t{randomTensor(dtype, shapes[k], uint32_t(10 + k)), randomTensor(dtype, shapes[k], 0),
              randomTensor(dtype, shapes[k], 0, 0.0)};
    // Moments start at 0, as a fresh run.
    std::fill(t.m.bytes.begin(), t.m.bytes.end(), 0);
    std::fill(t.v.bytes.begin(), t.v.bytes.end(), 0);
    multi.push_back(t);
    single.push_back(t);
  }
  for (int64_t step = 1; step <= 3; ++step) {
    HostTensor lr = f32({}, {float(1e-2 * double(step))}), stepT = i64({}, {step});
    std::vector<HostTensor> grads;
    for (size_t k = 0; k < shapes.size(); ++k)
      grads.push_back(randomTensor(dtypes[k], shapes[k], uint32_t(1000 * step + k)));
    std::vector<AdamWTensor> tensors;
    for (size_t k = 0; k < shapes.size(); ++k) {
      double decay = k % 2 ? 0.0 : 0.1;
      Tensors &t = multi[k];
      tensors.push_back({refOf(t.p), refOf(grads[k]), refOf(t.m), refOf(t.v), refOf(t.p),
                         refOf(t.m), refOf(t.v), decay});
      Tensors &s = single[k];
      AdamWConfig own = config;
      own.weightDecay = decay;
      Status st = adamw(refOf(s.p), refOf(grads[k]), refOf(s.m), refOf(s.v), refOf(lr),
                        refOf(stepT), own, refOf(s.p), refOf(s.m), refOf(s.v));
      ASSERT_TRUE(st.isOk()) << st.message();
    }
    Status st = adamwMulti(tensors, refOf(lr), refOf(stepT), config);
    ASSERT_TRUE(st.isOk()) << st.message();
    for (size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE("tensor " + std::to_string(k) + ", step " + std::to_string(step));
      EXPECT_TRUE(sameBytes(multi[k].p, single[k].p)) << "param";
      EXPECT_TRUE(sameBytes(multi[k].m, single[k].m)) << "exp_avg";
      EXPECT_TRUE(sameBytes(multi[k].v, single[k].v)) << "exp_avg_sq";
    }
  }
  // The step changed the parameters (the comparison above is not of untouched memory).
  EXPECT_FALSE(sameBytes(multi[3].p, randomTensor(dtypes[3], shapes[3], 13)));
}

} // namespace

TEST(OptimMulti, AdamWMultiIsThePerTensorKernelBitForBit) {
  if (!openblas_set_num_threads) {
    checkAgainstPerTensor(); // without OpenBLAS the kernels run on one thread
    return;
  }
  int saved = openblas_get_num_threads();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    openblas_set_num_threads(threads);
    checkAgainstPerTensor();
  }
  openblas_set_num_threads(saved);
}

TEST(OptimMulti, AdamWMultiRejectsMismatchedTensorsAndBadSteps) {
  HostTensor p = f32({4}, {1, 2, 3, 4}), g = f32({4}, {1, 1, 1, 1}), m = f32({4}, {0, 0, 0, 0});
  HostTensor v = f32({4}, {0, 0, 0, 0}), shortG = f32({3}, {1, 1, 1}), g64 = f64({4}, {1, 1, 1, 1});
  HostTensor lr = f32({}, {0.1f}), step = i64({}, {1}), step0 = i64({}, {0});
  auto call = [&](const HostTensor &grad, const HostTensor &s) {
    std::vector<AdamWTensor> t{
        {refOf(p), refOf(grad), refOf(m), refOf(v), refOf(p), refOf(m), refOf(v), 0.0}};
    return adamwMulti(t, refOf(lr), refOf(s), AdamWConfig{});
  };
  Status shape = call(shortG, step);
  EXPECT_FALSE(shape.isOk());
  EXPECT_NE(shape.message().find("tensor 0"), std::string::npos) << shape.message();
  EXPECT_FALSE(call(g64, step).isOk());
  Status zero = call(g, step0);
  EXPECT_FALSE(zero.isOk());
  EXPECT_NE(zero.message().find("must be >= 1"), std::string::npos) << zero.message();
  EXPECT_TRUE(call(g, step).isOk());
}

// The clip folded in (AdamWMulti with max_norm and the global norm as its last input): the bits of
// clipByNorm on every gradient followed by the per-tensor adamw, for f32 and f64, with a
// coefficient below 1 (max_norm 0.5 of a norm ~100) and one clamped at 1 (max_norm 1e6), over
// sizes around the SSE pairs and past the threading grain.
TEST(OptimMulti, AdamWMultiClipIsClipByNormThenAdamWBitForBit) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {1}, {97, 101}, {7}, {16384}};
  for (DType dtype : {DType::f32, DType::f64})
    for (double maxNorm : {0.5, 1e6}) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + ", max_norm " + std::to_string(maxNorm));
      std::vector<Tensors> multi, single;
      std::vector<HostTensor> grads;
      for (size_t k = 0; k < shapes.size(); ++k) {
        Tensors t{randomTensor(dtype, shapes[k], uint32_t(20 + k)),
                  randomTensor(dtype, shapes[k], uint32_t(40 + k)),
                  randomTensor(dtype, shapes[k], uint32_t(60 + k), 0.0)};
        multi.push_back(t);
        single.push_back(t);
        grads.push_back(randomTensor(dtype, shapes[k], uint32_t(80 + k)));
      }
      std::vector<TensorRef> gradRefs;
      for (HostTensor &g : grads)
        gradRefs.push_back(refOf(g));
      HostTensor norm = HostTensor::zeros(dtype, {});
      ASSERT_TRUE(globalNorm(gradRefs, refOf(norm)).isOk());
      HostTensor lr = f32({}, {1e-2f}), stepT = i64({}, {2});
      const AdamWConfig config{0.9, 0.95, 1e-8, 0.0};
      std::vector<AdamWTensor> tensors;
      bool clipped = false;
      for (size_t k = 0; k < shapes.size(); ++k) {
        double decay = k % 2 ? 0.0 : 0.1;
        Tensors &t = multi[k];
        tensors.push_back({refOf(t.p), refOf(grads[k]), refOf(t.m), refOf(t.v), refOf(t.p),
                           refOf(t.m), refOf(t.v), decay});
        HostTensor clippedGrad = HostTensor::zeros(dtype, shapes[k]);
        ASSERT_TRUE(clipByNorm(refOf(grads[k]), refOf(norm), maxNorm, refOf(clippedGrad)).isOk());
        clipped = clipped || !sameBytes(clippedGrad, grads[k]);
        Tensors &u = single[k];
        AdamWConfig own = config;
        own.weightDecay = decay;
        Status st = adamw(refOf(u.p), refOf(clippedGrad), refOf(u.m), refOf(u.v), refOf(lr),
                          refOf(stepT), own, refOf(u.p), refOf(u.m), refOf(u.v));
        ASSERT_TRUE(st.isOk()) << st.message();
      }
      // The small max_norm scales the gradients; the large one leaves them as they are.
      EXPECT_EQ(clipped, maxNorm < 1.0);
      TensorRef normRef = refOf(norm);
      Status st = adamwMulti(tensors, refOf(lr), refOf(stepT), config, &normRef, maxNorm);
      ASSERT_TRUE(st.isOk()) << st.message();
      for (size_t k = 0; k < shapes.size(); ++k) {
        SCOPED_TRACE("tensor " + std::to_string(k));
        EXPECT_TRUE(sameBytes(multi[k].p, single[k].p)) << "param";
        EXPECT_TRUE(sameBytes(multi[k].m, single[k].m)) << "exp_avg";
        EXPECT_TRUE(sameBytes(multi[k].v, single[k].v)) << "exp_avg_sq";
      }
      // A norm of another dtype than the gradients is refused by name.
      HostTensor otherNorm = HostTensor::zeros(dtype == DType::f32 ? DType::f64 : DType::f32, {});
      TensorRef otherRef = refOf(otherNorm);
      Status bad = adamwMulti(tensors, refOf(lr), refOf(stepT), config, &otherRef, maxNorm);
      EXPECT_FALSE(bad.isOk());
      EXPECT_NE(bad.message().find("ClipByNorm"), std::string::npos) << bad.message();
    }
}

// The global norm over many tensors (blocks of 8192 elements on the kernel threads): the same
// bits on 1, 2 and 3 threads, and within 1e-14 relative of a long-double sum. Error model: the
// blocked double sum of n = 60k squares has relative error <= n eps_64 ~ 7e-12 in the worst case
// and ~sqrt(n) eps_64 ~ 3e-14 typically; the squares of f32 inputs are exact in double; sqrt
// halves the relative error: 1e-14 leaves room over the typical case.
TEST(OptimMulti, GlobalNormIsOneFixedOrderOnAnyThreads) {
  std::vector<HostTensor> tensors;
  const std::vector<int64_t> sizes = {3, 8192, 1, 20001, 0, 16384, 7, 12345};
  long double reference = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    DType dtype = k % 2 ? DType::f64 : DType::f32;
    tensors.push_back(randomTensor(dtype, {sizes[k]}, uint32_t(50 + k)));
    const HostTensor &t = tensors.back();
    for (int64_t i = 0; i < sizes[k]; ++i) {
      long double v =
          dtype == DType::f64 ? (long double)t.data<double>()[i] : (long double)t.data<float>()[i];
      reference += v * v;
    }
  }
  std::vector<TensorRef> inputs;
  for (HostTensor &t : tensors)
    inputs.push_back(refOf(t));
  HostTensor out = HostTensor::zeros(DType::f64, {});
  std::vector<double> got;
  int saved = openblas_get_num_threads ? openblas_get_num_threads() : 1;
  for (int threads : {1, 2, 3}) {
    if (openblas_set_num_threads)
      openblas_set_num_threads(threads);
    ASSERT_TRUE(globalNorm(inputs, refOf(out)).isOk());
    got.push_back(valuesOf<double>(out)[0]);
  }
  if (openblas_set_num_threads)
    openblas_set_num_threads(saved);
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
  double want = double(std::sqrt(reference));
  EXPECT_NEAR(got[0], want, 1e-14 * want);
}
