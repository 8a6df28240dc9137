// The CPU executor runs plans built in the test: parameters from weights, a weights file or
// seeded init (sharded too), constants, aliasing buffers, several ranks, every opcode's
// dispatch, a small transformer block, and errors naming the opcode and location.
#include "runtime/exec/Executor.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Trace.h"
#include "runtime/init/ParamInit.h"
#include "runtime/io/Safetensors.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

#include <fstream>
#include <numbers>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

/// y = Gelu(Linear(x [2,3], fc.weight [4,3], fc.bias [4])).
PlanSpec linearGeluPlan(fb::InitKind weightInit = fb::InitKind::normal) {
  PlanSpec plan;
  plan.seed = 1234;
  ProgramSpec &p = plan.program();
  uint32_t x = p.input("x", DType::f32, {2, 3});
  uint32_t w = p.param("fc.weight", DType::f32, {4, 3}, weightInit, 0.02);
  uint32_t b = p.param("fc.bias", DType::f32, {4}, fb::InitKind::zeros);
  uint32_t h = p.buffer("h", DType::f32, {2, 4});
  uint32_t y = p.buffer("y", DType::f32, {2, 4});
  p.inst(fb::Opcode::Linear, {x, w, b}, h, "model.py:10 fc");
  p.inst(fb::Opcode::Gelu, {h}, y, "model.py:11 gelu", fb::Attrs::GeluAttrs, geluAttrs(false));
  p.output("y", y);
  return plan;
}

LoadedPlan load(const PlanSpec &spec) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return loaded.value();
}

std::unique_ptr<Executor> create(const LoadedPlan &plan, const TensorMap *weights = nullptr,
                                 int rank = 0) {
  ExecutorOptions options;
  options.weights = weights;
  options.rank = rank;
  auto ex = Executor::create(plan, options);
  EXPECT_TRUE(ex.isOk()) << ex.status().message();
  return ex.isOk() ? std::move(ex).value() : nullptr;
}

std::vector<double> naiveLinearGelu(const std::vector<float> &x, const std::vector<float> &w,
                                    const std::vector<float> &b) {
  std::vector<double> y;
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 4; ++o) {
      double h = b[o];
      for (int i = 0; i < 3; ++i)
        h += double(x[r * 3 + i]) * w[o * 3 + i];
      y.push_back(0.5 * h * (1 + std::erf(h / std::numbers::sqrt2)));
    }
  return y;
}

const std::vector<float> kX = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
const std::vector<float> kW = {0.1f, 0.2f, 0.3f,  -0.4f, 0.5f,  -0.6f,
                               0.7f, 0.8f, -0.9f, 1.0f,  -1.1f, 1.2f};
const std::vector<float> kB = {0.01f, -0.02f, 0.03f, -0.04f};

} // namespace

TEST(Executor, RunsLinearGeluWithWeightsPassedIn) {
  LoadedPlan plan = load(linearGeluPlan());
  TensorMap weights;
  weights["fc.weight"] = f32({4, 3}, kW);
  weights["fc.bias"] = f32({4}, kB);
  auto ex = create(plan, &weights);
  ASSERT_TRUE(ex);
  EXPECT_EQ(ex->inputNames(), std::vector<std::string>{"x"});
  EXPECT_EQ(ex->outputNames(), std::vector<std::string>{"y"});
  ASSERT_TRUE(ex->setInput("x", f32({2, 3}, kX)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  auto y = ex->output("y");
  ASSERT_TRUE(y.isOk()) << y.status().message();
  EXPECT_EQ(y->shape, (std::vector<int64_t>{2, 4}));
  expectClose(valuesOf<float>(*y), naiveLinearGelu(kX, kW, kB), 1e-5, 1e-7, "y");
  // A second run with new input gives the new answer (inputs are copied in on every run).
  std::vector<float> x2 = kX;
  x2[0] = -3.0f;
  ASSERT_TRUE(ex->setInput("x", f32({2, 3}, x2)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  expectClose(valuesOf<float>(ex->output("y").value()), naiveLinearGelu(x2, kW, kB), 1e-5, 1e-7,
              "second run");
}

TEST(Executor, ReadsTheWeightsFileNextToThePlan) {
  TempDir dir;
  TensorMap fileWeights;
  fileWeights["fc.weight"] = f32({4, 3}, kW);
  fileWeights["fc.bias"] = f32({4}, {9, 9, 9, 9}); // overridden below by options.weights
  ASSERT_TRUE(writeSafetensors(dir.file("weights.safetensors"), fileWeights).isOk());
  PlanSpec spec = linearGeluPlan(fb::InitKind::none);
  spec.weightsFile = "weights.safetensors";
  std::vector<uint8_t> bytes = spec.build();
  std::string planPath = dir.file("model.mplan");
  std::ofstream(planPath, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  auto plan = loadPlanFile(planPath);
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  TensorMap given;
  given["fc.bias"] = f32({4}, kB);
  auto ex = create(plan.value(), &given);
  ASSERT_TRUE(ex);
  ASSERT_TRUE(ex->setInput("x", f32({2, 3}, kX)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  expectClose(valuesOf<float>(ex->output("y").value()), naiveLinearGelu(kX, kW, kB), 1e-5, 1e-7,
              "y");
  // A missing weights file is an error naming it, not a silent init.
  std::filesystem::remove(dir.file("weights.safetensors"));
  ExecutorOptions options;
  auto failed = Executor::create(plan.value(), options);
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find("weights.safetensors"), std::string::npos);
}

namespace {

/// A program whose output is a copy of one parameter, to observe its initial value.
PlanSpec paramCopyPlan(std::vector<int64_t> local, std::vector<int64_t> global,
                       std::vector<int64_t> offset, fb::InitKind init, DType dtype = DType::f32) {
  PlanSpec plan;
  plan.seed = 77;
  ProgramSpec &p = plan.program();
  uint32_t w = p.buffer("w", dtype, local);
  p.params.push_back({"h0.mlp.fc.weight", w, global, offset, init, 0.5});
  uint32_t y = p.buffer("y", dtype, local);
  p.inst(fb::Opcode::Copy, {w}, y, "copy");
  p.output("y", y);
  return plan;
}

std::vector<float> runParamCopy(const PlanSpec &spec, const TensorMap *weights = nullptr) {
  LoadedPlan plan = load(spec);
  auto ex = create(plan, weights);
  if (!ex)
    return {};
  EXPECT_TRUE(ex->run().isOk());
  return valuesOf<float>(ex->output("y").value());
}

} // namespace

TEST(Executor, InitializesParametersFromTheSeed) {
  std::vector<int64_t> shape{3, 5};
  std::vector<float> want(15);
  megac::init::InitSpec spec{megac::init::InitKind::normal, 0.5};
  ASSERT_TRUE(megac::init::fillShard(spec, 77, "h0.mlp.fc.weight", shape,
                                     std::vector<int64_t>{0, 0}, shape, want));
  EXPECT_EQ(runParamCopy(paramCopyPlan(shape, shape, {0, 0}, fb::InitKind::normal)), want);
  EXPECT_EQ(runParamCopy(paramCopyPlan(shape, shape, {0, 0}, fb::InitKind::ones)),
            std::vector<float>(15, 1.0f));
  EXPECT_EQ(runParamCopy(paramCopyPlan(shape, shape, {0, 0}, fb::InitKind::zeros)),
            std::vector<float>(15, 0.0f));
  // A column shard initialized alone equals that slice of the whole.
  std::vector<float> shard =
      runParamCopy(paramCopyPlan({3, 2}, shape, {0, 3}, fb::InitKind::normal));
  EXPECT_EQ(shard, (std::vector<float>{want[3], want[4], want[8], want[9], want[13], want[14]}));
  // f64 and bf16 parameters start from the same float draws.
  LoadedPlan plan64 = load(paramCopyPlan(shape, shape, {0, 0}, fb::InitKind::normal, DType::f64));
  auto ex = create(plan64);
  ASSERT_TRUE(ex && ex->run().isOk());
  EXPECT_EQ(valuesOf<double>(ex->output("y").value()),
            std::vector<double>(want.begin(), want.end()));
}

TEST(Executor, InitKindNoneWithoutAWeightIsAnError) {
  LoadedPlan plan = load(paramCopyPlan({2}, {2}, {0}, fb::InitKind::none));
  auto ex = Executor::create(plan, ExecutorOptions{});
  ASSERT_FALSE(ex.isOk());
  EXPECT_NE(ex.status().message().find(
                "parameter 'h0.mlp.fc.weight' has no value: no weights were passed in and the "
                "plan has no weights file, and its init kind is none"),
            std::string::npos)
      << ex.status().message();
}

TEST(Executor, ShardedParametersTakeTheirSliceOfTheWeight) {
  TensorMap weights;
  std::vector<float> whole(4 * 6);
  for (size_t i = 0; i < whole.size(); ++i)
    whole[i] = float(i);
  weights["h0.mlp.fc.weight"] = f32({4, 6}, whole);
  EXPECT_EQ(runParamCopy(paramCopyPlan({2, 3}, {4, 6}, {2, 3}, fb::InitKind::none), &weights),
            (std::vector<float>{15, 16, 17, 21, 22, 23}));
  // The weight must have the global shape and the parameter's dtype.
  auto expectError = [&](const HostTensor &w, const std::string &piece) {
    TensorMap m;
    m["h0.mlp.fc.weight"] = w;
    LoadedPlan plan = load(paramCopyPlan({2, 3}, {4, 6}, {2, 3}, fb::InitKind::none));
    ExecutorOptions options;
    options.weights = &m;
    auto ex = Executor::create(plan, options);
    ASSERT_FALSE(ex.isOk());
    EXPECT_NE(ex.status().message().find(piece), std::string::npos) << ex.status().message();
    EXPECT_NE(ex.status().message().find("h0.mlp.fc.weight"), std::string::npos);
  };
  expectError(f32({2, 3}, std::vector<float>(6)), "global shape is [4, 6]");
  expectError(f64({4, 6}, std::vector<double>(24)), "holds f64, but the parameter is f32");
}

TEST(Executor, ConstantsAreLoadedWithTheProgram) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::i64, {3});
  uint32_t c = p.constant("c", DType::i64, {3}, std::vector<int64_t>{10, 20, 30});
  p.constant("empty", DType::f32, {0}, std::vector<float>{}); // zero bytes: nothing to copy
  uint32_t y = p.buffer("y", DType::i64, {3});
  p.inst(fb::Opcode::Add, {x, c}, y, "add");
  p.output("y", y);
  LoadedPlan plan = load(spec);
  auto ex = create(plan);
  ASSERT_TRUE(ex);
  ASSERT_TRUE(ex->setInput("x", i64({3}, {1, 2, 3})).isOk());
  ASSERT_TRUE(ex->run().isOk());
  EXPECT_EQ(valuesOf<int64_t>(ex->output("y").value()), (std::vector<int64_t>{11, 22, 33}));
}

TEST(Executor, OutputsMayAliasInputs) {
  // Memory planning may reuse an input's bytes for an output: in place (same offset) and
  // partly overlapping (a transpose whose output starts inside its input).
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
  auto ex = create(plan);
  ASSERT_TRUE(ex);
  std::vector<float> xs = randomValues(64, 3);
  ASSERT_TRUE(ex->setInput("x", f32({4, 16}, xs)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  std::vector<float> got = valuesOf<float>(ex->output("y").value());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 4; ++j)
      ASSERT_EQ(got[i * 4 + j], -xs[j * 16 + i]);
}

// An input nothing writes is read where setInput left it: through its own buffer and through a
// view inside its bytes (which reads zeros if not redirected: the arena was never filled), while
// a buffer written over the bytes after the input's last read stays in the arena. An input an
// instruction writes in place is copied in, so the caller's tensor is unchanged. The function's
// trace event says which bytes were copied and which read in place.
TEST(Executor, InputsNothingWritesAreReadInPlace) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {4, 16});            // bytes [0, 256)
  uint32_t row1 = p.buffer("x.row1", DType::f32, {16}, 64);  // a view of x's second row
  uint32_t sum = p.buffer("sum", DType::f32, {16});
  uint32_t over = p.buffer("over", DType::f32, {4, 16}, 0);  // reuses x's bytes after its reads
  uint32_t overRow1 = p.buffer("over.row1", DType::f32, {16}, 64);
  uint32_t y = p.buffer("y", DType::f32, {16});
  uint32_t z = p.input("z", DType::f32, {16});
  uint32_t zNeg = p.buffer("z.neg", DType::f32, {16});
  p.inst(fb::Opcode::Add, {row1, row1}, sum, "twice row 1 through the view");
  p.inst(fb::Opcode::Neg, {x}, over, "x negated over its own bytes");
  p.inst(fb::Opcode::Add, {overRow1, sum}, y, "-row 1 + 2 row 1 = row 1");
  p.inst(fb::Opcode::Neg, {z}, z, "z negated in place");
  p.inst(fb::Opcode::Add, {y, z}, zNeg, "row 1 - z");
  p.output("y", zNeg);
  LoadedPlan plan = load(spec);
  Trace trace;
  ExecutorOptions options;
  options.trace = &trace;
  auto created = Executor::create(plan, options);
  ASSERT_TRUE(created.isOk()) << created.status().message();
  std::unique_ptr<Executor> ex = std::move(created).value();
  std::vector<float> xs = randomValues(64, 5), zs = randomValues(16, 6);
  ASSERT_TRUE(ex->setInput("x", f32({4, 16}, xs)).isOk());
  ASSERT_TRUE(ex->setInput("z", f32({16}, zs)).isOk());
  trace.start();
  ASSERT_TRUE(ex->run().isOk());
  std::vector<float> got = valuesOf<float>(ex->output("y").value());
  for (int i = 0; i < 16; ++i)
    ASSERT_FLOAT_EQ(got[i], xs[16 + i] - zs[i]) << i;
  EXPECT_EQ(valuesOf<float>(ex->takeInput("x").value()), xs);
  EXPECT_EQ(valuesOf<float>(ex->takeInput("z").value()), zs); // negated in the arena only
  std::string events = trace.chromeEvents(0, "rank 0");
  EXPECT_NE(events.find("\"input_bytes_copied\": 64, \"input_bytes_read_in_place\": 256"),
            std::string::npos)
      << events;
}

TEST(Executor, EachRankRunsItsRole) {
  PlanSpec spec;
  spec.programs.resize(2);
  for (int role = 0; role < 2; ++role) {
    ProgramSpec &p = spec.programs[role];
    p.name = "stage" + std::to_string(role);
    uint32_t x = p.input(role ? "h" : "x", DType::f32, {2});
    uint32_t y = p.buffer("y", DType::f32, {2});
    p.inst(role ? fb::Opcode::Neg : fb::Opcode::Exp, {x}, y, "op");
    p.output(role ? "out" : "h", y);
  }
  spec.axisNames = {"pp"};
  spec.axisSizes = {2};
  spec.ranks = {{0, {0}}, {1, {1}}};
  LoadedPlan plan = load(spec);
  auto r1 = create(plan, nullptr, 1);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->inputNames(), std::vector<std::string>{"h"});
  ASSERT_TRUE(r1->setInput("h", f32({2}, {1, -2})).isOk());
  ASSERT_TRUE(r1->run().isOk());
  EXPECT_EQ(valuesOf<float>(r1->output("out").value()), (std::vector<float>{-1, 2}));
  ExecutorOptions options;
  options.rank = 2;
  auto bad = Executor::create(plan, options);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("rank 2 is not in the rank table (2 ranks)"),
            std::string::npos);
}

TEST(Executor, RunErrorsNameTheOpcodeAndLocation) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t ids = p.input("ids", DType::i64, {3});
  uint32_t table = p.param("wte", DType::f32, {10, 4}, fb::InitKind::normal, 0.02);
  uint32_t y = p.buffer("y", DType::f32, {3, 4});
  p.inst(fb::Opcode::Embedding, {table, ids}, y, "gpt.py:42 wte");
  p.output("y", y);
  LoadedPlan plan = load(spec);
  auto ex = create(plan);
  ASSERT_TRUE(ex);
  Status s = ex->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "input 'ids' was not set before running function 'main'");
  ASSERT_TRUE(ex->setInput("ids", i64({3}, {1, 10, 2})).isOk());
  s = ex->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find(
                "program 'main', function 'main', instruction 0 (Embedding at 'gpt.py:42 wte')"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("id 10 (element 1 of the ids) is outside the table's 10 rows"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(ex->output("y").isOk()) << "output after a failed run";
}

// The pipeline runner hands stashes over (setInput of an rvalue) and takes back what a later
// step reads again (takeInput): the same bytes, no copy, and the input unset afterwards.
TEST(Executor, InputsHandedOverAndTakenBack) {
  LoadedPlan plan = load(linearGeluPlan());
  TensorMap weights;
  weights["fc.weight"] = f32({4, 3}, kW);
  weights["fc.bias"] = f32({4}, kB);
  auto ex = create(plan, &weights);
  ASSERT_TRUE(ex);
  HostTensor x = f32({2, 3}, kX);
  const uint8_t *bytes = x.bytes.data();
  ASSERT_TRUE(ex->setInput("x", std::move(x)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  expectClose(valuesOf<float>(ex->output("y").value()), naiveLinearGelu(kX, kW, kB), 1e-5, 1e-7,
              "y");
  StatusOr<HostTensor> back = ex->takeInput("x");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->bytes.data(), bytes); // moved in and out, never copied
  EXPECT_EQ(valuesOf<float>(*back), kX);
  Status again = ex->takeInput("x").status();
  EXPECT_EQ(again.message(), "input 'x' is not set: nothing to take back");
  EXPECT_FALSE(ex->run().isOk()); // taken back: a run needs it set again
  EXPECT_EQ(ex->takeInput("z").status().message(), "the program has no input 'z' (inputs: x)");
  Status wrong = ex->setInput("x", f32({3, 2}, kX));
  EXPECT_EQ(wrong.message(), "input 'x' must be f32 [2, 3], got f32 [3, 2]");
}

TEST(Executor, RejectsBadInputsAndOutputNames) {
  LoadedPlan plan = load(linearGeluPlan());
  auto ex = create(plan);
  ASSERT_TRUE(ex);
  EXPECT_FALSE(ex->output("y").isOk()); // before run()
  Status s = ex->setInput("x", f32({3, 2}, kX));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "input 'x' must be f32 [2, 3], got f32 [3, 2]");
  EXPECT_FALSE(ex->setInput("x", f64({2, 3}, std::vector<double>(6))).isOk());
  s = ex->setInput("z", f32({2, 3}, kX));
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "the program has no input 'z' (inputs: x)");
  ASSERT_TRUE(ex->setInput("x", f32({2, 3}, kX)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  EXPECT_FALSE(ex->output("nope").isOk());
  EXPECT_GE(ex->arenaBytes(), 5u * 32u);
}

namespace {

/// Runs one instruction through a plan and returns its output.
HostTensor runOne(fb::Opcode op, const std::vector<HostTensor> &inputs, DType outDtype,
                  std::vector<int64_t> outShape, fb::Attrs attrsType = fb::Attrs::NONE,
                  AttrsFn attrs = nullptr) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<uint32_t> ins;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(p.input("in" + std::to_string(i), inputs[i].dtype, inputs[i].shape));
  uint32_t out = p.buffer("out", outDtype, outShape);
  p.inst(op, ins, out, "single", attrsType, std::move(attrs));
  p.output("out", out);
  auto plan = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(plan.isOk()) << plan.status().message();
  if (!plan.isOk())
    return {};
  auto ex = Executor::create(plan.value(), ExecutorOptions{});
  EXPECT_TRUE(ex.isOk()) << ex.status().message();
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(ex.value()->setInput("in" + std::to_string(i), inputs[i]).isOk());
  Status s = ex.value()->run();
  EXPECT_TRUE(s.isOk()) << fb::EnumNameOpcode(op) << ": " << s.message();
  auto y = ex.value()->output("out");
  return y.isOk() ? y.value() : HostTensor{};
}

/// The same op called on the kernel directly.
template <typename F> HostTensor direct(DType dtype, std::vector<int64_t> shape, F kernel) {
  HostTensor out = HostTensor::zeros(dtype, std::move(shape));
  Status s = kernel(cpu::refOf(out));
  EXPECT_TRUE(s.isOk()) << s.message();
  return out;
}

} // namespace

TEST(Executor, DispatchesEveryOpcodeToItsKernel) {
  using O = fb::Opcode;
  using namespace megac::runtime::cpu;
  HostTensor a = f32({2, 3}, randomValues(6, 1, 0.1, 2)),
             b = f32({2, 3}, randomValues(6, 2, 0.1, 2));
  HostTensor m1 = i1({2, 3}, {1, 0, 1, 1, 0, 0}), m2 = i1({2, 3}, {1, 1, 0, 0, 1, 0});
  std::vector<int64_t> s23{2, 3};
  // Unary and binary opcodes map onto the kernel enums by position.
  for (int op = int(O::Neg); op <= int(O::Not); ++op) {
    const HostTensor &in = op == int(O::Not) ? m1 : a;
    HostTensor got = runOne(O(op), {in}, in.dtype, s23);
    HostTensor want =
        direct(in.dtype, s23, [&](const TensorRef &o) { return unary(UnaryOp(op), refOf(in), o); });
    EXPECT_EQ(got.bytes, want.bytes) << fb::EnumNameOpcode(O(op));
  }
  for (int op = int(O::Add); op <= int(O::Or); ++op) {
    bool logic = op == int(O::And) || op == int(O::Or);
    const HostTensor &l = logic ? m1 : a, &r = logic ? m2 : b;
    HostTensor got = runOne(O(op), {l, r}, l.dtype, s23);
    HostTensor want = direct(l.dtype, s23, [&](const TensorRef &o) {
      return binary(BinaryOp(op - int(O::Add)), refOf(l), refOf(r), o);
    });
    EXPECT_EQ(got.bytes, want.bytes) << fb::EnumNameOpcode(O(op));
  }
  for (int pred = 0; pred <= int(fb::ComparePredicate::ge); ++pred) {
    HostTensor got = runOne(O::Compare, {a, b}, DType::i1, s23, fb::Attrs::CompareAttrs,
                            compareAttrs(fb::ComparePredicate(pred)));
    HostTensor want = direct(DType::i1, s23, [&](const TensorRef &o) {
      return compare(ComparePredicate(pred), refOf(a), refOf(b), o);
    });
    EXPECT_EQ(got.bytes, want.bytes) << "predicate " << pred;
  }
  for (int kind = 0; kind <= int(fb::ReduceKind::min); ++kind) {
    HostTensor got = runOne(O::Reduce, {a}, DType::f32, {2}, fb::Attrs::ReduceAttrs,
                            reduceAttrs(fb::ReduceKind(kind), {1}));
    HostTensor want = direct(DType::f32, {2}, [&](const TensorRef &o) {
      return reduce(ReduceKind(kind), refOf(a), std::vector<int64_t>{1}, o);
    });
    EXPECT_EQ(got.bytes, want.bytes) << "reduce kind " << kind;
  }
  // The rest, one by one, against closed forms.
  EXPECT_EQ(
      valuesOf<float>(runOne(O::Where, {m1, a, b}, DType::f32, s23)),
      (std::vector<float>{valuesOf<float>(a)[0], valuesOf<float>(b)[1], valuesOf<float>(a)[2],
                          valuesOf<float>(a)[3], valuesOf<float>(b)[4], valuesOf<float>(b)[5]}));
  EXPECT_EQ(runOne(O::Copy, {a}, DType::f32, {6}).bytes, a.bytes);
  HostTensor x = f32({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(valuesOf<float>(runOne(O::Transpose, {x}, DType::f32, {3, 2}, fb::Attrs::TransposeAttrs,
                                   transposeAttrs({1, 0}))),
            (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(valuesOf<float>(runOne(O::Slice, {x}, DType::f32, {2, 2}, fb::Attrs::SliceAttrs,
                                   sliceAttrs({0, 1}, {1, 1}))),
            (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(valuesOf<float>(
                runOne(O::Concat, {x, x}, DType::f32, {2, 6}, fb::Attrs::AxisAttrs, axisAttrs(1))),
            (std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(valuesOf<float>(runOne(O::Broadcast, {f32({3}, {1, 2, 3})}, DType::f32, {2, 3})),
            (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(valuesOf<int32_t>(runOne(O::Cast, {f32({2}, {2.9f, -2.9f})}, DType::i32, {2})),
            (std::vector<int32_t>{2, -2}));
  EXPECT_EQ(valuesOf<float>(runOne(O::Gather, {x, i64({1}, {-1})}, DType::f32, {2, 1},
                                   fb::Attrs::AxisAttrs, axisAttrs(1))),
            (std::vector<float>{2, 5}));
  std::vector<float> sm = valuesOf<float>(
      runOne(O::Softmax, {f32({2}, {0, 0})}, DType::f32, {2}, fb::Attrs::AxisAttrs, axisAttrs(0)));
  EXPECT_EQ(sm, (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(valuesOf<float>(runOne(O::MatMul, {x, f32({3, 1}, {1, 1, 1})}, DType::f32, {2, 1})),
            (std::vector<float>{3, 12}));
  EXPECT_EQ(valuesOf<float>(runOne(O::Linear, {x, f32({1, 3}, {1, 0, -1}), f32({1}, {10})},
                                   DType::f32, {2, 1})),
            (std::vector<float>{8, 8}));
  EXPECT_EQ(valuesOf<float>(runOne(O::Embedding, {x, i32({1}, {1})}, DType::f32, {1, 3})),
            (std::vector<float>{3, 4, 5}));
  expectClose(
      valuesOf<float>(runOne(O::LayerNorm, {f32({2}, {1, 3}), f32({2}, {1, 1}), f32({2}, {0, 5})},
                             DType::f32, {2}, fb::Attrs::NormAttrs, normAttrs(0))),
      std::vector<double>{-1, 6}, 1e-6, 0);
  expectClose(valuesOf<float>(runOne(O::RmsNorm, {f32({2}, {3, 4}), f32({2}, {1, 2})}, DType::f32,
                                     {2}, fb::Attrs::NormAttrs, normAttrs(0))),
              std::vector<double>{3 / std::sqrt(12.5), 8 / std::sqrt(12.5)}, 1e-6, 0);
  // One key: attention returns its value whatever the scores.
  EXPECT_EQ(valuesOf<float>(runOne(
                O::Attention,
                {f32({1, 1, 1, 2}, {1, 2}), f32({1, 1, 1, 2}, {3, 4}), f32({1, 1, 1, 2}, {7, 8})},
                DType::f32, {1, 1, 1, 2}, fb::Attrs::AttentionAttrs, attentionAttrs(true, 0.5))),
            (std::vector<float>{7, 8}));
  expectClose(valuesOf<float>(runOne(O::Gelu, {f32({1}, {1})}, DType::f32, {1},
                                     fb::Attrs::GeluAttrs, geluAttrs(true))),
              std::vector<double>{0.8411919906082768}, 1e-6, 0);
  expectClose(valuesOf<float>(runOne(
                  O::CrossEntropy, {f32({2, 2}, {0, 0, 1, 1}), i64({2}, {1, -1})}, DType::f32, {2},
                  fb::Attrs::CrossEntropyAttrs, crossEntropyAttrs(true, -1))),
              std::vector<double>{std::log(2.0), 0}, 1e-6, 0);
  HostTensor dropped = runOne(O::Dropout, {f32({4}, {1, 1, 1, 1}), i64({}, {5})}, DType::f32, {4},
                              fb::Attrs::DropoutAttrs, dropoutAttrs(0.5, 3));
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(valuesOf<float>(dropped)[i], cpu::dropoutKeeps(5, 3, i, 0.5) ? 2.0f : 0.0f);
}

TEST(Executor, RunsASmallTransformerBlock) {
  // ids -> Embedding -> LayerNorm -> q,k,v Linear -> reshape -> causal GQA Attention ->
  // reshape -> Linear -> residual Add -> tied head (MatMul with the transposed table) ->
  // CrossEntropy -> mean. Compared with the same kernels called one by one.
  const int64_t S = 5, V = 11, H = 8, NH = 2, NKV = 1, D = H / NH;
  PlanSpec spec;
  spec.seed = 3;
  ProgramSpec &p = spec.program();
  uint32_t ids = p.input("ids", DType::i64, {1, S});
  uint32_t labels = p.input("labels", DType::i64, {1, S});
  uint32_t wte = p.param("wte", DType::f32, {V, H}, fb::InitKind::normal, 0.5);
  uint32_t lnw = p.param("ln.weight", DType::f32, {H}, fb::InitKind::ones);
  uint32_t lnb = p.param("ln.bias", DType::f32, {H}, fb::InitKind::zeros);
  uint32_t wq = p.param("q.weight", DType::f32, {H, H}, fb::InitKind::normal, 0.3);
  uint32_t wk = p.param("k.weight", DType::f32, {NKV * D, H}, fb::InitKind::normal, 0.3);
  uint32_t wv = p.param("v.weight", DType::f32, {NKV * D, H}, fb::InitKind::normal, 0.3);
  uint32_t wo = p.param("o.weight", DType::f32, {H, H}, fb::InitKind::normal, 0.3);
  uint32_t emb = p.buffer("emb", DType::f32, {1, S, H});
  uint32_t ln = p.buffer("ln", DType::f32, {1, S, H});
  uint32_t q = p.buffer("q", DType::f32, {1, S, H}), k = p.buffer("k", DType::f32, {1, S, D});
  uint32_t v = p.buffer("v", DType::f32, {1, S, D});
  uint32_t q4 = p.buffer("q4", DType::f32, {1, S, NH, D}),
           k4 = p.buffer("k4", DType::f32, {1, S, NKV, D});
  uint32_t v4 = p.buffer("v4", DType::f32, {1, S, NKV, D});
  uint32_t att = p.buffer("att", DType::f32, {1, S, NH, D}),
           att3 = p.buffer("att3", DType::f32, {1, S, H});
  uint32_t proj = p.buffer("proj", DType::f32, {1, S, H}),
           res = p.buffer("res", DType::f32, {1, S, H});
  uint32_t wteT = p.buffer("wteT", DType::f32, {H, V}),
           logits = p.buffer("logits", DType::f32, {1, S, V});
  uint32_t losses = p.buffer("losses", DType::f32, {1, S}), loss = p.buffer("loss", DType::f32, {});
  using O = fb::Opcode;
  p.inst(O::Embedding, {wte, ids}, emb, "wte");
  p.inst(O::LayerNorm, {emb, lnw, lnb}, ln, "ln", fb::Attrs::NormAttrs, normAttrs(1e-5));
  p.inst(O::Linear, {ln, wq}, q, "q");
  p.inst(O::Linear, {ln, wk}, k, "k");
  p.inst(O::Linear, {ln, wv}, v, "v");
  p.inst(O::Copy, {q}, q4, "q reshape");
  p.inst(O::Copy, {k}, k4, "k reshape");
  p.inst(O::Copy, {v}, v4, "v reshape");
  p.inst(O::Attention, {q4, k4, v4}, att, "attn", fb::Attrs::AttentionAttrs,
         attentionAttrs(true, 1 / std::sqrt(double(D))));
  p.inst(O::Copy, {att}, att3, "attn reshape");
  p.inst(O::Linear, {att3, wo}, proj, "o");
  p.inst(O::Add, {emb, proj}, res, "residual");
  p.inst(O::Transpose, {wte}, wteT, "tied head", fb::Attrs::TransposeAttrs, transposeAttrs({1, 0}));
  p.inst(O::MatMul, {res, wteT}, logits, "head");
  p.inst(O::CrossEntropy, {logits, labels}, losses, "ce", fb::Attrs::CrossEntropyAttrs,
         crossEntropyAttrs(false, 0));
  p.inst(O::Reduce, {losses}, loss, "mean", fb::Attrs::ReduceAttrs,
         reduceAttrs(fb::ReduceKind::mean, {0, 1}));
  p.output("loss", loss);
  p.output("logits", logits);
  LoadedPlan plan = load(spec);

  // The reference: parameters drawn as the executor must, then the kernels one by one.
  auto initParam = [&](const char *name, std::vector<int64_t> shape, megac::init::InitSpec is) {
    HostTensor t = HostTensor::zeros(DType::f32, shape);
    std::vector<int64_t> zero(shape.size(), 0);
    EXPECT_TRUE(megac::init::fillShard(is, 3, name, shape, zero, shape,
                                       std::span<float>(t.data<float>(), size_t(t.numElements()))));
    return t;
  };
  using megac::init::InitKind;
  HostTensor Wte = initParam("wte", {V, H}, {InitKind::normal, 0.5});
  HostTensor Wq = initParam("q.weight", {H, H}, {InitKind::normal, 0.3});
  HostTensor Wk = initParam("k.weight", {D, H}, {InitKind::normal, 0.3});
  HostTensor Wv = initParam("v.weight", {D, H}, {InitKind::normal, 0.3});
  HostTensor Wo = initParam("o.weight", {H, H}, {InitKind::normal, 0.3});
  HostTensor ones = f32({H}, std::vector<float>(H, 1)), zeros = f32({H}, std::vector<float>(H, 0));
  HostTensor Ids = i64({1, S}, {3, 1, 4, 1, 5}), Labels = i64({1, S}, {1, 4, 1, 5, 9});
  using namespace megac::runtime::cpu;
  auto run = [](HostTensor out, auto kernel) {
    Status s = kernel(refOf(out));
    EXPECT_TRUE(s.isOk()) << s.message();
    return out;
  };
  auto z = [](std::vector<int64_t> shape) { return HostTensor::zeros(DType::f32, shape); };
  HostTensor Emb =
      run(z({1, S, H}), [&](TensorRef o) { return embedding(refOf(Wte), refOf(Ids), o); });
  TensorRef zb = refOf(zeros);
  HostTensor Ln = run(
      z({1, S, H}), [&](TensorRef o) { return layerNorm(refOf(Emb), refOf(ones), &zb, 1e-5, o); });
  HostTensor Q = run(z({1, S, NH, D}), [&](TensorRef o) {
    return linear(refOf(Ln), refOf(Wq), nullptr, {o.dtype, std::vector<int64_t>{1, S, H}, o.data});
  });
  HostTensor K = run(z({1, S, NKV, D}), [&](TensorRef o) {
    return linear(refOf(Ln), refOf(Wk), nullptr, {o.dtype, std::vector<int64_t>{1, S, D}, o.data});
  });
  HostTensor Vv = run(z({1, S, NKV, D}), [&](TensorRef o) {
    return linear(refOf(Ln), refOf(Wv), nullptr, {o.dtype, std::vector<int64_t>{1, S, D}, o.data});
  });
  HostTensor Att = run(z({1, S, H}), [&](TensorRef o) {
    std::vector<int64_t> s4{1, S, NH, D};
    return attention(refOf(Q), refOf(K), refOf(Vv), nullptr, true, 1 / std::sqrt(double(D)),
                     {o.dtype, s4, o.data});
  });
  HostTensor Proj =
      run(z({1, S, H}), [&](TensorRef o) { return linear(refOf(Att), refOf(Wo), nullptr, o); });
  HostTensor Res = run(
      z({1, S, H}), [&](TensorRef o) { return binary(BinaryOp::Add, refOf(Emb), refOf(Proj), o); });
  HostTensor WteT = run(z({H, V}), [&](TensorRef o) {
    return transpose(refOf(Wte), std::vector<int64_t>{1, 0}, o);
  });
  HostTensor Logits =
      run(z({1, S, V}), [&](TensorRef o) { return matmul(refOf(Res), refOf(WteT), o); });
  HostTensor Losses = run(z({1, S}), [&](TensorRef o) {
    return crossEntropy(refOf(Logits), refOf(Labels), std::nullopt, o);
  });
  double want = 0;
  for (float l : valuesOf<float>(Losses))
    want += l;
  want /= S;

  auto ex = create(plan);
  ASSERT_TRUE(ex);
  ASSERT_TRUE(ex->setInput("ids", Ids).isOk());
  ASSERT_TRUE(ex->setInput("labels", Labels).isOk());
  Status s = ex->run();
  ASSERT_TRUE(s.isOk()) << s.message();
  // Same kernels, same order: bit-identical logits; the mean differs only in summation order.
  EXPECT_EQ(ex->output("logits").value().bytes, Logits.bytes);
  expectClose(valuesOf<float>(ex->output("loss").value()), std::vector<double>{want}, 1e-6, 0,
              "loss");
  EXPECT_GT(want, 0.5); // a real loss, not a degenerate zero
}
