// The CUDA executor against the CPU executor: the same plans (built here with PlanBuilder) run
// on Backend::cpu and Backend::cuda with the same inputs and must agree per dtype; aliasing
// outputs, a training step with in-place AdamW (single and multi-tensor), dropout, every rank of
// a partitioned plan (vocab-parallel ops, ShardSlice, one-rank NCCL collectives), the
// parameter/state API, errors, an out-of-range embedding id found on the device; and 5 optimizer
// steps of compiled GPT plans (MEGAC_TEST_TRAIN_PLAN, set by ctest).
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/exec/Executor.h"
#include "support/Float16.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

LoadedPlan load(const PlanSpec &spec) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return loaded.value();
}

std::unique_ptr<Executor> create(const LoadedPlan &plan, Backend backend,
                                 const TensorMap *weights = nullptr) {
  ExecutorOptions options;
  options.backend = backend;
  options.weights = weights;
  auto ex = Executor::create(plan, options);
  EXPECT_TRUE(ex.isOk()) << backendName(backend) << ": " << ex.status().message();
  return ex.isOk() ? std::move(ex).value() : nullptr;
}

/// Any tensor's elements as doubles.
std::vector<double> toDoubles(const HostTensor &t) {
  std::vector<double> out(static_cast<size_t>(t.numElements()));
  for (size_t i = 0; i < out.size(); ++i)
    switch (t.dtype) {
    case DType::f64:
      out[i] = t.data<double>()[i];
      break;
    case DType::f32:
      out[i] = t.data<float>()[i];
      break;
    case DType::bf16:
      out[i] = bf16ToFloat(t.data<uint16_t>()[i]);
      break;
    case DType::f16:
      out[i] = halfToFloat(t.data<uint16_t>()[i]);
      break;
    case DType::i64:
      out[i] = double(t.data<int64_t>()[i]);
      break;
    case DType::i32:
      out[i] = t.data<int32_t>()[i];
      break;
    case DType::i1:
      out[i] = t.data<uint8_t>()[i];
      break;
    }
  return out;
}

/// The tolerance of a CPU/GPU comparison for a dtype: (rtol, atol).
std::pair<double, double> tolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-12, 1e-12};
  case DType::f32:
    return {1e-5, 1e-6};
  case DType::bf16:
    return {2e-2, 1e-2};
  case DType::f16:
    return {2e-3, 1e-3};
  default:
    return {0, 0};
  }
}

void expectAgree(const HostTensor &gpu, const HostTensor &cpu, const std::string &what) {
  ASSERT_EQ(gpu.dtype, cpu.dtype) << what;
  ASSERT_EQ(gpu.shape, cpu.shape) << what;
  auto [rtol, atol] = tolerance(cpu.dtype);
  expectClose(toDoubles(gpu), toDoubles(cpu), rtol, atol, what);
}

HostTensor bf16(std::vector<int64_t> shape, const std::vector<float> &v) {
  std::vector<uint16_t> bits;
  for (float x : v)
    bits.push_back(floatToBf16(x));
  return makeTensor(DType::bf16, std::move(shape), bits);
}

/// Runs `function` of the plan on both backends with `inputs` and compares every output.
void runBoth(const LoadedPlan &plan, const std::vector<std::pair<std::string, HostTensor>> &inputs,
             const TensorMap *weights = nullptr, const std::string &function = "main") {
  auto cpu = create(plan, Backend::cpu, weights), gpu = create(plan, Backend::cuda, weights);
  ASSERT_TRUE(cpu && gpu);
  for (const auto &[name, value] : inputs) {
    ASSERT_TRUE(cpu->setInput(name, value).isOk()) << name;
    ASSERT_TRUE(gpu->setInput(name, value).isOk()) << name;
  }
  Status c = cpu->run(function), g = gpu->run(function);
  ASSERT_TRUE(c.isOk()) << "cpu: " << c.message();
  ASSERT_TRUE(g.isOk()) << "cuda: " << g.message();
  for (const std::string &name : cpu->outputNames(function))
    expectAgree(gpu->output(name).value(), cpu->output(name).value(), "output " + name);
}

/// x [4, 8] -> Linear [16, 8] + bias -> Gelu -> * 0.5 -> + x2 -> LayerNorm -> Softmax, and a
/// causal attention over [1, 2, 4, 8] of the input, in `dtype` (a run of elementwise ops the
/// fusion can merge, GEMMs, norms, reductions).
PlanSpec mixedPlan(DType dtype) {
  using O = fb::Opcode;
  PlanSpec spec;
  spec.seed = 7;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", dtype, {4, 8});
  uint32_t w = p.param("fc.weight", dtype, {16, 8}, fb::InitKind::normal, 0.5);
  uint32_t b = p.param("fc.bias", dtype, {16}, fb::InitKind::normal, 0.1);
  uint32_t g = p.param("ln.weight", dtype, {16}, fb::InitKind::normal, 1.0);
  uint32_t half = p.input("half", dtype, {4, 16});
  uint32_t h = p.buffer("h", dtype, {4, 16});
  uint32_t a = p.buffer("a", dtype, {4, 16});
  uint32_t s = p.buffer("s", dtype, {4, 16});
  uint32_t r = p.buffer("r", dtype, {4, 16});
  uint32_t n = p.buffer("n", dtype, {4, 16});
  uint32_t y = p.buffer("y", dtype, {4, 16});
  p.inst(O::Linear, {x, w, b}, h, "fc");
  p.inst(O::Gelu, {h}, a, "gelu", fb::Attrs::GeluAttrs, geluAttrs(true));
  p.inst(O::Mul, {a, half}, s, "scale");
  p.inst(O::Add, {s, h}, r, "residual");
  p.inst(O::Tanh, {r}, r, "tanh in place");
  p.inst(O::LayerNorm, {r, g}, n, "ln", fb::Attrs::NormAttrs, normAttrs(1e-5));
  p.inst(O::Softmax, {n}, y, "softmax", fb::Attrs::AxisAttrs, axisAttrs(1));
  p.output("y", y);
  p.output("r", r);
  uint32_t q = p.input("q", dtype, {1, 2, 4, 8});
  uint32_t att = p.buffer("att", dtype, {1, 2, 4, 8});
  p.inst(O::Attention, {q, q, q}, att, "attention", fb::Attrs::AttentionAttrs,
         attentionAttrs(true, 0.35));
  p.output("att", att);
  return spec;
}

HostTensor ofDtype(DType dtype, std::vector<int64_t> shape, const std::vector<float> &v) {
  if (dtype == DType::bf16)
    return bf16(std::move(shape), v);
  if (dtype == DType::f64)
    return f64(std::move(shape), std::vector<double>(v.begin(), v.end()));
  return f32(std::move(shape), v);
}

} // namespace

TEST(CudaExecutor, MixedPlanAgreesWithTheCpuInEveryFloatType) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtypeName(dtype));
    LoadedPlan plan = load(mixedPlan(dtype));
    runBoth(plan, {{"x", ofDtype(dtype, {4, 8}, randomValues(32, 1))},
                   {"half", ofDtype(dtype, {4, 16}, std::vector<float>(64, 0.5f))},
                   {"q", ofDtype(dtype, {1, 2, 4, 8}, randomValues(64, 2))}});
  }
}

TEST(CudaExecutor, FusedRunsGiveTheUnfusedBits) {
  // The elementwise run Gelu, Mul, Add, Tanh of mixedPlan is one NVRTC kernel unless
  // MEGAC_NO_FUSION=1; Fusion.h promises the same bits either way.
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtypeName(dtype));
    LoadedPlan plan = load(mixedPlan(dtype));
    ASSERT_EQ(setenv("MEGAC_NO_FUSION", "1", 1), 0);
    auto unfused = create(plan, Backend::cuda);
    ASSERT_EQ(unsetenv("MEGAC_NO_FUSION"), 0);
    auto fused = create(plan, Backend::cuda);
    ASSERT_TRUE(fused && unfused);
    for (Executor *ex : {fused.get(), unfused.get()}) {
      ASSERT_TRUE(ex->setInput("x", ofDtype(dtype, {4, 8}, randomValues(32, 1))).isOk());
      ASSERT_TRUE(ex->setInput("half", ofDtype(dtype, {4, 16}, randomValues(64, 8))).isOk());
      ASSERT_TRUE(ex->setInput("q", ofDtype(dtype, {1, 2, 4, 8}, randomValues(64, 2))).isOk());
      Status s = ex->run();
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    for (const char *name : {"y", "r", "att"})
      EXPECT_EQ(fused->output(name).value().bytes, unfused->output(name).value().bytes) << name;
  }
}

TEST(CudaExecutor, OutputsMayAliasInputs) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {4, 16}); // bytes [0, 256)
  uint32_t neg = p.buffer("neg", DType::f32, {4, 16}, 0);
  uint32_t t = p.buffer("t", DType::f32, {16, 4}, 128);
  uint32_t y = p.buffer("y", DType::f32, {16, 4}, 512);
  p.inst(fb::Opcode::Neg, {x}, neg, "neg in place");
  p.inst(fb::Opcode::Transpose, {neg}, t, "overlapping transpose", fb::Attrs::TransposeAttrs,
         transposeAttrs({1, 0}));
  p.inst(fb::Opcode::Copy, {t}, y, "copy out");
  p.output("y", y);
  LoadedPlan plan = load(spec);
  auto gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(gpu);
  std::vector<float> xs = randomValues(64, 3);
  ASSERT_TRUE(gpu->setInput("x", f32({4, 16}, xs)).isOk());
  ASSERT_TRUE(gpu->run().isOk());
  std::vector<float> got = valuesOf<float>(gpu->output("y").value());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 4; ++j)
      ASSERT_EQ(got[i * 4 + j], -xs[j * 16 + i]);
}

TEST(CudaExecutor, DropoutMasksMatchTheCpuBitForBit) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {8, 33});
  uint32_t seed = p.input("seed", DType::i64, {});
  uint32_t y = p.buffer("y", DType::f32, {8, 33});
  uint32_t z = p.buffer("z", DType::f32, {8, 33});
  p.inst(fb::Opcode::Dropout, {x, seed}, y, "dropout", fb::Attrs::DropoutAttrs,
         dropoutAttrs(0.3, 4));
  p.inst(fb::Opcode::Dropout, {x, seed}, z, "shard dropout", fb::Attrs::DropoutAttrs,
         dropoutShardAttrs(0.5, 2, {16, 66}, {8, 33}));
  p.output("y", y);
  p.output("z", z);
  LoadedPlan plan = load(spec);
  auto cpu = create(plan, Backend::cpu), gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(cpu && gpu);
  for (Executor *ex : {cpu.get(), gpu.get()}) {
    ASSERT_TRUE(ex->setInput("x", f32({8, 33}, randomValues(264, 4))).isOk());
    ASSERT_TRUE(ex->setInput("seed", i64({}, {12345})).isOk());
    Status s = ex->run();
    ASSERT_TRUE(s.isOk()) << s.message();
  }
  EXPECT_EQ(gpu->output("y").value().bytes, cpu->output("y").value().bytes);
  EXPECT_EQ(gpu->output("z").value().bytes, cpu->output("z").value().bytes);
}

namespace {

/// Two parameters trained by AdamW, f32:
///   forward_backward(x [8], y [8]) -> loss = sum(w1 * x + w2 * y); grad.w1 += x; grad.w2 += y
///   apply_gradients(lr, step): grad_norm = GlobalNorm(grads); clip; AdamW w1; AdamW w2 (one
///   multi-tensor launch on the GPU); AdamW w3 with another config (its own launch).
PlanSpec twoParamPlan() {
  using O = fb::Opcode;
  PlanSpec spec;
  spec.seed = 3;
  ProgramSpec &p = spec.program();
  uint32_t w1 = p.param("w1", DType::f32, {8}, fb::InitKind::normal, 1.0);
  uint32_t w2 = p.param("w2", DType::f32, {8}, fb::InitKind::normal, 1.0);
  uint32_t w3 = p.param("w3", DType::f32, {8}, fb::InitKind::normal, 1.0);
  uint32_t g1 = p.stateBuffer("grad.w1", DType::f32, {8});
  uint32_t g2 = p.stateBuffer("grad.w2", DType::f32, {8});
  uint32_t g3 = p.stateBuffer("grad.w3", DType::f32, {8});
  uint32_t m1 = p.stateBuffer("adam.m.w1", DType::f32, {8});
  uint32_t v1 = p.stateBuffer("adam.v.w1", DType::f32, {8});
  uint32_t m2 = p.stateBuffer("adam.m.w2", DType::f32, {8});
  uint32_t v2 = p.stateBuffer("adam.v.w2", DType::f32, {8});
  uint32_t m3 = p.stateBuffer("adam.m.w3", DType::f32, {8});
  uint32_t v3 = p.stateBuffer("adam.v.w3", DType::f32, {8});
  p.functions[0].name = "forward_backward";
  uint32_t x = p.input("x", DType::f32, {8});
  uint32_t y = p.input("y", DType::f32, {8});
  uint32_t a = p.buffer("a", DType::f32, {8});
  uint32_t b = p.buffer("b", DType::f32, {8});
  uint32_t loss = p.buffer("loss", DType::f32, {});
  p.inst(O::Mul, {w1, x}, a, "w1 x");
  p.inst(O::Mul, {w2, y}, b, "w2 y");
  p.inst(O::Add, {a, b}, a, "sum");
  p.inst(O::Reduce, {a}, loss, "loss", fb::Attrs::ReduceAttrs,
         reduceAttrs(fb::ReduceKind::sum, {0}));
  p.inst(O::Add, {g1, x}, g1, "grad w1");
  p.inst(O::Add, {g2, y}, g2, "grad w2");
  p.inst(O::Add, {g3, x}, g3, "grad w3");
  p.output("loss", loss);
  p.function("apply_gradients");
  uint32_t lr = p.input("lr", DType::f32, {});
  uint32_t step = p.input("step", DType::i64, {});
  uint32_t norm = p.buffer("grad_norm", DType::f32, {});
  p.inst(O::GlobalNorm, {g1, g2, g3}, norm, "norm");
  p.inst(O::ClipByNorm, {g1, norm}, g1, "clip", fb::Attrs::ClipAttrs, clipAttrs(1.0));
  p.instN(O::AdamW, {w1, g1, m1, v1, lr, step}, {w1, m1, v1}, "adamw w1", fb::Attrs::AdamWAttrs,
          adamwAttrs(0.9, 0.95, 1e-8, 0.1));
  p.instN(O::AdamW, {w2, g2, m2, v2, lr, step}, {w2, m2, v2}, "adamw w2", fb::Attrs::AdamWAttrs,
          adamwAttrs(0.9, 0.95, 1e-8, 0.1));
  p.instN(O::AdamW, {w3, g3, m3, v3, lr, step}, {w3, m3, v3}, "adamw w3", fb::Attrs::AdamWAttrs,
          adamwAttrs(0.8, 0.99, 1e-6, 0.0));
  p.output("grad_norm", norm);
  return spec;
}

} // namespace

TEST(CudaExecutor, TrainingStepsAgreeWithTheCpu) {
  LoadedPlan plan = load(twoParamPlan());
  auto cpu = create(plan, Backend::cpu), gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(cpu && gpu);
  for (int step = 1; step <= 3; ++step) {
    for (Executor *ex : {cpu.get(), gpu.get()}) {
      ASSERT_TRUE(ex->zeroState("grad.").isOk());
      for (int mb = 0; mb < 2; ++mb) {
        ASSERT_TRUE(ex->setInput("x", f32({8}, randomValues(8, 10 * step + mb))).isOk());
        ASSERT_TRUE(ex->setInput("y", f32({8}, randomValues(8, 100 * step + mb))).isOk());
        Status s = ex->run("forward_backward");
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      ASSERT_TRUE(ex->setInput("lr", f32({}, {0.01f})).isOk());
      ASSERT_TRUE(ex->setInput("step", i64({}, {step})).isOk());
      Status s = ex->run("apply_gradients");
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    expectAgree(gpu->output("grad_norm").value(), cpu->output("grad_norm").value(), "grad_norm");
  }
  for (const std::string &name : cpu->parameterNames())
    expectAgree(gpu->parameter(name).value(), cpu->parameter(name).value(), name);
  for (const std::string &name : cpu->stateNames())
    expectAgree(gpu->state(name).value(), cpu->state(name).value(), name);
}

TEST(CudaExecutor, ParametersAndStateRoundTripAndZero) {
  LoadedPlan plan = load(twoParamPlan());
  auto cpu = create(plan, Backend::cpu), gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(cpu && gpu);
  EXPECT_EQ(gpu->parameterNames(), cpu->parameterNames());
  EXPECT_EQ(gpu->stateNames(), cpu->stateNames());
  EXPECT_EQ(gpu->functionNames(), cpu->functionNames());
  EXPECT_EQ(gpu->inputNames(), cpu->inputNames());
  EXPECT_EQ(gpu->arenaBytes(), cpu->arenaBytes());
  // The seeded init is the same on both backends.
  for (const std::string &name : cpu->parameterNames())
    EXPECT_EQ(gpu->parameter(name).value().bytes, cpu->parameter(name).value().bytes) << name;
  HostTensor w = f32({8}, randomValues(8, 9));
  ASSERT_TRUE(gpu->setParameter("w2", w).isOk());
  EXPECT_EQ(gpu->parameter("w2").value().bytes, w.bytes);
  HostTensor m = f32({8}, randomValues(8, 10)), g = f32({8}, randomValues(8, 11));
  ASSERT_TRUE(gpu->setState("adam.m.w1", m).isOk());
  ASSERT_TRUE(gpu->setState("grad.w1", g).isOk());
  EXPECT_EQ(gpu->state("adam.m.w1").value().bytes, m.bytes);
  EXPECT_EQ(gpu->state("grad.w1").value().bytes, g.bytes);
  ASSERT_TRUE(gpu->zeroState("grad.").isOk());
  EXPECT_EQ(gpu->state("grad.w1").value().bytes, std::vector<uint8_t>(32, 0));
  EXPECT_EQ(gpu->state("adam.m.w1").value().bytes, m.bytes) << "zeroState(\"grad.\") only";
  ASSERT_TRUE(gpu->zeroState("").isOk());
  EXPECT_EQ(gpu->state("adam.m.w1").value().bytes, std::vector<uint8_t>(32, 0));
  // Errors word for word as the CPU's.
  HostTensor wrong = f64({8}, std::vector<double>(8, 1.0));
  EXPECT_EQ(gpu->setParameter("w1", wrong).message(), cpu->setParameter("w1", wrong).message());
  EXPECT_EQ(gpu->setParameter("nope", w).message(), cpu->setParameter("nope", w).message());
  EXPECT_EQ(gpu->state("nope").status().message(), cpu->state("nope").status().message());
  ShardInfo shard = gpu->stateShard("grad.w1").value();
  EXPECT_EQ(shard.globalShape, (std::vector<int64_t>{8}));
}

TEST(CudaExecutor, InputErrorsAreTheCpus) {
  LoadedPlan plan = load(twoParamPlan());
  auto cpu = create(plan, Backend::cpu), gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(cpu && gpu);
  Status c = cpu->run("forward_backward"), g = gpu->run("forward_backward");
  ASSERT_FALSE(g.isOk());
  EXPECT_EQ(g.message(), c.message());
  EXPECT_EQ(g.message(), "input 'x' was not set before running function 'forward_backward'");
  HostTensor bad = i64({8}, std::vector<int64_t>(8, 1));
  EXPECT_EQ(gpu->setInput("x", bad).message(), cpu->setInput("x", bad).message());
  EXPECT_FALSE(gpu->setInput("x", bad).isOk());
  EXPECT_EQ(gpu->setInput("nope", bad).message(), cpu->setInput("nope", bad).message());
  EXPECT_EQ(gpu->run("nope").message(), cpu->run("nope").message());
  EXPECT_FALSE(gpu->output("loss").isOk()) << "output before a run";
}

TEST(CudaExecutor, AnEmbeddingIdOutOfRangeIsReportedAfterTheRun) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t ids = p.input("ids", DType::i64, {3});
  uint32_t table = p.param("wte", DType::f32, {10, 4}, fb::InitKind::normal, 0.02);
  uint32_t y = p.buffer("y", DType::f32, {3, 4});
  p.inst(fb::Opcode::Embedding, {table, ids}, y, "gpt.py:42 wte");
  p.output("y", y);
  LoadedPlan plan = load(spec);
  auto gpu = create(plan, Backend::cuda);
  ASSERT_TRUE(gpu);
  ASSERT_TRUE(gpu->setInput("ids", i64({3}, {1, 10, 2})).isOk());
  Status s = gpu->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find(
                "program 'main', function 'main', instruction 0 (Embedding at 'gpt.py:42 wte')"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("an embedding id outside [0, V)"), std::string::npos) << s.message();
  EXPECT_FALSE(gpu->output("y").isOk()) << "output after a failed run";
  // The flag is cleared: a good run afterwards succeeds.
  ASSERT_TRUE(gpu->setInput("ids", i64({3}, {1, 9, 2})).isOk());
  s = gpu->run();
  EXPECT_TRUE(s.isOk()) << s.message();
  std::vector<float> out = valuesOf<float>(gpu->output("y").value());
  std::vector<float> w = valuesOf<float>(gpu->parameter("wte").value());
  for (int e = 0; e < 4; ++e)
    EXPECT_EQ(out[4 + e], w[9 * 4 + e]);
}

TEST(CudaExecutor, ABadDeviceIsAnError) {
  LoadedPlan plan = load(twoParamPlan());
  ExecutorOptions options;
  options.backend = Backend::cuda;
  options.device = 1000;
  auto ex = Executor::create(plan, options);
  ASSERT_FALSE(ex.isOk());
  EXPECT_NE(ex.status().message().find("CUDA device 1000 does not exist"), std::string::npos)
      << ex.status().message();
  // Nothing of the failed creation is left as the CUDA runtime's last error: the next executor's
  // first kernel launch would report it ("Embedding: cudaErrorInvalidDevice").
  cudaError_t stale = cudaGetLastError();
  EXPECT_EQ(stale, cudaSuccess) << cudaGetErrorName(stale);
}

TEST(CudaExecutor, EachRankOfAPartitionedPlanAgreesWithTheCpu) {
  // Mesh [dp = 2, tp = 2, one = 1], each rank's executor over a one-rank view: sharded
  // parameters, ShardSlice, the vocab-parallel embedding and its gradient, a sharded dropout
  // (none needs another rank), and collectives over the size-1 axis (NCCL with one rank).
  using O = fb::Opcode;
  PlanSpec spec;
  spec.axisNames = {"dp", "tp", "one"};
  spec.axisSizes = {2, 2, 1};
  spec.ranks.clear();
  for (int64_t r = 0; r < 4; ++r)
    spec.ranks.push_back({0, {r / 2, r % 2, 0}});
  spec.seed = 11;
  ProgramSpec &p = spec.program();
  uint32_t table = p.shardedParam("table", DType::f32, {3, 4}, {6, 4}, {{0, {1}}});
  uint32_t ids = p.input("ids", DType::i64, {5});
  uint32_t dy = p.input("dy", DType::f32, {5, 4});
  uint32_t x = p.input("x", DType::f32, {2, 8});
  uint32_t seed = p.input("seed", DType::i64, {});
  uint32_t rows = p.buffer("rows", DType::f32, {5, 4});
  uint32_t dtable = p.buffer("dtable", DType::f32, {3, 4});
  uint32_t slice = p.buffer("slice", DType::f32, {2, 4});
  uint32_t dropped = p.buffer("dropped", DType::f32, {2, 4});
  uint32_t gathered = p.buffer("gathered", DType::f32, {2, 4});
  uint32_t scattered = p.buffer("scattered", DType::f32, {2, 4});
  p.inst(O::Embedding, {table, ids}, rows, "wte", fb::Attrs::EmbeddingAttrs, embeddingAttrs({1}));
  p.inst(O::EmbeddingGrad, {dy, ids}, dtable, "wte grad", fb::Attrs::EmbeddingAttrs,
         embeddingAttrs({1}));
  p.inst(O::AllReduce, {rows}, rows, "all-reduce over one", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({2}, fb::ReduceKind::sum));
  p.inst(O::ShardSlice, {x}, slice, "slice", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1));
  p.inst(O::Dropout, {slice, seed}, dropped, "drop", fb::Attrs::DropoutAttrs,
         [](flatbuffers::FlatBufferBuilder &b) {
           std::vector<int64_t> global = {2, 8}, offset = {0, 0};
           std::vector<uint32_t> tp = {1};
           std::vector<flatbuffers::Offset<fb::DimSharding>> dims = {
               fb::CreateDimShardingDirect(b, 1, &tp)};
           return fb::CreateDropoutAttrsDirect(b, 0.5, 3, &global, &offset, &dims).Union();
         });
  p.inst(O::AllGather, {dropped}, gathered, "gather over one", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({2}, fb::ReduceKind::sum, 1));
  p.inst(O::ReduceScatter, {gathered}, scattered, "scatter over one", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({2}, fb::ReduceKind::max, 1));
  p.output("rows", rows, {1});
  p.output("dtable", dtable);
  p.output("slice", slice);
  p.output("scattered", scattered);
  LoadedPlan plan = load(spec);
  HostTensor idsT = i64({5}, {0, 5, 3, 2, 3}), dyT = f32({5, 4}, randomValues(20, 3)),
             xT = f32({2, 8}, randomValues(16, 4)), seedT = i64({}, {42});
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ExecutorOptions options;
    options.rank = rank;
    auto cpu = Executor::create(plan, options);
    options.backend = Backend::cuda;
    auto gpu = Executor::create(plan, options);
    ASSERT_TRUE(cpu.isOk()) << cpu.status().message();
    ASSERT_TRUE(gpu.isOk()) << gpu.status().message();
    EXPECT_EQ((*gpu)->coords(), (*cpu)->coords());
    EXPECT_EQ((*gpu)->parameter("table").value().bytes, (*cpu)->parameter("table").value().bytes);
    EXPECT_EQ((*gpu)->parameterShard("table").value().offset,
              (*cpu)->parameterShard("table").value().offset);
    for (Executor *ex : {cpu->get(), gpu->get()}) {
      ASSERT_TRUE(ex->setInput("ids", idsT).isOk());
      ASSERT_TRUE(ex->setInput("dy", dyT).isOk());
      ASSERT_TRUE(ex->setInput("x", xT).isOk());
      ASSERT_TRUE(ex->setInput("seed", seedT).isOk());
      Status s = ex->run();
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    // Copies, masks and one-rank collectives are exact; the gradient sums in the CPU's order.
    for (const char *name : {"rows", "dtable", "slice", "scattered"})
      EXPECT_EQ((*gpu)->output(name).value().bytes, (*cpu)->output(name).value().bytes) << name;
    EXPECT_EQ((*gpu)->outputPartialAxes("rows").value(), (std::vector<uint32_t>{1}));
  }
}

// ---- 5 optimizer steps of a compiled GPT plan, CPU vs CUDA -------------------------------------

namespace {

std::vector<std::string> trainPlans() {
  std::vector<std::string> out;
  const char *env = std::getenv("MEGAC_TEST_TRAIN_PLAN");
  if (!env)
    return out;
  std::stringstream list(env);
  for (std::string path; std::getline(list, path, ',');)
    if (!path.empty())
      out.push_back(path);
  return out;
}

HostTensor scalarOf(DType dtype, double value) {
  HostTensor t = HostTensor::zeros(dtype, {});
  switch (dtype) {
  case DType::f64:
    *t.data<double>() = value;
    break;
  case DType::f32:
    *t.data<float>() = float(value);
    break;
  case DType::bf16:
    *t.data<uint16_t>() = floatToBf16(float(value));
    break;
  case DType::f16:
    *t.data<uint16_t>() = floatToHalf(float(value));
    break;
  case DType::i64:
    *t.data<int64_t>() = int64_t(value);
    break;
  case DType::i32:
    *t.data<int32_t>() = int32_t(value);
    break;
  case DType::i1:
    *t.data<uint8_t>() = value != 0;
    break;
  }
  return t;
}

/// Token ids [b, s] of `dtype` from a deterministic stream: `labels` are the next tokens.
std::pair<HostTensor, HostTensor> tokenBatch(const TensorInfo &info, int64_t vocab, int64_t seed) {
  HostTensor ids = HostTensor::zeros(info.dtype, info.shape), labels = ids;
  int64_t rows = info.shape.at(0), seq = info.shape.at(1);
  auto token = [&](int64_t k) { return (k * k * 37 + k * 11 + seed * 7919) % vocab; };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < seq; ++j) {
      int64_t k = r * (seq + 1) + j, i = r * seq + j;
      if (info.dtype == DType::i64) {
        ids.data<int64_t>()[i] = token(k);
        labels.data<int64_t>()[i] = token(k + 1);
      } else {
        ids.data<int32_t>()[i] = int32_t(token(k));
        labels.data<int32_t>()[i] = int32_t(token(k + 1));
      }
    }
  return {ids, labels};
}

bool hasInput(const Executor &ex, const std::string &name) {
  std::vector<std::string> names = ex.inputNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct StepResult {
  double loss = 0;     // summed over the micro-batches
  double gradNorm = 0; // apply_gradients' grad_norm (before clipping)
};

/// One optimizer step of 2 micro-batches: the summed loss and the gradient norm.
StatusOr<StepResult> trainStep(Executor &ex, int64_t step, int64_t vocab) {
  const int64_t microBatches = 2;
  ASSIGN_OR_RETURN(TensorInfo ids, ex.inputInfo("input_ids"));
  RETURN_IF_ERROR(ex.zeroState("grad."));
  if (hasInput(ex, "loss_normalizer")) {
    ASSIGN_OR_RETURN(TensorInfo norm, ex.inputInfo("loss_normalizer"));
    RETURN_IF_ERROR(ex.setInput(
        "loss_normalizer",
        scalarOf(norm.dtype, 1.0 / double(microBatches * ids.shape[0] * ids.shape[1]))));
  }
  double loss = 0;
  for (int64_t mb = 0; mb < microBatches; ++mb) {
    auto [input, labels] = tokenBatch(ids, vocab, step * microBatches + mb);
    RETURN_IF_ERROR(ex.setInput("input_ids", input));
    RETURN_IF_ERROR(ex.setInput("labels", labels));
    RETURN_IF_ERROR(ex.run("forward_backward"));
    ASSIGN_OR_RETURN(HostTensor part, ex.output("loss"));
    loss += toDoubles(part).at(0);
  }
  ASSIGN_OR_RETURN(TensorInfo lr, ex.inputInfo("lr"));
  ASSIGN_OR_RETURN(TensorInfo st, ex.inputInfo("step"));
  RETURN_IF_ERROR(ex.setInput("lr", scalarOf(lr.dtype, 1e-3)));
  RETURN_IF_ERROR(ex.setInput("step", scalarOf(st.dtype, double(step + 1))));
  RETURN_IF_ERROR(ex.run("apply_gradients"));
  ASSIGN_OR_RETURN(HostTensor norm, ex.output("grad_norm"));
  return StepResult{loss, toDoubles(norm).at(0)};
}

} // namespace

TEST(CudaExecutor, FiveGptTrainingStepsAgreeWithTheCpu) {
  std::vector<std::string> plans = trainPlans();
  if (plans.empty())
    GTEST_SKIP() << "MEGAC_TEST_TRAIN_PLAN is not set (ctest sets it to the plans its fixture "
                    "compiles with megac)";
  for (const std::string &path : plans) {
    SCOPED_TRACE(path);
    auto loaded = loadPlanFile(path);
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    auto cpu = create(*loaded, Backend::cpu), gpu = create(*loaded, Backend::cuda);
    ASSERT_TRUE(cpu && gpu);
    ASSERT_TRUE(hasInput(*cpu, "input_ids") && hasInput(*cpu, "labels"))
        << "not a causal-LM training plan";
    auto wte = cpu->parameter("wte");
    ASSERT_TRUE(wte.isOk()) << "the vocabulary comes from the 'wte' parameter: "
                            << wte.status().message();
    int64_t vocab = wte->shape.at(0);
    // Mixed precision keeps f32 master weights: a plan is "half" when any buffer is bf16/f16.
    bool half = false;
    for (const fb::Program *program : *loaded->plan().programs())
      for (const fb::Buffer *b : *program->buffers())
        half = half || b->dtype() == fb::DType::bf16 || b->dtype() == fb::DType::f16;
    const double lossRtol = half ? 2e-2 : 1e-4;
    // grad_norm, compared at every step (the parameters are not: AdamW divides by sqrt(v), so
    // roundoff in a gradient that is 0 in exact arithmetic -- the attention key bias -- moves
    // its element by up to lr per step differently on the two backends; only grad_norm says
    // whether the gradients agree). The error model, relative to the CPU's grad_norm:
    //  - f32: both backends compute the same plan's ops in f32 (no TF32 unless --allow-tf32),
    //    in other orders (cuBLASLt vs OpenBLAS GEMMs, other reduction trees). Each gradient
    //    element is then off by the reassociation of the sums on its path: about 48 ops forward
    //    and backward (2 layers x ~10 ops, twice, plus the head and the loss) with at most
    //    K = 256 terms each (the FFN's inner GEMM), and round-off that behaves as independent
    //    errors adds in quadrature (Higham & Mary 2019): sqrt(48 * 256) * u, u = 2^-24, per
    //    element and so on ||g||; times lambda = 5 for a margin: 3.3e-5. Later steps start from
    //    parameters that differ by lr times that relative difference (1e-3 * 7e-6) plus the key
    //    bias's lr-sized moves, which change no forward value (softmax ignores a per-row shift),
    //    so the bound holds at every step.
    //  - bf16 / f16 plans: the same plan rounds at the same places on both backends; a result
    //    differs only where the f32 reassociation above carries it across a half rounding
    //    boundary. At most as far apart as two independent half implementations: lambda *
    //    sqrt(2) * sigma, sigma the relative standard deviation of a bf16 run's grad_norm under
    //    the probabilistic rounding model, which tests/e2e/mixed_precision_test.py's Monte Carlo
    //    computes as 3.0e-4..4.2e-4 over 5 steps of a 2-layer, hidden-64 GPT like this one;
    //    sigma = 4.2e-4, lambda = 5: 3.0e-3 (f16's unit roundoff is 8x smaller: the same bound
    //    is loose there).
    const double normRtol =
        half ? 5 * std::sqrt(2.0) * 4.2e-4 : 5 * std::sqrt(48.0 * 256.0) * 0x1p-24;
    const int steps = 5;
    double worstNorm = 0;
    for (int64_t step = 0; step < steps; ++step) {
      StatusOr<StepResult> c = trainStep(*cpu, step, vocab), g = trainStep(*gpu, step, vocab);
      ASSERT_TRUE(c.isOk()) << "cpu step " << step << ": " << c.status().message();
      ASSERT_TRUE(g.isOk()) << "cuda step " << step << ": " << g.status().message();
      // NaN-proof: !(d <= bound) fails on a NaN or inf on either side.
      double lossDiff = std::fabs(g->loss - c->loss);
      EXPECT_TRUE(lossDiff <= lossRtol * std::fabs(c->loss))
          << "loss of step " << step << ": cuda " << g->loss << ", cpu " << c->loss;
      ASSERT_TRUE(std::isfinite(c->gradNorm) && c->gradNorm > 0)
          << "cpu grad_norm of step " << step << ": " << c->gradNorm;
      double normDiff = std::fabs(g->gradNorm - c->gradNorm);
      EXPECT_TRUE(normDiff <= normRtol * c->gradNorm)
          << "grad_norm of step " << step << ": cuda " << g->gradNorm << ", cpu " << c->gradNorm
          << " (relative difference " << normDiff / c->gradNorm << " > " << normRtol << ")";
      worstNorm = std::max(worstNorm, std::isfinite(normDiff) ? normDiff / (normRtol * c->gradNorm)
                                                              : INFINITY);
      // Small initial weights predict about uniformly (this checks the harness's inputs).
      if (step == 0) {
        EXPECT_NEAR(c->loss, std::log(double(vocab)), 0.5) << "the first step's mean loss";
      }
      std::printf("%s (%s) step %d: loss cpu %.6f cuda %.6f, grad_norm cpu %.7g cuda %.7g\n",
                  path.c_str(), half ? "half" : "f32", int(step), c->loss, g->loss, c->gradNorm,
                  g->gradNorm);
    }
    std::printf("%s: worst grad_norm error/bound %.3f (bound %.2e relative)\n", path.c_str(),
                worstNorm, normRtol);
    // The parameters stay finite on the device (their values are compared through the later
    // steps' losses and grad_norms).
    for (const std::string &name : cpu->parameterNames()) {
      std::vector<double> got = toDoubles(gpu->parameter(name).value());
      size_t bad =
          std::count_if(got.begin(), got.end(), [](double x) { return !std::isfinite(x); });
      EXPECT_EQ(bad, 0u) << name << ": " << bad << " non-finite elements on the device";
    }
  }
}
