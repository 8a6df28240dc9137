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
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &e, Value g) {
    Value x = getInput(), w = getWeight();
    int64_t out = getWeight().getType().getShape()[0], in = getWeight().getType().getShape()[1];
    int64_t rows = shape::numElements(dims(getType().getShape().drop_back()));
    Value wt = e.transpose(w, {1, 0});
    Grads grads{LinearOp::create(b, getLoc(), x.getType(), g, wt, Value())};
    Value g2 = e.reshape(g, {rows, out}), x2 = e.reshape(x, {rows, in});
    grads.push_back(e.matmul(e.transposeLast2(g2), x2));
    if (getBias())
      grads.push_back(e.reduceSum(g2, {0}, /*keepDims=*/false));
    return grads;
  });
}

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {
        EmbeddingGradOp::create(b, getLoc(), getTable().getType(), g, getIds(), getVocabAxesAttr()),
        Value()};
  });
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) {
    Type w = getWeight().getType();
    auto grad = LayerNormGradOp::create(b, getLoc(), getInput().getType(), w, w, g, getInput(),
                                        getWeight(), getEpsilon());
    Grads grads{grad.getInputGrad(), grad.getWeightGrad()};
    if (getBias())
      grads.push_back(grad.getBiasGrad());
    return grads;
  });
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    auto grad = RmsNormGradOp::create(b, getLoc(), getInput().getType(), getWeight().getType(), g,
                                      getInput(), getWeight(), getEpsilon());
    return {grad.getInputGrad(), grad.getWeightGrad()};
  });
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) {
    Value mask = getMask();
    Type maskType = mask ? mask.getType() : Type();
    // Positions (integer, causal by global position) get no gradient; nor a dmask: there is
    // no mask with them.
    auto grad = AttentionGradOp::create(b, getLoc(), getQuery().getType(), getKey().getType(),
                                        getValue().getType(), maskType, g, getQuery(), getKey(),
                                        getValue(), mask, getQueryPositions(), getKeyPositions(),
                                        getCausalAttr(), getScaleAttr());
    if (Attribute ring = (*this)->getAttr(kRingAxesAttr)) // the backward's ring: the same axes
      grad->setAttr(kRingAxesAttr, ring);
    Grads grads{grad.getQueryGrad(), grad.getKeyGrad(), grad.getValueGrad()};
    if (mask)
      grads.push_back(grad.getMaskGrad());
    if (getQueryPositions())
      grads.append({Value(), Value()});
    return grads;
  });
}

LogicalResult GeluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {GeluGradOp::create(b, getLoc(), getType(), getApproximation(), g, getInput())};
  });
}

// silu'(x) = s + x s (1 - s) = (s - y s) + y with s = sigmoid(x) and y = silu(x) (the forward's
// result): no constant of ones the size of the activation. Elementwise ops the CUDA executor
// fuses into one kernel.
LogicalResult SiluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &e, Value g) -> Grads {
    Value x = getInput(), y = getResult();
    Value s = SigmoidOp::create(b, getLoc(), x.getType(), x);
    Value slope = e.add(e.sub(s, e.mul(y, s)), y);
    return {e.mul(g, slope)};
  });
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
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &e, Value g) -> Grads {
    Location loc = getLoc();
    Value x = getInput(), sin = getSin();
    int64_t d = tensorOf(x).getShape().back(), half = d / 2;
    Value swapped = lastDimConcat(b, loc, lastDimSlice(b, loc, sin, half, d),
                                  lastDimSlice(b, loc, sin, 0, half));
    Value dx = RopeOp::create(b, loc, x.getType(), g, getCos(), e.neg(swapped)).getResult();
    Value rotated = lastDimConcat(b, loc, e.neg(lastDimSlice(b, loc, x, half, d)),
                                  lastDimSlice(b, loc, x, 0, half));
    return {dx, e.sumTo(e.mul(g, x), tensorOf(getCos())),
            e.sumTo(e.mul(g, rotated), tensorOf(sin))};
  });
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {CrossEntropyGradOp::create(b, getLoc(), getLogits().getType(), g, getLogits(),
                                       getLabels(), getIgnoreIndexAttr(), getVocabAxesAttr()),
            Value()};
  });
}

// The same elements drop (same seed and stream) and the survivors scale the same way.
LogicalResult DropoutOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {
        DropoutOp::create(b, getLoc(), getType(), g, getSeed(), getRatioAttr(), getStreamAttr()),
        Value()};
  });
}

//===----------------------------------------------------------------------===//
// Collectives (docs/pipeline.md): the backward of the partitioned model
//===----------------------------------------------------------------------===//

namespace {
/// The diagnostic of a collective whose reduction is not a sum.
template <typename Op> InFlightDiagnostic noSumRule(Op op) {
  return op.emitOpError() << "has no gradient rule for a " << stringifyReduceKind(op.getKind())
                          << " reduction";
}

/// The input's gradient of a collective that splits its input's dim `dim` over `axes`
/// (reduce_scatter, shard_slice): the result's gradient gathered back.
template <typename Op> Value gatherBack(OpBuilder &b, Op op, Value g) {
  return AllGatherOp::create(b, op.getLoc(), op.getInput().getType(), g, op.getMesh(), op.getAxes(),
                             op.getDimAttr(), UnitAttr());
}
} // namespace

// A sum over devices whose result every device then uses whole: each device's input
// contributes to the result on every device, and the result's gradient is already whole.
LogicalResult AllReduceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> FailureOr<Grads> {
    if (getKind() != ReduceKind::sum)
      return noSumRule(*this);
    return Grads{g};
  });
}

LogicalResult AllGatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    Type type = getInput().getType();
    if (getGradPartial())
      return {ReduceScatterOp::create(b, getLoc(), type, ReduceKind::sum, g, getMesh(), getAxes(),
                                      getDim())};
    return {ShardSliceOp::create(b, getLoc(), type, g, getMesh(), getAxes(), getDim())};
  });
}

LogicalResult ReduceScatterOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                             SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> FailureOr<Grads> {
    if (getKind() != ReduceKind::sum)
      return noSumRule(*this);
    return Grads{gatherBack(b, *this, g)};
  });
}

LogicalResult ShardSliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads,
             [&](Emitter &, Value g) -> Grads { return {gatherBack(b, *this, g)}; });
}

LogicalResult CopyToShardsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {AllReduceOp::create(b, getLoc(), getType(), ReduceKind::sum, g, getMesh(), getAxes())};
  });
}
