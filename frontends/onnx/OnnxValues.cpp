// The values of an ONNX import: NodeContext (one node's inputs, attributes and outputs, and the
// mega IR helpers the op converters build with), element types, and constants materialized as
// mega.constant (NodeContext::materialize, GraphImporter::constantOf/materializeValue).
#include "frontends/onnx/OnnxGraph.h"

#include "ir/MegaOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace megac::onnx_import {

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

NodeContext::NodeContext(GraphImporter &g, const onnx::NodeProto &node, int64_t index,
                         int64_t opset)
    : g_(g), node_(node), opset_(opset), loc_(nodeLocation(g.ctx, node, index)) {}

OpBuilder &NodeContext::builder() { return g_.builder; }
MLIRContext *NodeContext::context() { return &g_.ctx; }

LogicalResult NodeContext::fail(const Twine &message) {
  failed_ = true;
  std::string name = node_.name().empty() ? "<unnamed>" : node_.name();
  emitError(loc_) << opType() << " (node '" << name << "', opset " << opset_ << "): " << message;
  return failure();
}

bool NodeContext::hasInput(int i) const {
  return i >= 0 && i < node_.input_size() && !node_.input(i).empty();
}

ValueInfo &NodeContext::input(int i) { return g_.values.at(node_.input(i)); }

const ConstTensor *NodeContext::constant(int i) {
  if (!hasInput(i))
    return nullptr;
  ValueInfo &info = input(i);
  if (!info.isConstant())
    return nullptr;
  const ConstTensor *c = g_.constantOf(info, loc_, node_.input(i));
  if (!c)
    failed_ = true;
  return c;
}

FailureOr<Value> NodeContext::value(int i) {
  if (!hasInput(i))
    return fail("input " + Twine(i) + " is missing");
  if (input(i).sequence)
    return fail("input " + Twine(i) + " ('" + node_.input(i) + "') is a sequence, not a tensor");
  auto v = g_.materializeValue(input(i), loc_, node_.input(i));
  if (mlir::failed(v))
    failed_ = true;
  return v;
}

FailureOr<Value> NodeContext::valueAs(int i, const Shape &shape) {
  if (!hasInput(i))
    return fail("input " + Twine(i) + " is missing");
  ValueInfo &info = input(i);
  if (info.isConstant() && isMegaElemType(info.type) && info.shape != shape) {
    const ConstTensor *c = constant(i);
    if (!c)
      return failure();
    if (c->isSplat())
      return splat(c->getDouble(0), c->type, shape);
  }
  auto v = value(i);
  if (mlir::failed(v))
    return failure();
  return broadcast(*v, shape);
}

FailureOr<const ConstTensor *> NodeContext::constantInput(int i, const char *what) {
  if (!hasInput(i))
    return fail(Twine("the '") + what + "' input is missing");
  const ConstTensor *c = constant(i);
  if (failed_)
    return failure();
  if (!c)
    return fail(Twine("the '") + what + "' input ('" + node_.input(i) +
                "') must be a constant; it is computed at run time");
  return c;
}

FailureOr<std::vector<int64_t>> NodeContext::intsInput(int i, const char *what) {
  auto tensor = constantInput(i, what);
  if (mlir::failed(tensor))
    return failure();
  const ConstTensor *c = *tensor;
  if (c->isFloat() || c->type == ElemType::boolean)
    return fail(Twine("the '") + what + "' input must be an integer tensor, not " +
                elemTypeName(int(c->type)));
  return c->ints;
}

FailureOr<double> NodeContext::scalarInput(int i, const char *what) {
  auto tensor = constantInput(i, what);
  if (mlir::failed(tensor))
    return failure();
  const ConstTensor *c = *tensor;
  if (c->numElements() != 1)
    return fail(Twine("the '") + what + "' input must have one element, it has shape " +
                shapeStr(c->shape));
  return c->getDouble(0);
}

const onnx::AttributeProto *NodeContext::attr(const std::string &name) const {
  for (const auto &a : node_.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::attrInt(const std::string &name, int64_t fallback) const {
  const auto *a = attr(name);
  return a && a->type() == onnx::AttributeProto::INT ? a->i() : fallback;
}

double NodeContext::attrFloat(const std::string &name, double fallback) const {
  const auto *a = attr(name);
  return a && a->type() == onnx::AttributeProto::FLOAT ? double(a->f()) : fallback;
}

std::optional<std::vector<int64_t>> NodeContext::attrInts(const std::string &name) const {
  const auto *a = attr(name);
  if (!a || a->type() != onnx::AttributeProto::INTS)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string NodeContext::attrString(const std::string &name, const std::string &fallback) const {
  const auto *a = attr(name);
  return a && a->type() == onnx::AttributeProto::STRING ? a->s() : fallback;
}

bool NodeContext::hasOutput(int i) const {
  return i >= 0 && i < node_.output_size() && !node_.output(i).empty();
}

void NodeContext::setOutput(int i, Value v) {
  if (!hasOutput(i))
    return;
  ValueInfo info;
  auto type = mlir::cast<RankedTensorType>(v.getType());
  info.value = v;
  info.shape.assign(type.getShape().begin(), type.getShape().end());
  info.type = elemTypeOf(type);
  g_.values[node_.output(i)] = std::move(info);
}

void NodeContext::setOutputInfo(int i, ValueInfo info) {
  if (hasOutput(i))
    g_.values[node_.output(i)] = std::move(info);
}

FailureOr<const std::vector<ValueInfo> *> NodeContext::sequence(int i) {
  if (!hasInput(i))
    return fail("input " + Twine(i) + " is missing");
  if (!input(i).sequence)
    return fail("input " + Twine(i) + " ('" + node_.input(i) + "') is a tensor, not a sequence");
  return input(i).sequence.get();
}

void NodeContext::setOutput(int i, ConstTensor t) {
  if (!hasOutput(i))
    return;
  ValueInfo info;
  info.type = t.type;
  info.shape = t.shape;
  info.constant = std::make_shared<const ConstTensor>(std::move(t));
  g_.values[node_.output(i)] = std::move(info);
}

Type elementTypeOf(MLIRContext &ctx, ElemType t) {
  Builder b(&ctx);
  switch (t) {
  case ElemType::f32:
    return b.getF32Type();
  case ElemType::f64:
    return b.getF64Type();
  case ElemType::f16:
    return b.getF16Type();
  case ElemType::bf16:
    return b.getBF16Type();
  case ElemType::i64:
    return b.getI64Type();
  case ElemType::i32:
    return b.getI32Type();
  case ElemType::boolean:
    return b.getI1Type();
  default:
    return {};
  }
}

ElemType elemTypeOf(Type tensorType) {
  Type e = mlir::cast<RankedTensorType>(tensorType).getElementType();
  if (e.isF32())
    return ElemType::f32;
  if (e.isF64())
    return ElemType::f64;
  if (e.isF16())
    return ElemType::f16;
  if (e.isBF16())
    return ElemType::bf16;
  if (e.isInteger(64))
    return ElemType::i64;
  if (e.isInteger(32))
    return ElemType::i32;
  if (e.isInteger(1))
    return ElemType::boolean;
  return ElemType::undefined;
}

Type NodeContext::elementType(ElemType t) { return elementTypeOf(*context(), t); }

RankedTensorType NodeContext::tensorType(const Shape &shape, ElemType t) {
  return RankedTensorType::get(shape, elementType(t));
}

namespace {

/// A dense attribute for `t` (whose type the mega IR has), compact when it is a splat.
DenseElementsAttr denseAttr(RankedTensorType type, const ConstTensor &t) {
  Type e = type.getElementType();
  bool splat = t.isSplat();
  size_t n = splat ? 1 : size_t(t.numElements());
  auto apfloats = [&](const llvm::fltSemantics &sem) {
    SmallVector<APFloat> values;
    for (size_t i = 0; i < n; ++i) {
      APFloat f(t.floats[i]);
      bool lost = false;
      f.convert(sem, APFloat::rmNearestTiesToEven, &lost);
      values.push_back(f);
    }
    return DenseElementsAttr::get(type, values);
  };
  if (e.isF32()) {
    std::vector<float> values(t.floats.begin(), t.floats.begin() + n);
    return DenseElementsAttr::get(type, ArrayRef<float>(values));
  }
  if (e.isF64())
    return DenseElementsAttr::get(type, ArrayRef<double>(t.floats.data(), n));
  if (e.isF16())
    return apfloats(APFloat::IEEEhalf());
  if (e.isBF16())
    return apfloats(APFloat::BFloat());
  if (e.isInteger(64))
    return DenseElementsAttr::get(type, ArrayRef<int64_t>(t.ints.data(), n));
  if (e.isInteger(32)) {
    std::vector<int32_t> values(t.ints.begin(), t.ints.begin() + n);
    return DenseElementsAttr::get(type, ArrayRef<int32_t>(values));
  }
  SmallVector<bool> values;
  for (size_t i = 0; i < n; ++i)
    values.push_back(t.ints[i] != 0);
  return DenseElementsAttr::get(type, values);
}

} // namespace

Value NodeContext::materialize(const ConstTensor &t) {
  RankedTensorType type = tensorType(t.shape, t.type);
  if (t.numElements() == 0) {
    // An empty tensor: any element list of length 0.
    ConstTensor empty = t;
    return mega::ConstantOp::create(builder(), loc_, type, denseAttr(type, empty));
  }
  return mega::ConstantOp::create(builder(), loc_, type, denseAttr(type, t));
}

Value NodeContext::splat(double v, ElemType t, const Shape &shape) {
  ConstTensor c;
  c.type = t;
  c.shape = shape;
  if (isFloatType(t))
    c.floats = {roundToType(t, v)};
  else
    c.ints = {int64_t(v)};
  RankedTensorType type = tensorType(shape, t);
  return mega::ConstantOp::create(builder(), loc_, type, denseAttr(type, c));
}

Value NodeContext::broadcast(Value v, const Shape &shape) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  if (type.getShape() == ArrayRef<int64_t>(shape))
    return v;
  return mega::BroadcastOp::create(builder(), loc_,
                                   RankedTensorType::get(shape, type.getElementType()), v);
}

Value NodeContext::reshape(Value v, const Shape &shape) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  if (type.getShape() == ArrayRef<int64_t>(shape))
    return v;
  return mega::ReshapeOp::create(builder(), loc_,
                                 RankedTensorType::get(shape, type.getElementType()), v);
}

Value NodeContext::transpose(Value v, const std::vector<int64_t> &perm) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  Shape shape;
  for (int64_t p : perm)
    shape.push_back(type.getShape()[p]);
  return mega::TransposeOp::create(builder(), loc_,
                                   RankedTensorType::get(shape, type.getElementType()), v,
                                   builder().getDenseI64ArrayAttr(perm));
}

Value NodeContext::cast(Value v, ElemType to) {
  auto type = mlir::cast<RankedTensorType>(v.getType());
  Type e = elementType(to);
  if (type.getElementType() == e)
    return v;
  return mega::CastOp::create(builder(), loc_, RankedTensorType::get(type.getShape(), e), v);
}

FailureOr<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank, const char *what) {
  if (axis < -rank || axis >= rank)
    return fail(Twine(what) + " " + Twine(axis) + " is out of range for rank " + Twine(rank));
  return axis < 0 ? axis + rank : axis;
}

//===----------------------------------------------------------------------===//
// GraphImporter's constants
//===----------------------------------------------------------------------===//

const ConstTensor *GraphImporter::constantOf(ValueInfo &info, Location loc,
                                             const std::string &name) {
  if (info.constant)
    return info.constant.get();
  if (!info.initializer)
    return nullptr;
  auto decoded = decodeTensor(*info.initializer, NameLoc::get(StringAttr::get(&ctx, name)),
                              "initializer '" + name + "'");
  if (mlir::failed(decoded))
    return nullptr;
  info.constant = std::make_shared<const ConstTensor>(std::move(*decoded));
  info.initializer = nullptr;
  return info.constant.get();
}

FailureOr<Value> GraphImporter::materializeValue(ValueInfo &info, Location loc,
                                                 const std::string &name) {
  if (info.value)
    return info.value;
  if (!isMegaElemType(info.type))
    return emitError(loc) << "value '" << name << "' has element type "
                          << elemTypeName(int(info.type))
                          << ", which mega IR has no run-time tensors of (it has FLOAT, DOUBLE, "
                             "FLOAT16, BFLOAT16, INT64, INT32, BOOL)";
  const ConstTensor *c = constantOf(info, loc, name);
  if (!c)
    return failure();
  // Constants go to the top of the function so a later node's use is always dominated.
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(&func_.getBody().front());
  RankedTensorType type = RankedTensorType::get(c->shape, elementTypeOf(ctx, c->type));
  info.value = mega::ConstantOp::create(builder, loc, type, denseAttr(type, *c));
  return info.value;
}

} // namespace megac::onnx_import
