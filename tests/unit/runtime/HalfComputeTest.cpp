// bf16/f16 arithmetic in the executor: every opcode the mixed-precision training step uses gives,
// on half buffers, exactly the f32 kernel's result on the widened inputs rounded to the dtype.
#include "runtime/cpu/HalfCompute.h"
#include "runtime/exec/Executor.h"
#include "support/Float16.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

/// One buffer of a single-instruction plan: a float one takes the case's dtype; labels are i64.
struct Operand {
  std::vector<int64_t> shape;
  bool labels = false;
};

struct OpCase {
  const char *name;
  fb::Opcode op;
  std::vector<Operand> inputs;
  std::vector<std::vector<int64_t>> outputs;
  fb::Attrs attrsType = fb::Attrs::NONE;
  AttrsFn attrs = nullptr;
};

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

uint16_t toHalf(DType dtype, float v) {
  return dtype == DType::bf16 ? floatToBf16(v) : floatToHalf(v);
}
float fromHalf(DType dtype, uint16_t v) {
  return dtype == DType::bf16 ? bf16ToFloat(v) : halfToFloat(v);
}

/// Runs the case's instruction on `dtype` buffers with `inputs` (already of that dtype).
std::vector<HostTensor> runCase(const OpCase &c, DType dtype,
                                const std::vector<HostTensor> &inputs) {
  PlanSpec plan;
  ProgramSpec &p = plan.program();
  std::vector<uint32_t> ins, outs;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    ins.push_back(p.input("in" + std::to_string(i), c.inputs[i].labels ? DType::i64 : dtype,
                          c.inputs[i].shape));
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    outs.push_back(p.buffer("out" + std::to_string(i), dtype, c.outputs[i]));
    p.output("out" + std::to_string(i), outs.back());
  }
  p.instN(c.op, ins, outs, c.name, c.attrsType, c.attrs);
  auto loaded = loadPlanFromBytes(plan.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  auto ex = Executor::create(loaded.value(), {});
  EXPECT_TRUE(ex.isOk()) << ex.status().message();
  std::vector<HostTensor> results;
  if (!ex.isOk())
    return results;
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE((*ex)->setInput("in" + std::to_string(i), inputs[i]).isOk());
  Status s = (*ex)->run();
  EXPECT_TRUE(s.isOk()) << c.name << " on " << dtypeName(dtype) << ": " << s.message();
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    auto out = (*ex)->output("out" + std::to_string(i));
    EXPECT_TRUE(out.isOk());
    if (out.isOk())
      results.push_back(*out);
  }
  return results;
}

std::vector<OpCase> cases() {
  using O = fb::Opcode;
  std::vector<int64_t> m{3, 8}, q{1, 4, 2, 8};
  return {
      {"add", O::Add, {{m}, {m}}, {m}},
      {"mul", O::Mul, {{m}, {m}}, {m}},
      {"div", O::Div, {{m}, {m}}, {m}},
      {"exp", O::Exp, {{m}}, {m}},
      {"tanh", O::Tanh, {{m}}, {m}},
      {"sin", O::Sin, {{m}}, {m}},
      {"cos", O::Cos, {{m}}, {m}},
      {"gelu", O::Gelu, {{m}}, {m}, fb::Attrs::GeluAttrs, geluAttrs(false)},
      {"gelu_grad", O::GeluGrad, {{m}, {m}}, {m}, fb::Attrs::GeluAttrs, geluAttrs(true)},
      {"silu", O::Silu, {{m}}, {m}},
      {"rope", O::Rope, {{q}, {{2, 8}}, {{2, 8}}}, {q}},
      {"matmul", O::MatMul, {{{3, 5}}, {{5, 4}}}, {{3, 4}}},
      {"linear", O::Linear, {{m}, {{6, 8}}, {{6}}}, {{3, 6}}},
      {"reduce",
       O::Reduce,
       {{m}},
       {{3}},
       fb::Attrs::ReduceAttrs,
       reduceAttrs(fb::ReduceKind::sum, {1})},
      {"softmax", O::Softmax, {{m}}, {m}, fb::Attrs::AxisAttrs, axisAttrs(1)},
      {"softmax_grad", O::SoftmaxGrad, {{m}, {m}}, {m}, fb::Attrs::AxisAttrs, axisAttrs(1)},
      {"layer_norm", O::LayerNorm, {{m}, {{8}}, {{8}}}, {m}, fb::Attrs::NormAttrs, normAttrs(1e-5)},
      {"layer_norm_grad",
       O::LayerNormGrad,
       {{m}, {m}, {{8}}},
       {m, {8}, {8}},
       fb::Attrs::NormAttrs,
       normAttrs(1e-5)},
      {"attention",
       O::Attention,
       {{q}, {q}, {q}},
       {q},
       fb::Attrs::AttentionAttrs,
       attentionAttrs(true, 0.35)},
      {"attention_grad",
       O::AttentionGrad,
       {{q}, {q}, {q}, {q}},
       {q, q, q},
       fb::Attrs::AttentionAttrs,
       attentionAttrs(true, 0.35)},
      {"cross_entropy",
       O::CrossEntropy,
       {{m}, {{3}, true}},
       {{3}},
       fb::Attrs::CrossEntropyAttrs,
       crossEntropyAttrs(true, -100)},
      {"cross_entropy_grad",
       O::CrossEntropyGrad,
       {{{3}}, {m}, {{3}, true}},
       {m},
       fb::Attrs::CrossEntropyAttrs,
       crossEntropyAttrs(true, -100)},
      {"embedding_grad", O::EmbeddingGrad, {{m}, {{3}, true}}, {{5, 8}}},
  };
}

class HalfCompute : public ::testing::TestWithParam<DType> {};

TEST_P(HalfCompute, EveryOpcodeIsTheF32KernelRounded) {
  DType dtype = GetParam();
  uint32_t seed = 1;
  for (const OpCase &c : cases()) {
    std::vector<HostTensor> half, wide;
    for (const Operand &o : c.inputs) {
      int64_t n = count(o.shape);
      if (o.labels) {
        std::vector<int64_t> labels;
        for (int64_t i = 0; i < n; ++i)
          labels.push_back(i == 1 && c.op != fb::Opcode::EmbeddingGrad ? -100 : (i * 3 + 1) % 5);
        half.push_back(i64(o.shape, labels));
        wide.push_back(half.back());
        continue;
      }
      std::vector<float> values = randomValues(size_t(n), seed++, 0.2, 1.5);
      std::vector<uint16_t> bits;
      std::vector<float> widened;
      for (float v : values) {
        bits.push_back(toHalf(dtype, v));
        widened.push_back(fromHalf(dtype, bits.back()));
      }
      half.push_back(makeTensor(dtype, o.shape, bits));
      wide.push_back(f32(o.shape, widened));
    }
    std::vector<HostTensor> got = runCase(c, dtype, half);
    std::vector<HostTensor> want = runCase(c, DType::f32, wide);
    ASSERT_EQ(got.size(), c.outputs.size()) << c.name;
    ASSERT_EQ(want.size(), c.outputs.size()) << c.name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype, dtype);
      std::vector<uint16_t> bits = valuesOf<uint16_t>(got[i]);
      std::vector<float> reference = valuesOf<float>(want[i]);
      ASSERT_EQ(bits.size(), reference.size()) << c.name;
      for (size_t j = 0; j < bits.size(); ++j)
        EXPECT_EQ(bits[j], toHalf(dtype, reference[j]))
            << c.name << " output " << i << " element " << j << " on " << dtypeName(dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfCompute, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto &info) { return std::string(dtypeName(info.param)); });

TEST(HalfComputeHelper, PassesOtherDtypesThroughAndRoundsOnce) {
  std::vector<int64_t> shape{3};
  std::vector<uint16_t> x = {floatToBf16(1.0f), floatToBf16(2.0f), floatToBf16(3.0f)};
  std::vector<uint16_t> out(3);
  float scale = 1.0f / 3.0f;
  cpu::TensorRef in{DType::bf16, shape, x.data()};
  cpu::TensorRef s{DType::f32, {}, &scale};
  cpu::TensorRef o{DType::bf16, shape, out.data()};
  std::vector<cpu::TensorRef> ins{in, s}, outs{o};
  Status status = cpu::computeInF32(ins, outs, [&](auto wideIn, auto wideOut) {
    EXPECT_EQ(wideIn[0].dtype, DType::f32);
    EXPECT_EQ(wideIn[1].data, &scale); // not converted
    for (int i = 0; i < 3; ++i)
      wideOut[0].template as<float>()[i] = wideIn[0].template as<float>()[i] * scale;
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(out[i], floatToBf16(float(i + 1) * scale));
}

} // namespace
