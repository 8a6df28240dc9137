// buildTrainingStep end to end on a tiny language model: @forward_backward's loss and gradients
// (against central differences and the forward's logits), accumulation over micro-batches,
// @apply_gradients against AdamW written out by hand, fp32 against fp64, and option errors.
#include "passes/training/TrainingPipeline.h"
#include "tests/unit/training/TrainingHarness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

namespace megac::training_test {
namespace {

using passes::TrainingOptions;

constexpr int64_t kVocab = 6, kHidden = 4, kFfn = 8, kBatch = 2, kSeq = 3;

/// Embedding, layer norm, a GELU MLP with a residual, logits through the tied embedding.
std::string model(const std::string &t) {
  std::string v = "tensor<2x3x" + std::to_string(kVocab) + "x" + t + ">";
  std::string h = "tensor<2x3x4x" + t + ">", f = "tensor<2x3x8x" + t + ">";
  std::string wte = "tensor<6x4x" + t + ">", vec4 = "tensor<4x" + t + ">";
  std::string w1 = "tensor<8x4x" + t + ">", b1 = "tensor<8x" + t + ">";
  std::string w2 = "tensor<4x8x" + t + ">";
  return "func.func @lm(%wte: " + wte + " {mega.param = \"wte\"}, %g: " + vec4 +
         " {mega.param = \"ln.weight\"}, %b: " + vec4 + " {mega.param = \"ln.bias\"}, %w1: " + w1 +
         " {mega.param = \"fc1.weight\"}, %b1: " + b1 + " {mega.param = \"fc1.bias\"}, %w2: " + w2 +
         " {mega.param = \"fc2.weight\"}, %ids: tensor<2x3xi64> {mega.input = \"input_ids\"}) -> "
         "(" +
         v + " {mega.output = \"logits\"}) {\n" + "  %e = mega.embedding %wte[%ids] : " + wte +
         ", tensor<2x3xi64> -> " + h + "\n" + "  %n = mega.layer_norm %e, %g, %b eps 1.0e-05 : (" +
         h + ", " + vec4 + ", " + vec4 + ") -> " + h + "\n" +
         "  %u = mega.linear %n, %w1, %b1 : (" + h + ", " + w1 + ", " + b1 + ") -> " + f + "\n" +
         "  %a = mega.gelu tanh %u : " + f + "\n" + "  %d = mega.linear %a, %w2 : (" + f + ", " +
         w2 + ") -> " + h + "\n" + "  %r = mega.add %e, %d : " + h + "\n" +
         "  %z = mega.linear %r, %wte : (" + h + ", " + wte + ") -> " + v + "\n" +
         "  return %z : " + v + "\n}\n";
}

const std::vector<int64_t> kIds = {0, 5, 2, 3, 3, 1};
const std::vector<int64_t> kLabels = {5, 2, -100, 3, 1, 4};

HostTensor i64Tensor(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t = HostTensor::zeros(DType::i64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

HostTensor scalar(DType dtype, double value) {
  HostTensor t = HostTensor::zeros(dtype, {});
  if (dtype == DType::f64)
    *t.data<double>() = value;
  else
    *t.data<float>() = static_cast<float>(value);
  return t;
}

std::vector<double> asDoubles(const HostTensor &t) {
  std::vector<double> out(t.numElements());
  for (int64_t i = 0; i < t.numElements(); ++i)
    out[i] = t.dtype == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
  return out;
}

/// Random weights (f64 or f32) for the model's parameters, the same values either way.
TensorMap modelWeights(mlir::func::FuncOp f, DType dtype) {
  std::mt19937 rng(99);
  std::normal_distribution<double> normal(0.0, 0.5);
  TensorMap weights = sampleParameters(f, [&] { return normal(rng); });
  if (dtype == DType::f64)
    return weights;
  for (auto &[name, t] : weights) {
    HostTensor f32 = HostTensor::zeros(DType::f32, t.shape);
    for (int64_t i = 0; i < t.numElements(); ++i)
      f32.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    t = f32;
  }
  return weights;
}

struct Step {
  Harness harness;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  Compiled compiled;
  Executor *ex = nullptr;

  /// Builds the step for the model in element type `t` and loads it with the fixed weights.
  bool build(const std::string &t, const TrainingOptions &options = {}) {
    module = harness.parse(model(t));
    if (!module)
      return false;
    TensorMap weights = modelWeights(module->lookupSymbol<mlir::func::FuncOp>("lm"),
                                     t == "f64" ? DType::f64 : DType::f32);
    if (mlir::failed(passes::buildTrainingStep(*module, options))) {
      ADD_FAILURE() << harness.diagnostics();
      return false;
    }
    compiled = harness.compile(*module, weights);
    ex = compiled.executor.get();
    return ex != nullptr;
  }

  void setBatch(DType dtype, const std::vector<int64_t> &ids, const std::vector<int64_t> &labels,
                double normalizer) {
    expectOk(ex->setInput("input_ids", i64Tensor({kBatch, kSeq}, ids)), "input_ids");
    expectOk(ex->setInput("labels", i64Tensor({kBatch, kSeq}, labels)), "labels");
    expectOk(ex->setInput("loss_normalizer", scalar(dtype, normalizer)), "loss_normalizer");
  }
};

/// The mean cross-entropy over non-ignored tokens, from @forward's logits.
double lossFromLogits(const std::vector<double> &logits, const std::vector<int64_t> &labels) {
  double total = 0;
  int count = 0;
  for (int64_t t = 0; t < kBatch * kSeq; ++t) {
    if (labels[t] == -100)
      continue;
    const double *row = &logits[t * kVocab];
    double mx = *std::max_element(row, row + kVocab), sum = 0;
    for (int64_t j = 0; j < kVocab; ++j)
      sum += std::exp(row[j] - mx);
    total += std::log(sum) + mx - row[labels[t]];
    ++count;
  }
  return total / count;
}

TEST(TrainingStep, LossMatchesTheForwardAndGradientsMatchDifferences) {
  Step step;
  ASSERT_TRUE(step.build("f64"));
  std::vector<std::string> functions = step.ex->functionNames();
  EXPECT_EQ(functions,
            (std::vector<std::string>{"forward", "forward_backward", "apply_gradients"}));
  step.setBatch(DType::f64, kIds, kLabels, 1.0 / 5);
  expectOk(step.ex->run("forward"), "run forward");
  std::vector<double> logits = valuesOf(expectValue(step.ex->output("logits"), "logits"));
  double expected = lossFromLogits(logits, kLabels);
  expectOk(step.ex->zeroState("grad."), "zeroState");
  double loss = runScalar(*step.ex, "forward_backward", "loss");
  EXPECT_NEAR(loss, expected, 1e-12 * std::fabs(expected));
  // Every parameter's gradient, the tied embedding's two uses included.
  expectGradientsMatchDifferences(*step.ex, 1e-5, 1e-6);
}

TEST(TrainingStep, AccumulatorsSumMicroBatches) {
  Step step;
  ASSERT_TRUE(step.build("f64"));
  std::vector<int64_t> ids2 = {1, 1, 4, 0, 2, 3}, labels2 = {1, 4, 0, -100, 3, 3};
  auto gradsOf = [&](const std::vector<int64_t> &ids, const std::vector<int64_t> &labels) {
    expectOk(step.ex->zeroState("grad."), "zeroState");
    step.setBatch(DType::f64, ids, labels, 1.0 / 9);
    runScalar(*step.ex, "forward_backward", "loss");
    std::map<std::string, std::vector<double>> g;
    for (const std::string &p : step.ex->parameterNames())
      g[p] = valuesOf(expectValue(step.ex->state("grad." + p), p));
    return g;
  };
  auto g1 = gradsOf(kIds, kLabels), g2 = gradsOf(ids2, labels2);
  expectOk(step.ex->zeroState("grad."), "zeroState");
  step.setBatch(DType::f64, kIds, kLabels, 1.0 / 9);
  runScalar(*step.ex, "forward_backward", "loss");
  step.setBatch(DType::f64, ids2, labels2, 1.0 / 9);
  runScalar(*step.ex, "forward_backward", "loss");
  for (const std::string &p : step.ex->parameterNames()) {
    std::vector<double> both = valuesOf(expectValue(step.ex->state("grad." + p), p));
    for (size_t i = 0; i < both.size(); ++i)
      EXPECT_NEAR(both[i], g1[p][i] + g2[p][i], 1e-14) << p << "[" << i << "]";
  }
}

/// One apply_gradients from zero moments, written out: m = (1-b1) g, v = (1-b2) g^2, and with
/// step 1 the bias corrections make the update lr * g / (|g| + eps).
void checkApply(bool clip) {
  TrainingOptions options;
  options.beta1 = 0.8;
  options.beta2 = 0.9;
  options.eps = 1e-3;
  options.weightDecay = 0.1;
  options.clipGrad = clip ? 0.5 : 0.0;
  Step step;
  ASSERT_TRUE(step.build("f64", options));
  step.setBatch(DType::f64, kIds, kLabels, 1.0 / 5);
  expectOk(step.ex->zeroState("grad."), "zeroState");
  runScalar(*step.ex, "forward_backward", "loss");
  std::map<std::string, std::vector<double>> params, grads;
  double sq = 0;
  for (const std::string &p : step.ex->parameterNames()) {
    params[p] = valuesOf(expectValue(step.ex->parameter(p), p));
    grads[p] = valuesOf(expectValue(step.ex->state("grad." + p), p));
    for (double g : grads[p])
      sq += g * g;
  }
  double norm = std::sqrt(sq), lr = 0.05;
  double scale = clip ? std::min(1.0, 0.5 / (norm + 1e-6)) : 1.0;
  ASSERT_LT(scale, clip ? 1.0 : 2.0) << "the clipping case must clip";
  expectOk(step.ex->setInput("lr", scalar(DType::f64, lr)), "lr");
  expectOk(step.ex->setInput("step", i64Tensor({}, {1})), "step");
  double gradNorm = runScalar(*step.ex, "apply_gradients", "grad_norm");
  EXPECT_NEAR(gradNorm, norm, 1e-12 * norm);
  for (const std::string &p : step.ex->parameterNames()) {
    std::vector<double> got = valuesOf(expectValue(step.ex->parameter(p), p));
    std::vector<double> m = valuesOf(expectValue(step.ex->state("adam.m." + p), "adam.m." + p));
    std::vector<double> v = valuesOf(expectValue(step.ex->state("adam.v." + p), "adam.v." + p));
    bool decays = expectValue(step.ex->parameter(p), p).shape.size() >= 2;
    for (size_t i = 0; i < got.size(); ++i) {
      double g = grads[p][i] * scale, x = params[p][i];
      double want = x - lr * (decays ? 0.1 : 0.0) * x - lr * g / (std::fabs(g) + 1e-3);
      EXPECT_NEAR(got[i], want, 1e-12) << p << "[" << i << "]";
      EXPECT_NEAR(m[i], 0.2 * g, 1e-14) << p << "[" << i << "]";
      EXPECT_NEAR(v[i], 0.1 * g * g, 1e-14) << p << "[" << i << "]";
    }
  }
}

TEST(TrainingStep, ApplyGradientsIsAdamW) { checkApply(false); }
TEST(TrainingStep, ApplyGradientsClipsFirst) { checkApply(true); }

TEST(TrainingStep, Fp32MatchesFp64) {
  Step s64, s32;
  ASSERT_TRUE(s64.build("f64"));
  ASSERT_TRUE(s32.build("f32"));
  s64.setBatch(DType::f64, kIds, kLabels, 1.0 / 5);
  s32.setBatch(DType::f32, kIds, kLabels, 1.0 / 5);
  expectOk(s64.ex->zeroState("grad."), "zeroState");
  expectOk(s32.ex->zeroState("grad."), "zeroState");
  expectOk(s64.ex->run("forward_backward"), "run f64");
  expectOk(s32.ex->run("forward_backward"), "run f32");
  double l64 = asDoubles(expectValue(s64.ex->output("loss"), "loss"))[0];
  double l32 = asDoubles(expectValue(s32.ex->output("loss"), "loss"))[0];
  EXPECT_NEAR(l32, l64, 1e-5 * std::fabs(l64));
  // fp32 roundoff through a dozen ops on O(1) values: 1e-4 of the gradient's largest entry.
  for (const std::string &p : s64.ex->parameterNames()) {
    std::vector<double> a = asDoubles(expectValue(s64.ex->state("grad." + p), p));
    std::vector<double> b = asDoubles(expectValue(s32.ex->state("grad." + p), p));
    ASSERT_EQ(a.size(), b.size());
    double scale = 0;
    for (double x : a)
      scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(b[i], a[i], 1e-4 * scale) << p << "[" << i << "]";
  }
}

TEST(TrainingStep, BadOptionsAreDiagnosed) {
  Harness harness;
  auto module = harness.parse(model("f64"));
  ASSERT_TRUE(module);
  TrainingOptions options;
  options.beta2 = 1.5;
  EXPECT_TRUE(mlir::failed(passes::buildTrainingStep(*module, options)));
  EXPECT_NE(harness.diagnostics().find("beta1 and beta2 must be in [0, 1)"), std::string::npos)
      << harness.diagnostics();

  Harness other;
  auto module2 = other.parse(model("f64"));
  ASSERT_TRUE(module2);
  TrainingOptions named;
  named.logits = "scores";
  EXPECT_TRUE(mlir::failed(passes::buildTrainingStep(*module2, named)));
  EXPECT_NE(other.diagnostics().find("@lm has no result named \"scores\""), std::string::npos)
      << other.diagnostics();
}

} // namespace
} // namespace megac::training_test
