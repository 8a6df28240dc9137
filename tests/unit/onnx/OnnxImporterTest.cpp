// The ONNX importer on models built here with libonnx's protobuf classes: bad inputs give
// located errors naming the op, node, opset, input or initializer; weights become parameters
// (a tied one once); shape arithmetic and masks fold away.
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/ConstTensor.h"
#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <variant>

using namespace megac;
using namespace megac::onnx_import;

namespace {

using Dim = std::variant<int64_t, std::string>;

/// A model under construction, at one opset of the default domain.
struct Model {
  onnx::ModelProto proto;

  explicit Model(int64_t opset = 17) {
    proto.set_ir_version(8);
    auto *op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    proto.mutable_graph()->set_name("test_graph");
  }
  onnx::GraphProto &graph() { return *proto.mutable_graph(); }

  static void setType(onnx::ValueInfoProto *v, int elemType, const std::vector<Dim> *dims) {
    auto *tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemType);
    auto *shape = tt->mutable_shape();
    for (const Dim &d : *dims) {
      auto *dim = shape->add_dim();
      if (auto *value = std::get_if<int64_t>(&d))
        dim->set_dim_value(*value);
      else
        dim->set_dim_param(std::get<std::string>(d));
    }
  }
  void input(const std::string &name, int elemType, std::vector<Dim> dims) {
    auto *v = graph().add_input();
    v->set_name(name);
    setType(v, elemType, &dims);
  }
  /// An output of `rank` dims left symbolic: the checker wants a shape, inference fills it.
  void output(const std::string &name, int elemType, int rank) {
    auto *v = graph().add_output();
    v->set_name(name);
    std::vector<Dim> dims;
    for (int i = 0; i < rank; ++i)
      dims.push_back(name + "_" + std::to_string(i));
    setType(v, elemType, &dims);
  }
  onnx::NodeProto *node(const std::string &op, std::vector<std::string> inputs,
                        std::vector<std::string> outputs, const std::string &name = "") {
    auto *n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph().node_size()) : name);
    for (auto &i : inputs)
      n->add_input(i);
    for (auto &o : outputs)
      n->add_output(o);
    return n;
  }
  static void attrInt(onnx::NodeProto *n, const std::string &name, int64_t v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attrInts(onnx::NodeProto *n, const std::string &name, std::vector<int64_t> v) {
    auto *a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v)
      a->add_ints(x);
  }
  onnx::TensorProto *floats(const std::string &name, std::vector<int64_t> dims,
                            std::vector<float> values) {
    auto *t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims)
      t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char *>(values.data()), values.size() * 4));
    return t;
  }
  onnx::TensorProto *ints(const std::string &name, std::vector<int64_t> dims,
                          std::vector<int64_t> values) {
    auto *t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims)
      t->add_dims(d);
    for (int64_t v : values)
      t->add_int64_data(v);
    return t;
  }
  std::string bytes() const { return proto.SerializeAsString(); }
};

/// Imports bytes, collecting diagnostics as "LOCATION: MESSAGE".
struct Import {
  mlir::MLIRContext ctx;
  std::vector<std::string> errors;
  mlir::FailureOr<OnnxImport> result = mlir::failure();

  Import(const std::string &bytes, OnnxImportOptions options = {}) {
    mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
      std::string loc;
      llvm::raw_string_ostream os(loc);
      os << d.getLocation();
      errors.push_back(loc + ": " + d.str());
      return mlir::success();
    });
    result = importOnnxBytes(ctx, bytes, options);
  }
  bool ok() const { return mlir::succeeded(result); }
  std::string firstError() const { return errors.empty() ? "" : errors.front(); }
  mlir::func::FuncOp func() { return *(*result).module->getOps<mlir::func::FuncOp>().begin(); }
  /// How many ops of each name the function has.
  std::map<std::string, int> histogram() {
    std::map<std::string, int> h;
    func().walk([&](mlir::Operation *op) { ++h[op->getName().getStringRef().str()]; });
    return h;
  }
};

#define EXPECT_CONTAINS(haystack, needle)                                                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos)                                 \
      << "'" << (haystack) << "' does not contain '" << (needle) << "'"

TEST(OnnxImporter, TruncatedAndGarbageBytesAreErrors) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {2});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 1);
  std::string bytes = m.bytes();
  Import truncated(bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(truncated.ok());
  EXPECT_CONTAINS(truncated.firstError(), "cannot parse the ONNX model");
  Import garbage(std::string("\xff\xff\xff\xff not onnx at all", 22));
  EXPECT_FALSE(garbage.ok());
  EXPECT_FALSE(garbage.errors.empty());
}

TEST(OnnxImporter, UnsupportedOpNamesOpNodeAndOpset) {
  Model m(14);
  m.input("x", onnx::TensorProto::FLOAT, {3, 3});
  m.node("Relu", {"x"}, {"r"});
  m.node("Det", {"r"}, {"y"}, "my_det");
  m.output("y", onnx::TensorProto::FLOAT, 0);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  ASSERT_EQ(imp.errors.size(), 1u);
  EXPECT_CONTAINS(imp.firstError(), "unsupported ONNX op 'Det' in node 'my_det' (opset 14)");
  // Located at the node, named with its op type.
  EXPECT_CONTAINS(imp.firstError(), "loc(\"my_det\"(\"Det\"))");
}

TEST(OnnxImporter, ShapeInferenceErrorsAreLocatedAtTheNode) {
  Model m;
  m.input("a", onnx::TensorProto::FLOAT, {2, 3});
  m.input("b", onnx::TensorProto::FLOAT, {4, 5});
  m.node("MatMul", {"a", "b"}, {"y"}, "bad_matmul");
  m.output("y", onnx::TensorProto::FLOAT, 2);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "loc(\"bad_matmul\"(\"MatMul\")): ONNX shape inference failed");
}

// Issue 19: an opset newer than the ONNX schemas megac validates with (opset 99) is refused
// naming the supported range; every opset in the range imports (opset 1 Relu included).
TEST(OnnxImporter, Issue19OpsetOutsideTheSupportedRangeIsRefused) {
  for (int64_t opset : {int64_t(99), int64_t(0)}) {
    Model m(opset);
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 1);
    Import imp(m.bytes());
    ASSERT_FALSE(imp.ok()) << "opset " << opset;
    EXPECT_CONTAINS(imp.firstError(), "the model uses ONNX opset " + std::to_string(opset) +
                                          "; megac imports opsets 1 to ");
  }
  for (int64_t opset : {int64_t(1), int64_t(14), int64_t(17)}) {
    Model m(opset);
    m.input("x", onnx::TensorProto::FLOAT, {2});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", onnx::TensorProto::FLOAT, 1);
    Import imp(m.bytes());
    EXPECT_TRUE(imp.ok()) << "opset " << opset << ": " << imp.firstError();
  }
}

TEST(OnnxImporter, NonDefaultDomainIsUnsupported) {
  Model m;
  auto *op = m.proto.add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  m.input("x", onnx::TensorProto::FLOAT, {2});
  m.node("Custom", {"x"}, {"y"}, "custom")->set_domain("com.example");
  m.output("y", onnx::TensorProto::FLOAT, 1);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "com.example.Custom");
}

TEST(OnnxImporter, UnboundSymbolicDimNamesInputAndDim) {
  Model m;
  m.input("input_ids", onnx::TensorProto::INT64, {int64_t(2), std::string("sequence")});
  m.node("Identity", {"input_ids"}, {"y"});
  m.output("y", onnx::TensorProto::INT64, 2);
  Import unbound(m.bytes());
  ASSERT_FALSE(unbound.ok());
  EXPECT_CONTAINS(unbound.firstError(), "graph input 'input_ids' has symbolic dim 1 ('sequence')");
  EXPECT_CONTAINS(unbound.firstError(), "--input-shape input_ids=");

  OnnxImportOptions options;
  options.inputShapes["input_ids"] = {2, 16};
  Import bound(m.bytes(), options);
  ASSERT_TRUE(bound.ok()) << bound.firstError();
  EXPECT_EQ(mlir::cast<mlir::RankedTensorType>(bound.func().getArgument(0).getType()).getShape(),
            llvm::ArrayRef<int64_t>({2, 16}));

  options.inputShapes["input_ids"] = {3, 16};
  Import conflicting(m.bytes(), options);
  ASSERT_FALSE(conflicting.ok());
  EXPECT_CONTAINS(conflicting.firstError(), "gives dim 0 as 3, but the model fixes it to 2");

  OnnxImportOptions wrongName;
  wrongName.inputShapes["ids"] = {2, 16};
  Import unknown(m.bytes(), wrongName);
  ASSERT_FALSE(unknown.ok());
  EXPECT_CONTAINS(unknown.firstError(), "--input-shape names 'ids', which is not a graph input");
}

TEST(OnnxImporter, InitializerSizeMismatchNamesInitializer) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {2, 4});
  auto *w = m.floats("fc.weight", {4, 3}, std::vector<float>(12, 1.0f));
  w->mutable_raw_data()->resize(40); // 10 floats for a [4, 3] tensor
  m.node("MatMul", {"x", "fc.weight"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 2);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  // The checker or the importer may see it first; either names the initializer.
  EXPECT_CONTAINS(imp.firstError(), "fc.weight");
}

TEST(OnnxImporter, TiedWeightIsOneParameter) {
  // wte used by the embedding Gather and, transposed, by the head MatMul.
  Model m;
  m.input("ids", onnx::TensorProto::INT64, {2, 3});
  m.floats("wte", {5, 4}, std::vector<float>(20, 0.5f));
  m.node("Gather", {"wte", "ids"}, {"h"});
  m.attrInts(m.node("Transpose", {"wte"}, {"wte_t"}), "perm", {1, 0});
  m.node("MatMul", {"h", "wte_t"}, {"logits"});
  m.output("logits", onnx::TensorProto::FLOAT, 3);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  mlir::func::FuncOp f = imp.func();
  ASSERT_EQ(f.getNumArguments(), 2u);
  EXPECT_EQ(f.getArgAttrOfType<mlir::StringAttr>(1, mega::kParamAttr).str(), "wte");
  EXPECT_EQ(f.getArgAttrOfType<mlir::StringAttr>(0, mega::kInputAttr).str(), "ids");
  const auto &weights = (*imp.result).weights;
  ASSERT_EQ(weights.size(), 1u);
  const auto &wte = weights.at("wte");
  EXPECT_EQ(wte.dtype, megac::DType::f32);
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{5, 4}));
  ASSERT_EQ(wte.bytes.size(), 80u);
  float first;
  std::memcpy(&first, wte.bytes.data(), 4);
  EXPECT_EQ(first, 0.5f);
  // Both uses read the one argument.
  EXPECT_EQ(std::distance(f.getArgument(1).use_begin(), f.getArgument(1).use_end()), 2);
}

TEST(OnnxImporter, ShapeArithmeticAndMasksFold) {
  // Reshape(x, Concat(Gather(Shape(x), 0), [-1])) and a causal mask from a float buffer:
  // Where(Equal(Trilu(buffer), 0), -inf, x @ x^T). Only run-time ops remain.
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {4, 2, 3});
  m.node("Shape", {"x"}, {"s"});
  m.ints("zero", {}, {0});
  m.node("Gather", {"s", "zero"}, {"b"});
  m.ints("axes", {1}, {0});
  m.node("Unsqueeze", {"b", "axes"}, {"b1"});
  m.ints("minus_one", {1}, {-1});
  auto *concat = m.node("Concat", {"b1", "minus_one"}, {"shape"});
  m.attrInt(concat, "axis", 0);
  m.node("Reshape", {"x", "shape"}, {"flat"}); // [4, 6]
  m.attrInts(m.node("Transpose", {"flat"}, {"flat_t"}), "perm", {1, 0});
  m.node("MatMul", {"flat", "flat_t"}, {"scores"}); // [4, 4]
  m.floats("ones", {4, 4}, std::vector<float>(16, 1.0f));
  m.node("Trilu", {"ones"}, {"tril"})->add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("upper");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  m.floats("fzero", {}, {0.0f});
  m.node("Equal", {"tril", "fzero"}, {"masked"});
  m.floats("ninf", {}, {-std::numeric_limits<float>::infinity()});
  m.node("Where", {"masked", "ninf", "scores"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 2);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.reshape"], 1);
  EXPECT_EQ(h["mega.where"], 1);
  EXPECT_EQ(h["mega.gather"], 0);
  EXPECT_EQ(h["mega.concat"], 0);
  EXPECT_EQ(h["mega.compare"], 0);
  // The float buffer became a boolean mask constant, not a parameter.
  EXPECT_TRUE((*imp.result).weights.empty());
  EXPECT_EQ(imp.func().getNumArguments(), 1u);
}

TEST(OnnxImporter, TableGatheredWithConstantIdsStaysAParameter) {
  // T5's relative position bias: a learned table indexed by constant buckets. The table is a
  // weight (its values reach a run-time op), so the gather is not folded into a constant.
  Model m;
  m.input("scores", onnx::TensorProto::FLOAT, {2, 4, 4});
  m.floats("rel.weight", {8, 2}, std::vector<float>(16, 0.25f));
  m.ints("buckets", {4, 4}, std::vector<int64_t>(16, 3));
  m.node("Gather", {"rel.weight", "buckets"}, {"bias"}); // [4, 4, 2]
  m.attrInts(m.node("Transpose", {"bias"}, {"bias_t"}), "perm", {2, 0, 1});
  m.node("Add", {"scores", "bias_t"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 3);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  EXPECT_EQ((*imp.result).weights.count("rel.weight"), 1u);
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.gather"], 1);
  EXPECT_EQ(h["mega.transpose"], 1);
}

TEST(OnnxImporter, RotaryTablesFoldFromTheirBuffer) {
  // Llama's rotary embedding as transformers exports it: inv_freq (a buffer) times the
  // positions by MatMul, then Cos/Sin. The tables fold to constants and inv_freq is no weight.
  Model m;
  m.input("q", onnx::TensorProto::FLOAT, {1, 4, 4});
  m.floats("inv_freq", {1, 2, 1}, {1.0f, 0.01f});
  m.floats("positions", {1, 1, 4}, {0, 1, 2, 3});
  m.node("MatMul", {"inv_freq", "positions"}, {"freqs"}); // [1, 2, 4]
  m.attrInts(m.node("Transpose", {"freqs"}, {"freqs_t"}), "perm", {0, 2, 1});
  m.attrInt(m.node("Concat", {"freqs_t", "freqs_t"}, {"emb"}), "axis", -1); // [1, 4, 4]
  m.node("Cos", {"emb"}, {"cos"});
  m.node("Sin", {"emb"}, {"sin"});
  m.node("Mul", {"q", "cos"}, {"qc"});
  m.node("Mul", {"q", "sin"}, {"qs"});
  m.node("Add", {"qc", "qs"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 3);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  EXPECT_TRUE((*imp.result).weights.empty());
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.matmul"], 0);
  EXPECT_EQ(h["mega.cos"], 0);
  EXPECT_EQ(h["mega.mul"], 2);
}

TEST(OnnxImporter, SinAndCosOfRunTimeValuesAreRunTimeOps) {
  // Rotary tables computed at run time (the positions are an input): mega.sin and mega.cos.
  Model m;
  m.input("positions", onnx::TensorProto::FLOAT, {1, 1, 4});
  m.floats("inv_freq", {1, 2, 1}, {1.0f, 0.01f});
  m.node("MatMul", {"inv_freq", "positions"}, {"freqs"}); // [1, 2, 4]
  m.node("Cos", {"freqs"}, {"cos"});
  m.node("Sin", {"freqs"}, {"sin"});
  m.node("Add", {"cos", "sin"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 3);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.sin"], 1);
  EXPECT_EQ(h["mega.cos"], 1);
  EXPECT_EQ(h["mega.matmul"], 1);
}

TEST(OnnxImporter, LargeConstantResultsStayRunTimeOps) {
  // Expanding a small constant mask to 2M elements: a broadcast in the IR, not a 2M constant.
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {2, 1, 1024, 1024});
  auto *mask = m.graph().add_initializer();
  mask->set_name("mask");
  mask->set_data_type(onnx::TensorProto::BOOL);
  mask->add_dims(1024);
  mask->add_dims(1);
  for (int i = 0; i < 1024; ++i)
    mask->add_int32_data(i % 2);
  m.ints("to", {4}, {2, 1, 1024, 1024});
  m.floats("zero", {}, {0.0f});
  m.node("Expand", {"mask", "to"}, {"big"});
  m.node("Where", {"big", "x", "zero"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 4);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.broadcast"], 1);
  mlir::DenseElementsAttr largest;
  imp.func().walk([&](mega::ConstantOp c) {
    auto d = mlir::cast<mlir::DenseElementsAttr>(c.getValue());
    if (d.isSplat()) // one value stored, whatever the shape
      return;
    if (!largest || d.getNumElements() > largest.getNumElements())
      largest = d;
  });
  ASSERT_TRUE(largest);
  EXPECT_EQ(largest.getNumElements(), 1024);
}

TEST(OnnxImporter, RuntimeShapeInputIsAnError) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {2, 3});
  m.input("shape", onnx::TensorProto::INT64, {2});
  m.node("Reshape", {"x", "shape"}, {"y"}, "reshape_node");
  m.output("y", onnx::TensorProto::FLOAT, 2);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "Reshape (node 'reshape_node', opset 17)");
  EXPECT_CONTAINS(imp.firstError(), "the 'shape' input ('shape') must be a constant");
}

TEST(OnnxImporter, ConstantOnlyOpOnRuntimeValueIsAnError) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {3});
  m.node("Floor", {"x"}, {"y"}, "floor");
  m.output("y", onnx::TensorProto::FLOAT, 1);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "Floor (node 'floor', opset 17)");
  EXPECT_CONTAINS(imp.firstError(), "supported only on constants");
}

TEST(OnnxImporter, InvalidGraphIsAValidationError) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {3});
  m.node("Relu", {"not_defined"}, {"y"});
  m.output("y", onnx::TensorProto::FLOAT, 1);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "invalid ONNX model");
}

TEST(OnnxImporter, TrainingDropoutIsAnError) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {3});
  m.floats("ratio", {}, {0.1f});
  auto *t = m.graph().add_initializer();
  t->set_name("training");
  t->set_data_type(onnx::TensorProto::BOOL);
  t->add_int32_data(1);
  m.node("Dropout", {"x", "ratio", "training"}, {"y"}, "drop");
  m.output("y", onnx::TensorProto::FLOAT, 1);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "Dropout (node 'drop', opset 17): training-mode Dropout");
}

TEST(OnnxImporter, UnsupportedInputTypeNamesInput) {
  Model m;
  m.input("pixels", onnx::TensorProto::UINT8, {3});
  m.node("Identity", {"pixels"}, {"y"});
  m.output("y", onnx::TensorProto::UINT8, 1);
  Import imp(m.bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.firstError(), "graph input 'pixels' has element type UINT8");
}

TEST(OnnxImporter, GemmBecomesMatmulAndBroadcastAdd) {
  Model m(13);
  m.input("x", onnx::TensorProto::FLOAT, {2, 4});
  m.floats("w", {3, 4}, std::vector<float>(12, 1.0f));
  m.floats("b", {3}, {1.0f, 2.0f, 3.0f});
  m.attrInt(m.node("Gemm", {"x", "w", "b"}, {"y"}), "transB", 1);
  m.output("y", onnx::TensorProto::FLOAT, 2);
  Import imp(m.bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.transpose"], 1);
  EXPECT_EQ(h["mega.matmul"], 1);
  EXPECT_EQ(h["mega.broadcast"], 1);
  EXPECT_EQ(h["mega.add"], 1);
  EXPECT_EQ((*imp.result).weights.size(), 2u);
}

TEST(OnnxImporter, SupportedOpListIsSortedAndCoversTheIssue) {
  auto ops = supportedOnnxOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  for (const char *op : {"Gather",     "MatMul",    "Gemm",      "Add",      "Sub",
                         "Mul",        "Div",       "Pow",       "Sqrt",     "Erf",
                         "Tanh",       "Relu",      "Sigmoid",   "Neg",      "Exp",
                         "ReduceMean", "ReduceSum", "ReduceMax", "Softmax",  "LayerNormalization",
                         "Transpose",  "Reshape",   "Split",     "Slice",    "Concat",
                         "Squeeze",    "Unsqueeze", "Shape",     "Constant", "ConstantOfShape",
                         "Range",      "Where",     "Equal",     "Not",      "Cast",
                         "Expand",     "Trilu",     "Identity",  "Dropout",  "Sin",
                         "Cos"})
    EXPECT_TRUE(std::binary_search(ops.begin(), ops.end(), op)) << op;
  for (const std::string &op : constantOnlyOnnxOps())
    EXPECT_FALSE(std::binary_search(ops.begin(), ops.end(), op)) << op;
}

TEST(ConstTensor, SliceNormalizationFollowsOnnx) {
  SliceDim d;
  EXPECT_TRUE(normalizeSlice(10, -3, INT64_MAX, 1, d).empty());
  EXPECT_EQ(d.start, 7);
  EXPECT_EQ(d.count, 3);
  EXPECT_TRUE(normalizeSlice(10, INT64_MAX, INT64_MIN, -1, d).empty());
  EXPECT_EQ(d.start, 9);
  EXPECT_EQ(d.count, 10);
  EXPECT_TRUE(normalizeSlice(10, 1, 8, 3, d).empty());
  EXPECT_EQ(d.count, 3); // 1, 4, 7
  EXPECT_FALSE(normalizeSlice(10, 0, 5, 0, d).empty());
}

TEST(ConstTensor, HalfAndBf16RoundTrip) {
  EXPECT_EQ(halfToFloat(floatToHalf(1.5f)), 1.5f);
  EXPECT_EQ(halfToFloat(floatToHalf(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(1e6f))));
  EXPECT_EQ(halfToFloat(floatToHalf(5.9604645e-8f)), 5.9604645e-8f); // smallest subnormal
  EXPECT_EQ(bf16ToFloat(floatToBf16(3.0f)), 3.0f);
  EXPECT_EQ(roundToType(ElemType::f32, 0.1), double(0.1f));
}

TEST(ConstTensor, FoldKernelsMatchOnnxSemantics) {
  auto x = ConstTensor::fromInts(ElemType::i64, {2, 3}, {1, 2, 3, 4, 5, 6});
  Folded t = transpose(x, {1, 0});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.tensor.ints, (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  Folded g = gather(x, ConstTensor::fromInts(ElemType::i64, {1}, {-1}), 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.tensor.ints, (std::vector<int64_t>{3, 6}));
  Folded r = reduce(ReduceFn::sum, x, {0}, false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.tensor.ints, (std::vector<int64_t>{5, 7, 9}));
  Folded tri = trilu(ConstTensor::fromInts(ElemType::i64, {2, 2}, {1, 1, 1, 1}), 0, false);
  EXPECT_EQ(tri.tensor.ints, (std::vector<int64_t>{1, 0, 1, 1}));
  Folded mod = binary(BinaryFn::mod, ConstTensor::fromInts(ElemType::i64, {2}, {-7, 7}),
                      ConstTensor::fromInts(ElemType::i64, {}, {3}));
  EXPECT_EQ(mod.tensor.ints, (std::vector<int64_t>{2, 1})); // Python's sign rule
  Folded div = binary(BinaryFn::div, ConstTensor::fromInts(ElemType::i64, {1}, {1}),
                      ConstTensor::fromInts(ElemType::i64, {1}, {0}));
  EXPECT_FALSE(div.ok());
  Folded big = expand(ConstTensor::fromInts(ElemType::i64, {1}, {0}), {1 << 20, 1 << 20});
  EXPECT_FALSE(big.ok());
  // MatMul with a broadcast batch dim: [2, 1, 2] x [2, 3] and a 1-d right operand.
  auto a = ConstTensor::fromFloats(ElemType::f32, {2, 1, 2}, {1, 2, 3, 4});
  auto b = ConstTensor::fromFloats(ElemType::f32, {2, 3}, {1, 0, 1, 0, 1, 1});
  Folded mm = matmul(a, b);
  ASSERT_TRUE(mm.ok()) << mm.error;
  EXPECT_EQ(mm.tensor.shape, (Shape{2, 1, 3}));
  EXPECT_EQ(mm.tensor.floats, (std::vector<double>{1, 2, 3, 3, 4, 7}));
  Folded mv = matmul(a, ConstTensor::fromFloats(ElemType::f32, {2}, {1, -1}));
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ(mv.tensor.shape, (Shape{2, 1}));
  EXPECT_EQ(mv.tensor.floats, (std::vector<double>{-1, -1}));
  EXPECT_FALSE(matmul(a, a).ok()); // contracts 2 with 1
}

} // namespace

namespace {

/// repeat_interleave(x, 2, dim=1) as torch.onnx writes it for a dynamic batch: x split into a
/// sequence of columns, a Loop over them (trip count `trips`, a constant unless `runtimeTrips`)
/// that inserts each column twice into the carried sequence, then ConcatFromSequence.
Model repeatInterleave(bool runtimeTrips) {
  Model m;
  m.input("x", onnx::TensorProto::FLOAT, {2, 3});
  auto *split = m.node("SplitToSequence", {"x"}, {"columns"}, "split");
  Model::attrInt(split, "axis", 1);
  Model::attrInt(split, "keepdims", 1); // [2, 1] each
  if (runtimeTrips)
    m.input("trips", onnx::TensorProto::INT64, {});
  else
    m.ints("trips", {}, {3});
  auto *cond = m.graph().add_initializer();
  cond->set_name("true");
  cond->set_data_type(onnx::TensorProto::BOOL);
  cond->add_int32_data(1);
  auto *empty = m.node("SequenceEmpty", {}, {"empty"}, "empty");
  Model::attrInt(empty, "dtype", onnx::TensorProto::FLOAT);
  auto *loop = m.node("Loop", {"trips", "true", "empty"}, {"pairs"}, "loop");
  auto *attr = loop->add_attribute();
  attr->set_name("body");
  attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto *body = attr->mutable_g();
  body->set_name("body");
  auto typed = [](onnx::ValueInfoProto *v, const std::string &name, int elem, bool sequence) {
    v->set_name(name);
    auto *tt =
        sequence
            ? v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()
            : v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    if (!sequence)
      tt->mutable_shape();
  };
  typed(body->add_input(), "i", onnx::TensorProto::INT64, false);
  typed(body->add_input(), "c", onnx::TensorProto::BOOL, false);
  typed(body->add_input(), "acc", onnx::TensorProto::FLOAT, true);
  typed(body->add_output(), "c_out", onnx::TensorProto::BOOL, false);
  typed(body->add_output(), "acc_out", onnx::TensorProto::FLOAT, true);
  auto bodyNode = [&](const std::string &op, std::vector<std::string> in,
                      std::vector<std::string> out) {
    auto *n = body->add_node();
    n->set_op_type(op);
    n->set_name("body_" + out[0]);
    for (auto &s : in)
      n->add_input(s);
    for (auto &s : out)
      n->add_output(s);
    return n;
  };
  bodyNode("Identity", {"c"}, {"c_out"});
  bodyNode("SequenceAt", {"columns", "i"}, {"col"});
  bodyNode("SequenceInsert", {"acc", "col"}, {"acc1"});
  bodyNode("SequenceInsert", {"acc1", "col"}, {"acc_out"});
  auto *concat = m.node("ConcatFromSequence", {"pairs"}, {"y"}, "concat");
  Model::attrInt(concat, "axis", 1);
  m.output("y", onnx::TensorProto::FLOAT, 2);
  return m;
}

} // namespace

TEST(OnnxImporter, SequenceLoopsUnrollIntoSlicesAndOneConcat) {
  Import imp(repeatInterleave(false).bytes());
  ASSERT_TRUE(imp.ok()) << imp.firstError();
  auto h = imp.histogram();
  EXPECT_EQ(h["mega.slice"], 3); // one per column, each used twice
  EXPECT_EQ(h["mega.concat"], 1);
  auto result = mlir::cast<mlir::RankedTensorType>(imp.func().getResultTypes()[0]);
  EXPECT_EQ(result.getShape(), (llvm::ArrayRef<int64_t>{2, 6}));
  // Column k lands at positions 2k and 2k+1.
  std::string text;
  llvm::raw_string_ostream os(text);
  imp.func().print(os);
  auto concat = *imp.func().getOps<mega::ConcatOp>().begin();
  ASSERT_EQ(concat.getInputs().size(), 6u);
  for (int k = 0; k < 3; ++k) {
    auto a = concat.getInputs()[2 * k].getDefiningOp<mega::SliceOp>();
    ASSERT_TRUE(a) << text;
    EXPECT_EQ(concat.getInputs()[2 * k + 1], concat.getInputs()[2 * k]);
    EXPECT_EQ(a.getStarts()[1], k) << text;
  }
}

TEST(OnnxImporter, LoopWithRunTimeTripCountIsAnError) {
  Import imp(repeatInterleave(true).bytes());
  ASSERT_FALSE(imp.ok());
  EXPECT_CONTAINS(imp.errors.back(), "Loop (node 'loop', opset 17)");
  EXPECT_CONTAINS(imp.errors.back(), "only a Loop with a constant trip count");
}
