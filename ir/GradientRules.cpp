// Gradient rules (vector-Jacobian products) of the low-level mega ops: elementwise,
// contraction, indexing, reduction and shape ops. Coarse ops are in GradientRulesNn.cpp.
#include "ir/GradientEmitter.h"

#include <cmath>
#include <numbers>

using namespace mlir;
using namespace mega;
using namespace mega::grad;

namespace {

/// The reduced input shape with the reduced axes kept as size 1.
SmallVector<int64_t> keptShape(ArrayRef<int64_t> input, ArrayRef<int64_t> axes) {
  SmallVector<int64_t> shape(input.begin(), input.end());
  for (int64_t axis : axes)
    shape[*shape::normalizeAxis(axis, shape.size())] = 1;
  return shape;
}

using Rule = llvm::function_ref<Value(Emitter &e, Value g, Value x, Value y)>;

/// A one-operand, one-result op: dx = rule(dy, x, y).
LogicalResult unary(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                    SmallVectorImpl<Value> &operandGrads, Rule rule) {
  if (noIncoming(op, resultGrads, operandGrads))
    return success();
  Emitter e{b, op->getLoc()};
  Value x = op->getOperand(0);
  operandGrads.push_back(isFloatTensor(x) ? rule(e, resultGrads[0], x, op->getResult(0)) : Value());
  return success();
}

/// A two-operand elementwise op: (dx, dy) = (lhsRule, rhsRule)(dz, x, y), with z the result
/// reachable as `op->getResult(0)`.
using BinaryRule =
    llvm::function_ref<std::pair<Value, Value>(Emitter &e, Value g, Value x, Value y, Value z)>;
LogicalResult binary(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                     SmallVectorImpl<Value> &operandGrads, BinaryRule rule) {
  if (noIncoming(op, resultGrads, operandGrads))
    return success();
  Value x = op->getOperand(0), y = op->getOperand(1);
  if (!isFloatTensor(x)) {
    operandGrads.append(2, Value());
    return success();
  }
  Emitter e{b, op->getLoc()};
  auto [dx, dy] = rule(e, resultGrads[0], x, y, op->getResult(0));
  operandGrads.push_back(dx);
  operandGrads.push_back(dy);
  return success();
}

/// Gradients of max (or min, with `wins` = lt) of two tensors: the winner takes the gradient,
/// ties split it evenly (as torch.maximum).
std::pair<Value, Value> extremumGrads(Emitter &e, Value g, Value x, Value y,
                                      ComparePredicate wins) {
  Value win = e.indicator(e.compare(wins, x, y), x);
  Value tie = e.scale(e.indicator(e.compare(ComparePredicate::eq, x, y), x), 0.5);
  Value dx = e.mul(g, e.add(win, tie));
  return {dx, e.sub(g, dx)};
}

} // namespace

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult NegOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads,
               [](Emitter &e, Value g, Value, Value) { return e.neg(g); });
}

// d|x| = sign(x), 0 at 0 (PyTorch's convention).
LogicalResult AbsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value) {
    Value zero = e.constantLike(x, 0);
    Value positive = e.indicator(e.compare(ComparePredicate::gt, x, zero), x);
    Value negative = e.indicator(e.compare(ComparePredicate::lt, x, zero), x);
    return e.mul(g, e.sub(positive, negative));
  });
}

LogicalResult ExpOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads,
               [](Emitter &e, Value g, Value, Value y) { return e.mul(g, y); });
}

LogicalResult LogOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads,
               [](Emitter &e, Value g, Value x, Value) { return e.div(g, x); });
}

LogicalResult TanhOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value, Value y) {
    Value one = e.constantLike(y, 1);
    return e.mul(g, e.sub(one, e.mul(y, y)));
  });
}

// erf'(x) = 2/sqrt(pi) exp(-x^2).
LogicalResult ErfOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value) {
    Value bell = ExpOp::create(e.b, e.loc, x.getType(), e.neg(e.mul(x, x)));
    return e.mul(e.scale(g, 2 / std::sqrt(std::numbers::pi)), bell);
  });
}

LogicalResult SigmoidOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value, Value y) {
    return e.mul(g, e.mul(y, e.sub(e.constantLike(y, 1), y)));
  });
}

// relu'(0) = 0, as PyTorch.
LogicalResult ReluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value) {
    return e.mul(g, e.indicator(e.compare(ComparePredicate::gt, x, e.constantLike(x, 0)), x));
  });
}

LogicalResult SqrtOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads,
               [](Emitter &e, Value g, Value, Value y) { return e.div(e.scale(g, 0.5), y); });
}

// d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
LogicalResult RsqrtOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value, Value y) {
    Value cube = e.mul(y, e.mul(y, y));
    return e.mul(e.scale(g, -0.5), cube);
  });
}

// d sin(x) = cos(x) dy.
LogicalResult SinOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value) {
    return e.mul(g, CosOp::create(e.b, e.loc, x.getType(), x));
  });
}

// d cos(x) = -sin(x) dy.
LogicalResult CosOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return unary(*this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value) {
    return e.neg(e.mul(g, SinOp::create(e.b, e.loc, x.getType(), x)));
  });
}

LogicalResult AddOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &, Value g, Value, Value, Value) { return std::pair(g, g); });
}

LogicalResult SubOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &e, Value g, Value, Value, Value) { return std::pair(g, e.neg(g)); });
}

LogicalResult MulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &e, Value g, Value x, Value y, Value) {
                  Value dx = e.mul(g, y);
                  return std::pair(dx, e.mul(g, x));
                });
}

// z = x / y: dx = g / y, dy = -g z / y.
LogicalResult DivOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &e, Value g, Value, Value y, Value z) {
                  Value dx = e.div(g, y);
                  return std::pair(dx, e.neg(e.div(e.mul(g, z), y)));
                });
}

// z = x^y: dx = g y x^(y-1) (finite at x = 0 for y >= 1), dy = g z log(x). A dy nobody needs
// (a constant exponent) is dead code the autodiff pass drops.
LogicalResult PowOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(
      *this, b, resultGrads, operandGrads, [](Emitter &e, Value g, Value x, Value y, Value z) {
        Value xPowYm1 = PowOp::create(e.b, e.loc, x.getType(), x, e.sub(y, e.constantLike(y, 1)));
        Value dx = e.mul(g, e.mul(y, xPowYm1));
        Value logX = LogOp::create(e.b, e.loc, x.getType(), x);
        return std::pair(dx, e.mul(g, e.mul(z, logX)));
      });
}

LogicalResult MaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &e, Value g, Value x, Value y, Value) {
                  return extremumGrads(e, g, x, y, ComparePredicate::gt);
                });
}

LogicalResult MinOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                   SmallVectorImpl<Value> &operandGrads) {
  return binary(*this, b, resultGrads, operandGrads,
                [](Emitter &e, Value g, Value x, Value y, Value) {
                  return extremumGrads(e, g, x, y, ComparePredicate::lt);
                });
}

LogicalResult WhereOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(Value()); // the condition
  if (!isFloatTensor(getResult())) {
    operandGrads.append(2, Value());
    return success();
  }
  Emitter e{b, getLoc()};
  Value g = resultGrads[0], zero = e.constantLike(g, 0);
  operandGrads.push_back(e.where(getCond(), g, zero));
  operandGrads.push_back(e.where(getCond(), zero, g));
  return success();
}

//===----------------------------------------------------------------------===//
// Contraction, indexing, reduction, shape
//===----------------------------------------------------------------------===//

// C = A B with broadcast batch dims: dA = G B^T and dB = A^T G, each summed over the batch
// dims its operand was broadcast along.
LogicalResult MatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  Value g = resultGrads[0];
  operandGrads.push_back(e.sumTo(e.matmul(g, e.transposeLast2(getRhs())), getLhs().getType()));
  operandGrads.push_back(e.sumTo(e.matmul(e.transposeLast2(getLhs()), g), getRhs().getType()));
  return success();
}

// Gather along axis 0 is an embedding lookup; its gradient is embedding_grad's scatter-add over
// the rows flattened to [V, rest].
LogicalResult GatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  auto data = getData().getType();
  int64_t rank = data.getRank();
  int64_t axis = shape::normalizeAxis(static_cast<int64_t>(getAxis()), rank).value_or(-1);
  if (axis != 0)
    return emitOpError() << "has a gradient only along axis 0 (an embedding lookup), not axis "
                         << getAxis() << "; gather the transposed data instead";
  if (!isFloatTensor(getData())) {
    operandGrads.append(2, Value());
    return success();
  }
  Emitter e{b, getLoc()};
  auto ids = getIndices().getType().getShape();
  int64_t rows = data.getShape()[0];
  int64_t rest = shape::numElements(dims(data.getShape().drop_front()));
  SmallVector<int64_t> rowShape(ids.begin(), ids.end());
  rowShape.push_back(rest);
  Value g = e.reshape(resultGrads[0], rowShape);
  Value table = EmbeddingGradOp::create(b, getLoc(), withShape(g, {rows, rest}), g, getIndices(),
                                        ArrayAttr());
  operandGrads.push_back(e.reshape(table, data.getShape()));
  operandGrads.push_back(Value());
  return success();
}

// sum: broadcast back; mean: and divide by the count; max/min: to the elements equal to the
// extremum, split evenly among ties (as torch.amax).
LogicalResult ReduceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (!isFloatTensor(getInput())) {
    operandGrads.push_back(Value());
    return success();
  }
  Emitter e{b, getLoc()};
  auto input = getInput().getType();
  SmallVector<int64_t> kept = keptShape(input.getShape(), getAxes());
  Value g = e.broadcastTo(e.reshape(resultGrads[0], kept), input);
  switch (getKind()) {
  case ReduceKind::sum:
    operandGrads.push_back(g);
    break;
  case ReduceKind::mean: {
    int64_t count = input.getNumElements() / std::max<int64_t>(1, shape::numElements(dims(kept)));
    operandGrads.push_back(e.scale(g, 1.0 / static_cast<double>(count)));
    break;
  }
  case ReduceKind::max:
  case ReduceKind::min: {
    Value extremum = e.broadcastTo(e.reshape(getResult(), kept), input);
    Value hit = e.indicator(e.compare(ComparePredicate::eq, getInput(), extremum), getInput());
    Value ties = e.broadcastTo(e.reduceSum(hit, getAxes(), /*keepDims=*/true), input);
    operandGrads.push_back(e.mul(e.div(g, ties), hit));
    break;
  }
  }
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  operandGrads.push_back(
      SoftmaxGradOp::create(b, getLoc(), getType(), resultGrads[0], getResult(), getAxis()));
  return success();
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  operandGrads.push_back(
      ifFloat(getInput(), e.reshape(resultGrads[0], getInput().getType().getShape())));
  return success();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (!isFloatTensor(getInput())) {
    operandGrads.push_back(Value());
    return success();
  }
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = static_cast<int64_t>(i);
  Emitter e{b, getLoc()};
  operandGrads.push_back(e.transpose(resultGrads[0], inverse));
  return success();
}

// The slice's elements go back where they came from, zeros elsewhere: pad with `starts`
// before, the stride's gaps between and what is left after.
LogicalResult SliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (!isFloatTensor(getInput())) {
    operandGrads.push_back(Value());
    return success();
  }
  Emitter e{b, getLoc()};
  auto input = getInput().getType();
  auto out = getType().getShape();
  if (getType().getNumElements() == 0) {
    operandGrads.push_back(e.constant(input, 0));
    return success();
  }
  SmallVector<int64_t> low, high, interior;
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t start = getStarts()[d], stride = getStrides()[d];
    int64_t last = start + (out[d] - 1) * stride;
    low.push_back(start);
    high.push_back(input.getShape()[d] - 1 - last);
    interior.push_back(stride - 1);
  }
  operandGrads.push_back(PadOp::create(b, getLoc(), input, resultGrads[0], low, high, interior));
  return success();
}

// Each input gets its slice of the gradient along the concat axis.
LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (!isFloatTensor(getResult())) {
    operandGrads.append(getNumOperands(), Value());
    return success();
  }
  auto out = getType().getShape();
  int64_t axis = *shape::normalizeAxis(static_cast<int64_t>(getAxis()), out.size());
  int64_t offset = 0;
  for (Value input : getInputs()) {
    auto type = cast<RankedTensorType>(input.getType());
    SmallVector<int64_t> starts(out.size(), 0), limits(out.begin(), out.end()),
        strides(out.size(), 1);
    starts[axis] = offset;
    limits[axis] = offset + type.getShape()[axis];
    offset = limits[axis];
    operandGrads.push_back(
        SliceOp::create(b, getLoc(), type, resultGrads[0], starts, limits, strides));
  }
  return success();
}

LogicalResult BroadcastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  Emitter e{b, getLoc()};
  operandGrads.push_back(ifFloat(getInput(), e.sumTo(resultGrads[0], getInput().getType())));
  return success();
}

// Back to the input's precision; an integer or i1 input has no gradient.
LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  if (noIncoming(*this, resultGrads, operandGrads))
    return success();
  if (!isFloatTensor(getInput()) || !isFloatTensor(getResult())) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(
      CastOp::create(b, getLoc(), getInput().getType(), resultGrads[0]).getResult());
  return success();
}
