// Gradient rules (vector-Jacobian products) of the low-level mega ops: elementwise,
// contraction, indexing, reduction and shape ops. Coarse ops are in GradientRulesNn.cpp.
#include "ir/GradientEmitter.h"

#include "mlir/IR/Matchers.h"

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
  Value x = op->getOperand(0);
  return vjp(op, b, resultGrads, operandGrads, {x},
             [&](Emitter &e, Value g) -> Grads { return {rule(e, g, x, op->getResult(0))}; });
}

/// A two-operand elementwise op: (dx, dy) = (lhsRule, rhsRule)(dz, x, y), with z the result
/// reachable as `op->getResult(0)`.
using BinaryRule =
    llvm::function_ref<std::pair<Value, Value>(Emitter &e, Value g, Value x, Value y, Value z)>;
LogicalResult binary(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                     SmallVectorImpl<Value> &operandGrads, BinaryRule rule) {
  Value x = op->getOperand(0), y = op->getOperand(1);
  return vjp(op, b, resultGrads, operandGrads, {x}, [&](Emitter &e, Value g) -> Grads {
    auto [dx, dy] = rule(e, g, x, y, op->getResult(0));
    return {dx, dy};
  });
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
  return vjp(*this, b, resultGrads, operandGrads, {getResult()}, [&](Emitter &e, Value g) -> Grads {
    Value zero = e.constantLike(g, 0);
    return {Value() /* the condition */, e.where(getCond(), g, zero), e.where(getCond(), zero, g)};
  });
}

//===----------------------------------------------------------------------===//
// Contraction, indexing, reduction, shape
//===----------------------------------------------------------------------===//

// C = A B with broadcast batch dims: dA = G B^T and dB = A^T G, each summed over the batch
// dims its operand was broadcast along.
LogicalResult MatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &e, Value g) -> Grads {
    // With layout flags, the product reads op(lhs) and op(rhs): differentiate with respect to
    // those and transpose the gradients back to the operands' stored layouts (the transposes
    // fold into flags again in mega-training-gemm-fusion).
    bool tl = getTransposeLhs(), tr = getTransposeRhs();
    Value lhs = tl ? e.transposeLast2(getLhs()) : getLhs();
    Value rhs = tr ? e.transposeLast2(getRhs()) : getRhs();
    Value dl = e.sumTo(e.matmul(g, e.transposeLast2(rhs)), cast<RankedTensorType>(lhs.getType()));
    Value dr = e.sumTo(e.matmul(e.transposeLast2(lhs), g), cast<RankedTensorType>(rhs.getType()));
    Grads grads{tl ? e.transposeLast2(dl) : dl, tr ? e.transposeLast2(dr) : dr};
    if (getAccumulate()) // acc + product: the accumulator's gradient is the result's
      grads.push_back(g);
    return grads;
  });
}

/// Whether a constant integer tensor has no negative entry.
static bool nonNegativeConstant(Value v) {
  DenseIntElementsAttr values;
  if (!matchPattern(v, m_Constant(&values)))
    return false;
  return llvm::all_of(values.getValues<APInt>(), [](const APInt &i) { return !i.isNegative(); });
}

/// An integer constant of `type`'s shape and element type filled with v.
static Value intSplat(OpBuilder &b, Location loc, RankedTensorType type, int64_t v) {
  return ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(type, APInt(type.getElementTypeBitWidth(), v, /*isSigned=*/true)));
}

/// Indices in [-n, n) wrapped to [0, n): where(i < 0, i + n, i).
static Value wrapIndices(Emitter &e, Value indices, int64_t n) {
  auto type = cast<RankedTensorType>(indices.getType());
  Value negative = e.compare(ComparePredicate::lt, indices, intSplat(e.b, e.loc, type, 0));
  return e.where(negative, e.add(indices, intSplat(e.b, e.loc, type, n)), indices);
}

// Gather along axis 0 is an embedding lookup; its gradient is embedding_grad's scatter-add over
// the rows flattened to [V, rest]. Along another axis the same runs on the data with that axis
// moved to the front: the result's gradient is permuted to [indices..., data dims but axis...],
// scattered into [V, rest] and permuted back (a constant pick of q, k or v out of a fused
// projection, as Falcon's, is a gather on axis 2 or 3).
LogicalResult GatherOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto math = [&](Emitter &e, Value g) -> FailureOr<Grads> {
    auto data = getData().getType();
    int64_t rank = data.getRank();
    std::optional<int64_t> normalized = shape::normalizeAxis(static_cast<int64_t>(getAxis()), rank);
    if (!normalized)
      return emitOpError() << "axis " << getAxis() << " is out of range for rank " << rank;
    int64_t axis = *normalized;
    ArrayRef<int64_t> ids = getIndices().getType().getShape();
    int64_t nIds = static_cast<int64_t>(ids.size());
    // The result is [data[:axis], ids, data[axis+1:]]; bring the ids' dims to the front.
    if (axis != 0) {
      SmallVector<int64_t> perm;
      for (int64_t i = 0; i < nIds; ++i)
        perm.push_back(axis + i);
      for (int64_t i = 0; i < axis; ++i)
        perm.push_back(i);
      for (int64_t i = axis + nIds; i < rank - 1 + nIds; ++i)
        perm.push_back(i);
      g = e.transpose(g, perm);
    }
    // The data with `axis` in front: [V, rest...].
    SmallVector<int64_t> movedShape{data.getShape()[axis]};
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis)
        movedShape.push_back(data.getShape()[i]);
    int64_t rows = movedShape[0];
    int64_t rest = shape::numElements(dims(ArrayRef<int64_t>(movedShape).drop_front()));
    SmallVector<int64_t> rowShape(ids.begin(), ids.end());
    rowShape.push_back(rest);
    g = e.reshape(g, rowShape);
    // embedding_grad takes rows in [0, V); gather also takes [-V, 0).
    Value rowIds = getIndices();
    if (!nonNegativeConstant(rowIds))
      rowIds = wrapIndices(e, rowIds, rows);
    Value table =
        EmbeddingGradOp::create(b, getLoc(), withShape(g, {rows, rest}), g, rowIds, ArrayAttr());
    Value moved = e.reshape(table, movedShape);
    if (axis != 0) {
      // Inverse of [axis, 0..axis-1, axis+1..]: dim 0 goes back to position `axis`.
      SmallVector<int64_t> back;
      for (int64_t i = 0; i < rank; ++i)
        back.push_back(i < axis ? i + 1 : i == axis ? 0 : i);
      moved = e.transpose(moved, back);
    }
    return Grads{moved, Value()};
  };
  return vjp(*this, b, resultGrads, operandGrads, {getData()}, math);
}

// d data = scatter-add of dy into zeros at the gathered positions (repeated indices add up).
LogicalResult GatherElementsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                              SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getData()}, [&](Emitter &e, Value g) -> Grads {
    Value zeros = e.constantLike(getData(), 0.0);
    return {ScatterElementsOp::create(b, getLoc(), getData().getType(), zeros, getIndices(), g,
                                      getAxis(), /*accumulate=*/true),
            Value()};
  });
}

// Overwrite: d data is dy with the written positions zeroed, d updates is dy gathered at them.
// Accumulate: d data is dy itself.
LogicalResult ScatterElementsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                               SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getData()}, [&](Emitter &e, Value g) -> Grads {
    Value data =
        getAccumulate()
            ? g
            : ScatterElementsOp::create(b, getLoc(), g.getType(), g, getIndices(),
                                        e.constantLike(getUpdates(), 0.0), getAxis(), false)
                  .getResult();
    return {
        data, Value(),
        GatherElementsOp::create(b, getLoc(), getUpdates().getType(), g, getIndices(), getAxis())};
  });
}

// As scatter_elements; d updates gathers dy's slices at the index tuples: dy flattened to
// [prod(data[:k]), rest] and gathered on axis 0 at the tuples' row-major row numbers.
LogicalResult ScatterNdOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getData()}, [&](Emitter &e, Value g) -> Grads {
    Value dataGrad = getAccumulate()
                         ? g
                         : ScatterNdOp::create(b, getLoc(), g.getType(), g, getIndices(),
                                               e.constantLike(getUpdates(), 0.0), false)
                               .getResult();
    auto indices = getIndices().getType();
    ArrayRef<int64_t> data = getData().getType().getShape();
    int64_t k = indices.getShape().back();
    SmallVector<int64_t> tuples(indices.getShape().drop_back());
    // row = sum_j idx[..., j] * stride_j (negative entries wrapped first: idx + n where idx < 0).
    auto intType = [&](ArrayRef<int64_t> shape) {
      return RankedTensorType::get(shape, indices.getElementType());
    };
    auto intConstant = [&](ArrayRef<int64_t> shape, int64_t v) {
      return intSplat(b, getLoc(), intType(shape), v);
    };
    Value row;
    int64_t stride = 1;
    for (int64_t j = k - 1; j >= 0; --j) {
      SmallVector<int64_t> starts(indices.getRank(), 0), strides(indices.getRank(), 1);
      SmallVector<int64_t> limits(indices.getShape());
      starts.back() = j;
      limits.back() = j + 1;
      SmallVector<int64_t> one(tuples);
      one.push_back(1);
      Value col = SliceOp::create(b, getLoc(), intType(one), getIndices(), starts, limits, strides);
      col = e.reshape(col, tuples);
      Value wrapped = wrapIndices(e, col, data[j]);
      Value term = stride == 1 ? wrapped : e.mul(wrapped, intConstant(tuples, stride));
      row = row ? e.add(row, term) : term;
      stride *= data[j];
    }
    int64_t rest = shape::numElements(dims(data.drop_front(k)));
    Value flat = e.reshape(g, {stride, rest});
    SmallVector<int64_t> gathered(tuples);
    gathered.push_back(rest);
    Value rows = GatherOp::create(b, getLoc(), withShape(g, gathered), flat, row, 0);
    return {dataGrad, Value(), e.reshape(rows, getUpdates().getType().getShape())};
  });
}

// y_i = sum_{j<=i} x_j gives dx_j = sum_{i>=j} dy_i: the cumulative sum the other way round
// (exclusive stays exclusive).
LogicalResult CumSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getInput()}, [&](Emitter &, Value g) -> Grads {
    return {CumSumOp::create(b, getLoc(), getInput().getType(), g, getAxis(), getExclusive(),
                             !getReverse())};
  });
}

// sum: broadcast back; mean: and divide by the count; max/min: to the elements equal to the
// extremum, split evenly among ties (as torch.amax).
LogicalResult ReduceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto math = [&](Emitter &e, Value resultGrad) -> Grads {
    auto input = getInput().getType();
    SmallVector<int64_t> kept = keptShape(input.getShape(), getAxes());
    Value g = e.broadcastTo(e.reshape(resultGrad, kept), input);
    switch (getKind()) {
    case ReduceKind::sum:
      return {g};
    case ReduceKind::mean: {
      int64_t count = input.getNumElements() / std::max<int64_t>(1, shape::numElements(dims(kept)));
      return {e.scale(g, 1.0 / static_cast<double>(count))};
    }
    case ReduceKind::max:
    case ReduceKind::min: {
      Value extremum = e.broadcastTo(e.reshape(getResult(), kept), input);
      Value hit = e.indicator(e.compare(ComparePredicate::eq, getInput(), extremum), getInput());
      Value ties = e.broadcastTo(e.reduceSum(hit, getAxes(), /*keepDims=*/true), input);
      return {e.mul(e.div(g, ties), hit)};
    }
    }
    llvm_unreachable("every reduce kind has a case");
  };
  return vjp(*this, b, resultGrads, operandGrads, {getInput()}, math);
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, [&](Emitter &, Value g) -> Grads {
    return {SoftmaxGradOp::create(b, getLoc(), getType(), g, getResult(), getAxis())};
  });
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getInput()}, [&](Emitter &e, Value g) -> Grads {
    return {e.reshape(g, getInput().getType().getShape())};
  });
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getInput()}, [&](Emitter &e, Value g) -> Grads {
    ArrayRef<int64_t> perm = getPerm();
    SmallVector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[perm[i]] = static_cast<int64_t>(i);
    return {e.transpose(g, inverse)};
  });
}

// The slice's elements go back where they came from, zeros elsewhere: pad with `starts`
// before, the stride's gaps between and what is left after.
LogicalResult SliceOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getInput()}, [&](Emitter &e, Value g) -> Grads {
    auto input = getInput().getType();
    auto out = getType().getShape();
    if (getType().getNumElements() == 0)
      return {e.constant(input, 0)};
    SmallVector<int64_t> low, high, interior;
    for (size_t d = 0; d < out.size(); ++d) {
      int64_t start = getStarts()[d], stride = getStrides()[d];
      int64_t last = start + (out[d] - 1) * stride;
      low.push_back(start);
      high.push_back(input.getShape()[d] - 1 - last);
      interior.push_back(stride - 1);
    }
    return {PadOp::create(b, getLoc(), input, g, low, high, interior)};
  });
}

// Each input gets its slice of the gradient along the concat axis.
LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getResult()}, [&](Emitter &, Value g) {
    auto out = getType().getShape();
    int64_t axis = *shape::normalizeAxis(static_cast<int64_t>(getAxis()), out.size());
    int64_t offset = 0;
    Grads grads;
    for (Value input : getInputs()) {
      auto type = cast<RankedTensorType>(input.getType());
      SmallVector<int64_t> starts(out.size(), 0), limits(out.begin(), out.end()),
          strides(out.size(), 1);
      starts[axis] = offset;
      limits[axis] = offset + type.getShape()[axis];
      offset = limits[axis];
      grads.push_back(SliceOp::create(b, getLoc(), type, g, starts, limits, strides));
    }
    return grads;
  });
}

LogicalResult BroadcastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  return vjp(*this, b, resultGrads, operandGrads, {getInput()},
             [&](Emitter &e, Value g) -> Grads { return {e.sumTo(g, getInput().getType())}; });
}

// Back to the input's precision; an integer or i1 input has no gradient.
LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  auto math = [&](Emitter &, Value g) -> Grads {
    return {CastOp::create(b, getLoc(), getInput().getType(), g).getResult()};
  };
  return vjp(*this, b, resultGrads, operandGrads, {getInput(), getResult()}, math);
}
