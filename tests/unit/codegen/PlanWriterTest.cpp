// writePlan on small parsed IR and the zoo GPT: the FlatBuffer's opcodes, attributes, buffers,
// parameters, ports and constants, memory safety of the arena, and the lowering errors.
// (Training modules, with several functions, state and updates: TrainingPlanTest.cpp.)
#include "codegen/PlanWriter.h"

#include "frontends/models/ModelZoo.h"
#include "ir/MegaOps.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

using namespace mlir;
namespace pl = megac::plan;
using megac::codegen::CodegenOptions;
using megac::codegen::writePlan;

namespace {

struct PlanWriterTest : ::testing::Test {
  PlanWriterTest() { ctx.loadDialect<mega::MegaDialect, func::FuncDialect>(); }

  OwningOpRef<ModuleOp> parse(const std::string &ir) {
    auto module = parseSourceString<ModuleOp>(ir, &ctx);
    EXPECT_TRUE(module) << "cannot parse:\n" << ir;
    return module;
  }

  /// The plan's bytes (verified as a FlatBuffer), or empty with the diagnostics collected.
  std::vector<uint8_t> compile(ModuleOp module, const CodegenOptions &options = {}) {
    diagnostics.clear();
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      diagnostics.push_back(d.str());
      return success();
    });
    FailureOr<std::vector<uint8_t>> bytes = writePlan(module, options);
    if (failed(bytes))
      return {};
    flatbuffers::Verifier verifier(bytes->data(), bytes->size());
    EXPECT_TRUE(pl::VerifyPlanBuffer(verifier));
    EXPECT_TRUE(pl::PlanBufferHasIdentifier(bytes->data()));
    return *bytes;
  }

  MLIRContext ctx;
  std::vector<std::string> diagnostics;
};

std::vector<int64_t> vec(const flatbuffers::Vector<int64_t> *v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
}
std::vector<uint32_t> vec(const flatbuffers::Vector<uint32_t> *v) {
  return v ? std::vector<uint32_t>(v->begin(), v->end()) : std::vector<uint32_t>{};
}

const pl::Buffer *bufferOf(const pl::Program *p, uint32_t index) {
  return p->buffers()->Get(index);
}

template <typename T> std::vector<T> constantValues(const pl::Constant *c) {
  std::vector<T> out(c->data()->size() / sizeof(T));
  std::memcpy(out.data(), c->data()->data(), c->data()->size());
  return out;
}

/// The program's only (or i-th) function.
const pl::Function *fnOf(const pl::Program *p, size_t i = 0) {
  EXPECT_LT(i, p->functions()->size());
  return p->functions()->Get(static_cast<flatbuffers::uoffset_t>(i));
}

/// Runs the program's data flow over the arena byte by byte: each buffer's bytes are tagged
/// with the buffer that wrote them (parameters, state and constants when loaded, a function's
/// inputs when it starts, results by their instruction). Every read must find its own tag
/// untouched, or the tag of a buffer at the same offset (the input a reshape aliases, the
/// parameter an update rewrote): otherwise memory planning let something clobber a live value.
/// The functions run in order twice, so persistent buffers must survive every function.
void expectArenaSafe(const pl::Program *p) {
  std::vector<int64_t> tags(p->arena_bytes(), -1);
  auto write = [&](uint32_t index) {
    const pl::Buffer *b = bufferOf(p, index);
    ASSERT_LE(b->offset() + b->bytes(), p->arena_bytes());
    std::fill(tags.begin() + b->offset(), tags.begin() + b->offset() + b->bytes(), index);
  };
  auto check = [&](uint32_t index, const std::string &where) {
    const pl::Buffer *b = bufferOf(p, index);
    if (b->bytes() == 0)
      return;
    int64_t tag = tags[b->offset()];
    for (uint64_t i = b->offset(); i < b->offset() + b->bytes(); ++i)
      if (tags[i] != tag) {
        ADD_FAILURE() << where << ": buffer " << b->name()->str() << " was partly overwritten";
        return;
      }
    bool aliasOk = tag >= 0 && bufferOf(p, tag)->offset() == b->offset();
    EXPECT_TRUE(tag == static_cast<int64_t>(index) || aliasOk)
        << where << ": buffer " << b->name()->str() << " holds "
        << (tag < 0 ? std::string("nothing") : bufferOf(p, tag)->name()->str());
  };
  std::vector<uint32_t> persistent;
  for (const pl::Parameter *param : *p->parameters())
    persistent.push_back(param->buffer());
  if (p->state())
    for (const pl::StateBuffer *st : *p->state())
      persistent.push_back(st->buffer());
  for (const pl::Constant *c : *p->constants())
    persistent.push_back(c->buffer());
  for (uint32_t b : persistent)
    write(b);
  for (int round = 0; round < 2; ++round)
    for (const pl::Function *fn : *p->functions()) {
      std::string name = fn->name()->str();
      for (uint32_t b : persistent)
        check(b, "before function " + name);
      for (const pl::Port *port : *fn->inputs())
        write(port->buffer());
      for (auto [i, inst] : llvm::enumerate(*fn->instructions())) {
        std::string where = name + ", instruction " + std::to_string(i) + " (" +
                            pl::EnumNameOpcode(inst->op()) + ")";
        for (uint32_t in : *inst->inputs())
          check(in, where);
        // No output shares a byte with an input, except in place: exactly the same bytes, for
        // an opcode that may write in place.
        for (uint32_t out : *inst->outputs())
          for (uint32_t in : *inst->inputs()) {
            const pl::Buffer *o = bufferOf(p, out), *b = bufferOf(p, in);
            bool disjoint = o->offset() + o->bytes() <= b->offset() ||
                            b->offset() + b->bytes() <= o->offset() || !o->bytes() || !b->bytes();
            bool inPlace = pl::writesInPlace(inst->op()) && o->offset() == b->offset() &&
                           o->bytes() == b->bytes();
            EXPECT_TRUE(disjoint || inPlace) << where << ": output " << o->name()->str()
                                             << " overlaps input " << b->name()->str();
          }
        for (uint32_t out : *inst->outputs())
          write(out);
      }
      for (const pl::Port *port : *fn->outputs())
        check(port->buffer(), name + ", output " + port->name()->str());
    }
  for (uint32_t b : persistent)
    check(b, "after every function");
}

const char *kAffine = R"mlir(
func.func @affine(%x: tensor<2x3xf32> {mega.input = "x"}) -> (tensor<2x3xf32> {mega.output = "y"}) {
  %two = mega.constant dense<2.0> : tensor<2x3xf32>
  %one = mega.constant dense<1.0> : tensor<2x3xf32>
  %m = mega.mul %x, %two : tensor<2x3xf32> loc("scale"("model.py":3:7))
  %y = mega.add %m, %one : tensor<2x3xf32> loc("model.py":4:1)
  return %y : tensor<2x3xf32>
}
)mlir";

} // namespace

TEST_F(PlanWriterTest, AffineProgram) {
  auto module = parse(kAffine);
  ASSERT_TRUE(module);
  CodegenOptions options;
  options.seed = 7;
  options.weightsFile = "affine.safetensors";
  std::vector<uint8_t> bytes = compile(*module, options);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Plan *plan = pl::GetPlan(bytes.data());
  EXPECT_EQ(plan->format_version(), static_cast<uint32_t>(pl::FormatVersion::Current));
  EXPECT_EQ(plan->producer()->str().rfind("megac ", 0), 0u);
  EXPECT_EQ(plan->seed(), 7u);
  EXPECT_EQ(plan->weights_file()->str(), "affine.safetensors");
  ASSERT_EQ(plan->mesh()->axis_names()->size(), 1u);
  EXPECT_EQ(plan->mesh()->axis_names()->Get(0)->str(), "dp");
  EXPECT_EQ(vec(plan->mesh()->axis_sizes()), (std::vector<int64_t>{1}));
  ASSERT_EQ(plan->ranks()->size(), 1u);
  EXPECT_EQ(plan->ranks()->Get(0)->role(), 0u);
  EXPECT_EQ(vec(plan->ranks()->Get(0)->coords()), (std::vector<int64_t>{0}));
  ASSERT_EQ(plan->programs()->size(), 1u);

  const pl::Program *p = plan->programs()->Get(0);
  EXPECT_EQ(p->name()->str(), "affine");
  ASSERT_EQ(p->buffers()->size(), 5u); // x, 2, 1, m, y
  for (const pl::Buffer *b : *p->buffers()) {
    EXPECT_EQ(b->dtype(), pl::DType::f32);
    EXPECT_EQ(vec(b->shape()), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(b->bytes(), 24u);
    EXPECT_EQ(b->offset() % 64, 0u);
    EXPECT_LE(b->offset() + b->bytes(), p->arena_bytes());
  }
  EXPECT_EQ(bufferOf(p, 0)->name()->str(), "x");
  EXPECT_EQ(p->parameters()->size(), 0u);
  ASSERT_EQ(fnOf(p)->inputs()->size(), 1u);
  EXPECT_EQ(fnOf(p)->inputs()->Get(0)->name()->str(), "x");
  EXPECT_EQ(fnOf(p)->inputs()->Get(0)->buffer(), 0u);
  ASSERT_EQ(fnOf(p)->outputs()->size(), 1u);
  EXPECT_EQ(fnOf(p)->outputs()->Get(0)->name()->str(), "y");
  EXPECT_EQ(fnOf(p)->outputs()->Get(0)->buffer(), 4u);

  ASSERT_EQ(p->constants()->size(), 2u);
  EXPECT_EQ(p->constants()->Get(0)->buffer(), 1u);
  EXPECT_EQ(constantValues<float>(p->constants()->Get(0)), std::vector<float>(6, 2.0f));
  EXPECT_EQ(constantValues<float>(p->constants()->Get(1)), std::vector<float>(6, 1.0f));

  ASSERT_EQ(fnOf(p)->instructions()->size(), 2u);
  const pl::Instruction *mul = fnOf(p)->instructions()->Get(0),
                        *add = fnOf(p)->instructions()->Get(1);
  EXPECT_EQ(mul->op(), pl::Opcode::Mul);
  EXPECT_EQ(vec(mul->inputs()), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(vec(mul->outputs()), (std::vector<uint32_t>{3}));
  EXPECT_EQ(mul->attrs_type(), pl::Attrs::NONE);
  EXPECT_EQ(mul->location()->str(), "scale (model.py:3)");
  EXPECT_EQ(add->op(), pl::Opcode::Add);
  EXPECT_EQ(vec(add->inputs()), (std::vector<uint32_t>{3, 2}));
  EXPECT_EQ(add->location()->str(), "model.py:4");
  // Everything is live at once here: five 64-byte slots.
  EXPECT_EQ(p->arena_bytes(), 5u * 64u);
  expectArenaSafe(p);
}

TEST_F(PlanWriterTest, EveryOpGetsItsOpcodeAndAttributes) {
  auto module = parse(R"mlir(
func.func @ops(%x: tensor<4x5xf32> {mega.input = "x"}, %y: tensor<4x5xf32> {mega.input = "y"},
               %ids: tensor<2x8xi64> {mega.input = "ids"}, %labels: tensor<2x8xi64> {mega.input = "labels"},
               %seed: tensor<i64> {mega.input = "seed"},
               %table: tensor<16x8xf32> {mega.param = "table", mega.init = #mega.init<normal, std = 0.02>},
               %g: tensor<8xf32> {mega.param = "g", mega.init = #mega.init<ones>},
               %b: tensor<8xf32> {mega.param = "b", mega.init = #mega.init<zeros>},
               %w: tensor<16x8xf32> {mega.param = "w"})
    -> (tensor<4x5xf32>, tensor<5x4xf32>, tensor<2x2xf32>, tensor<4x10xf32>, tensor<4x5xf32>,
        tensor<4x5xbf16>, tensor<4x3xf32>, tensor<1x1xf32>, tensor<4x5xf32>, tensor<4x4xf32>,
        tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8x16xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) {
  %u1 = mega.neg %x : tensor<4x5xf32>
  %u2 = mega.abs %u1 : tensor<4x5xf32>
  %u3 = mega.exp %u2 : tensor<4x5xf32>
  %u4 = mega.log %u3 : tensor<4x5xf32>
  %u5 = mega.tanh %u4 : tensor<4x5xf32>
  %u6 = mega.erf %u5 : tensor<4x5xf32>
  %u7 = mega.sigmoid %u6 : tensor<4x5xf32>
  %u8 = mega.relu %u7 : tensor<4x5xf32>
  %u9 = mega.sqrt %u8 : tensor<4x5xf32>
  %u10 = mega.rsqrt %u9 : tensor<4x5xf32>
  %b1 = mega.add %u10, %y : tensor<4x5xf32>
  %b2 = mega.sub %b1, %y : tensor<4x5xf32>
  %b3 = mega.mul %b2, %y : tensor<4x5xf32>
  %b4 = mega.div %b3, %y : tensor<4x5xf32>
  %b5 = mega.pow %b4, %y : tensor<4x5xf32>
  %b6 = mega.min %b5, %y : tensor<4x5xf32>
  %b7 = mega.max %b6, %y : tensor<4x5xf32>
  %c = mega.compare lt %b7, %y : tensor<4x5xf32>
  %n = mega.not %c : tensor<4x5xi1>
  %a = mega.and %c, %n : tensor<4x5xi1>
  %o = mega.or %a, %c : tensor<4x5xi1>
  %wh = mega.where %o, %b7, %y : tensor<4x5xi1>, tensor<4x5xf32>
  %t = mega.transpose %wh [1, 0] : tensor<4x5xf32> -> tensor<5x4xf32>
  %s = mega.slice %x [0, 1] to [4, 5] step [2, 2] : tensor<4x5xf32> -> tensor<2x2xf32>
  %cat = mega.concat %x, %y axis -1 : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x10xf32>
  %row = mega.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>
  %bc = mega.broadcast %row : tensor<5xf32> -> tensor<4x5xf32>
  %cast = mega.cast %x : tensor<4x5xf32> -> tensor<4x5xbf16>
  %gi = mega.constant dense<[0, 2, 4]> : tensor<3xi64>
  %gat = mega.gather %x[%gi] axis -1 : tensor<4x5xf32>, tensor<3xi64> -> tensor<4x3xf32>
  %red = mega.reduce mean %x over [-1, 0] keep_dims : tensor<4x5xf32> -> tensor<1x1xf32>
  %sm = mega.softmax %x axis -1 : tensor<4x5xf32>
  %mm = mega.matmul %x, %t : tensor<4x5xf32>, tensor<5x4xf32> -> tensor<4x4xf32>
  %emb = mega.embedding %table[%ids] : tensor<16x8xf32>, tensor<2x8xi64> -> tensor<2x8x8xf32>
  %ln = mega.layer_norm %emb, %g, %b eps 1.0e-05 : (tensor<2x8x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
  %rms = mega.rms_norm %ln, %g eps 1.0e-06 : (tensor<2x8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
  %lin = mega.linear %rms, %w : (tensor<2x8x8xf32>, tensor<16x8xf32>) -> tensor<2x8x16xf32>
  %gelu = mega.gelu tanh %lin : tensor<2x8x16xf32>
  %ce = mega.cross_entropy %gelu, %labels {ignore_index = -100 : i64} : tensor<2x8x16xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
  %ce2 = mega.cross_entropy %gelu, %labels : tensor<2x8x16xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
  %drop = mega.dropout %gelu, %seed ratio 1.0e-01 stream 3 : tensor<2x8x16xf32>, tensor<i64>
  %qr = mega.reshape %lin : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %att = mega.attention %qr, %qr, %qr causal : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  %att2 = mega.attention %qr, %qr, %qr {scale = 1.0 : f64} : (tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32>
  return %b7, %t, %s, %cat, %bc, %cast, %gat, %red, %sm, %mm, %ce, %ce2, %drop, %att, %att2
    : tensor<4x5xf32>, tensor<5x4xf32>, tensor<2x2xf32>, tensor<4x10xf32>, tensor<4x5xf32>,
      tensor<4x5xbf16>, tensor<4x3xf32>, tensor<1x1xf32>, tensor<4x5xf32>, tensor<4x4xf32>,
      tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8x16xf32>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);

  using O = pl::Opcode;
  std::vector<O> expected = {
      O::Neg,          O::Abs,          O::Exp,       O::Log,       O::Tanh,      O::Erf,
      O::Sigmoid,      O::Relu,         O::Sqrt,      O::Rsqrt,     O::Add,       O::Sub,
      O::Mul,          O::Div,          O::Pow,       O::Min,       O::Max,       O::Compare,
      O::Not,          O::And,          O::Or,        O::Where,     O::Transpose, O::Slice,
      O::Concat,       O::Broadcast,    O::Cast,      O::Gather,    O::Reduce,    O::Softmax,
      O::MatMul,       O::Embedding,    O::LayerNorm, O::RmsNorm,   O::Linear,    O::Gelu,
      O::CrossEntropy, O::CrossEntropy, O::Dropout,   O::Attention, O::Attention};
  ASSERT_EQ(fnOf(p)->instructions()->size(), expected.size());
  std::map<O, std::vector<const pl::Instruction *>> byOp;
  for (auto [i, inst] : llvm::enumerate(*fnOf(p)->instructions())) {
    EXPECT_EQ(inst->op(), expected[i]) << "instruction " << i;
    byOp[inst->op()].push_back(inst);
  }

  const pl::Instruction *compare = byOp[O::Compare][0];
  ASSERT_EQ(compare->attrs_type(), pl::Attrs::CompareAttrs);
  EXPECT_EQ(compare->attrs_as_CompareAttrs()->predicate(), pl::ComparePredicate::lt);
  EXPECT_EQ(bufferOf(p, compare->outputs()->Get(0))->dtype(), pl::DType::i1);
  EXPECT_EQ(bufferOf(p, compare->outputs()->Get(0))->bytes(), 20u); // one byte per i1
  EXPECT_EQ(byOp[O::Where][0]->inputs()->size(), 3u);
  EXPECT_EQ(vec(byOp[O::Transpose][0]->attrs_as_TransposeAttrs()->perm()),
            (std::vector<int64_t>{1, 0}));
  const pl::SliceAttrs *slice = byOp[O::Slice][0]->attrs_as_SliceAttrs();
  ASSERT_TRUE(slice);
  EXPECT_EQ(vec(slice->starts()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(vec(slice->strides()), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(vec(bufferOf(p, byOp[O::Slice][0]->outputs()->Get(0))->shape()),
            (std::vector<int64_t>{2, 2}));
  // Axes come out non-negative.
  EXPECT_EQ(byOp[O::Concat][0]->attrs_as_AxisAttrs()->axis(), 1);
  EXPECT_EQ(byOp[O::Concat][0]->inputs()->size(), 2u);
  EXPECT_EQ(byOp[O::Gather][0]->attrs_as_AxisAttrs()->axis(), 1);
  EXPECT_EQ(byOp[O::Softmax][0]->attrs_as_AxisAttrs()->axis(), 1);
  const pl::ReduceAttrs *reduce = byOp[O::Reduce][0]->attrs_as_ReduceAttrs();
  ASSERT_TRUE(reduce);
  EXPECT_EQ(reduce->kind(), pl::ReduceKind::mean);
  EXPECT_EQ(vec(reduce->axes()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(vec(bufferOf(p, byOp[O::Reduce][0]->outputs()->Get(0))->shape()),
            (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(bufferOf(p, byOp[O::Cast][0]->outputs()->Get(0))->dtype(), pl::DType::bf16);
  EXPECT_EQ(bufferOf(p, byOp[O::Cast][0]->outputs()->Get(0))->bytes(), 40u);
  EXPECT_DOUBLE_EQ(byOp[O::LayerNorm][0]->attrs_as_NormAttrs()->epsilon(), 1e-5);
  EXPECT_EQ(byOp[O::LayerNorm][0]->inputs()->size(), 3u);
  EXPECT_DOUBLE_EQ(byOp[O::RmsNorm][0]->attrs_as_NormAttrs()->epsilon(), 1e-6);
  EXPECT_EQ(byOp[O::Linear][0]->inputs()->size(), 2u); // no bias
  EXPECT_TRUE(byOp[O::Gelu][0]->attrs_as_GeluAttrs()->tanh());
  const pl::CrossEntropyAttrs *ce = byOp[O::CrossEntropy][0]->attrs_as_CrossEntropyAttrs();
  ASSERT_TRUE(ce);
  EXPECT_TRUE(ce->has_ignore_index());
  EXPECT_EQ(ce->ignore_index(), -100);
  ASSERT_TRUE(byOp[O::CrossEntropy][1]->attrs_as_CrossEntropyAttrs());
  EXPECT_FALSE(byOp[O::CrossEntropy][1]->attrs_as_CrossEntropyAttrs()->has_ignore_index());
  const pl::DropoutAttrs *dropout = byOp[O::Dropout][0]->attrs_as_DropoutAttrs();
  ASSERT_TRUE(dropout);
  EXPECT_DOUBLE_EQ(dropout->ratio(), 0.1);
  EXPECT_EQ(dropout->stream(), 3);
  EXPECT_EQ(byOp[O::Dropout][0]->inputs()->size(), 2u);
  // Default scale 1/sqrt(head_dim) = 1/sqrt(4); an explicit scale is kept.
  const pl::AttentionAttrs *causal = byOp[O::Attention][0]->attrs_as_AttentionAttrs();
  ASSERT_TRUE(causal);
  EXPECT_TRUE(causal->causal());
  EXPECT_DOUBLE_EQ(causal->scale(), 0.5);
  const pl::AttentionAttrs *scaled = byOp[O::Attention][1]->attrs_as_AttentionAttrs();
  ASSERT_TRUE(scaled);
  EXPECT_FALSE(scaled->causal());
  EXPECT_DOUBLE_EQ(scaled->scale(), 1.0);
  // Attention reads the reshape's buffer, which shares the linear's bytes.
  const pl::Buffer *linearOut = bufferOf(p, byOp[O::Linear][0]->outputs()->Get(0));
  const pl::Buffer *query = bufferOf(p, byOp[O::Attention][0]->inputs()->Get(0));
  EXPECT_NE(linearOut, query);
  EXPECT_EQ(linearOut->offset(), query->offset());
  EXPECT_EQ(vec(query->shape()), (std::vector<int64_t>{2, 8, 4, 4}));

  // Parameters: global shape, zero shard offset, init spec.
  ASSERT_EQ(p->parameters()->size(), 4u);
  std::map<std::string, const pl::Parameter *> params;
  for (const pl::Parameter *param : *p->parameters())
    params[param->name()->str()] = param;
  EXPECT_EQ(params["table"]->init(), pl::InitKind::normal);
  EXPECT_DOUBLE_EQ(params["table"]->init_std(), 0.02);
  EXPECT_EQ(vec(params["table"]->global_shape()), (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(vec(params["table"]->shard_offset()), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(params["g"]->init(), pl::InitKind::ones);
  EXPECT_EQ(params["b"]->init(), pl::InitKind::zeros);
  EXPECT_EQ(params["w"]->init(), pl::InitKind::none);
  EXPECT_EQ(bufferOf(p, params["w"]->buffer())->name()->str(), "w");

  ASSERT_EQ(fnOf(p)->inputs()->size(), 5u);
  EXPECT_EQ(fnOf(p)->inputs()->Get(4)->name()->str(), "seed");
  EXPECT_EQ(vec(bufferOf(p, fnOf(p)->inputs()->Get(4)->buffer())->shape()), std::vector<int64_t>{});
  EXPECT_EQ(bufferOf(p, fnOf(p)->inputs()->Get(4)->buffer())->bytes(), 8u);
  ASSERT_EQ(fnOf(p)->outputs()->size(), 15u);
  EXPECT_EQ(fnOf(p)->outputs()->Get(14)->name()->str(), "output_14");

  ASSERT_EQ(p->constants()->size(), 2u);
  EXPECT_EQ(constantValues<float>(p->constants()->Get(0)), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(constantValues<int64_t>(p->constants()->Get(1)), (std::vector<int64_t>{0, 2, 4}));
  expectArenaSafe(p);
}

TEST_F(PlanWriterTest, ConstantsAreLittleEndianBytes) {
  auto module = parse(R"mlir(
func.func @c() -> (tensor<3xi1>, tensor<2xi64>, tensor<2x2xbf16>, tensor<2xf64>, tensor<3xi32>, tensor<2xi1>, tensor<f16>) {
  %m = mega.constant dense<[true, false, true]> : tensor<3xi1>
  %i = mega.constant dense<[1, -2]> : tensor<2xi64>
  %h = mega.constant dense<1.5> : tensor<2x2xbf16>
  %d = mega.constant dense<[0.25, -3.0]> : tensor<2xf64>
  %s = mega.constant dense<-7> : tensor<3xi32>
  %t = mega.constant dense<true> : tensor<2xi1>
  %f = mega.constant dense<2.0> : tensor<f16>
  return %m, %i, %h, %d, %s, %t, %f : tensor<3xi1>, tensor<2xi64>, tensor<2x2xbf16>, tensor<2xf64>, tensor<3xi32>, tensor<2xi1>, tensor<f16>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);
  ASSERT_EQ(p->constants()->size(), 7u);
  EXPECT_EQ(constantValues<uint8_t>(p->constants()->Get(0)), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(constantValues<int64_t>(p->constants()->Get(1)), (std::vector<int64_t>{1, -2}));
  // bf16 1.5 = 0x3FC0.
  EXPECT_EQ(constantValues<uint16_t>(p->constants()->Get(2)),
            (std::vector<uint16_t>{0x3FC0, 0x3FC0, 0x3FC0, 0x3FC0}));
  EXPECT_EQ(constantValues<double>(p->constants()->Get(3)), (std::vector<double>{0.25, -3.0}));
  EXPECT_EQ(constantValues<int32_t>(p->constants()->Get(4)), (std::vector<int32_t>{-7, -7, -7}));
  EXPECT_EQ(constantValues<uint8_t>(p->constants()->Get(5)), (std::vector<uint8_t>{1, 1}));
  // f16 2.0 = 0x4000; a 0-d tensor has one element and an empty shape.
  EXPECT_EQ(constantValues<uint16_t>(p->constants()->Get(6)), (std::vector<uint16_t>{0x4000}));
  EXPECT_EQ(vec(bufferOf(p, p->constants()->Get(6)->buffer())->shape()), std::vector<int64_t>{});
  for (const pl::Constant *c : *p->constants())
    EXPECT_EQ(c->data()->size(), bufferOf(p, c->buffer())->bytes());
  EXPECT_EQ(fnOf(p)->instructions()->size(), 0u);
}

TEST_F(PlanWriterTest, ResourceConstantsCopyTheirBlob) {
  // A dense_resource blob: 4 bytes of alignment, then two little-endian i32 (7, -1).
  auto module = parse(R"mlir(
func.func @r() -> tensor<2xi32> {
  %c = mega.constant dense_resource<blob> : tensor<2xi32>
  return %c : tensor<2xi32>
}
{-#
  dialect_resources: { builtin: { blob: "0x0400000007000000FFFFFFFF" } }
#-}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);
  ASSERT_EQ(p->constants()->size(), 1u);
  EXPECT_EQ(constantValues<int32_t>(p->constants()->Get(0)), (std::vector<int32_t>{7, -1}));
}

TEST_F(PlanWriterTest, ResultsMayBeArgumentsConstantsOrReshapes) {
  auto module = parse(R"mlir(
func.func @pass(%x: tensor<2x3xf32>, %w: tensor<6xf32> {mega.param = "w", mega.init = #mega.init<zeros>})
    -> (tensor<2x3xf32> {mega.output = "same"}, tensor<2xi32>, tensor<2x3xf32>, tensor<3x2xf32>) {
  %c = mega.constant dense<[4, 5]> : tensor<2xi32>
  %r = mega.reshape %w : tensor<6xf32> -> tensor<2x3xf32>
  %r2 = mega.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  return %x, %c, %r, %r2 : tensor<2x3xf32>, tensor<2xi32>, tensor<2x3xf32>, tensor<3x2xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);
  EXPECT_EQ(fnOf(p)->instructions()->size(), 0u); // reshapes are aliases, not copies
  ASSERT_EQ(fnOf(p)->inputs()->size(), 1u);
  EXPECT_EQ(fnOf(p)->inputs()->Get(0)->name()->str(), "input_0"); // unmarked argument
  ASSERT_EQ(fnOf(p)->outputs()->size(), 4u);
  EXPECT_EQ(fnOf(p)->outputs()->Get(0)->name()->str(), "same");
  EXPECT_EQ(fnOf(p)->outputs()->Get(0)->buffer(), fnOf(p)->inputs()->Get(0)->buffer());
  EXPECT_EQ(fnOf(p)->outputs()->Get(1)->name()->str(), "output_1");
  EXPECT_EQ(fnOf(p)->outputs()->Get(1)->buffer(), p->constants()->Get(0)->buffer());
  const pl::Buffer *reshaped = bufferOf(p, fnOf(p)->outputs()->Get(2)->buffer());
  EXPECT_EQ(vec(reshaped->shape()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(reshaped->offset(), bufferOf(p, p->parameters()->Get(0)->buffer())->offset());
  EXPECT_EQ(bufferOf(p, fnOf(p)->outputs()->Get(3)->buffer())->offset(),
            bufferOf(p, fnOf(p)->inputs()->Get(0)->buffer())->offset());
  expectArenaSafe(p);
}

TEST_F(PlanWriterTest, UnsupportedOpsAreErrorsOnTheOp) {
  auto module = parse(R"mlir(
func.func @dist(%x: tensor<8xf32>, %g: tensor<8xf32>) -> (tensor<8xf32>, tensor<16xf32>) {
  %s = mega.all_reduce sum %x on #mega.mesh<dp = 2> axes ["dp"] : tensor<8xf32>
  %n = mega.all_gather %g on #mega.mesh<tp = 2> axes ["tp"] dim 0 : tensor<8xf32> -> tensor<16xf32>
  %e = mega.exp %s : tensor<8xf32>
  return %e, %n : tensor<8xf32>, tensor<16xf32>
}
)mlir");
  ASSERT_TRUE(module);
  EXPECT_TRUE(compile(*module).empty());
  EXPECT_EQ(diagnostics,
            (std::vector<std::string>{
                "mesh axis \"dp\" is not an axis of the plan's mesh (the module has no mega.mesh)",
                "mesh axis \"tp\" is not an axis of the plan's mesh (the module has no "
                "mega.mesh)"}));
}

TEST_F(PlanWriterTest, FunctionSelectionAndMesh) {
  const char *twoFuncs = R"mlir(
func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = mega.exp %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @b(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = mega.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
)mlir";
  auto module = parse(twoFuncs);
  ASSERT_TRUE(module);
  // Every function by default: one program, a Function each, ports named after their function.
  std::vector<uint8_t> all = compile(*module);
  ASSERT_FALSE(all.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *both = pl::GetPlan(all.data())->programs()->Get(0);
  EXPECT_EQ(both->name()->str(), "main");
  ASSERT_EQ(both->functions()->size(), 2u);
  EXPECT_EQ(fnOf(both, 0)->name()->str(), "a");
  EXPECT_EQ(fnOf(both, 1)->name()->str(), "b");
  EXPECT_EQ(fnOf(both, 1)->inputs()->Get(0)->name()->str(), "b.input_0");
  EXPECT_EQ(fnOf(both, 1)->outputs()->Get(0)->name()->str(), "b.output_0");
  EXPECT_EQ(fnOf(both, 0)->instructions()->Get(0)->op(), pl::Opcode::Exp);
  // The two functions run one at a time: their buffers share bytes.
  EXPECT_EQ(bufferOf(both, fnOf(both, 0)->inputs()->Get(0)->buffer())->offset(),
            bufferOf(both, fnOf(both, 1)->inputs()->Get(0)->buffer())->offset());
  expectArenaSafe(both);
  CodegenOptions options;
  options.function = "b";
  std::vector<uint8_t> bytes = compile(*module, options);
  ASSERT_FALSE(bytes.empty());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);
  EXPECT_EQ(p->name()->str(), "b");
  ASSERT_EQ(p->functions()->size(), 1u);
  EXPECT_EQ(fnOf(p)->inputs()->Get(0)->name()->str(), "input_0");
  EXPECT_EQ(fnOf(p)->instructions()->Get(0)->op(), pl::Opcode::Neg);
  options.function = "c";
  EXPECT_TRUE(compile(*module, options).empty());
  EXPECT_EQ(diagnostics, (std::vector<std::string>{"no function @c in the module"}));

  auto meshModule = parse(R"mlir(
module attributes {mega.mesh = #mega.mesh<pp = 1, tp = 1>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
)mlir");
  ASSERT_TRUE(meshModule);
  bytes = compile(*meshModule);
  ASSERT_FALSE(bytes.empty());
  const pl::Plan *plan = pl::GetPlan(bytes.data());
  ASSERT_EQ(plan->mesh()->axis_names()->size(), 2u);
  EXPECT_EQ(plan->mesh()->axis_names()->Get(1)->str(), "tp");
  EXPECT_EQ(vec(plan->ranks()->Get(0)->coords()), (std::vector<int64_t>{0, 0}));

  auto bigMesh = parse(R"mlir(
module attributes {mega.mesh = #mega.mesh<dp = 2>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
)mlir");
  ASSERT_TRUE(bigMesh);
  // A partitioned module: every rank of the mesh runs its one program.
  bytes = compile(*bigMesh);
  ASSERT_FALSE(bytes.empty());
  plan = pl::GetPlan(bytes.data());
  ASSERT_EQ(plan->ranks()->size(), 2u);
  EXPECT_EQ(plan->ranks()->Get(1)->role(), 0u);
  EXPECT_EQ(vec(plan->ranks()->Get(1)->coords()), (std::vector<int64_t>{1}));
}

TEST_F(PlanWriterTest, MalformedSignaturesAreErrors) {
  auto module = parse(R"mlir(
func.func @f(%x: tensor<4xf32> {mega.input = "x"}, %y: tensor<4xf32> {mega.input = "x"},
             %z: tensor<4xf32> {mega.init = #mega.init<zeros>})
    -> (tensor<4xf32> {mega.output = "o"}, tensor<4xf32> {mega.output = "o"}) {
  return %x, %y : tensor<4xf32>, tensor<4xf32>
}
)mlir");
  ASSERT_TRUE(module);
  EXPECT_TRUE(compile(*module).empty());
  EXPECT_EQ(diagnostics, (std::vector<std::string>{"two inputs are named 'x'",
                                                   "argument 2 has mega.init but no mega.param "
                                                   "name"}));

  auto sharded = parse(R"mlir(
func.func @f(%x: tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>>) -> tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>> {
  return %x : tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>>
}
)mlir");
  ASSERT_TRUE(sharded);
  EXPECT_TRUE(compile(*sharded).empty());
  ASSERT_EQ(diagnostics.size(), 1u);
  EXPECT_NE(diagnostics[0].find("is laid out over 2 devices"), std::string::npos) << diagnostics[0];
}

TEST_F(PlanWriterTest, ZooGptPlansMemorySafely) {
  auto config = megac::models::parseModelSpec("gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128");
  ASSERT_TRUE(config.config) << config.error;
  std::string error;
  auto module = megac::models::buildModel(ctx, *config.config, error);
  ASSERT_TRUE(module) << error;
  std::vector<uint8_t> bytes = compile(*module);
  ASSERT_FALSE(bytes.empty()) << (diagnostics.empty() ? "" : diagnostics.front());
  const pl::Program *p = pl::GetPlan(bytes.data())->programs()->Get(0);

  std::map<pl::Opcode, int> histogram;
  for (const pl::Instruction *inst : *fnOf(p)->instructions()) {
    ++histogram[inst->op()];
    // The DSL's operators (x + b) carry no call site yet; its named layers do.
    if (inst->op() != pl::Opcode::Add && inst->op() != pl::Opcode::Broadcast) {
      EXPECT_FALSE(inst->location()->str().empty()) << pl::EnumNameOpcode(inst->op());
    }
  }
  // Per layer: 2 layer norms, q/k/v/proj/fc/proj linears, attention, gelu, 2 residual adds;
  // plus embedding, position broadcast + add, final norm and the tied head. Reshapes vanish.
  EXPECT_EQ(histogram[pl::Opcode::Linear], 13);
  EXPECT_EQ(histogram[pl::Opcode::LayerNorm], 5);
  EXPECT_EQ(histogram[pl::Opcode::Attention], 2);
  EXPECT_EQ(histogram[pl::Opcode::Gelu], 2);
  EXPECT_EQ(histogram[pl::Opcode::Add], 5);
  EXPECT_EQ(histogram[pl::Opcode::Embedding], 1);
  EXPECT_EQ(histogram[pl::Opcode::Broadcast], 1);
  EXPECT_EQ(histogram[pl::Opcode::Copy], 0);
  EXPECT_EQ(fnOf(p)->instructions()->size(), 29u);
  EXPECT_EQ(p->parameters()->size(), 36u);
  ASSERT_EQ(fnOf(p)->outputs()->size(), 1u);
  EXPECT_EQ(fnOf(p)->outputs()->Get(0)->name()->str(), "logits");
  EXPECT_EQ(vec(bufferOf(p, fnOf(p)->outputs()->Get(0)->buffer())->shape()),
            (std::vector<int64_t>{1, 32, 128}));
  expectArenaSafe(p);

  // Activations: buffers an instruction writes that are not outputs. Pinned: everything loaded
  // or returned. Reshape aliases are neither (they own no bytes).
  auto aligned = [](uint64_t bytes) { return (bytes + 63) / 64 * 64; };
  std::set<uint32_t> pinned, written;
  for (const pl::Parameter *param : *p->parameters())
    pinned.insert(param->buffer());
  for (const pl::Port *port : *fnOf(p)->inputs())
    pinned.insert(port->buffer());
  for (const pl::Port *port : *fnOf(p)->outputs())
    pinned.insert(port->buffer());
  for (const pl::Instruction *inst : *fnOf(p)->instructions())
    written.insert(inst->outputs()->begin(), inst->outputs()->end());
  uint64_t pinnedBytes = 0, activationBytes = 0;
  for (uint32_t b : pinned)
    pinnedBytes += aligned(bufferOf(p, b)->bytes());
  for (uint32_t b : written)
    if (!pinned.count(b))
      activationBytes += aligned(bufferOf(p, b)->bytes());
  EXPECT_EQ(written.size() + p->parameters()->size() + fnOf(p)->inputs()->size() + 8,
            p->buffers()->size()); // 8 reshapes
  uint64_t activationArena = p->arena_bytes() - pinnedBytes;
  EXPECT_LT(activationArena, activationBytes / 2); // intermediates share space
  std::printf("zoo gpt (2 layers, hidden 64): arena %llu bytes = %llu pinned + %llu for "
              "activations that total %llu bytes without reuse\n",
              (unsigned long long)p->arena_bytes(), (unsigned long long)pinnedBytes,
              (unsigned long long)activationArena, (unsigned long long)activationBytes);
}
