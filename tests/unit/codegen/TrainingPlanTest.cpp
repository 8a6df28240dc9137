// Training modules through codegen and the runtime: a hand-written linear-regression module
// (forward, forward_backward accumulating gradients into state, apply_gradients clipping and
// running AdamW in place) compiled to one plan and run for three steps against a hand
// computation in f64 and f32; the in-place rules and their located errors; the lowering of every
// backward and optimizer op.
#include "codegen/PlanWriter.h"

#include "ir/MegaOps.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace mlir;
namespace pl = megac::plan;
namespace rt = megac::runtime;
using megac::codegen::CodegenOptions;
using megac::codegen::writePlan;

namespace {

struct Diag {
  std::string message;
  std::string location;                                   // "file:line:col" or ""
  std::vector<std::pair<std::string, std::string>> notes; // (message, location)
};

std::string where(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" +
           std::to_string(file.getColumn());
  return {};
}

struct TrainingPlanTest : ::testing::Test {
  TrainingPlanTest() {
    ctx.loadDialect<mega::MegaDialect, func::FuncDialect>();
    ctx.printOpOnDiagnostic(false); // no "see current operation" notes
  }

  OwningOpRef<ModuleOp> parse(const std::string &ir) {
    auto module = parseSourceString<ModuleOp>(ir, &ctx, "train.mlir");
    EXPECT_TRUE(module) << "cannot parse:\n" << ir;
    return module;
  }

  /// The plan's bytes, or empty with the diagnostics collected.
  std::vector<uint8_t> compile(ModuleOp module, const CodegenOptions &options = {}) {
    diagnostics.clear();
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      Diag diag{d.str(), where(d.getLocation()), {}};
      for (Diagnostic &note : d.getNotes())
        diag.notes.emplace_back(note.str(), where(note.getLocation()));
      diagnostics.push_back(std::move(diag));
      return success();
    });
    FailureOr<std::vector<uint8_t>> bytes = writePlan(module, options);
    return failed(bytes) ? std::vector<uint8_t>{} : *bytes;
  }

  std::string firstError() const {
    return diagnostics.empty() ? "(no diagnostics)" : diagnostics.front().message;
  }

  MLIRContext ctx;
  std::vector<Diag> diagnostics;
};

const pl::Program *programOf(const std::vector<uint8_t> &bytes) {
  return pl::GetPlan(bytes.data())->programs()->Get(0);
}

const pl::Function *functionNamed(const pl::Program *p, const std::string &name) {
  for (const pl::Function *fn : *p->functions())
    if (fn->name()->str() == name)
      return fn;
  ADD_FAILURE() << "no function " << name;
  return nullptr;
}

uint32_t parameterBuffer(const pl::Program *p, const std::string &name) {
  for (const pl::Parameter *param : *p->parameters())
    if (param->name()->str() == name)
      return param->buffer();
  for (const pl::StateBuffer *st : *p->state())
    if (st->name()->str() == name)
      return st->buffer();
  ADD_FAILURE() << "no parameter or state " << name;
  return 0;
}

/// Linear regression on micro-batches x [4,3], t [4,1] in element type T (f64 or f32):
///   loss = sum((x w - t)^2) * loss_normalizer, grad.w += d loss / d w,
///   apply_gradients: clip to 0.5, AdamW (beta1 0.9, beta2 0.99, eps 1e-8, weight decay 0.1).
std::string regressionModule(const std::string &t) {
  std::string ir = R"mlir(
module {
  func.func @forward(%w: tensor<3x1xT> {mega.param = "w", mega.init = #mega.init<normal, std = 0.5>},
                     %x: tensor<4x3xT> {mega.input = "x"}) -> (tensor<4x1xT> {mega.output = "pred"}) {
    %p = mega.matmul %x, %w : tensor<4x3xT>, tensor<3x1xT> -> tensor<4x1xT>
    return %p : tensor<4x1xT>
  }
  func.func @forward_backward(%w: tensor<3x1xT> {mega.param = "w"},
                              %x: tensor<4x3xT> {mega.input = "x"},
                              %t: tensor<4x1xT> {mega.input = "t"},
                              %norm: tensor<T> {mega.input = "loss_normalizer"},
                              %acc: tensor<3x1xT> {mega.state = "grad.w"})
      -> (tensor<T> {mega.output = "loss"}, tensor<3x1xT> {mega.updates = "grad.w"}) {
    %pred = mega.matmul %x, %w : tensor<4x3xT>, tensor<3x1xT> -> tensor<4x1xT>
    %d = mega.sub %pred, %t : tensor<4x1xT>
    %sq = mega.mul %d, %d : tensor<4x1xT>
    %s = mega.reduce sum %sq over [0, 1] : tensor<4x1xT> -> tensor<T>
    %loss = mega.mul %s, %norm : tensor<T>
    %two = mega.constant dense<2.0> : tensor<4x1xT>
    %nb = mega.broadcast %norm : tensor<T> -> tensor<4x1xT>
    %g1 = mega.mul %d, %two : tensor<4x1xT>
    %dp = mega.mul %g1, %nb : tensor<4x1xT>
    %xt = mega.transpose %x [1, 0] : tensor<4x3xT> -> tensor<3x4xT>
    %gw = mega.matmul %xt, %dp : tensor<3x4xT>, tensor<4x1xT> -> tensor<3x1xT>
    %acc2 = mega.add %acc, %gw : tensor<3x1xT>
    return %loss, %acc2 : tensor<T>, tensor<3x1xT>
  }
  func.func @apply_gradients(%w: tensor<3x1xT> {mega.param = "w"},
                             %acc: tensor<3x1xT> {mega.state = "grad.w"},
                             %m: tensor<3x1xT> {mega.state = "adam.m.w"},
                             %v: tensor<3x1xT> {mega.state = "adam.v.w"},
                             %lr: tensor<T> {mega.input = "lr"},
                             %step: tensor<i64> {mega.input = "step"})
      -> (tensor<3x1xT> {mega.updates = "w"}, tensor<3x1xT> {mega.updates = "adam.m.w"},
          tensor<3x1xT> {mega.updates = "adam.v.w"}, tensor<T> {mega.output = "grad_norm"}) {
    %n = mega.global_norm %acc : (tensor<3x1xT>) -> tensor<T>
    %c = mega.clip_by_norm %acc, %n max 0.5 : tensor<3x1xT>, tensor<T>
    %w2, %m2, %v2 = mega.adamw_update %w, %c, %m, %v, %lr, %step
        {beta1 = 0.9, beta2 = 0.99, eps = 1.0e-08, weight_decay = 0.1}
        : (tensor<3x1xT>, tensor<3x1xT>, tensor<3x1xT>, tensor<3x1xT>, tensor<T>, tensor<i64>)
        -> (tensor<3x1xT>, tensor<3x1xT>, tensor<3x1xT>)
    return %w2, %m2, %v2, %n : tensor<3x1xT>, tensor<3x1xT>, tensor<3x1xT>, tensor<T>
  }
}
)mlir";
  std::string out;
  for (size_t i = 0; i < ir.size(); ++i) {
    // "xT>" and "<T>" name the element type.
    if (ir[i] == 'T' && i > 0 && (ir[i - 1] == 'x' || ir[i - 1] == '<') && i + 1 < ir.size() &&
        ir[i + 1] == '>')
      out += t;
    else
      out += ir[i];
  }
  return out;
}

template <typename T>
megac::HostTensor tensorOf(std::vector<int64_t> shape, const std::vector<double> &v) {
  megac::HostTensor out = megac::HostTensor::zeros(
      std::is_same_v<T, double> ? megac::DType::f64 : megac::DType::f32, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i)
    out.data<T>()[i] = static_cast<T>(v[i]);
  return out;
}

template <typename T> std::vector<double> valuesOf(const megac::HostTensor &t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numElements(); ++i)
    out.push_back(static_cast<double>(t.data<T>()[i]));
  return out;
}

/// Three optimizer steps of two micro-batches each through the compiled plan, against the same
/// arithmetic written out in double (rounded to T where the plan stores T).
template <typename T> void runThreeSteps(const std::vector<uint8_t> &bytes, double rtol) {
  auto loaded = rt::loadPlanFromBytes(bytes);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  std::vector<double> w = {0.5, -0.25, 1.0};
  megac::TensorMap weights{{"w", tensorOf<T>({3, 1}, w)}};
  rt::ExecutorOptions options;
  options.weights = &weights;
  auto created = rt::Executor::create(*loaded, options);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  rt::Executor &ex = **created;
  EXPECT_EQ(ex.functionNames(),
            (std::vector<std::string>{"forward", "forward_backward", "apply_gradients"}));
  EXPECT_EQ(ex.stateNames(), (std::vector<std::string>{"grad.w", "adam.m.w", "adam.v.w"}));

  const double b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, maxNorm = 0.5;
  const int micro = 2;
  const double norm = double(T(1.0 / (4 * micro)));
  std::vector<double> m(3, 0.0), v(3, 0.0);
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  auto draw = [&](size_t n) {
    std::vector<double> out(n);
    for (double &x : out)
      x = double(T(dist(gen)));
    return out;
  };
  int clipped = 0;
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(ex.zeroState("grad.").isOk());
    std::vector<double> grad(3, 0.0);
    double loss = 0.0, expectedLoss = 0.0;
    for (int mb = 0; mb < micro; ++mb) {
      std::vector<double> x = draw(12), t = draw(4);
      ASSERT_TRUE(ex.setInput("x", tensorOf<T>({4, 3}, x)).isOk());
      ASSERT_TRUE(ex.setInput("t", tensorOf<T>({4, 1}, t)).isOk());
      ASSERT_TRUE(ex.setInput("loss_normalizer", tensorOf<T>({}, {norm})).isOk());
      megac::Status s = ex.run("forward_backward");
      ASSERT_TRUE(s.isOk()) << s.message();
      loss += valuesOf<T>(ex.output("loss").value())[0];
      for (int r = 0; r < 4; ++r) {
        double d = x[r * 3] * w[0] + x[r * 3 + 1] * w[1] + x[r * 3 + 2] * w[2] - t[r];
        expectedLoss += d * d * norm;
        for (int c = 0; c < 3; ++c)
          grad[c] += x[r * 3 + c] * 2 * d * norm;
      }
    }
    EXPECT_NEAR(loss, expectedLoss, rtol * std::fabs(expectedLoss)) << "step " << step;
    double lr = double(T(0.05 / double(step)));
    ASSERT_TRUE(ex.setInput("lr", tensorOf<T>({}, {lr})).isOk());
    std::vector<uint8_t> stepBytes(8);
    std::memcpy(stepBytes.data(), &step, 8);
    ASSERT_TRUE(ex.setInput("step", megac::HostTensor{megac::DType::i64, {}, stepBytes}).isOk());
    megac::Status s = ex.run("apply_gradients");
    ASSERT_TRUE(s.isOk()) << s.message();
    double gradNorm = std::sqrt(grad[0] * grad[0] + grad[1] * grad[1] + grad[2] * grad[2]);
    EXPECT_NEAR(valuesOf<T>(ex.output("grad_norm").value())[0], gradNorm, rtol * gradNorm);
    clipped += gradNorm > maxNorm;
    double coef = std::min(1.0, maxNorm / (gradNorm + 1e-6));
    double bias1 = 1 - std::pow(b1, double(step)), bias2 = 1 - std::pow(b2, double(step));
    for (int c = 0; c < 3; ++c) {
      double g = grad[c] * coef;
      w[c] -= lr * wd * w[c];
      m[c] = b1 * m[c] + (1 - b1) * g;
      v[c] = b2 * v[c] + (1 - b2) * g * g;
      w[c] -= lr * (m[c] / bias1) / (std::sqrt(v[c] / bias2) + eps);
    }
    std::vector<double> got = valuesOf<T>(ex.parameter("w").value());
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(got[c], w[c], rtol * std::fabs(w[c]) + rtol * 1e-2)
          << "w[" << c << "] after step " << step;
    std::vector<double> gotM = valuesOf<T>(ex.state("adam.m.w").value());
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(gotM[c], m[c], rtol * std::fabs(m[c]) + rtol * 1e-2) << "m[" << c << "]";
  }
  EXPECT_GE(clipped, 1) << "the test wants clipping to matter";
  // The forward function sees the trained parameter.
  std::vector<double> x = draw(12);
  ASSERT_TRUE(ex.setInput("x", tensorOf<T>({4, 3}, x)).isOk());
  ASSERT_TRUE(ex.run().isOk());
  std::vector<double> pred = valuesOf<T>(ex.output("pred").value());
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(pred[r], x[r * 3] * w[0] + x[r * 3 + 1] * w[1] + x[r * 3 + 2] * w[2], 10 * rtol);
}

} // namespace

TEST_F(TrainingPlanTest, LinearRegressionTrainsThreeStepsInF64AndF32) {
  for (std::string dtype : {"f64", "f32"}) {
    SCOPED_TRACE(dtype);
    auto module = parse(regressionModule(dtype));
    ASSERT_TRUE(module);
    std::vector<uint8_t> bytes = compile(*module);
    ASSERT_FALSE(bytes.empty()) << firstError();
    const pl::Program *p = programOf(bytes);
    ASSERT_EQ(p->functions()->size(), 3u);
    ASSERT_EQ(p->parameters()->size(), 1u); // one w, shared by three functions
    EXPECT_EQ(p->parameters()->Get(0)->init(), pl::InitKind::normal);
    ASSERT_EQ(p->state()->size(), 3u);
    // In place: the accumulation writes grad.w, AdamW writes w, m and v; no copies.
    const pl::Function *fb = functionNamed(p, "forward_backward");
    const pl::Function *ag = functionNamed(p, "apply_gradients");
    ASSERT_TRUE(fb && ag);
    const pl::Instruction *acc = fb->instructions()->Get(fb->instructions()->size() - 1);
    EXPECT_EQ(acc->op(), pl::Opcode::Add);
    EXPECT_EQ(acc->outputs()->Get(0), parameterBuffer(p, "grad.w"));
    EXPECT_EQ(acc->inputs()->Get(0), parameterBuffer(p, "grad.w"));
    const pl::Instruction *adamw = ag->instructions()->Get(ag->instructions()->size() - 1);
    ASSERT_EQ(adamw->op(), pl::Opcode::AdamW);
    EXPECT_EQ(adamw->outputs()->Get(0), parameterBuffer(p, "w"));
    EXPECT_EQ(adamw->outputs()->Get(1), parameterBuffer(p, "adam.m.w"));
    EXPECT_EQ(adamw->outputs()->Get(2), parameterBuffer(p, "adam.v.w"));
    const pl::AdamWAttrs *attrs = adamw->attrs_as_AdamWAttrs();
    ASSERT_TRUE(attrs);
    EXPECT_EQ(attrs->beta2(), 0.99);
    EXPECT_EQ(attrs->weight_decay(), 0.1);
    for (const pl::Function *fn : *p->functions())
      for (const pl::Instruction *inst : *fn->instructions())
        EXPECT_NE(inst->op(), pl::Opcode::Copy);
    EXPECT_EQ(ag->outputs()->size(), 1u); // grad_norm; the updates are no outputs
    // The loss normalizer, lr and step are inputs of their functions; x is shared.
    EXPECT_EQ(functionNamed(p, "forward")->inputs()->Get(0)->name()->str(), "x");
    if (dtype == "f64")
      runThreeSteps<double>(bytes, 1e-12);
    else
      runThreeSteps<float>(bytes, 2e-5);
  }
}

TEST_F(TrainingPlanTest, FunctionsShareTheArenaAbovePersistentBuffers) {
  auto module = parse(regressionModule("f64"));
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << firstError();
  const pl::Program *p = programOf(bytes);
  // Persistent: w, grad.w, adam.m.w, adam.v.w (24 bytes each) and the constant 2 (32 bytes),
  // one 64-byte slot each, first; every function's buffers lie above them.
  uint64_t persistentEnd = 5 * 64;
  std::vector<uint32_t> persistent;
  for (const pl::Parameter *param : *p->parameters())
    persistent.push_back(param->buffer());
  for (const pl::StateBuffer *st : *p->state())
    persistent.push_back(st->buffer());
  for (const pl::Constant *c : *p->constants())
    persistent.push_back(c->buffer());
  ASSERT_EQ(persistent.size(), 5u);
  for (uint32_t b : persistent)
    EXPECT_LT(p->buffers()->Get(b)->offset(), persistentEnd);
  uint64_t total = 0;
  for (const pl::Function *fn : *p->functions()) {
    uint64_t top = 0;
    for (const pl::Instruction *inst : *fn->instructions())
      for (uint32_t out : *inst->outputs()) {
        const pl::Buffer *b = p->buffers()->Get(out);
        if (std::find(persistent.begin(), persistent.end(), out) != persistent.end())
          continue;
        EXPECT_GE(b->offset(), persistentEnd) << fn->name()->str();
        top = std::max(top, b->offset() + b->bytes());
        total += (b->bytes() + 63) / 64 * 64;
      }
    EXPECT_LE(top, p->arena_bytes());
  }
  // forward_backward's activations alone need more than apply_gradients': the arena holds the
  // largest function, not the sum.
  EXPECT_LT(p->arena_bytes(), persistentEnd + total);
  // And the input x of forward and forward_backward is one input: same name, both functions.
  EXPECT_EQ(functionNamed(p, "forward")->inputs()->Get(0)->name()->str(),
            functionNamed(p, "forward_backward")->inputs()->Get(0)->name()->str());
}

TEST_F(TrainingPlanTest, ReadingAnUpdatedValueLaterIsALocatedError) {
  auto module = parse(R"mlir(
func.func @apply(%w: tensor<4xf32> {mega.param = "w"}, %g: tensor<4xf32> {mega.input = "g"})
    -> (tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.output = "delta"}) {
  %w2 = mega.sub %w, %g : tensor<4xf32> loc("opt.py":3:5)
  %delta = mega.sub %w2, %w : tensor<4xf32> loc("opt.py":4:9)
  return %w2, %delta : tensor<4xf32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  EXPECT_TRUE(compile(*module).empty());
  ASSERT_EQ(diagnostics.size(), 1u) << firstError();
  EXPECT_EQ(diagnostics[0].message, "reads the old value of 'w' after it is updated in place "
                                    "(mega.updates on result 0); read it before the update");
  EXPECT_EQ(diagnostics[0].location, "opt.py:4:9");
  ASSERT_EQ(diagnostics[0].notes.size(), 1u);
  EXPECT_EQ(diagnostics[0].notes[0].first, "'w' is overwritten here");
  EXPECT_EQ(diagnostics[0].notes[0].second, "opt.py:3:5");

  // Read before the update: fine, and the subtraction writes w in place.
  auto ordered = parse(R"mlir(
func.func @apply(%w: tensor<4xf32> {mega.param = "w"}, %g: tensor<4xf32> {mega.input = "g"})
    -> (tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.output = "half"}) {
  %half = mega.mul %w, %g : tensor<4xf32>
  %w2 = mega.sub %w, %g : tensor<4xf32>
  return %w2, %half : tensor<4xf32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(ordered);
  std::vector<uint8_t> bytes = compile(*ordered);
  ASSERT_FALSE(bytes.empty()) << firstError();
  const pl::Program *p = programOf(bytes);
  EXPECT_EQ(p->functions()->Get(0)->instructions()->Get(1)->outputs()->Get(0),
            p->parameters()->Get(0)->buffer());
}

TEST_F(TrainingPlanTest, ReturningTheOldValueOfAnUpdatedParameterIsAnError) {
  auto module = parse(R"mlir(
func.func @apply(%w: tensor<4xf32> {mega.param = "w"}, %g: tensor<4xf32> {mega.input = "g"})
    -> (tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.output = "old"}) {
  %w2 = mega.sub %w, %g : tensor<4xf32> loc("opt.py":3:5)
  return %w2, %w : tensor<4xf32>, tensor<4xf32> loc("opt.py":4:3)
}
)mlir");
  ASSERT_TRUE(module);
  EXPECT_TRUE(compile(*module).empty());
  ASSERT_EQ(diagnostics.size(), 1u) << firstError();
  EXPECT_EQ(diagnostics[0].message,
            "'func.return' op result 1 reads the old value of 'w', which result 0 replaces "
            "(mega.updates) before the function returns");
  EXPECT_EQ(diagnostics[0].location, "opt.py:4:3");
}

TEST_F(TrainingPlanTest, UpdatesNoInstructionCanWriteInPlaceAreCopiedAtTheEnd) {
  // A matmul result, a reshaped parameter, an input and the parameter itself (a no-op).
  auto module = parse(R"mlir(
func.func @f(%a: tensor<2x2xf32> {mega.param = "a"}, %b: tensor<4xf32> {mega.param = "b"},
             %c: tensor<4xf32> {mega.state = "c"}, %d: tensor<4xf32> {mega.state = "d"},
             %x: tensor<2x2xf32> {mega.input = "x"}, %y: tensor<4xf32> {mega.input = "y"})
    -> (tensor<2x2xf32> {mega.updates = "a"}, tensor<4xf32> {mega.updates = "c"},
        tensor<4xf32> {mega.updates = "d"}, tensor<4xf32> {mega.updates = "b"}) {
  %mm = mega.matmul %a, %x : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
  %r = mega.reshape %mm : tensor<2x2xf32> -> tensor<4xf32>
  return %mm, %r, %y, %b : tensor<2x2xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << firstError();
  const pl::Program *p = programOf(bytes);
  const pl::Function *fn = p->functions()->Get(0);
  ASSERT_EQ(fn->instructions()->size(), 4u); // matmul, then a copy into a, c and d
  EXPECT_EQ(fn->instructions()->Get(0)->op(), pl::Opcode::MatMul);
  for (uint32_t i = 1; i < 4; ++i)
    EXPECT_EQ(fn->instructions()->Get(i)->op(), pl::Opcode::Copy);
  EXPECT_EQ(fn->instructions()->Get(1)->outputs()->Get(0), parameterBuffer(p, "a"));
  EXPECT_EQ(fn->instructions()->Get(2)->outputs()->Get(0), parameterBuffer(p, "c"));
  EXPECT_EQ(fn->instructions()->Get(3)->outputs()->Get(0), parameterBuffer(p, "d"));
  EXPECT_EQ(fn->outputs()->size(), 0u);

  auto loaded = rt::loadPlanFromBytes(bytes);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  megac::TensorMap weights{{"a", tensorOf<float>({2, 2}, {1, 2, 3, 4})},
                           {"b", tensorOf<float>({4}, {5, 6, 7, 8})}};
  rt::ExecutorOptions options;
  options.weights = &weights;
  auto ex = std::move(rt::Executor::create(*loaded, options).value());
  ASSERT_TRUE(ex->setInput("x", tensorOf<float>({2, 2}, {0, 1, 1, 0})).isOk());
  ASSERT_TRUE(ex->setInput("y", tensorOf<float>({4}, {9, 9, 9, 9})).isOk());
  megac::Status s = ex->run();
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(valuesOf<float>(ex->parameter("a").value()), (std::vector<double>{2, 1, 4, 3}));
  EXPECT_EQ(valuesOf<float>(ex->state("c").value()), (std::vector<double>{2, 1, 4, 3}));
  EXPECT_EQ(valuesOf<float>(ex->state("d").value()), (std::vector<double>{9, 9, 9, 9}));
  EXPECT_EQ(valuesOf<float>(ex->parameter("b").value()), (std::vector<double>{5, 6, 7, 8}));
}

TEST_F(TrainingPlanTest, MalformedTrainingSignaturesAreErrors) {
  struct Case {
    const char *ir;
    std::string error;
  };
  const Case cases[] = {
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<4xf32> {mega.updates = "v"}) {
  %e = mega.exp %w : tensor<4xf32>
  return %e : tensor<4xf32>
})mlir",
       "'func.return' op result 0 updates 'v', which is not a mega.param or mega.state argument "
       "of @f"},
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w"})
    -> (tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.updates = "w"}) {
  %e = mega.exp %w : tensor<4xf32>
  return %e, %e : tensor<4xf32>, tensor<4xf32>
})mlir",
       "'func.return' op two results update 'w'"},
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<4xf64> {mega.updates = "w"}) {
  %e = mega.cast %w : tensor<4xf32> -> tensor<4xf64>
  return %e : tensor<4xf64>
})mlir",
       "'func.return' op result 0 of type 'tensor<4xf64>' updates 'w' of type 'tensor<4xf32>'"},
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}
func.func @g(%w: tensor<8xf32> {mega.param = "w"}) -> tensor<8xf32> {
  return %w : tensor<8xf32>
})mlir",
       "parameter 'w' is 'tensor<8xf32>' here but 'tensor<4xf32>' in an earlier function"},
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}
func.func @g(%w: tensor<4xf32> {mega.state = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
})mlir",
       "'w' names both a parameter and a state buffer"},
      {R"mlir(
func.func @f(%w: tensor<4xf32> {mega.param = "w", mega.init = #mega.init<zeros>}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}
func.func @g(%w: tensor<4xf32> {mega.param = "w", mega.init = #mega.init<ones>}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
})mlir",
       "parameter 'w' has another mega.init in an earlier function"},
      {R"mlir(
func.func @f(%x: tensor<4xf32> {mega.input = "x"}) -> (tensor<4xf32> {mega.output = "y"}) {
  return %x : tensor<4xf32>
}
func.func @g(%x: tensor<2xf32> {mega.input = "x"}) -> (tensor<2xf32> {mega.output = "z"}) {
  return %x : tensor<2xf32>
})mlir",
       "input 'x' is 'tensor<2xf32>' here but has another type in an earlier function"},
      {R"mlir(
func.func @f(%x: tensor<4xf32> {mega.input = "x"}) -> (tensor<4xf32> {mega.output = "y"}) {
  return %x : tensor<4xf32>
}
func.func @g(%x: tensor<4xf32> {mega.input = "x"}) -> (tensor<4xf32> {mega.output = "y"}) {
  return %x : tensor<4xf32>
})mlir",
       "'func.return' op output 'y' is also an output of @f; output names are unique across the "
       "module"},
      {R"mlir(
func.func @f(%x: tensor<4xf32> {mega.param = "x", mega.state = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
})mlir",
       "argument 0 is more than one of a parameter (mega.param), an input (mega.input) and a "
       "state buffer (mega.state)"},
      {R"mlir(
func.func @f(%a: tensor<4xf32> {mega.state = "s"}, %b: tensor<4xf32> {mega.state = "s"}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
})mlir",
       "two state buffers are named 's'"},
  };
  for (const Case &c : cases) {
    auto module = parse(c.ir);
    ASSERT_TRUE(module);
    EXPECT_TRUE(compile(*module).empty()) << c.ir;
    ASSERT_FALSE(diagnostics.empty()) << c.ir;
    EXPECT_EQ(diagnostics[0].message, c.error);
    EXPECT_FALSE(diagnostics[0].location.empty()) << "unlocated: " << c.error;
  }
}

TEST_F(TrainingPlanTest, BackwardAndOptimizerOpsLowerToTheirOpcodes) {
  auto module = parse(R"mlir(
func.func @grads(%x: tensor<2x3x4xf32> {mega.input = "x"}, %dy: tensor<2x3x4xf32> {mega.input = "dy"},
                 %w: tensor<4xf32> {mega.param = "w", mega.init = #mega.init<ones>},
                 %q: tensor<1x3x2x4xf32> {mega.input = "q"}, %k: tensor<1x5x1x4xf32> {mega.input = "k"},
                 %mask: tensor<3x5xf32> {mega.input = "mask"},
                 %dl: tensor<2x3xf32> {mega.input = "dl"}, %labels: tensor<2x3xi64> {mega.input = "labels"},
                 %ids: tensor<2x3xi64> {mega.input = "ids"}, %lr: tensor<f32> {mega.input = "lr"},
                 %step: tensor<i64> {mega.input = "step"})
    -> (tensor<2x5x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>,
        tensor<4xf32>, tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>, tensor<3x5xf32>,
        tensor<1x3x2x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>,
        tensor<7x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>) {
  %pad = mega.pad %x low [0, 1, 0] high [0, 1, 0] interior [0, 0, 0] : tensor<2x3x4xf32> -> tensor<2x5x4xf32>
  %dx, %dw, %db = mega.layer_norm_grad %dy, %x, %w eps 1.0e-05 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %rx, %rw = mega.rms_norm_grad %dy, %x, %w eps 1.0e-06 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>)
  %dq, %dk, %dv, %dm = mega.attention_grad %q, %q, %k, %k mask %mask causal {scale = 0.25 : f64} : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>, tensor<3x5xf32>) -> (tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>, tensor<3x5xf32>)
  %dq2, %dk2, %dv2 = mega.attention_grad %q, %q, %k, %k : (tensor<1x3x2x4xf32>, tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>) -> (tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>)
  %gg = mega.gelu_grad tanh %dy, %x : tensor<2x3x4xf32>
  %sg = mega.softmax_grad %dy, %x axis -2 : tensor<2x3x4xf32>
  %cg = mega.cross_entropy_grad %dl, %x, %labels {ignore_index = -100 : i64} : (tensor<2x3xf32>, tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %eg = mega.embedding_grad %dy[%ids] : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<7x4xf32>
  %w2, %m2, %v2 = mega.adamw_update %w, %db, %dw, %rw, %lr, %step {beta1 = 0.8, beta2 = 0.9, eps = 1.0e-06, weight_decay = 0.0} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %n = mega.global_norm %dw, %db, %eg : (tensor<4xf32>, tensor<4xf32>, tensor<7x4xf32>) -> tensor<f32>
  %c = mega.clip_by_norm %db, %n max 2.5 : tensor<4xf32>, tensor<f32>
  return %pad, %dx, %dw, %db, %rx, %rw, %dq, %dk, %dv, %dm, %dq2, %gg, %sg, %cg, %eg, %w2, %m2, %v2, %n, %c
      : tensor<2x5x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>,
        tensor<4xf32>, tensor<1x3x2x4xf32>, tensor<1x5x1x4xf32>, tensor<1x5x1x4xf32>, tensor<3x5xf32>,
        tensor<1x3x2x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>,
        tensor<7x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << firstError();
  const pl::Function *fn = programOf(bytes)->functions()->Get(0);
  using O = pl::Opcode;
  const std::vector<O> expected = {O::Pad,           O::LayerNormGrad,    O::RmsNormGrad,
                                   O::AttentionGrad, O::AttentionGrad,    O::GeluGrad,
                                   O::SoftmaxGrad,   O::CrossEntropyGrad, O::EmbeddingGrad,
                                   O::AdamW,         O::GlobalNorm,       O::ClipByNorm};
  ASSERT_EQ(fn->instructions()->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const pl::Instruction *inst = fn->instructions()->Get(i);
    EXPECT_EQ(inst->op(), expected[i]) << "instruction " << i;
    EXPECT_EQ(int(inst->outputs()->size()), pl::outputCount(inst->op(), inst->inputs()->size()))
        << pl::EnumNameOpcode(inst->op());
  }
  auto inst = [&](size_t i) { return fn->instructions()->Get(i); };
  auto vec = [](const flatbuffers::Vector<int64_t> *v) {
    return std::vector<int64_t>(v->begin(), v->end());
  };
  EXPECT_EQ(vec(inst(0)->attrs_as_PadAttrs()->low()), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(vec(inst(0)->attrs_as_PadAttrs()->high()), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(vec(inst(0)->attrs_as_PadAttrs()->interior()), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(inst(1)->attrs_as_NormAttrs()->epsilon(), 1e-5);
  EXPECT_EQ(inst(2)->attrs_as_NormAttrs()->epsilon(), 1e-6);
  EXPECT_EQ(inst(3)->inputs()->size(), 5u);
  EXPECT_TRUE(inst(3)->attrs_as_AttentionAttrs()->causal());
  EXPECT_EQ(inst(3)->attrs_as_AttentionAttrs()->scale(), 0.25);
  EXPECT_FALSE(inst(4)->attrs_as_AttentionAttrs()->causal());
  EXPECT_EQ(inst(4)->attrs_as_AttentionAttrs()->scale(), 0.5); // 1/sqrt(4)
  EXPECT_TRUE(inst(5)->attrs_as_GeluAttrs()->tanh());
  EXPECT_EQ(inst(6)->attrs_as_AxisAttrs()->axis(), 1);
  EXPECT_TRUE(inst(7)->attrs_as_CrossEntropyAttrs()->has_ignore_index());
  EXPECT_EQ(inst(7)->attrs_as_CrossEntropyAttrs()->ignore_index(), -100);
  EXPECT_EQ(inst(9)->attrs_as_AdamWAttrs()->beta1(), 0.8);
  EXPECT_EQ(inst(9)->attrs_as_AdamWAttrs()->eps(), 1e-6);
  EXPECT_EQ(inst(10)->inputs()->size(), 3u);
  EXPECT_EQ(inst(11)->attrs_as_ClipAttrs()->max_norm(), 2.5);

  // The runtime accepts the plan, and the compiled layer_norm_grad computes what the kernel does.
  auto loaded = rt::loadPlanFromBytes(bytes);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  auto ex = std::move(rt::Executor::create(*loaded, {}).value());
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> dist(-1, 1);
  auto random = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<double> v(n);
    for (double &x : v)
      x = dist(gen);
    return tensorOf<float>(std::move(shape), v);
  };
  megac::HostTensor x = random({2, 3, 4}), dy = random({2, 3, 4});
  for (const std::string &name : ex->inputNames()) {
    if (name == "x" || name == "dy")
      continue;
    rt::TensorInfo info = ex->inputInfo(name).value();
    megac::HostTensor t = megac::HostTensor::zeros(info.dtype, info.shape);
    if (info.dtype == megac::DType::f32)
      t = random(info.shape);
    if (name == "step")
      t.data<int64_t>()[0] = 1;
    ASSERT_TRUE(ex->setInput(name, t).isOk());
  }
  ASSERT_TRUE(ex->setInput("x", x).isOk());
  ASSERT_TRUE(ex->setInput("dy", dy).isOk());
  megac::Status s = ex->run();
  ASSERT_TRUE(s.isOk()) << s.message();
  megac::HostTensor w = tensorOf<float>({4}, {1, 1, 1, 1}),
                    dx = megac::HostTensor::zeros(megac::DType::f32, {2, 3, 4});
  megac::HostTensor dw = megac::HostTensor::zeros(megac::DType::f32, {4}), db = dw;
  ASSERT_TRUE(rt::cpu::layerNormGrad(rt::cpu::refOf(dy), rt::cpu::refOf(x), rt::cpu::refOf(w), 1e-5,
                                     rt::cpu::refOf(dx), rt::cpu::refOf(dw), rt::cpu::refOf(db))
                  .isOk());
  EXPECT_EQ(ex->output("output_1").value().bytes, dx.bytes);
  EXPECT_EQ(ex->output("output_2").value().bytes, dw.bytes);
  EXPECT_EQ(ex->output("output_3").value().bytes, db.bytes);
}
