// mega-split-fused-projections: a linear whose output columns are cut into equal consecutive
// parts (GPT-2's c_attn: q | k | v) becomes one linear per part, each reading its part of the one
// parameter through a view (Passes.td).
#include "passes/input/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_SPLITFUSEDPROJECTIONS
#include "passes/input/Passes.h.inc"

namespace {

/// A parameter argument of `f` used by exactly one op, or null.
BlockArgument soleUseParameter(func::FuncOp f, Value v) {
  auto arg = dyn_cast_or_null<BlockArgument>(v);
  if (!arg || arg.getOwner()->getParentOp() != f.getOperation() ||
      !f.getArgAttr(arg.getArgNumber(), mega::kParamAttr) || !arg.hasOneUse())
    return {};
  return arg;
}

/// One fused projection: y = linear(x, W or transpose(W), b), optionally reshaped keeping its
/// last dim, then cut by slices on the last dim into `parts` equal consecutive pieces.
struct FusedProjection {
  mega::LinearOp linear;
  mega::TransposeOp transpose; // Conv1D's weight [in, P], transposed at the use; or null
  BlockArgument weight, bias;  // bias may be null
  mega::ReshapeOp reshape;     // between the linear and the slices, or null
  SmallVector<mega::SliceOp> slices; // by start
  int64_t parts = 0, width = 0;
};

/// The slices of `y` on its last dim, if they are all of its uses and tile it in equal parts.
bool collectSlices(Value y, FusedProjection &p) {
  auto type = cast<RankedTensorType>(y.getType());
  int64_t rank = type.getRank(), total = type.getShape().back();
  if (rank < 1 || y.use_empty())
    return false;
  for (Operation *user : y.getUsers()) {
    auto slice = dyn_cast<mega::SliceOp>(user);
    if (!slice)
      return false;
    ArrayRef<int64_t> starts = slice.getStarts(), limits = slice.getLimits(),
                      strides = slice.getStrides();
    for (int64_t d = 0; d < rank; ++d) {
      if (strides[d] != 1)
        return false;
      if (d + 1 < rank && (starts[d] != 0 || limits[d] != type.getDimSize(d)))
        return false;
    }
    p.slices.push_back(slice);
  }
  llvm::sort(p.slices, [](mega::SliceOp a, mega::SliceOp b) {
    return a.getStarts().back() < b.getStarts().back();
  });
  int64_t width = p.slices.front().getLimits().back() - p.slices.front().getStarts().back();
  if (p.slices.size() < 2 || width <= 0 || width * int64_t(p.slices.size()) != total)
    return false;
  for (size_t i = 0; i < p.slices.size(); ++i)
    if (p.slices[i].getStarts().back() != int64_t(i) * width ||
        p.slices[i].getLimits().back() != int64_t(i + 1) * width)
      return false;
  p.parts = int64_t(p.slices.size());
  p.width = width;
  return true;
}

std::optional<FusedProjection> match(func::FuncOp f, mega::LinearOp linear) {
  FusedProjection p;
  p.linear = linear;
  Value w = linear.getWeight();
  if (auto t = w.getDefiningOp<mega::TransposeOp>()) {
    if (t.getPerm() != ArrayRef<int64_t>{1, 0} || !w.hasOneUse())
      return std::nullopt;
    p.transpose = t;
    w = t.getInput();
  }
  p.weight = soleUseParameter(f, w);
  if (!p.weight || cast<RankedTensorType>(p.weight.getType()).getRank() != 2)
    return std::nullopt;
  if (Value b = linear.getBias()) {
    p.bias = soleUseParameter(f, b);
    if (!p.bias)
      return std::nullopt;
  }
  Value y = linear.getResult();
  if (y.hasOneUse())
    if (auto reshape = dyn_cast<mega::ReshapeOp>(*y.getUsers().begin())) {
      auto in = cast<RankedTensorType>(y.getType()), out = reshape.getType();
      if (out.getRank() >= 1 && out.getShape().back() == in.getShape().back()) {
        p.reshape = reshape;
        y = reshape.getResult();
      }
    }
  if (!collectSlices(y, p))
    return std::nullopt;
  return p;
}

RankedTensorType withShape(Type type, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, cast<RankedTensorType>(type).getElementType());
}

/// Part `i` of `param` (whose dim `axis` is the part dim, size parts) as a tensor without it.
Value partOf(OpBuilder &b, Location loc, Value param, int64_t axis, int64_t i) {
  auto type = cast<RankedTensorType>(param.getType());
  SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape()),
      strides(type.getRank(), 1), kept;
  starts[axis] = i;
  limits[axis] = i + 1;
  SmallVector<int64_t> sliced(type.getShape());
  sliced[axis] = 1;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d != axis)
      kept.push_back(type.getDimSize(d));
  Value s = mega::SliceOp::create(b, loc, withShape(type, sliced), param, starts, limits, strides);
  return mega::ReshapeOp::create(b, loc, withShape(type, kept), s);
}

/// Gives `arg` the shape `shape` (the same elements in the same order) and records the shape
/// the model's own files hold.
void reshapeArgument(func::FuncOp f, BlockArgument arg, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(arg.getType());
  f.setArgAttr(arg.getArgNumber(), mega::kSourceShapeAttr,
               DenseI64ArrayAttr::get(f.getContext(), type.getShape()));
  arg.setType(withShape(type, shape));
}

void rewrite(func::FuncOp f, FusedProjection &p) {
  OpBuilder b(p.linear);
  Location loc = p.linear.getLoc();
  auto w = cast<RankedTensorType>(p.weight.getType());
  int64_t n = p.parts, width = p.width;
  // [P, in] -> [n, p, in]; Conv1D's [in, P] -> [in, n, p].
  int64_t axis = p.transpose ? 1 : 0;
  if (p.transpose)
    reshapeArgument(f, p.weight, {w.getDimSize(0), n, width});
  else
    reshapeArgument(f, p.weight, {n, width, w.getDimSize(1)});
  if (p.bias)
    reshapeArgument(f, p.bias, {n, width});

  auto y = cast<RankedTensorType>(p.linear.getType());
  SmallVector<int64_t> partShape(y.getShape());
  partShape.back() = width;
  for (int64_t i = 0; i < n; ++i) {
    Value weight = partOf(b, loc, p.weight, axis, i);
    if (p.transpose) {
      auto t = cast<RankedTensorType>(weight.getType());
      weight = mega::TransposeOp::create(b, loc, withShape(t, {t.getDimSize(1), t.getDimSize(0)}),
                                         weight, ArrayRef<int64_t>{1, 0});
    }
    Value bias = p.bias ? partOf(b, loc, p.bias, 0, i) : Value();
    Value part = mega::LinearOp::create(b, loc, withShape(y, partShape), p.linear.getInput(),
                                        weight, bias);
    if (p.reshape) {
      SmallVector<int64_t> shape(p.reshape.getType().getShape());
      shape.back() = width;
      part = mega::ReshapeOp::create(b, loc, withShape(y, shape), part);
    }
    p.slices[i].getResult().replaceAllUsesWith(part);
    p.slices[i].erase();
  }
  if (p.reshape)
    p.reshape.erase();
  p.linear.erase();
  if (p.transpose)
    p.transpose.erase();
  f.setType(FunctionType::get(f.getContext(), f.getBody().front().getArgumentTypes(),
                              f.getFunctionType().getResults()));
}

struct SplitFusedProjectionsPass
    : public impl::SplitFusedProjectionsBase<SplitFusedProjectionsPass> {
  void runOnOperation() override {
    for (auto f : getOperation().getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      SmallVector<mega::LinearOp> linears;
      f.walk([&](mega::LinearOp op) { linears.push_back(op); });
      for (mega::LinearOp linear : linears)
        if (std::optional<FusedProjection> p = match(f, linear))
          rewrite(f, *p);
    }
  }
};

} // namespace
} // namespace megac::passes
