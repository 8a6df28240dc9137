// Plans with the multi-tensor AdamW (plan opcode AdamWMulti): three steps of a two-tensor
// AdamWMulti equal two per-tensor AdamW instructions bit for bit through the executor, and the
// loader's rules for it (three outputs per four inputs after lr and step, one weight decay per
// tensor, each output written only over its own tensor's p, m or v).
#include "runtime/exec/Executor.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

constexpr double kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8;

AttrsFn multiAttrs(std::vector<double> decays) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateAdamWMultiAttrsDirect(b, kBeta1, kBeta2, kEps, &decays).Union();
  };
}

/// apply_gradients(lr, step) over w1 [3, 1] (decay 0.1) and w2 [2] (no decay), f64, with their
/// gradients and moments as state: one AdamWMulti, or (`multi` false) one AdamW per tensor.
PlanSpec optimizerPlan(bool multi) {
  using O = fb::Opcode;
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  p.name = "optimizer";
  uint32_t w1 = p.param("w1", DType::f64, {3, 1}), w2 = p.param("w2", DType::f64, {2});
  uint32_t g1 = p.stateBuffer("grad.w1", DType::f64, {3, 1});
  uint32_t g2 = p.stateBuffer("grad.w2", DType::f64, {2});
  uint32_t m1 = p.stateBuffer("adam.m.w1", DType::f64, {3, 1});
  uint32_t m2 = p.stateBuffer("adam.m.w2", DType::f64, {2});
  uint32_t v1 = p.stateBuffer("adam.v.w1", DType::f64, {3, 1});
  uint32_t v2 = p.stateBuffer("adam.v.w2", DType::f64, {2});
  p.functions[0].name = "apply_gradients";
  uint32_t lr = p.input("lr", DType::f64, {});
  uint32_t step = p.input("step", DType::i64, {});
  if (multi) {
    p.instN(O::AdamWMulti, {lr, step, w1, g1, m1, v1, w2, g2, m2, v2}, {w1, m1, v1, w2, m2, v2},
            "adamw", fb::Attrs::AdamWMultiAttrs, multiAttrs({0.1, 0.0}));
  } else {
    p.instN(O::AdamW, {w1, g1, m1, v1, lr, step}, {w1, m1, v1}, "adamw w1", fb::Attrs::AdamWAttrs,
            adamwAttrs(kBeta1, kBeta2, kEps, 0.1));
    p.instN(O::AdamW, {w2, g2, m2, v2, lr, step}, {w2, m2, v2}, "adamw w2", fb::Attrs::AdamWAttrs,
            adamwAttrs(kBeta1, kBeta2, kEps, 0.0));
  }
  return spec;
}

void expectRejected(const PlanSpec &plan, const std::vector<std::string> &expected) {
  auto loaded = loadPlanFromBytes(plan.build(), "test.mplan");
  ASSERT_FALSE(loaded.isOk()) << "accepted a plan that should fail with: " << expected[0];
  for (const std::string &piece : expected)
    EXPECT_NE(loaded.status().message().find(piece), std::string::npos)
        << "message: " << loaded.status().message() << "\nmissing: " << piece;
}

} // namespace

TEST(AdamWMultiPlan, TrainsLikeOneAdamWPerTensorBitForBit) {
  TensorMap weights{{"w1", f64({3, 1}, {0.5, -0.25, 1.0})}, {"w2", f64({2}, {2.0, -3.0})}};
  ExecutorOptions options;
  options.weights = &weights;
  std::unique_ptr<Executor> runs[2];
  for (bool multi : {false, true}) {
    auto loaded = loadPlanFromBytes(optimizerPlan(multi).build());
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    auto created = Executor::create(*loaded, options);
    ASSERT_TRUE(created.isOk()) << created.status().message();
    runs[multi] = std::move(*created);
  }
  for (int64_t step = 1; step <= 3; ++step)
    for (auto &ex : runs) {
      ASSERT_TRUE(ex->setState("grad.w1", f64({3, 1}, randomValues<double>(3, 10 + step))).isOk());
      ASSERT_TRUE(ex->setState("grad.w2", f64({2}, randomValues<double>(2, 20 + step))).isOk());
      ASSERT_TRUE(ex->setInput("lr", f64({}, {0.05})).isOk());
      ASSERT_TRUE(ex->setInput("step", i64({}, {step})).isOk());
      Status s = ex->run("apply_gradients");
      ASSERT_TRUE(s.isOk()) << s.message();
    }
  for (const char *name : {"w1", "w2"}) {
    std::vector<double> single = valuesOf<double>(runs[0]->parameter(name).value());
    EXPECT_EQ(valuesOf<double>(runs[1]->parameter(name).value()), single) << name;
    EXPECT_NE(single, valuesOf<double>(weights.at(name))) << name << " did not move";
  }
  for (const char *name : {"adam.m.w1", "adam.v.w1", "adam.m.w2", "adam.v.w2"})
    EXPECT_EQ(valuesOf<double>(runs[1]->state(name).value()),
              valuesOf<double>(runs[0]->state(name).value()))
        << name;
}

TEST(AdamWMultiPlan, LoaderHoldsEachTensorToItsOwnBuffers) {
  // w1's new value written over w2 (same bytes as another tensor's input).
  PlanSpec overOther = optimizerPlan(true);
  overOther.program().functions[0].instructions[0].outputs[0] = 1;
  expectRejected(overOther, {"instruction 0 (AdamWMulti at 'adamw')",
                             "AdamWMulti reads while it writes; a tensor's p, m, v may be written "
                             "only over themselves"});
  // A weight decay short.
  PlanSpec decays = optimizerPlan(true);
  decays.program().functions[0].instructions[0].attrs = multiAttrs({0.1});
  expectRejected(decays, {"has 1 weight decays for 2 tensors; give one per tensor"});
  // A tensor's four inputs cut to three (and its outputs to match the count rule).
  PlanSpec inputs = optimizerPlan(true);
  auto &inst = inputs.program().functions[0].instructions[0];
  inst.inputs.pop_back();
  inst.outputs.resize(3); // 2 + 7 inputs: three outputs per four after lr and step, rounded down
  expectRejected(inputs, {"has 9 inputs; AdamWMulti takes lr, step and four (p, g, m, v) per "
                          "tensor"});
  // Too few outputs for the inputs.
  PlanSpec outputs = optimizerPlan(true);
  outputs.program().functions[0].instructions[0].outputs.pop_back();
  expectRejected(outputs, {"has 5 outputs, expected 6"});
}

// A version-3 reader knew AdamWMulti without its max_norm clip (it would skip the clip): the
// opcode needs format version 4, and a version-3 plan holding it is refused with the fix; a
// version newer than this runtime's is refused before anything is read.
TEST(AdamWMultiPlan, NeedsFormatVersion4) {
  PlanSpec v3 = optimizerPlan(true);
  v3.formatVersion = 3;
  expectRejected(v3, {"instruction 0 (AdamWMulti", "AdamWMulti needs plan format version 4; "
                                                    "recompile the model"});
  PlanSpec v4 = optimizerPlan(true);
  v4.formatVersion = 4;
  auto loaded = loadPlanFromBytes(v4.build(), "test.mplan");
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  PlanSpec v5 = optimizerPlan(true);
  v5.formatVersion = 5;
  expectRejected(v5, {"plan format version 5 is not supported (this runtime reads versions 2 "
                      "to 4); recompile the model"});
}
