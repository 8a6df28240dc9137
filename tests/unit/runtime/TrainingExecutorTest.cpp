// Plans with several functions, state and in-place updates: a hand-built linear-regression
// training step (forward_backward accumulating into state, apply_gradients clipping and running
// AdamW in place) against a hand computation; the executor's function, parameter and state API;
// the new opcodes' dispatch; and every loader rule about functions, state and in-place writes.
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "support/Float16.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

#include <cmath>
#include <optional>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8, kDecay = 0.1, kMaxNorm = 0.5;

/// Linear regression, f64: loss = sum((x w - t)^2) * norm over a micro-batch x [4,3], t [4,1].
///   forward_backward(x, t, norm) -> loss; grad.w += x^T (2 (x w - t) norm)     (in place)
///   apply_gradients(lr, step) -> grad_norm; grad.w clipped to kMaxNorm (in place);
///                                  w, adam.m.w, adam.v.w = AdamW(...)          (in place)
/// With `fused`, the gradient is one MatMul reading x transposed (MatMulAttrs) and accumulating
/// into grad.w in place (issue 30) instead of Transpose, MatMul and Add.
PlanSpec linearRegressionPlan(bool fused = false) {
  using O = fb::Opcode;
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  p.name = "regression";
  uint32_t w = p.param("w", DType::f64, {3, 1});
  uint32_t grad = p.stateBuffer("grad.w", DType::f64, {3, 1});
  uint32_t m = p.stateBuffer("adam.m.w", DType::f64, {3, 1});
  uint32_t v = p.stateBuffer("adam.v.w", DType::f64, {3, 1});

  p.functions[0].name = "forward_backward";
  uint32_t x = p.input("x", DType::f64, {4, 3});
  uint32_t t = p.input("t", DType::f64, {4, 1});
  uint32_t norm = p.input("norm", DType::f64, {});
  uint32_t pred = p.buffer("pred", DType::f64, {4, 1});
  uint32_t diff = p.buffer("diff", DType::f64, {4, 1});
  uint32_t sq = p.buffer("sq", DType::f64, {4, 1});
  uint32_t sum = p.buffer("sum", DType::f64, {});
  uint32_t loss = p.buffer("loss", DType::f64, {});
  uint32_t twice = p.buffer("twice", DType::f64, {4, 1});
  uint32_t normB = p.buffer("norm_b", DType::f64, {4, 1});
  uint32_t dpred = p.buffer("dpred", DType::f64, {4, 1});
  uint32_t xt = p.buffer("xt", DType::f64, {3, 4});
  uint32_t gw = p.buffer("gw", DType::f64, {3, 1});
  p.inst(O::MatMul, {x, w}, pred, "pred");
  p.inst(O::Sub, {pred, t}, diff, "diff");
  p.inst(O::Mul, {diff, diff}, sq, "sq");
  p.inst(O::Reduce, {sq}, sum, "sum", fb::Attrs::ReduceAttrs,
         reduceAttrs(fb::ReduceKind::sum, {0, 1}));
  p.inst(O::Mul, {sum, norm}, loss, "loss");
  p.inst(O::Add, {diff, diff}, twice, "2 diff");
  p.inst(O::Broadcast, {norm}, normB, "norm");
  p.inst(O::Mul, {twice, normB}, dpred, "dpred");
  if (fused) {
    p.inst(O::MatMul, {x, dpred, grad}, grad, "dw", fb::Attrs::MatMulAttrs,
           [](flatbuffers::FlatBufferBuilder &b) {
             return fb::CreateMatMulAttrs(b, /*transpose_lhs=*/true, false).Union();
           });
  } else {
    p.inst(O::Transpose, {x}, xt, "x^T", fb::Attrs::TransposeAttrs, transposeAttrs({1, 0}));
    p.inst(O::MatMul, {xt, dpred}, gw, "dw");
    p.inst(O::Add, {grad, gw}, grad, "accumulate"); // in place into the state
  }
  p.output("loss", loss);

  p.function("apply_gradients");
  uint32_t lr = p.input("lr", DType::f64, {});
  uint32_t step = p.input("step", DType::i64, {});
  uint32_t gnorm = p.buffer("grad_norm", DType::f64, {});
  p.inst(O::GlobalNorm, {grad}, gnorm, "norm");
  p.inst(O::ClipByNorm, {grad, gnorm}, grad, "clip", fb::Attrs::ClipAttrs, clipAttrs(kMaxNorm));
  p.instN(O::AdamW, {w, grad, m, v, lr, step}, {w, m, v}, "adamw", fb::Attrs::AdamWAttrs,
          adamwAttrs(kBeta1, kBeta2, kEps, kDecay));
  p.output("grad_norm", gnorm);
  return spec;
}

LoadedPlan load(const PlanSpec &spec) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return loaded.value();
}

/// Loads `plan` and expects an error containing every piece of `expected`.
void expectRejected(const PlanSpec &plan, std::vector<std::string> expected) {
  auto loaded = loadPlanFromBytes(plan.build(), "test.mplan");
  ASSERT_FALSE(loaded.isOk()) << "accepted a plan that should fail with: " << expected[0];
  for (const std::string &piece : expected)
    EXPECT_NE(loaded.status().message().find(piece), std::string::npos)
        << "message: " << loaded.status().message() << "\nmissing: " << piece;
}

} // namespace

TEST(TrainingExecutor, RunsThreeStepsOfLinearRegression) {
  LoadedPlan plan = load(linearRegressionPlan());
  std::vector<double> w = {0.5, -0.25, 1.0};
  TensorMap weights{{"w", f64({3, 1}, w)}};
  ExecutorOptions options;
  options.weights = &weights;
  auto created = Executor::create(plan, options);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  Executor &ex = **created;
  EXPECT_EQ(ex.functionNames(), (std::vector<std::string>{"forward_backward", "apply_gradients"}));
  EXPECT_EQ(ex.parameterNames(), std::vector<std::string>{"w"});
  EXPECT_EQ(ex.stateNames(), (std::vector<std::string>{"grad.w", "adam.m.w", "adam.v.w"}));
  EXPECT_EQ(ex.inputNames("apply_gradients"), (std::vector<std::string>{"lr", "step"}));
  EXPECT_EQ(ex.inputNames(), (std::vector<std::string>{"x", "t", "norm", "lr", "step"}));
  EXPECT_EQ(ex.outputNames(), (std::vector<std::string>{"loss", "grad_norm"}));
  auto info = ex.inputInfo("step");
  ASSERT_TRUE(info.isOk());
  EXPECT_EQ(info->dtype, DType::i64);
  EXPECT_TRUE(info->shape.empty());
  // State is zero at load.
  EXPECT_EQ(valuesOf<double>(ex.state("adam.v.w").value()), (std::vector<double>{0, 0, 0}));

  std::vector<double> m(3, 0.0), v(3, 0.0);
  const int kMicro = 2;
  const double norm = 1.0 / (4 * kMicro);
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(ex.zeroState("grad.").isOk());
    std::vector<double> grad(3, 0.0);
    double lossSum = 0.0, expectedLoss = 0.0;
    for (int mb = 0; mb < kMicro; ++mb) {
      std::vector<double> x = randomValues<double>(12, uint32_t(step * 10 + mb));
      std::vector<double> t = randomValues<double>(4, uint32_t(step * 10 + mb + 5));
      ASSERT_TRUE(ex.setInput("x", f64({4, 3}, x)).isOk());
      ASSERT_TRUE(ex.setInput("t", f64({4, 1}, t)).isOk());
      ASSERT_TRUE(ex.setInput("norm", f64({}, {norm})).isOk());
      Status s = ex.run("forward_backward");
      ASSERT_TRUE(s.isOk()) << s.message();
      lossSum += valuesOf<double>(ex.output("loss").value())[0];
      for (int r = 0; r < 4; ++r) {
        double d = x[r * 3] * w[0] + x[r * 3 + 1] * w[1] + x[r * 3 + 2] * w[2] - t[r];
        expectedLoss += d * d * norm;
        for (int c = 0; c < 3; ++c)
          grad[c] += x[r * 3 + c] * 2 * d * norm;
      }
    }
    EXPECT_NEAR(lossSum, expectedLoss, 1e-14 * std::fabs(expectedLoss));
    expectClose(valuesOf<double>(ex.state("grad.w").value()), grad, 1e-13, 1e-16, "accumulated");

    double lr = 0.05 / double(step);
    ASSERT_TRUE(ex.setInput("lr", f64({}, {lr})).isOk());
    ASSERT_TRUE(ex.setInput("step", i64({}, {step})).isOk());
    Status s = ex.run("apply_gradients");
    ASSERT_TRUE(s.isOk()) << s.message();
    double gradNorm = std::sqrt(grad[0] * grad[0] + grad[1] * grad[1] + grad[2] * grad[2]);
    EXPECT_NEAR(valuesOf<double>(ex.output("grad_norm").value())[0], gradNorm, 1e-14 * gradNorm);
    double coef = std::min(1.0, kMaxNorm / (gradNorm + 1e-6));
    double bias1 = 1 - std::pow(kBeta1, double(step)), bias2 = 1 - std::pow(kBeta2, double(step));
    for (int c = 0; c < 3; ++c) {
      double g = grad[c] * coef;
      w[c] -= lr * kDecay * w[c];
      m[c] = kBeta1 * m[c] + (1 - kBeta1) * g;
      v[c] = kBeta2 * v[c] + (1 - kBeta2) * g * g;
      w[c] -= lr * (m[c] / bias1) / (std::sqrt(v[c] / bias2) + kEps);
    }
    expectClose(valuesOf<double>(ex.parameter("w").value()), w, 1e-13, 0,
                "w after step " + std::to_string(step));
    expectClose(valuesOf<double>(ex.state("adam.m.w").value()), m, 1e-13, 0, "m");
    expectClose(valuesOf<double>(ex.state("adam.v.w").value()), v, 1e-13, 0, "v");
  }
  // The loss of forward_backward is gone once apply_gradients ran (they share arena bytes).
  auto stale = ex.output("loss");
  ASSERT_FALSE(stale.isOk());
  EXPECT_EQ(stale.status().message(),
            "output 'loss' of function 'forward_backward' is read after a run of function "
            "'apply_gradients'; read it right after running 'forward_backward'");
}

TEST(TrainingExecutor, ParametersAndStateCanBeReadWrittenAndZeroed) {
  LoadedPlan plan = load(linearRegressionPlan());
  TensorMap weights{{"w", f64({3, 1}, {1, 2, 3})}};
  ExecutorOptions options;
  options.weights = &weights;
  auto ex = std::move(Executor::create(plan, options).value());
  EXPECT_EQ(valuesOf<double>(ex->parameter("w").value()), (std::vector<double>{1, 2, 3}));
  ASSERT_TRUE(ex->setParameter("w", f64({3, 1}, {4, 5, 6})).isOk());
  EXPECT_EQ(valuesOf<double>(ex->parameter("w").value()), (std::vector<double>{4, 5, 6}));
  ASSERT_TRUE(ex->setState("adam.m.w", f64({3, 1}, {7, 8, 9})).isOk());
  ASSERT_TRUE(ex->setState("grad.w", f64({3, 1}, {1, 1, 1})).isOk());
  ASSERT_TRUE(ex->zeroState("grad.").isOk());
  EXPECT_EQ(valuesOf<double>(ex->state("grad.w").value()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(valuesOf<double>(ex->state("adam.m.w").value()), (std::vector<double>{7, 8, 9}));
  ASSERT_TRUE(ex->zeroState("").isOk());
  EXPECT_EQ(valuesOf<double>(ex->state("adam.m.w").value()), (std::vector<double>{0, 0, 0}));

  Status s = ex->setParameter("w", f64({3}, {1, 2, 3}));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "parameter 'w' must be f64 [3, 1], got f64 [3]");
  EXPECT_EQ(ex->setState("adam.v.w", f32({3, 1}, {1, 2, 3})).message(),
            "state buffer 'adam.v.w' must be f64 [3, 1], got f32 [3, 1]");
  EXPECT_EQ(ex->parameter("grad.w").status().message(), "the program has no parameter 'grad.w'");
  EXPECT_EQ(ex->state("w").status().message(), "the program has no state buffer 'w'");
  // Two functions, none named "forward": run() needs a name.
  EXPECT_EQ(ex->run().message(), "run() without a function name needs a program with one function "
                                 "or a 'forward' function; this one has: forward_backward, "
                                 "apply_gradients");
  EXPECT_EQ(ex->run("train").message(),
            "the program has no function 'train' (functions: forward_backward, apply_gradients)");
  s = ex->run("apply_gradients");
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "input 'lr' was not set before running function 'apply_gradients'");
  // A failed AdamW (step 0) names the function and instruction.
  ASSERT_TRUE(ex->setInput("lr", f64({}, {0.1})).isOk());
  ASSERT_TRUE(ex->setInput("step", i64({}, {0})).isOk());
  s = ex->run("apply_gradients");
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "program 'regression', function 'apply_gradients', instruction 2 (AdamW "
                         "at 'adamw'): AdamW: step 0 must be >= 1 (steps count from 1)");
  EXPECT_FALSE(ex->output("grad_norm").isOk());
}

TEST(TrainingExecutor, RunWithoutANameRunsForward) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  p.functions[0].name = "eval";
  uint32_t x = p.input("x", DType::f32, {2});
  uint32_t y = p.buffer("y", DType::f32, {2});
  p.inst(fb::Opcode::Neg, {x}, y);
  p.output("y", y);
  p.function("forward");
  // The same input in a second function is the same input: set once, read by both.
  uint32_t x2 = p.input("x", DType::f32, {2});
  uint32_t z = p.buffer("z", DType::f32, {2});
  p.inst(fb::Opcode::Exp, {x2}, z);
  p.output("z", z);
  LoadedPlan plan = load(spec);
  auto ex = std::move(Executor::create(plan, {}).value());
  ASSERT_TRUE(ex->setInput("x", f32({2}, {0, 1})).isOk());
  ASSERT_TRUE(ex->run().isOk());
  EXPECT_EQ(valuesOf<float>(ex->output("z").value()), (std::vector<float>{1, std::exp(1.0f)}));
  EXPECT_EQ(ex->output("y").status().message(),
            "output 'y' of function 'eval' is read after a run of function 'forward'; read it "
            "right after running 'eval'");
  ASSERT_TRUE(ex->run("eval").isOk());
  EXPECT_EQ(valuesOf<float>(ex->output("y").value()), (std::vector<float>{-0.0f, -1}));
  EXPECT_EQ(ex->inputNames(), std::vector<std::string>{"x"});
}

namespace {

/// Runs one instruction with several outputs through a plan and returns them.
std::vector<HostTensor> runMulti(fb::Opcode op, const std::vector<HostTensor> &inputs,
                                 const std::vector<HostTensor> &outputShapes, fb::Attrs attrsType,
                                 AttrsFn attrs) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<uint32_t> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(p.input("in" + std::to_string(i), inputs[i].dtype, inputs[i].shape));
  for (size_t i = 0; i < outputShapes.size(); ++i) {
    outs.push_back(
        p.buffer("out" + std::to_string(i), outputShapes[i].dtype, outputShapes[i].shape));
    p.output("out" + std::to_string(i), outs.back());
  }
  p.instN(op, ins, outs, "multi", attrsType, std::move(attrs));
  auto plan = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  if (!plan.isOk())
    return {};
  auto ex = std::move(Executor::create(plan.value(), {}).value());
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(ex->setInput("in" + std::to_string(i), inputs[i]).isOk());
  Status s = ex->run();
  EXPECT_TRUE(s.isOk()) << fb::EnumNameOpcode(op) << ": " << s.message();
  std::vector<HostTensor> results;
  for (size_t i = 0; i < outputShapes.size(); ++i)
    results.push_back(ex->output("out" + std::to_string(i)).value());
  return results;
}

/// The kernel called directly on fresh outputs shaped like `outputShapes`.
template <typename F>
std::vector<HostTensor> directMulti(std::vector<HostTensor> outputShapes, F kernel) {
  std::vector<cpu::TensorRef> refs;
  for (HostTensor &t : outputShapes)
    refs.push_back(cpu::refOf(t));
  Status s = kernel(refs);
  EXPECT_TRUE(s.isOk()) << s.message();
  return outputShapes;
}

void expectSameBytes(const std::vector<HostTensor> &got, const std::vector<HostTensor> &want,
                     const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i].bytes, want[i].bytes) << what << " output " << i;
}

} // namespace

TEST(TrainingExecutor, DispatchesTheTrainingOpcodesToTheirKernels) {
  using O = fb::Opcode;
  using cpu::refOf;
  auto z = [](std::vector<int64_t> shape) { return HostTensor::zeros(DType::f32, shape); };
  HostTensor x = f32({2, 3}, randomValues(6, 1)), dy = f32({2, 3}, randomValues(6, 2));
  HostTensor w = f32({3}, randomValues(3, 3, 0.5, 1.5));

  expectSameBytes(
      runMulti(O::Pad, {x}, {z({3, 6})}, fb::Attrs::PadAttrs, padAttrs({1, 0}, {0, 1}, {0, 1})),
      directMulti({z({3, 6})},
                  [&](auto &o) {
                    return cpu::pad(refOf(x), std::vector<int64_t>{1, 0},
                                    std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 1}, o[0]);
                  }),
      "Pad");
  expectSameBytes(runMulti(O::LayerNormGrad, {dy, x, w}, {z({2, 3}), z({3}), z({3})},
                           fb::Attrs::NormAttrs, normAttrs(1e-5)),
                  directMulti({z({2, 3}), z({3}), z({3})},
                              [&](auto &o) {
                                return cpu::layerNormGrad(refOf(dy), refOf(x), refOf(w), 1e-5, o[0],
                                                          o[1], o[2]);
                              }),
                  "LayerNormGrad");
  expectSameBytes(runMulti(O::RmsNormGrad, {dy, x, w}, {z({2, 3}), z({3})}, fb::Attrs::NormAttrs,
                           normAttrs(1e-6)),
                  directMulti({z({2, 3}), z({3})},
                              [&](auto &o) {
                                return cpu::rmsNormGrad(refOf(dy), refOf(x), refOf(w), 1e-6, o[0],
                                                        o[1]);
                              }),
                  "RmsNormGrad");
  HostTensor q = f32({1, 2, 2, 3}, randomValues(12, 4)), k = f32({1, 3, 1, 3}, randomValues(9, 5));
  HostTensor v = f32({1, 3, 1, 2}, randomValues(6, 6)),
             dout = f32({1, 2, 2, 2}, randomValues(8, 7));
  HostTensor mask = f32({2, 3}, randomValues(6, 8));
  expectSameBytes(runMulti(O::AttentionGrad, {dout, q, k, v, mask},
                           {z({1, 2, 2, 3}), z({1, 3, 1, 3}), z({1, 3, 1, 2}), z({2, 3})},
                           fb::Attrs::AttentionAttrs, attentionAttrs(true, 0.7)),
                  directMulti({z({1, 2, 2, 3}), z({1, 3, 1, 3}), z({1, 3, 1, 2}), z({2, 3})},
                              [&](auto &o) {
                                cpu::TensorRef m = refOf(mask);
                                return cpu::attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v),
                                                          &m, true, 0.7, o[0], o[1], o[2], &o[3]);
                              }),
                  "AttentionGrad with a mask");
  expectSameBytes(runMulti(O::AttentionGrad, {dout, q, k, v},
                           {z({1, 2, 2, 3}), z({1, 3, 1, 3}), z({1, 3, 1, 2})},
                           fb::Attrs::AttentionAttrs, attentionAttrs(false, 0.7)),
                  directMulti({z({1, 2, 2, 3}), z({1, 3, 1, 3}), z({1, 3, 1, 2})},
                              [&](auto &o) {
                                return cpu::attentionGrad(refOf(dout), refOf(q), refOf(k), refOf(v),
                                                          nullptr, false, 0.7, o[0], o[1], o[2],
                                                          nullptr);
                              }),
                  "AttentionGrad");
  expectSameBytes(
      runMulti(O::GeluGrad, {dy, x}, {z({2, 3})}, fb::Attrs::GeluAttrs, geluAttrs(true)),
      directMulti({z({2, 3})},
                  [&](auto &o) { return cpu::geluGrad(refOf(dy), refOf(x), true, o[0]); }),
      "GeluGrad");
  expectSameBytes(
      runMulti(O::SoftmaxGrad, {dy, x}, {z({2, 3})}, fb::Attrs::AxisAttrs, axisAttrs(0)),
      directMulti({z({2, 3})},
                  [&](auto &o) { return cpu::softmaxGrad(refOf(dy), refOf(x), 0, o[0]); }),
      "SoftmaxGrad");
  HostTensor dl = f32({2}, {0.5, -2}), labels = i64({2}, {2, -100});
  expectSameBytes(runMulti(O::CrossEntropyGrad, {dl, x, labels}, {z({2, 3})},
                           fb::Attrs::CrossEntropyAttrs, crossEntropyAttrs(true, -100)),
                  directMulti({z({2, 3})},
                              [&](auto &o) {
                                return cpu::crossEntropyGrad(refOf(dl), refOf(x), refOf(labels),
                                                             -100, o[0]);
                              }),
                  "CrossEntropyGrad");
  HostTensor ids = i64({2}, {3, 3});
  expectSameBytes(
      runMulti(O::EmbeddingGrad, {x, ids}, {z({5, 3})}, fb::Attrs::NONE, nullptr),
      directMulti({z({5, 3})},
                  [&](auto &o) { return cpu::embeddingGrad(refOf(x), refOf(ids), o[0]); }),
      "EmbeddingGrad");
  HostTensor lr = f32({}, {0.01f}), step = i64({}, {3}), sq = f32({2, 3}, randomValues(6, 9, 0, 1));
  expectSameBytes(runMulti(O::AdamW, {x, dy, dy, sq, lr, step}, {z({2, 3}), z({2, 3}), z({2, 3})},
                           fb::Attrs::AdamWAttrs, adamwAttrs(0.8, 0.9, 1e-6, 0.01)),
                  directMulti({z({2, 3}), z({2, 3}), z({2, 3})},
                              [&](auto &o) {
                                return cpu::adamw(refOf(x), refOf(dy), refOf(dy), refOf(sq),
                                                  refOf(lr), refOf(step),
                                                  cpu::AdamWConfig{0.8, 0.9, 1e-6, 0.01}, o[0],
                                                  o[1], o[2]);
                              }),
                  "AdamW");
  expectSameBytes(runMulti(O::GlobalNorm, {x, w}, {z({})}, fb::Attrs::NONE, nullptr),
                  directMulti({z({})},
                              [&](auto &o) {
                                std::vector<cpu::TensorRef> in{refOf(x), refOf(w)};
                                return cpu::globalNorm(in, o[0]);
                              }),
                  "GlobalNorm");
  HostTensor n = f32({}, {7});
  expectSameBytes(
      runMulti(O::ClipByNorm, {x, n}, {z({2, 3})}, fb::Attrs::ClipAttrs, clipAttrs(1)),
      directMulti({z({2, 3})},
                  [&](auto &o) { return cpu::clipByNorm(refOf(x), refOf(n), 1, o[0]); }),
      "ClipByNorm");
  HostTensor seed = i64({}, {11});
  expectSameBytes(runMulti(O::Dropout, {x, seed}, {z({2, 3})}, fb::Attrs::DropoutAttrs,
                           dropoutShardAttrs(0.5, 2, {4, 3}, {2, 0})),
                  directMulti({z({2, 3})},
                              [&](auto &o) {
                                return cpu::dropoutShard(refOf(x), refOf(seed), 0.5, 2,
                                                         std::vector<int64_t>{4, 3},
                                                         std::vector<int64_t>{2, 0}, o[0]);
                              }),
                  "Dropout of a shard");
}

TEST(TrainingLoader, AcceptsTheTrainingPlan) {
  auto loaded = loadPlanFromBytes(linearRegressionPlan().build());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  const fb::Program &p = *loaded->plan().programs()->Get(0);
  ASSERT_EQ(p.functions()->size(), 2u);
  EXPECT_EQ(p.state()->size(), 3u);
}

// The fused form (x read transposed, the product accumulated into grad.w by the GEMM itself)
// loads and trains like Transpose + MatMul + Add: f64 sums of 4 products reassociated at most,
// so the states agree to 1e-13 relative after 3 steps of 2 micro-batches.
TEST(TrainingExecutor, FusedAccumulatingGemmTrainsLikeTheSeparateAdd) {
  TensorMap weights{{"w", f64({3, 1}, {0.5, -0.25, 1.0})}};
  ExecutorOptions options;
  options.weights = &weights;
  auto plain = Executor::create(load(linearRegressionPlan()), options);
  auto fused = Executor::create(load(linearRegressionPlan(/*fused=*/true)), options);
  ASSERT_TRUE(plain.isOk()) << plain.status().message();
  ASSERT_TRUE(fused.isOk()) << fused.status().message();
  for (int64_t step = 1; step <= 3; ++step) {
    for (Executor *ex : {plain->get(), fused->get()}) {
      ASSERT_TRUE(ex->zeroState("grad.").isOk());
      for (int mb = 0; mb < 2; ++mb) {
        ASSERT_TRUE(
            ex->setInput("x", f64({4, 3}, randomValues<double>(12, uint32_t(step * 10 + mb))))
                .isOk());
        ASSERT_TRUE(
            ex->setInput("t", f64({4, 1}, randomValues<double>(4, uint32_t(step + mb)))).isOk());
        ASSERT_TRUE(ex->setInput("norm", f64({}, {0.125})).isOk());
        Status s = ex->run("forward_backward");
        ASSERT_TRUE(s.isOk()) << s.message();
      }
    }
    std::vector<double> want = valuesOf<double>((*plain)->state("grad.w").value());
    ASSERT_NE(want, std::vector<double>(3, 0.0)); // a gradient that accumulated something
    expectClose(valuesOf<double>((*fused)->state("grad.w").value()), want, 1e-13, 1e-16,
                "grad.w after step " + std::to_string(step));
    for (Executor *ex : {plain->get(), fused->get()}) {
      ASSERT_TRUE(ex->setInput("lr", f64({}, {0.05})).isOk());
      ASSERT_TRUE(ex->setInput("step", i64({}, {step})).isOk());
      ASSERT_TRUE(ex->run("apply_gradients").isOk());
    }
  }
  expectClose(valuesOf<double>((*fused)->parameter("w").value()),
              valuesOf<double>((*plain)->parameter("w").value()), 1e-13, 1e-16, "w");
}

/// Mixed precision (issue 30): grad.w (f32 state [3, 2]) += g^T x with g [4, 3] and x [4, 2]
/// in `half` (bf16 or f16), one MatMul reading g transposed and accumulating in place; `out`,
/// `acc` and `rhs` override the output's, the accumulator's and x's dtype (for the rejections).
PlanSpec mixedAccumulationPlan(DType half, DType out = DType::f32, DType acc = DType::f32,
                               std::optional<DType> rhs = std::nullopt, bool accumulate = true) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  p.functions[0].name = "forward_backward";
  uint32_t grad = p.stateBuffer("grad.w", acc, {3, 2});
  uint32_t g = p.input("g", half, {4, 3});
  uint32_t x = p.input("x", rhs.value_or(half), {4, 2});
  uint32_t target = out == acc && accumulate ? grad : p.buffer("dw", out, {3, 2});
  std::vector<uint32_t> ins = {g, x};
  if (accumulate)
    ins.push_back(grad);
  p.inst(fb::Opcode::MatMul, ins, target, "dw", fb::Attrs::MatMulAttrs,
         [](flatbuffers::FlatBufferBuilder &b) {
           return fb::CreateMatMulAttrs(b, /*transpose_lhs=*/true, false).Union();
         });
  return spec;
}

// bf16/f16 operands accumulate into the f32 state in place: two micro-batches against a double
// sum of the half-rounded inputs. Error model: the products of half values are exact in f32,
// each micro-batch sums 4 of them (|g||x| < 1) into |grad| < 8 in f32: |err| <= 8 terms *
// 2^-24 * 8 ~ 4e-6 absolute; 1e-5. A product rounded to half before the add would be off by
// up to 2^-9 |product| (~1e-2 for bf16), so the test tells the fused f32 sum from it.
TEST(TrainingExecutor, HalfGemmAccumulatesIntoTheF32GradientInPlace) {
  for (DType half : {DType::bf16, DType::f16}) {
    auto toHalf = [&](double v) {
      float f = static_cast<float>(v);
      return half == DType::bf16 ? floatToBf16(f) : floatToHalf(f);
    };
    auto fromHalf = [&](uint16_t b) {
      return half == DType::bf16 ? bf16ToFloat(b) : halfToFloat(b);
    };
    auto created = Executor::create(load(mixedAccumulationPlan(half)), {});
    ASSERT_TRUE(created.isOk()) << created.status().message();
    Executor &ex = **created;
    ASSERT_TRUE(ex.zeroState("grad.").isOk());
    std::vector<double> want(6, 0.0);
    for (uint32_t mb = 0; mb < 2; ++mb) {
      std::vector<uint16_t> g, x;
      for (double v : randomValues<double>(12, 30 + mb))
        g.push_back(toHalf(v));
      for (double v : randomValues<double>(8, 40 + mb))
        x.push_back(toHalf(v));
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j)
          for (int r = 0; r < 4; ++r)
            want[i * 2 + j] += double(fromHalf(g[r * 3 + i])) * double(fromHalf(x[r * 2 + j]));
      ASSERT_TRUE(ex.setInput("g", makeTensor(half, {4, 3}, g)).isOk());
      ASSERT_TRUE(ex.setInput("x", makeTensor(half, {4, 2}, x)).isOk());
      Status s = ex.run("forward_backward");
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    expectClose(valuesOf<float>(ex.state("grad.w").value()), want, 0.0, 1e-5,
                std::string("grad.w from ") + dtypeName(half));
  }
}

TEST(TrainingLoader, RejectsMatMulDtypesOtherThanMixedAccumulation) {
  // An f32 output of bf16 operands needs an accumulator.
  expectRejected(mixedAccumulationPlan(DType::bf16, DType::f32, DType::f32, std::nullopt,
                                       /*accumulate=*/false),
                 {"instruction 0 (MatMul at 'dw')",
                  "MatMul writes f32 from bf16 operands; its output is bf16, or f32 when it "
                  "accumulates (3 inputs: bf16/f16 products summed into an f32 gradient "
                  "accumulator)"});
  // f64 is no half type's accumulator.
  expectRejected(mixedAccumulationPlan(DType::bf16, DType::f64, DType::f64),
                 {"MatMul writes f64 from bf16 operands"});
  // The accumulator has the output's dtype.
  expectRejected(mixedAccumulationPlan(DType::f16, DType::f32, DType::f16),
                 {"MatMul accumulates into a f16 accumulator (input 2) but writes f32; the "
                  "accumulator and the output need one dtype"});
  // lhs and rhs alike.
  expectRejected(mixedAccumulationPlan(DType::bf16, DType::f32, DType::f32, DType::f16),
                 {"MatMul reads bf16 and f16 operands; both need one dtype"});
}

TEST(TrainingLoader, RejectsWritesOutsideTheInPlaceRules) {
  // A MatMul may not write a parameter, even one it does not read.
  PlanSpec plan = linearRegressionPlan();
  plan.program().functions[0].instructions[9].outputs = {0}; // w has gw's shape [3, 1]
  expectRejected(plan, {"function 'forward_backward', instruction 9 (MatMul at 'dw')",
                        "output 0 (buffer 0 ('w')) is a parameter: only the elementwise opcodes, "
                        "AdamW, ClipByNorm, AllReduce and a MatMul or MoeMatmulWeightGrad into its "
                        "accumulator write in place, not MatMul"});
  // An accumulating MatMul writes over its accumulator, never over lhs or rhs (read whole).
  plan = linearRegressionPlan(/*fused=*/true);
  plan.program().functions[0].instructions[8].outputs = {
      plan.program().functions[0].instructions[8].inputs[1]}; // over dpred, its rhs
  expectRejected(plan, {"instruction 8 (MatMul at 'dw')", "shares bytes with input 1"});
  // Nor its own input.
  plan = linearRegressionPlan();
  plan.program().functions[0].instructions[8].outputs = {
      plan.program().functions[0].inputs[0].buffer};
  expectRejected(plan, {"instruction 8 (Transpose at 'x^T')", "is also input 0"});
  // Nobody writes a constant.
  plan = linearRegressionPlan();
  uint32_t c = plan.program().constant("c", DType::f64, {4, 1}, std::vector<double>{1, 2, 3, 4});
  plan.program().functions[0].instructions[1].outputs = {c};
  expectRejected(plan, {"instruction 1 (Sub at 'diff')", "is a constant; constants are never "
                                                         "written"});
  // A temporary may not share bytes with persistent storage.
  plan = linearRegressionPlan();
  plan.program().buffers[plan.program().functions[0].instructions[1].outputs[0]].offset =
      plan.program().buffers[1].offset; // diff onto grad.w
  expectRejected(plan, {"instruction 1 (Sub at 'diff')",
                        "shares bytes with the state buffer in buffer 1 ('grad.w')"});
  // Nor may an input port.
  plan = linearRegressionPlan();
  plan.program().buffers[plan.program().functions[1].inputs[0].buffer].offset =
      plan.program().buffers[0].offset;
  expectRejected(plan, {"function 'apply_gradients': input 0 ('lr')",
                        "shares bytes with the parameter in buffer 0 ('w')"});
  // An instruction's outputs are disjoint.
  plan = linearRegressionPlan();
  plan.program().functions[1].instructions[2].outputs = {0, 0, 3};
  expectRejected(plan,
                 {"instruction 2 (AdamW at 'adamw')", "output 1", "shares bytes with output 0"});
  // Persistent buffers never share bytes.
  plan = linearRegressionPlan();
  plan.program().buffers[3].offset = plan.program().buffers[2].offset;
  expectRejected(plan,
                 {"the state buffer in buffer 2 ('adam.m.w') and the state buffer in buffer 3 "
                  "('adam.v.w') share bytes"});
}

TEST(TrainingLoader, RejectsBadFunctionsStateAndPorts) {
  PlanSpec plan = linearRegressionPlan();
  plan.program().functions[1].name = "forward_backward";
  expectRejected(plan, {"program 'regression', function 'forward_backward': appears twice"});
  plan = linearRegressionPlan();
  plan.program().functions[1].name = "";
  expectRejected(plan, {"function 1 has no name"});
  plan = linearRegressionPlan();
  plan.program().functions.clear();
  expectRejected(plan, {"program 'regression': it has no functions"});
  plan = linearRegressionPlan();
  plan.program().functions[1].outputs[0].name = "loss";
  expectRejected(plan,
                 {"function 'apply_gradients': output 0 ('loss') appears twice in the program"});
  plan = linearRegressionPlan();
  plan.program().functions[1].inputs[0].name = "x"; // [] here, [4, 3] in forward_backward
  expectRejected(plan,
                 {"function 'apply_gradients': input 0 ('x')",
                  "dtype or shape differs from the input of that name in an earlier function"});
  plan = linearRegressionPlan();
  plan.program().state[1].name = "w";
  expectRejected(plan, {"state buffer 1 ('w') has the name of another parameter or state buffer"});
  plan = linearRegressionPlan();
  plan.program().state[1].name = "";
  expectRejected(plan, {"state buffer 1 has no name"});
  plan = linearRegressionPlan();
  plan.program().state[1].buffer = 0;
  expectRejected(plan, {"state buffer 1 ('adam.m.w') uses buffer 0 ('w'), which already holds a "
                        "parameter"});
  plan = linearRegressionPlan();
  plan.program().state[1].buffer = 99;
  expectRejected(plan, {"state buffer 1 ('adam.m.w') refers to buffer 99"});
}

TEST(TrainingLoader, RejectsBadTrainingAttrsAndOutputCounts) {
  auto single = [](fb::Opcode op, std::vector<std::vector<int64_t>> ins, size_t outs,
                   fb::Attrs type, AttrsFn attrs) {
    PlanSpec plan;
    ProgramSpec &p = plan.program();
    std::vector<uint32_t> in, out;
    for (size_t i = 0; i < ins.size(); ++i)
      in.push_back(p.input("x" + std::to_string(i), DType::f32, ins[i]));
    for (size_t i = 0; i < outs; ++i)
      out.push_back(p.buffer("y" + std::to_string(i), DType::f32, {2, 3}));
    p.instN(op, in, out, "here", type, std::move(attrs));
    return plan;
  };
  using O = fb::Opcode;
  using A = fb::Attrs;
  std::vector<int64_t> s{2, 3}, scalar{};
  expectRejected(
      single(O::AttentionGrad, {s, s, s, s, s}, 3, A::AttentionAttrs, attentionAttrs(false, 1)),
      {"instruction 0 (AttentionGrad at 'here')", "has 3 outputs, expected 4"});
  expectRejected(single(O::LayerNormGrad, {s, s, s}, 2, A::NormAttrs, normAttrs(1e-5)),
                 {"has 2 outputs, expected 3"});
  expectRejected(single(O::RmsNormGrad, {s, s, s}, 3, A::NormAttrs, normAttrs(1e-5)),
                 {"has 3 outputs, expected 2"});
  expectRejected(single(O::GlobalNorm, {}, 1, A::NONE, nullptr),
                 {"has 0 inputs, expected 1 or more"});
  expectRejected(single(O::Pad, {s}, 1, A::PadAttrs, padAttrs({0, 0}, {1, -1}, {0, 0})),
                 {"pad amount -1 is negative"});
  expectRejected(single(O::Pad, {s}, 1, A::PadAttrs, padAttrs({0}, {1}, {0})),
                 {"low, high and interior must have the input's rank 2"});
  expectRejected(single(O::AdamW, {s, s, s, s, scalar, scalar}, 3, A::AdamWAttrs,
                        adamwAttrs(0.9, 1.0, 1e-8, 0)),
                 {"betas (0.900000, 1.000000) must be in [0, 1)"});
  expectRejected(single(O::AdamW, {s, s, s, s, scalar, scalar}, 3, A::AdamWAttrs,
                        adamwAttrs(0.9, 0.99, -1, 0)),
                 {"eps -1.000000 and weight_decay 0.000000 must be finite (eps >= 0)"});
  expectRejected(single(O::ClipByNorm, {s, scalar}, 1, A::ClipAttrs, clipAttrs(0)),
                 {"max_norm 0.000000 must be finite and > 0"});
  expectRejected(single(O::SoftmaxGrad, {s, s}, 1, A::AxisAttrs, axisAttrs(2)),
                 {"axis 2 is out of range"});
  expectRejected(single(O::Dropout, {s, scalar}, 1, A::DropoutAttrs,
                        [](flatbuffers::FlatBufferBuilder &b) {
                          std::vector<int64_t> global{4, 3};
                          return fb::CreateDropoutAttrsDirect(b, 0.5, 0, &global, nullptr).Union();
                        }),
                 {"DropoutAttrs has global_shape without shard_offset or the reverse"});
  expectRejected(
      single(O::Dropout, {s, scalar}, 1, A::DropoutAttrs, dropoutShardAttrs(0.5, 0, {4}, {0})),
      {"global_shape and shard_offset must have the input's rank 2"});
}

TEST(TrainingLoader, EveryFlippedByteIsRejectedOrRunsSafely) {
  // A flipped byte either fails loading, or gives a plan the executor runs (or refuses) without
  // touching memory outside its arena: the loader checked every index, size and write.
  std::vector<uint8_t> bytes = linearRegressionPlan().build();
  int rejected = 0, ran = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0xff;
    auto loaded = loadPlanFromBytes(std::move(bad));
    if (!loaded.isOk()) {
      ++rejected;
      continue;
    }
    TensorMap weights{{"w", f64({3, 1}, {1, 2, 3})}};
    ExecutorOptions options;
    options.weights = &weights;
    auto ex = Executor::create(*loaded, options);
    if (!ex.isOk())
      continue;
    // Whatever the plan now says its inputs are, give it zeros of that type.
    for (const std::string &name : (*ex)->inputNames()) {
      TensorInfo info = (*ex)->inputInfo(name).value();
      (void)(*ex)->setInput(name, HostTensor::zeros(info.dtype, info.shape));
    }
    for (const std::string &fn : (*ex)->functionNames())
      ran += (*ex)->run(fn).isOk();
  }
  EXPECT_GT(rejected, int(bytes.size() / 4));
  EXPECT_GT(ran, 0);
}
