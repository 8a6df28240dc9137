// Verifiers, result-shape inference and costs of the mega ops.
#include "ir/MegaOps.h"
#include "ir/MegaVerify.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace mega;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

/// True when every value is a ranked tensor: inference may run on unverified operands while
/// parsing, and must fail (not crash) on anything else.
bool allRanked(ValueRange values) {
  return llvm::all_of(values, [](Value v) { return v && isa<RankedTensorType>(v.getType()); });
}

LogicalResult notRanked(std::optional<Location> loc) {
  return emitOptionalError(loc, "operands must be ranked tensors");
}

LogicalResult pushInferred(std::optional<Location> loc, const shape::Result &r, Type element,
                           SmallVectorImpl<Type> &out) {
  if (!r.ok())
    return emitOptionalError(loc, r.error);
  out.push_back(RankedTensorType::get(r.shape, element));
  return success();
}

std::optional<shape::Shape> optionalShape(Value v) {
  if (!v)
    return std::nullopt;
  auto d = dimsOf(v);
  return shape::Shape(d.begin(), d.end());
}

Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

/// Why `axes` does not name distinct axes of `mesh`, or empty.
std::string meshAxesError(MeshAttr mesh, ArrayAttr axes) {
  if (axes.empty())
    return "a collective needs at least one mesh axis";
  llvm::SmallSet<StringRef, 4> seen;
  for (Attribute a : axes) {
    StringRef name = cast<StringAttr>(a).getValue();
    if (!mesh.findAxis(name))
      return "mesh axis '" + name.str() + "' is not in the mesh";
    if (!seen.insert(name).second)
      return "mesh axis '" + name.str() + "' is listed twice";
  }
  return {};
}

LogicalResult verifyMeshAxes(std::optional<Location> loc, MeshAttr mesh, ArrayAttr axes) {
  std::string why = meshAxesError(mesh, axes);
  return why.empty() ? success() : emitOptionalError(loc, why);
}

/// A collective's input dims, once the input is ranked and the mesh axes are valid.
FailureOr<shape::Dims> collectiveInput(std::optional<Location> loc, Value input, MeshAttr mesh,
                                       ArrayAttr axes) {
  if (!allRanked({input}))
    return notRanked(loc);
  if (failed(verifyMeshAxes(loc, mesh, axes)))
    return failure();
  return dimsOf(input);
}

SmallVector<StringAttr> axisNames(ArrayAttr axes) {
  SmallVector<StringAttr> names;
  for (Attribute a : axes)
    names.push_back(cast<StringAttr>(a));
  return names;
}

int64_t elems(Value v) { return cost::numElements(v.getType()); }

} // namespace

bool mega::sameShapesAndElementTypes(TypeRange lhs, TypeRange rhs) {
  if (lhs.size() != rhs.size())
    return false;
  for (auto [l, r] : llvm::zip(lhs, rhs)) {
    auto lt = dyn_cast<RankedTensorType>(l), rt = dyn_cast<RankedTensorType>(r);
    if (!lt || !rt) {
      if (l != r)
        return false;
      continue;
    }
    if (lt.getShape() != rt.getShape() || lt.getElementType() != rt.getElementType())
      return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Low level
//===----------------------------------------------------------------------===//

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &out) {
  auto value = adaptor.getValue();
  if (!value)
    return emitOptionalError(loc, "constant needs a value");
  out.push_back(value.getType());
  return success();
}
OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }
int64_t ConstantOp::getFlops() { return 0; }

LogicalResult CompareOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getLhs()}))
    return notRanked(loc);
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  out.push_back(RankedTensorType::get(lhs.getShape(), IntegerType::get(ctx, 1), lhs.getEncoding()));
  return success();
}

LogicalResult WhereOp::verify() {
  auto cond = getCond().getType(), value = getTrueValue().getType();
  if (cond.getShape() != value.getShape())
    return emitOpError() << "condition shape " << shape::str(span(cond.getShape()))
                         << " differs from the value shape " << shape::str(span(value.getShape()))
                         << "; broadcast it first";
  return success();
}

/// An operand's dims as the product reads them: the last two swapped when `transposed`.
static SmallVector<int64_t> gemmDims(Value v, bool transposed) {
  SmallVector<int64_t> d(cast<RankedTensorType>(v.getType()).getShape());
  if (transposed && d.size() >= 2)
    std::swap(d[d.size() - 1], d[d.size() - 2]);
  return d;
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getLhs(), adaptor.getRhs()}))
    return notRanked(loc);
  Type element = elementOf(adaptor.getLhs());
  if (element != elementOf(adaptor.getRhs()))
    return emitOptionalError(loc, "matmul operands have different element types");
  // The GEMM accumulates in its operands' type or, mixed precision (Megatron's gradient-
  // accumulation fusion), reads bf16/f16 operands into an f32 accumulator: the result has the
  // accumulator's type.
  if (Value acc = adaptor.getAccumulate(); acc && isa<RankedTensorType>(acc.getType())) {
    Type accElement = elementOf(acc);
    if (accElement != element && !(isa<BFloat16Type, Float16Type>(element) && accElement.isF32()))
      return emitOptionalError(loc, "matmul accumulates ", element, " operands into a ", accElement,
                               " accumulator; a GEMM accumulates in its operands' type, or "
                               "bf16/f16 operands into f32 (cast the product first)");
    element = accElement;
  }
  SmallVector<int64_t> lhs = gemmDims(adaptor.getLhs(), adaptor.getTransposeLhs());
  SmallVector<int64_t> rhs = gemmDims(adaptor.getRhs(), adaptor.getTransposeRhs());
  return pushInferred(loc, shape::matmul(span(lhs), span(rhs)), element, out);
}

LogicalResult MatmulOp::verify() {
  Value acc = getAccumulate();
  if (!acc)
    return success();
  auto accType = cast<RankedTensorType>(acc.getType());
  auto type = getType();
  if (accType.getShape() != type.getShape() || accType.getElementType() != type.getElementType())
    return emitOpError() << "accumulator " << accType << " must have the result's type " << type
                         << " (the GEMM writes its sum over the accumulator)";
  return success();
}

int64_t MatmulOp::getMatmulFlops() {
  int64_t k = gemmDims(getLhs(), getTransposeLhs()).back();
  // The accumulation is one more add per result element.
  return 2 * elems(getResult()) * k + (getAccumulate() ? elems(getResult()) : 0);
}
int64_t MatmulOp::getFlops() { return getMatmulFlops(); }

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getData(), adaptor.getIndices()}))
    return notRanked(loc);
  return pushInferred(loc,
                      shape::gather(dimsOf(adaptor.getData()), dimsOf(adaptor.getIndices()),
                                    static_cast<int64_t>(adaptor.getAxis())),
                      elementOf(adaptor.getData()), out);
}
int64_t GatherOp::getFlops() { return 0; }

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getInput()}))
    return notRanked(loc);
  return pushInferred(
      loc,
      shape::reduce(dimsOf(adaptor.getInput()), span(adaptor.getAxes()), adaptor.getKeepDims()),
      elementOf(adaptor.getInput()), out);
}
int64_t ReduceOp::getFlops() { return elems(getInput()); }

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, static_cast<int64_t>(getAxis()), getType().getRank());
}
// max, subtract, exp, sum, divide.
int64_t SoftmaxOp::getFlops() { return 5 * elems(getResult()); }

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "cannot change the element type; use mega.cast";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << shape::str(span(in.getShape())) << " ("
                         << in.getNumElements() << " elements) to "
                         << shape::str(span(out.getShape())) << " (" << out.getNumElements()
                         << " elements)";
  return success();
}
int64_t ReshapeOp::getFlops() { return 0; }

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getInput()}))
    return notRanked(loc);
  return pushInferred(loc, shape::transpose(dimsOf(adaptor.getInput()), span(adaptor.getPerm())),
                      elementOf(adaptor.getInput()), out);
}
int64_t TransposeOp::getFlops() { return 0; }

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getInput()}))
    return notRanked(loc);
  return pushInferred(loc,
                      shape::slice(dimsOf(adaptor.getInput()), span(adaptor.getStarts()),
                                   span(adaptor.getLimits()), span(adaptor.getStrides())),
                      elementOf(adaptor.getInput()), out);
}
int64_t SliceOp::getFlops() { return 0; }

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "concat needs at least one input");
  if (!allRanked(adaptor.getInputs()))
    return notRanked(loc);
  std::vector<shape::Shape> shapes;
  for (Value v : adaptor.getInputs()) {
    auto d = dimsOf(v);
    shapes.emplace_back(d.begin(), d.end());
  }
  return pushInferred(loc, shape::concat(shapes, static_cast<int64_t>(adaptor.getAxis())),
                      elementOf(adaptor.getInputs().front()), out);
}
int64_t ConcatOp::getFlops() { return 0; }

LogicalResult BroadcastOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "cannot change the element type; use mega.cast";
  std::string why = shape::checkBroadcastsTo(span(in.getShape()), span(out.getShape()));
  if (!why.empty())
    return emitOpError() << why;
  return success();
}
int64_t BroadcastOp::getFlops() { return 0; }

LogicalResult CastOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getShape() != out.getShape())
    return emitOpError() << "cannot change the shape (" << shape::str(span(in.getShape())) << " to "
                         << shape::str(span(out.getShape())) << "); use mega.reshape";
  return success();
}

//===----------------------------------------------------------------------===//
// Coarse ops
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getInput(), adaptor.getWeight()}) ||
      (adaptor.getBias() && !allRanked({adaptor.getBias()})))
    return notRanked(loc);
  Type element = elementOf(adaptor.getInput());
  if (elementOf(adaptor.getWeight()) != element ||
      (adaptor.getBias() && elementOf(adaptor.getBias()) != element))
    return emitOptionalError(loc, "linear input, weight and bias must share one element type; "
                                  "cast first (mixed precision inserts mega.cast)");
  return pushInferred(loc,
                      shape::linear(dimsOf(adaptor.getInput()), dimsOf(adaptor.getWeight()),
                                    optionalShape(adaptor.getBias())),
                      elementOf(adaptor.getInput()), out);
}
int64_t LinearOp::getMatmulFlops() {
  return 2 * elems(getResult()) * getWeight().getType().getShape()[1];
}
int64_t LinearOp::getFlops() { return getMatmulFlops() + (getBias() ? elems(getResult()) : 0); }

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getTable(), adaptor.getIds()}))
    return notRanked(loc);
  return pushInferred(loc, shape::embedding(dimsOf(adaptor.getTable()), dimsOf(adaptor.getIds())),
                      elementOf(adaptor.getTable()), out);
}
int64_t EmbeddingOp::getFlops() { return 0; }

LogicalResult LayerNormOp::verify() {
  return verifyNormParams(*this, "layer_norm", dimsOf(getInput()), dimsOf(getWeight()),
                          optionalShape(getBias()), getEpsilon());
}
// mean, subtract, square, variance, rsqrt-scale, weight, bias.
int64_t LayerNormOp::getFlops() { return 8 * elems(getResult()); }

LogicalResult RmsNormOp::verify() {
  return verifyNormParams(*this, "rms_norm", dimsOf(getInput()), dimsOf(getWeight()), std::nullopt,
                          getEpsilon());
}
// square, sum, rsqrt-scale, weight.
int64_t RmsNormOp::getFlops() { return 4 * elems(getResult()); }

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()}) ||
      (adaptor.getMask() && !allRanked({adaptor.getMask()})))
    return notRanked(loc);
  Type element = elementOf(adaptor.getQuery());
  if (elementOf(adaptor.getKey()) != element || elementOf(adaptor.getValue()) != element ||
      (adaptor.getMask() && elementOf(adaptor.getMask()) != element))
    return emitOptionalError(loc, "attention query, key, value and mask must share one element "
                                  "type; cast first");
  if (auto scale = adaptor.getScale(); scale && !(scale->convertToDouble() > 0))
    return emitOptionalError(loc, "attention scale must be > 0");
  for (Value positions : {adaptor.getQueryPositions(), adaptor.getKeyPositions()})
    if (positions && (!allRanked({positions}) || !elementOf(positions).isInteger(64)))
      return emitOptionalError(loc, "attention positions must be ranked i64 tensors");
  if (std::string why = shape::checkAttentionPositions(
          dimsOf(adaptor.getQuery()), dimsOf(adaptor.getKey()),
          optionalShape(adaptor.getQueryPositions()), optionalShape(adaptor.getKeyPositions()),
          bool(adaptor.getMask()), bool(adaptor.getCausal()));
      !why.empty())
    return emitOptionalError(loc, why);
  return pushInferred(loc,
                      shape::attention(dimsOf(adaptor.getQuery()), dimsOf(adaptor.getKey()),
                                       dimsOf(adaptor.getValue()),
                                       optionalShape(adaptor.getMask())),
                      elementOf(adaptor.getQuery()), out);
}
/// `mega.ring_axes` (MegaDialect.h): mesh axis names, on an attention by positions only.
LogicalResult mega::verifyRingAxes(Operation *op, bool hasPositions) {
  Attribute ring = op->getAttr(mega::kRingAxesAttr);
  if (!ring)
    return success();
  auto axes = dyn_cast<ArrayAttr>(ring);
  if (!axes || axes.empty() || !llvm::all_of(axes, [](Attribute a) { return isa<StringAttr>(a); }))
    return op->emitOpError() << mega::kRingAxesAttr
                             << " must be a non-empty array of mesh axis names";
  if (!hasPositions)
    return op->emitOpError() << "a ring attention (" << mega::kRingAxesAttr
                             << ") needs query and key positions";
  return success();
}

LogicalResult AttentionOp::verify() { return verifyRingAxes(*this, bool(getQueryPositions())); }

// Full s x t score matrices, causal or not: the convention of Megatron's FLOP formulas
// (REFERENCE.md: 4 B s^2 h per layer), so MFU is comparable.
int64_t AttentionOp::getMatmulFlops() {
  auto q = getQuery().getType().getShape(), k = getKey().getType().getShape();
  auto v = getValue().getType().getShape();
  int64_t pairs = q[0] * q[2] * q[1] * k[1]; // b * h * s * t
  return 2 * pairs * q[3] + 2 * pairs * v[3];
}
// Plus scale, mask and softmax on the b * h * s * t scores.
int64_t AttentionOp::getFlops() {
  auto q = getQuery().getType().getShape(), k = getKey().getType().getShape();
  return getMatmulFlops() + 7 * q[0] * q[2] * q[1] * k[1];
}

// Erf or tanh polynomial, products and sums: about 8 per element.
int64_t GeluOp::getFlops() { return 8 * elems(getResult()); }

// exp, add, divide, multiply.
int64_t SiluOp::getFlops() { return 4 * elems(getResult()); }

LogicalResult RopeOp::verify() {
  if (elementOf(getCos()) != elementOf(getInput()) || elementOf(getSin()) != elementOf(getInput()))
    return emitOpError() << "cos and sin must have the input's element type; cast first";
  std::string why = shape::checkRope(dimsOf(getInput()), dimsOf(getCos()), dimsOf(getSin()));
  if (!why.empty())
    return emitOpError() << why;
  return success();
}
// Two products and a sum per element (the tables are read, not computed).
int64_t RopeOp::getFlops() { return 3 * elems(getResult()); }

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked({adaptor.getLogits(), adaptor.getLabels()}))
    return notRanked(loc);
  return pushInferred(loc,
                      shape::crossEntropy(dimsOf(adaptor.getLogits()), dimsOf(adaptor.getLabels())),
                      elementOf(adaptor.getLogits()), out);
}
// max, subtract, exp, sum over the vocab; log and pick per token.
int64_t CrossEntropyOp::getFlops() { return 4 * elems(getLogits()) + 2 * elems(getResult()); }

LogicalResult DropoutOp::verify() {
  double ratio = getRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return emitOpError() << "ratio must be in [0, 1), got " << ratio;
  return success();
}
// Compare against the threshold and scale.
int64_t DropoutOp::getFlops() { return 2 * elems(getResult()); }

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

LogicalResult AdamWUpdateOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &out) {
  Value tensors[] = {adaptor.getParam(), adaptor.getGrad(), adaptor.getExpAvg(),
                     adaptor.getExpAvgSq()};
  if (!allRanked(tensors))
    return notRanked(loc);
  auto shape = dimsOf(adaptor.getParam());
  for (Value v : tensors)
    if (!std::ranges::equal(dimsOf(v), shape))
      return emitOptionalError(loc,
                               "adamw_update: param, grad and moments must share one shape; "
                               "param is ",
                               shape::str(shape), ", another is ", shape::str(dimsOf(v)));
  // The gradient may be stored in another precision than the fp32 master weights and moments.
  if (elementOf(adaptor.getExpAvg()) != elementOf(adaptor.getParam()) ||
      elementOf(adaptor.getExpAvgSq()) != elementOf(adaptor.getParam()))
    return emitOptionalError(loc, "adamw_update: the moments must have the parameter's element "
                                  "type");
  auto inRange = [](const APFloat &x) {
    double d = x.convertToDouble();
    return d >= 0.0 && d < 1.0;
  };
  if (!inRange(adaptor.getBeta1()) || !inRange(adaptor.getBeta2()))
    return emitOptionalError(loc, "adamw_update: beta1 and beta2 must be in [0, 1)");
  if (!(adaptor.getEps().convertToDouble() > 0) ||
      !(adaptor.getWeightDecay().convertToDouble() >= 0))
    return emitOptionalError(loc, "adamw_update: eps must be > 0 and weight_decay >= 0");
  out.push_back(adaptor.getParam().getType());
  out.push_back(adaptor.getExpAvg().getType());
  out.push_back(adaptor.getExpAvgSq().getType());
  return success();
}
// Moments (5), bias corrections, sqrt, divide, decay and update: about 16 per element.
int64_t AdamWUpdateOp::getFlops() { return 16 * elems(getParam()); }

LogicalResult GlobalNormOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &out) {
  if (!allRanked(adaptor.getInputs()))
    return notRanked(loc);
  bool allF64 = llvm::all_of(adaptor.getInputs(), [](Value v) { return elementOf(v).isF64(); });
  out.push_back(RankedTensorType::get({}, allF64 ? Type(Float64Type::get(ctx))
                                                 : Type(Float32Type::get(ctx))));
  return success();
}
LogicalResult GlobalNormOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  return success();
}
// Square and add per element.
int64_t GlobalNormOp::getFlops() {
  int64_t n = 0;
  for (Value v : getInputs())
    n += 2 * elems(v);
  return n;
}

LogicalResult ClipByNormOp::verify() {
  if (!(getMaxNorm().convertToDouble() > 0))
    return emitOpError() << "max_norm must be > 0";
  return success();
}

//===----------------------------------------------------------------------===//
// Distribution
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::verify() {
  std::string why = meshAxesError(getMesh(), getAxes());
  if (!why.empty())
    return emitOpError() << why;
  return success();
}

LogicalResult CopyToShardsOp::verify() {
  std::string why = meshAxesError(getMesh(), getAxes());
  if (!why.empty())
    return emitOpError() << why;
  return success();
}

LogicalResult AllGatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &out) {
  auto input = collectiveInput(loc, adaptor.getInput(), adaptor.getMesh(), adaptor.getAxes());
  if (failed(input))
    return failure();
  shape::Dims in = *input;
  auto dim = shape::normalizeAxis(static_cast<int64_t>(adaptor.getDim()), in.size());
  if (!dim)
    return emitOptionalError(loc, "all_gather dim ", static_cast<int64_t>(adaptor.getDim()),
                             " is out of range for ", shape::str(in));
  shape::Shape result(in.begin(), in.end());
  result[*dim] *= adaptor.getMesh().getGroupSize(axisNames(adaptor.getAxes()));
  return pushInferred(loc, {result, {}}, elementOf(adaptor.getInput()), out);
}

namespace {
/// reduce_scatter and shard_slice: the input's `dim`, divided by the group size.
LogicalResult inferDividedDim(std::optional<Location> loc, StringRef opName, Value input,
                              MeshAttr mesh, ArrayAttr axes, int64_t rawDim,
                              SmallVectorImpl<Type> &out) {
  auto dims = collectiveInput(loc, input, mesh, axes);
  if (failed(dims))
    return failure();
  shape::Dims in = *dims;
  auto dim = shape::normalizeAxis(rawDim, in.size());
  if (!dim)
    return emitOptionalError(loc, opName, " dim ", rawDim, " is out of range for ", shape::str(in));
  int64_t group = mesh.getGroupSize(axisNames(axes));
  if (in[*dim] % group != 0)
    return emitOptionalError(loc, opName, " dim ", *dim, " of size ", in[*dim],
                             " is not divisible by the group size ", group);
  shape::Shape result(in.begin(), in.end());
  result[*dim] /= group;
  return pushInferred(loc, {result, {}}, elementOf(input), out);
}
} // namespace

LogicalResult ReduceScatterOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor, SmallVectorImpl<Type> &out) {
  return inferDividedDim(loc, "reduce_scatter", adaptor.getInput(), adaptor.getMesh(),
                         adaptor.getAxes(), static_cast<int64_t>(adaptor.getDim()), out);
}

LogicalResult ShardSliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &out) {
  return inferDividedDim(loc, "shard_slice", adaptor.getInput(), adaptor.getMesh(),
                         adaptor.getAxes(), static_cast<int64_t>(adaptor.getDim()), out);
}

LogicalResult AllToAllOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &out) {
  auto input = collectiveInput(loc, adaptor.getInput(), adaptor.getMesh(), adaptor.getAxes());
  if (failed(input))
    return failure();
  shape::Dims in = *input;
  auto split = shape::normalizeAxis(static_cast<int64_t>(adaptor.getSplitDim()), in.size());
  auto concat = shape::normalizeAxis(static_cast<int64_t>(adaptor.getConcatDim()), in.size());
  if (!split || !concat)
    return emitOptionalError(loc, "all_to_all split/concat dims are out of range for ",
                             shape::str(in));
  int64_t group = adaptor.getMesh().getGroupSize(axisNames(adaptor.getAxes()));
  if (in[*split] % group != 0)
    return emitOptionalError(loc, "all_to_all split dim ", *split, " of size ", in[*split],
                             " is not divisible by the group size ", group);
  shape::Shape result(in.begin(), in.end());
  result[*split] /= group;
  result[*concat] *= group;
  return pushInferred(loc, {result, {}}, elementOf(adaptor.getInput()), out);
}

namespace {
LogicalResult verifyPeer(Operation *op, MeshAttr mesh, StringRef axis, int64_t shift, int64_t tag) {
  auto index = mesh.findAxis(axis);
  if (!index)
    return op->emitOpError() << "mesh axis '" << axis << "' is not in the mesh";
  int64_t size = mesh.getAxisSizes()[*index];
  if (shift == 0 || shift <= -size || shift >= size)
    return op->emitOpError() << "shift " << shift << " must be non-zero and within the " << size
                             << " devices of axis '" << axis << "'";
  if (tag < 0)
    return op->emitOpError() << "tag must be >= 0";
  return success();
}
} // namespace

LogicalResult SendOp::verify() {
  return verifyPeer(*this, getMesh(), getAxis(), getShift(), getTag());
}
int64_t SendOp::getFlops() { return 0; }

LogicalResult RecvOp::verify() {
  return verifyPeer(*this, getMesh(), getAxis(), getShift(), getTag());
}
int64_t RecvOp::getFlops() { return 0; }

LogicalResult ReshardOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getShape() != out.getShape() || in.getElementType() != out.getElementType())
    return emitOpError() << "changes only the layout: the global shape and element type must "
                            "stay the same";
  return success();
}
int64_t ReshardOp::getFlops() { return 0; }

#define GET_OP_CLASSES
#include "ir/MegaOps.cpp.inc"

#include "ir/MegaInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Element gathers and scatters, cumulative sum
//===----------------------------------------------------------------------===//

namespace {
/// GatherElements and ScatterElements: the indices and `other` (the result or the updates, named
/// `what`) have one shape, of the data's rank, `other` the data's element type, and the axis is
/// in range.
LogicalResult verifyElementIndexing(Operation *op, ShapedType data, ShapedType indices,
                                    ShapedType other, const char *what, int64_t axis) {
  if (indices.getShape() != other.getShape() || data.getRank() != indices.getRank())
    return op->emitOpError() << "indices " << shape::str(span(indices.getShape())) << " and "
                             << what << " " << shape::str(span(other.getShape()))
                             << " must have one shape, of the data's rank " << data.getRank();
  if (data.getElementType() != other.getElementType())
    return op->emitOpError() << what << " element type differs from the data's";
  return verifyAxis(op, axis, data.getRank());
}
} // namespace

LogicalResult GatherElementsOp::verify() {
  return verifyElementIndexing(*this, getData().getType(), getIndices().getType(),
                               getResult().getType(), "result", getAxis());
}
int64_t GatherElementsOp::getFlops() { return 0; }

LogicalResult ScatterElementsOp::verify() {
  return verifyElementIndexing(*this, getData().getType(), getIndices().getType(),
                               getUpdates().getType(), "updates", getAxis());
}
int64_t ScatterElementsOp::getFlops() {
  return getAccumulate() ? getUpdates().getType().getNumElements() : 0;
}

LogicalResult ScatterNdOp::verify() {
  auto data = getData().getType(), indices = getIndices().getType();
  auto updates = getUpdates().getType();
  int64_t k = indices.getRank() ? indices.getShape().back() : 0;
  if (indices.getRank() < 1 || k < 1 || k > data.getRank())
    return emitOpError() << "indices " << shape::str(span(indices.getShape()))
                         << " must end in a tuple size from 1 to the data's rank "
                         << data.getRank();
  SmallVector<int64_t> want(indices.getShape().drop_back());
  llvm::append_range(want, data.getShape().drop_front(k));
  if (updates.getShape() != ArrayRef<int64_t>(want))
    return emitOpError() << "updates " << shape::str(span(updates.getShape())) << " must be "
                         << shape::str(span(ArrayRef<int64_t>(want)));
  if (data.getElementType() != updates.getElementType())
    return emitOpError() << "updates element type differs from the data's";
  return success();
}
int64_t ScatterNdOp::getFlops() {
  return getAccumulate() ? getUpdates().getType().getNumElements() : 0;
}

LogicalResult CumSumOp::verify() {
  return verifyAxis(*this, getAxis(), getInput().getType().getRank());
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives
//===----------------------------------------------------------------------===//

namespace {
/// A start's shared rules: its mesh axes, its result type (the blocking twin's, from
/// `infer`), and one use, a collective_done in the same block.
LogicalResult verifyStart(Operation *op, MeshAttr mesh, ArrayAttr axes,
                          function_ref<LogicalResult(SmallVectorImpl<Type> &)> infer) {
  std::string why = meshAxesError(mesh, axes);
  if (!why.empty())
    return op->emitOpError() << why;
  SmallVector<Type> want;
  if (failed(infer(want)))
    return failure();
  if (!sameShapesAndElementTypes(want, op->getResultTypes()))
    return op->emitOpError() << "result type " << op->getResult(0).getType() << " should be "
                             << want[0] << ", the blocking collective's";
  Value result = op->getResult(0);
  if (!result.hasOneUse() || !isa<CollectiveDoneOp>(*result.getUsers().begin()) ||
      result.getUsers().begin()->getBlock() != op->getBlock())
    return op->emitOpError() << "result must have exactly one use, a mega.collective_done in "
                                "the same block (it is in flight until then)";
  return success();
}
} // namespace

LogicalResult AllReduceStartOp::verify() {
  return verifyStart(*this, getMesh(), getAxes(), [&](SmallVectorImpl<Type> &out) -> LogicalResult {
    out.push_back(getInput().getType());
    return success();
  });
}
int64_t AllReduceStartOp::getFlops() { return 0; }

LogicalResult AllGatherStartOp::verify() {
  return verifyStart(*this, getMesh(), getAxes(), [&](SmallVectorImpl<Type> &out) -> LogicalResult {
    auto input = collectiveInput(getLoc(), getInput(), getMesh(), getAxes());
    if (failed(input))
      return failure();
    shape::Dims in = *input;
    auto dim = shape::normalizeAxis(static_cast<int64_t>(getDim()), in.size());
    if (!dim)
      return emitOpError() << "dim " << getDim() << " is out of range for " << shape::str(in);
    shape::Shape result(in.begin(), in.end());
    result[*dim] *= getMesh().getGroupSize(axisNames(getAxes()));
    return pushInferred(getLoc(), {result, {}}, elementOf(getInput()), out);
  });
}
int64_t AllGatherStartOp::getFlops() { return 0; }

LogicalResult ReduceScatterStartOp::verify() {
  return verifyStart(*this, getMesh(), getAxes(), [&](SmallVectorImpl<Type> &out) -> LogicalResult {
    return inferDividedDim(getLoc(), "reduce_scatter_start", getInput(), getMesh(), getAxes(),
                           static_cast<int64_t>(getDim()), out);
  });
}
int64_t ReduceScatterStartOp::getFlops() { return 0; }

LogicalResult CollectiveDoneOp::verify() {
  Operation *start = getInput().getDefiningOp();
  if (!start || !isa<AllReduceStartOp, AllGatherStartOp, ReduceScatterStartOp>(start))
    return emitOpError() << "operand must be the result of a mega.all_reduce_start, "
                            "all_gather_start or reduce_scatter_start";
  if (start->getBlock() != (*this)->getBlock())
    return emitOpError() << "must be in the block of its start";
  return success();
}
int64_t CollectiveDoneOp::getFlops() { return 0; }
