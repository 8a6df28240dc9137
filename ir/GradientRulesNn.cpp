// Gradient rules of the coarse mega ops (linear, embedding, norms, attention, gelu, silu, rope,
// cross_entropy, dropout), mostly through their backward ops (ir/MegaGradOps.td).
#include "ir/GradientEmitter.h"

using namespace mlir;
using namespace mega;
using namespace mega::grad;

//===----------------------------------------------------------------------===//
// Coarse ops
//===----------------------------------------------------------------------===//

// y = x W^T + b with x [..., in], W [out, in]: dx = dy W (a linear with W^T, so it shards like
// the forward), dW = dy^T x over all rows, db = the row sum of dy.
LogicalResult LinearOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  Value g = resultGrads[0], x = getInput(), w = getWeight();
  int64_t out = getWeight().getType().getShape()[0], in = getWeight().getType().getShape()[1];
  int64_t rows = shape::numElements(dims(getType().getShape().drop_back()));
  Value wt = e.transpose(w, {1, 0});
  operandGrads.push_back(LinearOp::create(b, getLoc(), x.getType(), g, wt, Value()));
  Value g2 = e.reshape(g, {rows, out}), x2 = e.reshape(x, {rows, in});
  operandGrads.push_back(e.matmul(e.transposeLast2(g2), x2));
  if (getBias())
    operandGrads.push_back(e.reduceSum(g2, {0}, /*keepDims=*/false));
  return success();
}

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(
      EmbeddingGradOp::create(b, getLoc(), getTable().getType(), resultGrads[0], getIds(),
                              getVocabAxesAttr()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Type w = getWeight().getType();
  auto grad = LayerNormGradOp::create(b, getLoc(), getInput().getType(), w, w, resultGrads[0],
                                      getInput(), getWeight(), getEpsilon());
  operandGrads.push_back(grad.getInputGrad());
  operandGrads.push_back(grad.getWeightGrad());
  if (getBias())
    operandGrads.push_back(grad.getBiasGrad());
  return success();
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  auto grad = RmsNormGradOp::create(b, getLoc(), getInput().getType(), getWeight().getType(),
                                    resultGrads[0], getInput(), getWeight(), getEpsilon());
  operandGrads.push_back(grad.getInputGrad());
  operandGrads.push_back(grad.getWeightGrad());
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Value mask = getMask();
  Type maskType = mask ? mask.getType() : Type();
  auto grad = AttentionGradOp::create(b, getLoc(), getQuery().getType(), getKey().getType(),
                                      getValue().getType(), maskType, resultGrads[0], getQuery(),
                                      getKey(), getValue(), mask, getCausalAttr(), getScaleAttr());
  operandGrads.push_back(grad.getQueryGrad());
  operandGrads.push_back(grad.getKeyGrad());
  operandGrads.push_back(grad.getValueGrad());
  if (mask)
    operandGrads.push_back(grad.getMaskGrad());
  return success();
}

LogicalResult GeluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(
      GeluGradOp::create(b, getLoc(), getType(), getApproximation(), resultGrads[0], getInput()));
  return success();
}

// silu'(x) = s + x s (1 - s) = (s - y s) + y with s = sigmoid(x) and y = silu(x) (the forward's
// result): no constant of ones the size of the activation. Elementwise ops the CUDA executor
// fuses into one kernel.
LogicalResult SiluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  Value x = getInput(), y = getResult();
  Value s = SigmoidOp::create(b, getLoc(), x.getType(), x);
  Value slope = e.add(e.sub(s, e.mul(y, s)), y);
  operandGrads.push_back(e.mul(resultGrads[0], slope));
  return success();
}

namespace {
/// `v` [..., d] sliced to [..., lo:hi) on the last dim.
Value lastDimSlice(OpBuilder &b, Location loc, Value v, int64_t lo, int64_t hi) {
  auto shape = tensorOf(v).getShape();
  SmallVector<int64_t> starts(shape.size(), 0), limits(shape), strides(shape.size(), 1);
  starts.back() = lo;
  limits.back() = hi;
  SmallVector<int64_t> out(shape);
  out.back() = hi - lo;
  return SliceOp::create(b, loc, withShape(v, out), v, starts, limits, strides);
}
/// concat(a, b) on the last dim.
Value lastDimConcat(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  SmallVector<int64_t> out(tensorOf(lhs).getShape());
  out.back() += tensorOf(rhs).getShape().back();
  int64_t axis = static_cast<int64_t>(out.size()) - 1;
  return ConcatOp::create(b, loc, withShape(lhs, out), ValueRange{lhs, rhs}, axis);
}
} // namespace

// y = x c + R(x) s with R(x) = [-x2, x1] on the halves of the last dim. R's transpose is -R, so
// dx = dy c - R(dy s): halves dy1 c1 + dy2 s2 and dy2 c2 - dy1 s1, which is
// rope(dy, c, -[s2, s1]) (= rope(dy, c, -s) for Hugging Face's tables, whose halves repeat).
// dc = dy x and ds = dy R(x), summed over the dims the tables broadcast along.
LogicalResult RopeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  Location loc = getLoc();
  Value g = resultGrads[0], x = getInput(), sin = getSin();
  int64_t d = tensorOf(x).getShape().back(), half = d / 2;
  Value swapped = lastDimConcat(b, loc, lastDimSlice(b, loc, sin, half, d),
                                lastDimSlice(b, loc, sin, 0, half));
  operandGrads.push_back(
      RopeOp::create(b, loc, x.getType(), g, getCos(), e.neg(swapped)).getResult());
  Value rotated = lastDimConcat(b, loc, e.neg(lastDimSlice(b, loc, x, half, d)),
                                lastDimSlice(b, loc, x, 0, half));
  operandGrads.push_back(e.sumTo(e.mul(g, x), tensorOf(getCos())));
  operandGrads.push_back(e.sumTo(e.mul(g, rotated), tensorOf(sin)));
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(),
                                                    resultGrads[0], getLogits(), getLabels(),
                                                    getIgnoreIndexAttr(), getVocabAxesAttr()));
  operandGrads.push_back(Value());
  return success();
}

// The same elements drop (same seed and stream) and the survivors scale the same way.
LogicalResult DropoutOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(DropoutOp::create(b, getLoc(), getType(), resultGrads[0], getSeed(),
                                           getRatioAttr(), getStreamAttr()));
  operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives (docs/pipeline.md): the backward of the partitioned model
//===----------------------------------------------------------------------===//

// A sum over devices whose result every device then uses whole: each device's input
// contributes to the result on every device, and the result's gradient is already whole.
LogicalResult AllReduceOp::buildGradient(OpBuilder &, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (getKind() != ReduceKind::sum)
    return emitOpError() << "has no gradient rule for a " << stringifyReduceKind(getKind())
                         << " reduction";
  operandGrads.push_back(resultGrads[0]);
  return success();
}

LogicalResult AllGatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Type type = getInput().getType();
  if (getGradPartial())
    operandGrads.push_back(ReduceScatterOp::create(b, getLoc(), type, ReduceKind::sum,
                                                   resultGrads[0], getMesh(), getAxes(),
                                                   getDim()));
  else
    operandGrads.push_back(
        ShardSliceOp::create(b, getLoc(), type, resultGrads[0], getMesh(), getAxes(), getDim()));
  return success();
}

LogicalResult ReduceScatterOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                             SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (getKind() != ReduceKind::sum)
    return emitOpError() << "has no gradient rule for a " << stringifyReduceKind(getKind())
                         << " reduction";
  operandGrads.push_back(AllGatherOp::create(b, getLoc(), getInput().getType(), resultGrads[0],
                                             getMesh(), getAxes(), getDimAttr(), UnitAttr()));
  return success();
}

LogicalResult ShardSliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(AllGatherOp::create(b, getLoc(), getInput().getType(), resultGrads[0],
                                             getMesh(), getAxes(), getDimAttr(), UnitAttr()));
  return success();
}

LogicalResult CopyToShardsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(AllReduceOp::create(b, getLoc(), getType(), ReduceKind::sum,
                                             resultGrads[0], getMesh(), getAxes()));
  return success();
}
