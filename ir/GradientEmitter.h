// Helpers of the gradient rules (ir/GradientRules*.cpp): an emitter of the mega ops rules are
// written in, and the conventions every rule shares. Internal to ir/.
#pragma once

#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cassert>
#include <utility>

namespace mega::grad {

using namespace mlir;

inline RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }
inline shape::Dims dims(ArrayRef<int64_t> a) { return {a.data(), a.size()}; }

inline bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// The tensor type `like` with another shape (same element type and encoding-free).
inline RankedTensorType withShape(Value like, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, tensorOf(like).getElementType());
}

/// Builds the mega ops the rules are written in, all at one location (the forward op's).
struct Emitter {
  OpBuilder &b;
  Location loc;

  Value constant(RankedTensorType type, double value) {
    auto element = cast<FloatType>(type.getElementType());
    APFloat f(value);
    bool lost = false;
    f.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return ConstantOp::create(b, loc, DenseElementsAttr::get(type, f));
  }
  Value constantLike(Value like, double value) { return constant(tensorOf(like), value); }

  Value add(Value x, Value y) { return AddOp::create(b, loc, x.getType(), x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x.getType(), x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x.getType(), x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x.getType(), x, y); }
  Value neg(Value x) { return NegOp::create(b, loc, x.getType(), x); }
  Value scale(Value x, double s) { return mul(x, constantLike(x, s)); }

  Value compare(ComparePredicate predicate, Value x, Value y) {
    auto i1 = RankedTensorType::get(tensorOf(x).getShape(), b.getI1Type());
    return CompareOp::create(b, loc, i1, predicate, x, y);
  }
  /// 1.0 where `mask` holds, else 0.0, in the element type of `like`.
  Value indicator(Value mask, Value like) {
    return CastOp::create(b, loc, withShape(like, tensorOf(mask).getShape()), mask);
  }
  Value where(Value cond, Value t, Value f) {
    return WhereOp::create(b, loc, t.getType(), cond, t, f);
  }

  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (tensorOf(x).getShape() == shape)
      return x;
    return ReshapeOp::create(b, loc, withShape(x, shape), x);
  }
  Value broadcastTo(Value x, RankedTensorType type) {
    if (tensorOf(x).getShape() == type.getShape())
      return x;
    return BroadcastOp::create(b, loc, type, x);
  }
  Value reduceSum(Value x, ArrayRef<int64_t> axes, bool keepDims) {
    shape::Result r = shape::reduce(dims(tensorOf(x).getShape()), dims(axes), keepDims);
    assert(r.ok() && "reduction axes come from a valid shape");
    return ReduceOp::create(b, loc, withShape(x, r.shape), ReduceKind::sum, x, axes, keepDims);
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    shape::Result r = shape::transpose(dims(tensorOf(x).getShape()), dims(perm));
    assert(r.ok() && "a permutation of the value's own rank");
    return TransposeOp::create(b, loc, withShape(x, r.shape), x, perm);
  }
  /// Swaps the last two dims (a matrix transpose of each batch entry).
  Value transposeLast2(Value x) {
    int64_t rank = tensorOf(x).getRank();
    SmallVector<int64_t> perm;
    for (int64_t i = 0; i < rank; ++i)
      perm.push_back(i);
    std::swap(perm[rank - 1], perm[rank - 2]);
    return transpose(x, perm);
  }
  Value matmul(Value x, Value y) {
    shape::Result r = shape::matmul(dims(tensorOf(x).getShape()), dims(tensorOf(y).getShape()));
    assert(r.ok() && "gradient products of a valid matmul");
    return MatmulOp::create(b, loc, withShape(x, r.shape), x, y);
  }

  /// The adjoint of numpy broadcasting: sums `g` over the dims `target` was broadcast along
  /// (leading dims it lacks and its size-1 dims) and reshapes to `target`.
  Value sumTo(Value g, RankedTensorType target) {
    auto from = tensorOf(g).getShape();
    auto to = target.getShape();
    if (from == to)
      return g;
    int64_t lead = static_cast<int64_t>(from.size()) - static_cast<int64_t>(to.size());
    SmallVector<int64_t> axes;
    for (int64_t i = 0; i < static_cast<int64_t>(from.size()); ++i)
      if (i < lead || (to[i - lead] == 1 && from[i] != 1))
        axes.push_back(i);
    Value s = axes.empty() ? g : reduceSum(g, axes, /*keepDims=*/false);
    return reshape(s, to);
  }
};

/// The gradients a rule's math returns: one per operand, in operand order (null: none).
using Grads = SmallVector<Value, 4>;

/// The preamble every rule of a one-result op shares, so that a rule states only its math.
/// With no incoming gradient, or when one of `floats` (the values whose element type makes the
/// op differentiable: a shape op's input, a gather's data) is not a float tensor, every operand
/// gets none. Otherwise `math(e, g)`, given an emitter at the op and the result's gradient `g`,
/// returns the operands' gradients: `Grads`, or `FailureOr<Grads>` for a rule that can fail
/// (after a diagnostic on the op).
template <typename Math>
LogicalResult vjp(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                  SmallVectorImpl<Value> &operandGrads, ArrayRef<Value> floats, Math &&math) {
  if (resultGrads.size() != 1 || !resultGrads[0] || !llvm::all_of(floats, isFloatTensor)) {
    operandGrads.append(op->getNumOperands(), Value());
    return success();
  }
  Emitter e{b, op->getLoc()};
  FailureOr<Grads> grads = math(e, resultGrads[0]);
  if (failed(grads))
    return failure();
  assert(grads->size() == op->getNumOperands() && "one gradient per operand");
  operandGrads.append(grads->begin(), grads->end());
  return success();
}

/// `vjp` of an op differentiable whatever its operands' types.
template <typename Math>
LogicalResult vjp(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                  SmallVectorImpl<Value> &operandGrads, Math &&math) {
  return vjp(op, b, resultGrads, operandGrads, {}, std::forward<Math>(math));
}

} // namespace mega::grad
