// Verifiers, shape inference and costs of the backward ops (ir/MegaGradOps.td).
#include "ir/MegaOps.h"
#include "ir/MegaVerify.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace mega;

namespace {

int64_t elems(Value v) { return cost::numElements(v.getType()); }

/// Shape and element type equal (encodings may differ).
bool sameTensor(Type a, Type b) { return sameShapesAndElementTypes(TypeRange(a), TypeRange(b)); }

/// Checks that gradient results mirror the forward operands they belong to.
LogicalResult expectSame(Operation *op, Type got, Type want, const char *what) {
  if (!sameTensor(got, want))
    return op->emitOpError() << what << " has type " << got << " but must match " << want;
  return success();
}

/// The norm backward ops: the forward's parameters, epsilon > 0, and result_grad, input_grad
/// shaped like the input `x`, weight_grad like the weight `w`.
LogicalResult verifyNormGrad(Operation *op, const char *name, Type x, Type w,
                             const APFloat &epsilon, Type resultGrad, Type inputGrad,
                             Type weightGrad) {
  if (failed(verifyNormParams(op, name, dimsOf(x), dimsOf(w), std::nullopt, epsilon)) ||
      failed(expectSame(op, resultGrad, x, "result_grad")) ||
      failed(expectSame(op, inputGrad, x, "input_grad")) ||
      failed(expectSame(op, weightGrad, w, "weight_grad")))
    return failure();
  return success();
}

} // namespace

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      SmallVectorImpl<Type> &out) {
  auto input = dyn_cast<RankedTensorType>(adaptor.getInput().getType());
  if (!input)
    return emitOptionalError(loc, "operands must be ranked tensors");
  shape::Result r = shape::pad(dimsOf(input), span(adaptor.getLow()), span(adaptor.getHigh()),
                               span(adaptor.getInterior()));
  if (!r.ok())
    return emitOptionalError(loc, r.error);
  out.push_back(RankedTensorType::get(r.shape, input.getElementType()));
  return success();
}
int64_t PadOp::getFlops() { return 0; }

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormGrad(*this, "layer_norm_grad", getInput().getType(), getWeight().getType(),
                            getEpsilon(), getResultGrad().getType(), getInputGrad().getType(),
                            getWeightGrad().getType())) ||
      failed(expectSame(*this, getBiasGrad().getType(), getWeight().getType(), "bias_grad")))
    return failure();
  return success();
}
// Recomputed statistics and normalized input, then two row reductions: about 12 per element.
int64_t LayerNormGradOp::getFlops() { return 12 * elems(getInput()); }

LogicalResult RmsNormGradOp::verify() {
  return verifyNormGrad(*this, "rms_norm_grad", getInput().getType(), getWeight().getType(),
                        getEpsilon(), getResultGrad().getType(), getInputGrad().getType(),
                        getWeightGrad().getType());
}
int64_t RmsNormGradOp::getFlops() { return 8 * elems(getInput()); }

LogicalResult AttentionGradOp::verify() {
  std::optional<shape::Shape> maskShape;
  if (getMask()) {
    auto d = dimsOf(getMask().getType());
    maskShape = shape::Shape(d.begin(), d.end());
  }
  shape::Result r = shape::attention(dimsOf(getQuery().getType()), dimsOf(getKey().getType()),
                                     dimsOf(getValue().getType()), maskShape);
  if (!r.ok())
    return emitOpError() << r.error;
  if (auto scale = getScale(); scale && !(scale->convertToDouble() > 0))
    return emitOpError() << "scale must be > 0";
  auto positionShape = [](Value v) -> std::optional<shape::Shape> {
    if (!v)
      return std::nullopt;
    auto d = dimsOf(cast<RankedTensorType>(v.getType()));
    return shape::Shape(d.begin(), d.end());
  };
  for (Value positions : {getQueryPositions(), getKeyPositions()})
    if (positions && !cast<RankedTensorType>(positions.getType()).getElementType().isInteger(64))
      return emitOpError() << "positions must be i64 tensors";
  if (std::string why = shape::checkAttentionPositions(
          dimsOf(getQuery().getType()), dimsOf(getKey().getType()),
          positionShape(getQueryPositions()), positionShape(getKeyPositions()), bool(getMask()),
          getCausal());
      !why.empty())
    return emitOpError() << why;
  if (failed(verifyRingAxes(*this, bool(getQueryPositions()))))
    return failure();
  auto out = RankedTensorType::get(r.shape, getQuery().getType().getElementType());
  if (failed(expectSame(*this, getResultGrad().getType(), out, "result_grad")) ||
      failed(expectSame(*this, getQueryGrad().getType(), getQuery().getType(), "query_grad")) ||
      failed(expectSame(*this, getKeyGrad().getType(), getKey().getType(), "key_grad")) ||
      failed(expectSame(*this, getValueGrad().getType(), getValue().getType(), "value_grad")))
    return failure();
  if (bool(getMask()) != bool(getMaskGrad()))
    return emitOpError() << "has a mask_grad result exactly when it has a mask operand";
  if (getMask() &&
      failed(expectSame(*this, getMaskGrad().getType(), getMask().getType(), "mask_grad")))
    return failure();
  return success();
}
// Recompute q k^T, then dv = p^T do, dp = do v^T, dq = ds k, dk = ds^T q: five products of the
// forward's size (full s x t scores, as the forward counts).
int64_t AttentionGradOp::getMatmulFlops() {
  auto q = getQuery().getType().getShape(), k = getKey().getType().getShape();
  auto v = getValue().getType().getShape();
  int64_t pairs = q[0] * q[2] * q[1] * k[1];
  return 2 * pairs * (3 * q[3] + 2 * v[3]);
}
int64_t AttentionGradOp::getFlops() {
  auto q = getQuery().getType().getShape(), k = getKey().getType().getShape();
  return getMatmulFlops() + 10 * q[0] * q[2] * q[1] * k[1];
}

int64_t GeluGradOp::getFlops() { return 12 * elems(getInputGrad()); }

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, static_cast<int64_t>(getAxis()), getType().getRank());
}
int64_t SoftmaxGradOp::getFlops() { return 4 * elems(getInputGrad()); }

LogicalResult CrossEntropyGradOp::verify() {
  shape::Result r =
      shape::crossEntropy(dimsOf(getLogits().getType()), dimsOf(getLabels().getType()));
  if (!r.ok())
    return emitOpError() << r.error;
  auto perToken = RankedTensorType::get(r.shape, getLogits().getType().getElementType());
  if (failed(expectSame(*this, getLossGrad().getType(), perToken, "loss_grad")) ||
      failed(expectSame(*this, getLogitsGrad().getType(), getLogits().getType(), "logits_grad")))
    return failure();
  return success();
}
int64_t CrossEntropyGradOp::getFlops() { return 5 * elems(getLogits()); }

LogicalResult EmbeddingGradOp::verify() {
  auto dy = getResultGrad().getType(), table = getTableGrad().getType();
  auto ids = getIds().getType();
  if (table.getRank() != 2)
    return emitOpError() << "table_grad must be [vocab, hidden], got "
                         << shape::str(span(table.getShape()));
  shape::Result r = shape::embedding(span(table.getShape()), span(ids.getShape()));
  if (!r.ok())
    return emitOpError() << r.error;
  if (dy.getShape() != ArrayRef<int64_t>(r.shape) || dy.getElementType() != table.getElementType())
    return emitOpError() << "result_grad " << dy << " must be the embedding output "
                         << shape::str(r.shape) << " of the table's element type";
  return success();
}
int64_t EmbeddingGradOp::getFlops() { return elems(getResultGrad()); }
