// The CUDA optimizer kernels (runtime/cuda/kernels/Optim.cu) against the CPU reference: adamw
// (and adamwMulti == adamw per tensor, also with the clip folded in), globalNorm (deterministic)
// and clipByNorm.
#include "tests/unit/cuda/ElementwiseTestUtil.h"

namespace megac::runtime::cuda::test {
namespace {

using OptimKernels = CudaKernelTest;

/// A 0-d tensor holding v (lr, step, norm).
std::unique_ptr<Tensor> scalar(DType dtype, double v) {
  auto t = std::make_unique<Tensor>(dtype, std::vector<int64_t>{});
  setAt(dtype, t->host.data(), 0, v);
  t->upload();
  return t;
}

struct AdamWState {
  std::unique_ptr<Tensor> p, g, m, v;
  AdamWState(DType dtype, const std::vector<int64_t> &shape, uint32_t seed)
      : p(std::make_unique<Tensor>(dtype, shape)), g(std::make_unique<Tensor>(dtype, shape)),
        m(std::make_unique<Tensor>(dtype, shape)), v(std::make_unique<Tensor>(dtype, shape)) {
    fillUniform(*p, -1.0, 1.0, seed);
    fillUniform(*g, -0.1, 0.1, seed + 1);
    fillUniform(*m, -0.01, 0.01, seed + 2);
    fillUniform(*v, 0.0, 1e-4, seed + 3);
    for (Tensor *t : {p.get(), g.get(), m.get(), v.get()})
      t->upload();
  }
};

TEST_F(OptimKernels, AdamWMatchesCpu) {
  cpu::AdamWConfig config;
  config.weightDecay = 0.01;
  uint32_t seed = 1;
  for (DType dtype : floatDtypes())
    for (DType lrDtype : {DType::f32, DType::f64})
      for (DType stepDtype : {DType::i64, DType::i32})
        for (int64_t stepValue : {int64_t(1), int64_t(7), int64_t(1000)})
          for (const auto &shape : testShapes()) {
            if (shape == std::vector<int64_t>{1000003} && (stepValue != 7 || lrDtype != DType::f32))
              continue; // the big tensor a few times is enough
            AdamWState s(dtype, shape, seed);
            seed += 4;
            auto lr = scalar(lrDtype, 1e-3);
            auto step = scalar(stepDtype, static_cast<double>(stepValue));
            Tensor pOut(dtype, shape), mOut(dtype, shape), vOut(dtype, shape);
            Tensor pRef(dtype, shape), mRef(dtype, shape), vRef(dtype, shape);
            ASSERT_OK(adamw(ctx, s.p->devRef(), s.g->devRef(), s.m->devRef(), s.v->devRef(),
                            lr->devRef(), step->devRef(), config, pOut.devRef(), mOut.devRef(),
                            vOut.devRef()));
            ASSERT_OK(cpuReference({s.p->hostRef(), s.g->hostRef(), s.m->hostRef(), s.v->hostRef(),
                                    lr->hostRef(), step->hostRef()},
                                   {pRef.hostRef(), mRef.hostRef(), vRef.hostRef()},
                                   [&](auto in, auto out) {
                                     return cpu::adamw(in[0], in[1], in[2], in[3], in[4], in[5],
                                                       config, out[0], out[1], out[2]);
                                   }));
            sync();
            std::string what = std::string("AdamW ") + dtypeName(dtype) + " step " +
                               std::to_string(stepValue) + " " + shapeName(shape);
            expectClose(dtype, pOut.download(), pRef.host, toleranceFor(dtype), what + " p");
            expectClose(dtype, mOut.download(), mRef.host, toleranceFor(dtype), what + " m");
            expectClose(dtype, vOut.download(), vRef.host, toleranceFor(dtype), what + " v");
          }
}

TEST_F(OptimKernels, AdamWInPlace) {
  cpu::AdamWConfig config{0.8, 0.95, 1e-6, 0.1};
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::vector<int64_t> shape = {3, 1001};
    AdamWState s(dtype, shape, 50);
    auto lr = scalar(DType::f64, 3e-2);
    auto step = scalar(DType::i64, 3);
    Tensor pRef(dtype, shape), mRef(dtype, shape), vRef(dtype, shape);
    ASSERT_OK(cpuReference({s.p->hostRef(), s.g->hostRef(), s.m->hostRef(), s.v->hostRef(),
                            lr->hostRef(), step->hostRef()},
                           {pRef.hostRef(), mRef.hostRef(), vRef.hostRef()},
                           [&](auto in, auto out) {
                             return cpu::adamw(in[0], in[1], in[2], in[3], in[4], in[5], config,
                                               out[0], out[1], out[2]);
                           }));
    ASSERT_OK(adamw(ctx, s.p->devRef(), s.g->devRef(), s.m->devRef(), s.v->devRef(), lr->devRef(),
                    step->devRef(), config, s.p->devRef(), s.m->devRef(), s.v->devRef()));
    sync();
    expectClose(dtype, s.p->download(), pRef.host, toleranceFor(dtype), "AdamW in place p");
    expectClose(dtype, s.m->download(), mRef.host, toleranceFor(dtype), "AdamW in place m");
    expectClose(dtype, s.v->download(), vRef.host, toleranceFor(dtype), "AdamW in place v");
  }
}

/// adamwMulti over many tensors (more than one launch's worth, mixed dtypes, empty and large
/// ones) gives exactly adamw's bytes per tensor.
TEST_F(OptimKernels, AdamWMultiEqualsAdamWPerTensor) {
  cpu::AdamWConfig config{0.9, 0.99, 1e-8, 0.05};
  auto lr = scalar(DType::f32, 2e-3);
  auto step = scalar(DType::i32, 5);
  std::vector<std::unique_ptr<AdamWState>> multi, single;
  std::vector<AdamWTensors> refs;
  for (int k = 0; k < 200; ++k) { // 50 per dtype: two launches of each
    DType dtype = floatDtypes()[k % 4];
    std::vector<int64_t> shape;
    if (k % 17 == 3)
      shape = {0};
    else if (k % 29 == 5)
      shape = {5, 4099}; // several chunks
    else if (k == 7)
      shape = {1000003};
    else
      shape = {static_cast<int64_t>(1 + (k * 37) % 300)};
    multi.push_back(std::make_unique<AdamWState>(dtype, shape, 1000 + k));
    single.push_back(std::make_unique<AdamWState>(dtype, shape, 1000 + k));
    AdamWState &s = *multi.back();
    refs.push_back({s.p->devRef(), s.g->devRef(), s.m->devRef(), s.v->devRef()});
  }
  ASSERT_OK(adamwMulti(ctx, refs, lr->devRef(), step->devRef(), config));
  for (auto &s : single)
    ASSERT_OK(adamw(ctx, s->p->devRef(), s->g->devRef(), s->m->devRef(), s->v->devRef(),
                    lr->devRef(), step->devRef(), config, s->p->devRef(), s->m->devRef(),
                    s->v->devRef()));
  sync();
  for (size_t k = 0; k < multi.size(); ++k) {
    DType dtype = multi[k]->p->dtype();
    std::string what = "adamwMulti tensor " + std::to_string(k);
    expectExact(dtype, multi[k]->p->download(), single[k]->p->download(), what + " p");
    expectExact(dtype, multi[k]->m->download(), single[k]->m->download(), what + " m");
    expectExact(dtype, multi[k]->v->download(), single[k]->v->download(), what + " v");
    // And the update happened (p moved) for a non-empty f32/f64 tensor.
    if (multi[k]->p->size() > 0 && (dtype == DType::f32 || dtype == DType::f64)) {
      EXPECT_NE(multi[k]->p->download(), multi[k]->p->host) << what;
    }
  }
}

/// The clip folded into adamwMulti (and adamw): exactly clipByNorm's product fed to adamw, for
/// f32 and f64 masters, with a coefficient below 1 (norm 3, max_norm 0.5) and clamped at 1.
TEST_F(OptimKernels, AdamWMultiClipEqualsClipByNormThenAdamW) {
  cpu::AdamWConfig config{0.9, 0.99, 1e-8, 0.05};
  auto lr = scalar(DType::f32, 2e-3);
  auto step = scalar(DType::i32, 5);
  for (DType dtype : {DType::f32, DType::f64})
    for (double maxNorm : {0.5, 1e6}) {
      auto norm = scalar(dtype, 3.0);
      std::vector<std::unique_ptr<AdamWState>> multi, single;
      std::vector<AdamWTensors> refs;
      for (int k = 0; k < 60; ++k) { // two launches
        std::vector<int64_t> shape = {k == 7 ? 5 * 4099 : static_cast<int64_t>(1 + (k * 37) % 300)};
        multi.push_back(std::make_unique<AdamWState>(dtype, shape, 2000 + k));
        single.push_back(std::make_unique<AdamWState>(dtype, shape, 2000 + k));
        AdamWState &s = *multi.back();
        refs.push_back({s.p->devRef(), s.g->devRef(), s.m->devRef(), s.v->devRef()});
      }
      TensorRef normRef = norm->devRef();
      ASSERT_OK(adamwMulti(ctx, refs, lr->devRef(), step->devRef(), config, &normRef, maxNorm));
      for (auto &s : single) {
        ASSERT_OK(clipByNorm(ctx, s->g->devRef(), normRef, maxNorm, s->g->devRef()));
        ASSERT_OK(adamw(ctx, s->p->devRef(), s->g->devRef(), s->m->devRef(), s->v->devRef(),
                        lr->devRef(), step->devRef(), config, s->p->devRef(), s->m->devRef(),
                        s->v->devRef()));
      }
      sync();
      for (size_t k = 0; k < multi.size(); ++k) {
        std::string what = std::string("adamwMulti clip ") + dtypeName(dtype) + " max_norm " +
                           std::to_string(maxNorm) + " tensor " + std::to_string(k);
        expectExact(dtype, multi[k]->p->download(), single[k]->p->download(), what + " p");
        expectExact(dtype, multi[k]->m->download(), single[k]->m->download(), what + " m");
        expectExact(dtype, multi[k]->v->download(), single[k]->v->download(), what + " v");
      }
    }
}

TEST_F(OptimKernels, GlobalNormMatchesCpuAndIsDeterministic) {
  for (DType outDtype : {DType::f32, DType::f64})
    for (bool halves : {false, true}) {
      std::vector<std::vector<int64_t>> shapes = {{1}, {7}, {1000003}, {0}, {3, 5}, {}, {4099}};
      std::vector<std::unique_ptr<Tensor>> inputs;
      std::vector<TensorRef> dev, host;
      for (size_t k = 0; k < shapes.size(); ++k) {
        DType dtype =
            halves ? (k % 2 ? DType::bf16 : DType::f16) : (k % 2 ? DType::f64 : DType::f32);
        inputs.push_back(std::make_unique<Tensor>(dtype, shapes[k]));
        fillUniform(*inputs.back(), -2.0, 2.0, 60 + static_cast<uint32_t>(k));
        inputs.back()->upload();
        dev.push_back(inputs.back()->devRef());
        host.push_back(inputs.back()->hostRef());
      }
      Tensor out(outDtype, {}), ref(outDtype, {});
      out.poison();
      ASSERT_OK(globalNorm(ctx, dev, out.devRef()));
      ASSERT_OK(cpuReference(host, {ref.hostRef()},
                             [&](auto in, auto outs) { return cpu::globalNorm(in, outs[0]); }));
      sync();
      std::vector<uint8_t> first = out.download();
      // Double sums in another order: well inside f64's 1e-12 for ~1e6 terms.
      expectClose(outDtype, first, ref.host, toleranceFor(outDtype),
                  std::string("GlobalNorm -> ") + dtypeName(outDtype));
      out.poison(0x22);
      ASSERT_OK(globalNorm(ctx, dev, out.devRef()));
      sync();
      EXPECT_EQ(out.download(), first) << "GlobalNorm is not deterministic";
    }
  // No inputs: 0.
  Tensor out(DType::f32, {});
  out.poison();
  ASSERT_OK(globalNorm(ctx, {}, out.devRef()));
  sync();
  std::vector<uint8_t> got = out.download();
  EXPECT_EQ(valueAt(DType::f32, got.data(), 0), 0.0);
}

TEST_F(OptimKernels, ClipByNormMatchesCpu) {
  for (DType dtype : floatDtypes())
    for (double normValue : {0.5, 1.0, 3.0, 1000.0})
      for (const auto &shape : testShapes()) {
        Tensor x(dtype, shape), out(dtype, shape), ref(dtype, shape);
        fillUniform(x, -3.0, 3.0, 70);
        x.upload();
        auto norm = scalar(dtype, normValue);
        out.poison();
        ASSERT_OK(clipByNorm(ctx, x.devRef(), norm->devRef(), 1.0, out.devRef()));
        ASSERT_OK(
            cpuReference({x.hostRef(), norm->hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
              return cpu::clipByNorm(in[0], in[1], 1.0, outs[0]);
            }));
        sync();
        expectClose(dtype, out.download(), ref.host, toleranceFor(dtype),
                    std::string("ClipByNorm ") + dtypeName(dtype) + " norm " +
                        std::to_string(normValue) + " " + shapeName(shape));
      }
}

TEST_F(OptimKernels, ErrorsMatchCpuWithoutLaunching) {
  std::vector<int64_t> s3 = {3}, s4 = {4}, s0 = {};
  TensorRef f3{DType::f32, s3, nullptr}, f4{DType::f32, s4, nullptr}, d3{DType::f64, s3, nullptr};
  // lr has host memory: the CPU reads it before it checks step.
  static float lrValue = 1e-3f;
  TensorRef lr{DType::f32, s0, &lrValue}, lrBad{DType::i64, s0, nullptr};
  TensorRef step{DType::i64, s0, nullptr}, stepBad{DType::i64, s3, nullptr};
  TensorRef d0{DType::f64, s0, nullptr}, f1{DType::f32, s3, nullptr};
  auto same = [](const Status &gpu, const Status &cpu, const char *op) {
    EXPECT_FALSE(gpu.isOk()) << op;
    EXPECT_FALSE(cpu.isOk()) << op;
    EXPECT_EQ(gpu.message(), cpu.message());
    EXPECT_EQ(gpu.message().rfind(op, 0), 0u) << gpu.message();
  };
  cpu::AdamWConfig config, badConfig{1.0, 0.999, 1e-8, 0.0};
  same(adamw(ctx, f3, f4, f3, f3, lr, step, config, f3, f3, f3),
       cpu::adamw(f3, f4, f3, f3, lr, step, config, f3, f3, f3), "AdamW");
  same(adamw(ctx, f3, f3, d3, f3, lr, step, config, f3, f3, f3),
       cpu::adamw(f3, f3, d3, f3, lr, step, config, f3, f3, f3), "AdamW");
  same(adamw(ctx, f3, f3, f3, f3, f3, f3, config, f3, f3, f3),
       cpu::adamw(f3, f3, f3, f3, f3, f3, config, f3, f3, f3), "AdamW");
  same(adamw(ctx, f3, f3, f3, f3, lrBad, step, config, f3, f3, f3),
       cpu::adamw(f3, f3, f3, f3, lrBad, step, config, f3, f3, f3), "AdamW");
  same(adamw(ctx, f3, f3, f3, f3, lr, stepBad, config, f3, f3, f3),
       cpu::adamw(f3, f3, f3, f3, lr, stepBad, config, f3, f3, f3), "AdamW");
  std::vector<AdamWTensors> multi = {{f3, f3, f3, f3}, {f3, f4, f3, f3}};
  Status s = adamwMulti(ctx, multi, lr, step, config);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("AdamW", 0), 0u) << s.message();
  multi = {{f3, f3, f3, f3}};
  s = adamwMulti(ctx, multi, lr, step, badConfig);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("AdamW", 0), 0u) << s.message();
  std::vector<TensorRef> ins = {f3};
  same(globalNorm(ctx, ins, f3), cpu::globalNorm(ins, f3), "GlobalNorm");
  same(clipByNorm(ctx, f3, f1, 1.0, f3), cpu::clipByNorm(f3, f1, 1.0, f3), "ClipByNorm");
  same(clipByNorm(ctx, f3, d0, 1.0, f3), cpu::clipByNorm(f3, d0, 1.0, f3), "ClipByNorm");
  same(clipByNorm(ctx, f3, TensorRef{DType::f32, s0, nullptr}, -1.0, f3),
       cpu::clipByNorm(f3, TensorRef{DType::f32, s0, nullptr}, -1.0, f3), "ClipByNorm");
  same(clipByNorm(ctx, f3, TensorRef{DType::f32, s0, nullptr}, 1.0, f4),
       cpu::clipByNorm(f3, TensorRef{DType::f32, s0, nullptr}, 1.0, f4), "ClipByNorm");
  sync();
  EXPECT_EQ(takeError(), 0);
}

} // namespace
} // namespace megac::runtime::cuda::test
