// mega-pipeline-split and mega-forward-backward-split on 2-layer zoo models (f64): the chunks
// partition the forward and chain port to port, and every pipeline layout and recompute policy,
// run chunk by chunk on the CPU runtime, gives the unsplit step's loss and gradients (GPT's
// tied embedding, BERT's attention mask, T5's encoder output crossing the decoder's cuts).
#include "passes/schedule/Passes.h"
#include "passes/training/Passes.h"
#include "tests/unit/training/TrainingHarness.h"

#include "frontends/models/ModelConfig.h"
#include "frontends/models/ModelZoo.h"

#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

namespace megac::schedule_test {
namespace {

using namespace megac::training_test;

constexpr const char *kGpt = "gpt:layers=2,hidden=8,heads=2,seq=4,vocab=16,batch=2,dtype=f64";
constexpr const char *kBert = "bert:layers=2,hidden=8,heads=2,seq=4,vocab=16,batch=2,dtype=f64";
constexpr const char *kT5 =
    "t5:layers=2,hidden=8,heads=2,seq=4,dec_seq=4,vocab=16,batch=2,dtype=f64";
// Every model's i64 inputs are [2, 4].
const std::vector<int64_t> kIds = {3, 1, 4, 1, 5, 9, 2, 6};
const std::vector<int64_t> kDecoderIds = {0, 7, 3, 2, 0, 8, 8, 1};
const std::vector<int64_t> kMask = {1, 1, 1, 0, 1, 1, 0, 0};
const std::vector<int64_t> kLabels = {1, 4, 1, 5, 9, 2, 6, -100};

HostTensor i64Tensor(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t = HostTensor::zeros(DType::i64, std::move(shape));
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

/// The zoo GPT after mega-training-loss and, with pp·vpp > 1, mega-pipeline-split.
mlir::OwningOpRef<mlir::ModuleOp> forwardHalf(Harness &h, const char *spec, int64_t pp,
                                              int64_t vpp) {
  models::ConfigResult parsed = models::parseModelSpec(spec);
  EXPECT_TRUE(parsed.config) << parsed.error;
  std::string error;
  mlir::OwningOpRef<mlir::ModuleOp> module = models::buildModel(h.context(), *parsed.config, error);
  EXPECT_TRUE(module) << error;
  bool ok = h.runPasses(*module, [&](mlir::PassManager &pm) {
    pm.addPass(passes::createTrainingLoss());
    passes::PipelineSplitOptions split;
    split.stages = pp;
    split.virtualStages = vpp;
    pm.addPass(passes::createPipelineSplit(split));
  });
  EXPECT_TRUE(ok) << h.diagnostics();
  return module;
}

/// The rest of the step: autodiff, the forward/backward split, then CSE (which must keep the
/// recomputed clones).
bool backwardHalf(Harness &h, mlir::ModuleOp module, const std::string &recompute) {
  return h.runPasses(module, [&](mlir::PassManager &pm) {
    pm.addPass(passes::createTrainingAutodiff());
    passes::ForwardBackwardSplitOptions split;
    split.recompute = recompute;
    pm.addPass(passes::createForwardBackwardSplit(split));
    pm.addPass(mlir::createCSEPass());
  });
}

/// Ops computed from parameters and constants only, or from data inputs and constants only:
/// recomputed in every chunk that reads them.
std::set<mlir::Operation *> invariantOps(mlir::func::FuncOp f) {
  enum { param = 1, data = 2, activation = 4 };
  std::map<mlir::Operation *, int> deps;
  std::set<mlir::Operation *> out;
  for (mlir::Operation &op : f.getBody().front().without_terminator()) {
    int d = 0;
    for (mlir::Value v : op.getOperands())
      if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v))
        d |= f.getArgAttr(arg.getArgNumber(), mega::kParamAttr) ? param : data;
      else
        d |= deps[v.getDefiningOp()];
    if ((d & param) && (d & data))
      d |= activation;
    deps[&op] = d;
    if (!(d & activation))
      out.insert(&op);
  }
  return out;
}

std::map<std::string, int> opCounts(mlir::func::FuncOp f) {
  std::set<mlir::Operation *> invariant = invariantOps(f);
  std::map<std::string, int> counts;
  for (mlir::Operation &op : f.getBody().front().without_terminator())
    if (!invariant.count(&op))
      ++counts[op.getName().getStringRef().str()];
  return counts;
}

std::string portName(mlir::func::FuncOp f, unsigned i, bool result) {
  auto name = result ? f.getResultAttrOfType<mlir::StringAttr>(i, mega::kOutputAttr)
                     : f.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr);
  return name ? name.str() : "";
}

class PipelineSplit : public testing::TestWithParam<const char *> {};

TEST_P(PipelineSplit, ChunksPartitionTheForwardAndChainPortToPort) {
  Harness h;
  mlir::OwningOpRef<mlir::ModuleOp> whole = forwardHalf(h, GetParam(), 1, 1);
  ASSERT_TRUE(whole);
  std::map<std::string, int> expected =
      opCounts(whole->lookupSymbol<mlir::func::FuncOp>("forward_backward"));

  for (auto [pp, vpp] : {std::pair<int64_t, int64_t>{2, 1}, {2, 2}, {4, 1}}) {
    SCOPED_TRACE("pp=" + std::to_string(pp) + " vpp=" + std::to_string(vpp));
    mlir::OwningOpRef<mlir::ModuleOp> split = forwardHalf(h, GetParam(), pp, vpp);
    ASSERT_TRUE(split);
    EXPECT_FALSE(split->lookupSymbol("forward"));
    EXPECT_FALSE(split->lookupSymbol("forward_backward"));
    // Chunks by number, each in the module of stage c % pp.
    std::map<int64_t, mlir::func::FuncOp> chunks;
    for (auto stage : split->getOps<mlir::ModuleOp>()) {
      auto s = stage->getAttrOfType<mlir::IntegerAttr>(passes::kStageAttr);
      ASSERT_TRUE(s);
      for (auto f : stage.getOps<mlir::func::FuncOp>()) {
        int64_t c = std::stoll(f.getSymName().drop_front(strlen("forward_backward.c")).str());
        EXPECT_EQ(c % pp, s.getInt()) << f.getSymName().str();
        chunks[c] = f;
      }
    }
    ASSERT_EQ(chunks.size(), static_cast<size_t>(pp * vpp));
    std::map<std::string, int> counts;
    for (auto &[c, f] : chunks)
      for (auto &[name, n] : opCounts(f))
        counts[name] += n;
    EXPECT_EQ(counts, expected) << "every forward op lies in exactly one chunk";
    for (int64_t c = 0; c + 1 < pp * vpp; ++c) {
      mlir::func::FuncOp from = chunks[c], to = chunks[c + 1];
      std::map<std::string, mlir::Type> sent, received;
      for (unsigned i = 0; i < from.getNumResults(); ++i)
        sent[portName(from, i, true)] = from.getResultTypes()[i];
      for (unsigned i = 0; i < to.getNumArguments(); ++i)
        if (llvm::StringRef(portName(to, i, false)).starts_with("act.c"))
          received[portName(to, i, false)] = to.getArgumentTypes()[i];
      EXPECT_FALSE(sent.empty());
      EXPECT_EQ(sent, received) << "chunk " << c << " -> " << c + 1;
      for (auto &[name, type] : sent)
        EXPECT_TRUE(llvm::StringRef(name).starts_with("act.c" + std::to_string(c + 1))) << name;
    }
  }
}

struct StepResult {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;
};

void setData(Executor &ex) {
  std::set<std::string> inputs;
  for (const std::string &name : ex.inputNames())
    inputs.insert(name);
  for (auto [name, values] :
       {std::pair<const char *, const std::vector<int64_t> *>{"input_ids", &kIds},
        {"decoder_input_ids", &kDecoderIds},
        {"attention_mask", &kMask}})
    if (inputs.count(name))
      expectOk(ex.setInput(name, i64Tensor({2, 4}, *values)), name);
  if (inputs.count("labels"))
    expectOk(ex.setInput("labels", i64Tensor({2, 4}, kLabels)), "labels");
  if (inputs.count("loss_normalizer"))
    expectOk(ex.setInput("loss_normalizer", f64Tensor({}, {1.0 / 7})), "loss_normalizer");
  expectOk(ex.zeroState("grad."), "zeroState");
}

/// The unsplit @forward_backward.
StepResult runWhole(Harness &h, mlir::ModuleOp module, const TensorMap &weights) {
  StepResult out;
  Compiled compiled = h.compile(module, weights);
  if (!compiled.executor)
    return out;
  Executor &ex = *compiled.executor;
  setData(ex);
  out.loss = runScalar(ex, "forward_backward", "loss");
  for (const std::string &p : ex.parameterNames())
    out.grads[p] = valuesOf(expectValue(ex.state("grad." + p), "grad." + p));
  return out;
}

/// The chunks in pipeline order (forwards 0..C-1, backwards C-1..0), one executor per stage,
/// activations, their gradients and the stash handed over by name; a parameter's gradient is
/// summed over the stages that hold it (a tied embedding).
StepResult runPipeline(Harness &h, mlir::ModuleOp module, int64_t chunks,
                       const TensorMap &weights) {
  StepResult out;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> copies;
  std::vector<Compiled> stages;
  for (auto stage : module.getOps<mlir::ModuleOp>()) {
    copies.emplace_back(stage.clone());
    stages.push_back(h.compile(*copies.back(), weights));
    if (!stages.back().executor)
      return out;
    setData(*stages.back().executor);
  }
  int64_t pp = stages.size();
  std::map<std::string, HostTensor> ports;
  auto run = [&](int64_t c, const std::string &kind) {
    Executor &ex = *stages[c % pp].executor;
    std::string fn = kind + ".c" + std::to_string(c);
    for (const std::string &name : ex.inputNames(fn))
      if (ports.count(name))
        expectOk(ex.setInput(name, ports[name]), fn + " input " + name);
    expectOk(ex.run(fn), "run " + fn);
    for (const std::string &name : ex.outputNames(fn))
      ports[name] = expectValue(ex.output(name), fn + " output " + name);
  };
  for (int64_t c = 0; c < chunks; ++c)
    run(c, "forward");
  for (int64_t c = chunks - 1; c >= 0; --c)
    run(c, "backward");
  EXPECT_TRUE(ports.count("loss"));
  if (ports.count("loss"))
    out.loss = valuesOf(ports["loss"])[0];
  for (Compiled &stage : stages)
    for (const std::string &p : stage.executor->parameterNames()) {
      std::vector<double> g = valuesOf(expectValue(stage.executor->state("grad." + p), p));
      std::vector<double> &sum = out.grads[p];
      sum.resize(g.size(), 0.0);
      for (size_t i = 0; i < g.size(); ++i)
        sum[i] += g[i];
    }
  return out;
}

void expectSameStep(const StepResult &got, const StepResult &want) {
  EXPECT_NEAR(got.loss, want.loss, 1e-12 * std::fabs(want.loss));
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (auto &[p, g] : want.grads) {
    auto it = got.grads.find(p);
    ASSERT_NE(it, got.grads.end()) << p;
    ASSERT_EQ(it->second.size(), g.size()) << p;
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(it->second[i], g[i], 1e-12 + 1e-10 * std::fabs(g[i])) << p << "[" << i << "]";
  }
}

class ForwardBackwardSplit : public testing::TestWithParam<const char *> {};

TEST_P(ForwardBackwardSplit, EveryLayoutAndPolicyGivesTheUnsplitGradients) {
  Harness h;
  mlir::OwningOpRef<mlir::ModuleOp> reference = forwardHalf(h, GetParam(), 1, 1);
  ASSERT_TRUE(reference);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 0.3);
  TensorMap weights = sampleParameters(
      reference->lookupSymbol<mlir::func::FuncOp>("forward_backward"), [&] { return normal(rng); });
  ASSERT_TRUE(backwardHalf(h, *reference, "none")) << h.diagnostics();
  StepResult want = runWhole(h, *reference, weights);
  ASSERT_FALSE(want.grads.empty());
  double norm = 0;
  for (auto &[p, g] : want.grads)
    for (double x : g)
      norm += x * x;
  ASSERT_GT(norm, 0.0) << "the reference gradients are all zero";

  for (std::string recompute : {"none", "selective", "full"}) {
    for (auto [pp, vpp] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}, {4, 1}}) {
      SCOPED_TRACE(recompute + " pp=" + std::to_string(pp) + " vpp=" + std::to_string(vpp));
      mlir::OwningOpRef<mlir::ModuleOp> module = forwardHalf(h, GetParam(), pp, vpp);
      ASSERT_TRUE(module);
      ASSERT_TRUE(backwardHalf(h, *module, recompute)) << h.diagnostics();
      StepResult got = pp * vpp == 1 ? runWhole(h, *module, weights)
                                     : runPipeline(h, *module, pp * vpp, weights);
      expectSameStep(got, want);
    }
  }
}

// Recompute without chunks: the forward values the backward recomputes die early, so the
// memory planner's arena (persistent buffers plus the peak of live temporaries) shrinks.
TEST(ForwardBackwardSplit, RecomputeInPlaceShrinksTheArena) {
  Harness h;
  std::map<std::string, uint64_t> arena;
  for (std::string recompute : {"none", "selective", "full"}) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        forwardHalf(h, "gpt:layers=2,hidden=16,heads=2,seq=8,vocab=32,batch=2", 1, 1);
    ASSERT_TRUE(module);
    ASSERT_TRUE(backwardHalf(h, *module, recompute)) << h.diagnostics();
    module->lookupSymbol<mlir::func::FuncOp>("forward").erase();
    Compiled compiled = h.compile(*module, {});
    ASSERT_TRUE(compiled.executor);
    arena[recompute] = compiled.executor->arenaBytes();
    std::printf("recompute=%s: arena %llu bytes\n", recompute.c_str(),
                static_cast<unsigned long long>(arena[recompute]));
  }
  EXPECT_LT(arena["selective"], arena["none"]);
  EXPECT_LT(arena["full"], arena["selective"]);
}

INSTANTIATE_TEST_SUITE_P(Zoo, PipelineSplit, testing::Values(kGpt, kBert, kT5));
INSTANTIATE_TEST_SUITE_P(Zoo, ForwardBackwardSplit, testing::Values(kGpt, kBert, kT5));

} // namespace
} // namespace megac::schedule_test
