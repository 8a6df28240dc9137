// mega-training-precision: f64 conversion of a whole module, or bf16/fp16 mixed precision of
// @forward_backward (half compute, f32 master weights, f32 norms/softmax/loss).
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGPRECISION
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kForwardBackward = "forward_backward";
constexpr StringLiteral kLossScale = "loss_scale";

/// `type` with an f32 element type replaced by `to`; any other type unchanged.
Type retype(Type type, Type to) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.getElementType().isF32())
    return type;
  return tensor.clone(to);
}

/// `dense` (f32) with every value rounded to nearest even in `to`'s semantics.
DenseElementsAttr convertDense(DenseElementsAttr dense, FloatType to) {
  return dense.mapValues(to, [&](const APFloat &value) {
    APFloat converted = value;
    bool lost = false;
    converted.convert(to.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return converted.bitcastToAPInt();
  });
}

/// Every f32 tensor of the module to f64: signatures, block arguments, results, constants.
LogicalResult convertModuleToF64(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  auto f64 = Float64Type::get(ctx);
  WalkResult walked = module.walk([&](Operation *op) -> WalkResult {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(retype(arg.getType(), f64));
    for (OpResult result : op->getResults())
      result.setType(retype(result.getType(), f64));
    if (auto func = dyn_cast<func::FuncOp>(op)) {
      SmallVector<Type> inputs, results;
      for (Type type : func.getArgumentTypes())
        inputs.push_back(retype(type, f64));
      for (Type type : func.getResultTypes())
        results.push_back(retype(type, f64));
      func.setFunctionType(FunctionType::get(ctx, inputs, results));
    }
    if (auto constant = dyn_cast<mega::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        return op->emitError("mega-training-precision: cannot convert this constant to f64 (not "
                             "a dense elements attribute)");
      if (dense.getElementType().isF32())
        constant.setValueAttr(convertDense(dense, f64));
    }
    return WalkResult::advance();
  });
  return failure(walked.wasInterrupted());
}

bool isFloatTensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && isa<FloatType>(tensor.getElementType());
}

/// Ops computed in f32 under mixed precision: normalization statistics, softmax, the loss.
bool keepsF32(Operation *op) {
  return isa<mega::LayerNormOp, mega::RmsNormOp, mega::SoftmaxOp, mega::CrossEntropyOp>(op);
}

/// The bf16/fp16 rewrite of one function's single block.
class MixedPrecision {
public:
  MixedPrecision(func::FuncOp f, FloatType half) : f_(f), half_(half) {}

  LogicalResult run(bool lossScale);

private:
  /// `v` with the element type `element`: a cast right after v's definition, made once and
  /// shared by every user (a parameter is cast once).
  Value as(OpBuilder &b, Value v, FloatType element);

  func::FuncOp f_;
  FloatType half_;
  DenseMap<std::pair<Value, Type>, Value> casts_;
};

Value MixedPrecision::as(OpBuilder &b, Value v, FloatType element) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getElementType() == element)
    return v;
  Value &slot = casts_[{v, element}];
  if (!slot) {
    OpBuilder::InsertionGuard guard(b);
    if (Operation *def = v.getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(v.getParentBlock());
    slot = mega::CastOp::create(b, v.getLoc(), type.clone(element), v);
  }
  return slot;
}

LogicalResult MixedPrecision::run(bool lossScale) {
  MLIRContext *ctx = f_.getContext();
  auto f32 = Float32Type::get(ctx);
  Block &block = f_.getBody().front();
  OpBuilder b(ctx);
  // The loss tail: cross_entropy and everything computed from it stays f32.
  DenseSet<Value> lossTail;
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : ops) {
    bool tail = isa<mega::CrossEntropyOp>(op) ||
                llvm::any_of(op->getOperands(), [&](Value v) { return lossTail.contains(v); });
    bool wide = tail || keepsF32(op);
    FloatType element = wide ? FloatType(f32) : half_;
    for (OpOperand &operand : op->getOpOperands()) {
      Value v = operand.get();
      if (!isFloatTensor(v.getType()))
        continue;
      auto from = cast<FloatType>(cast<RankedTensorType>(v.getType()).getElementType());
      if (from != f32 && from != half_)
        return op->emitError() << "mega-training-precision: " << op->getName() << " has a "
                               << v.getType() << " operand; the model must be f32";
      operand.set(as(b, v, element));
    }
    if (auto constant = dyn_cast<mega::ConstantOp>(op); constant && !wide) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        return op->emitError("mega-training-precision: a constant that is not a dense elements "
                             "attribute");
      if (dense.getElementType().isF32())
        constant.setValueAttr(convertDense(dense, half_));
    }
    // Results follow the compute precision; norms and softmax give f32 (their users cast).
    if (!wide)
      for (OpResult r : op->getResults())
        r.setType(retype(r.getType(), half_));
    if (tail)
      for (OpResult r : op->getResults())
        lossTail.insert(r);
  }
  // The returned loss (and anything else returned) keeps its f32 type.
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  for (auto [i, operand] : llvm::enumerate(ret->getOpOperands())) {
    Type want = f_.getResultTypes()[i];
    if (operand.get().getType() != want && isFloatTensor(want))
      operand.set(
          as(b, operand.get(), cast<FloatType>(cast<RankedTensorType>(want).getElementType())));
  }
  if (!lossScale)
    return success();
  // fp16: the loss-scale input autodiff seeds d(loss) with (TrainingAutodiff's loss-scale).
  unsigned n = f_.getNumArguments();
  auto attrs = DictionaryAttr::get(ctx, {NamedAttribute(StringAttr::get(ctx, mega::kInputAttr),
                                                        StringAttr::get(ctx, kLossScale))});
  if (failed(f_.insertArgument(n, RankedTensorType::get({}, f32), attrs, f_.getLoc())))
    return f_.emitError("mega-training-precision: cannot add the loss_scale input");
  return success();
}

struct TrainingPrecisionPass : impl::TrainingPrecisionBase<TrainingPrecisionPass> {
  using TrainingPrecisionBase::TrainingPrecisionBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult run(ModuleOp module) {
    if (precision == "fp32")
      return success();
    if (precision == "fp64")
      return convertModuleToF64(module);
    if (precision != "bf16" && precision != "fp16")
      return module.emitError() << "mega-training-precision: precision '" << precision
                                << "' is not fp32, fp64, bf16 or fp16";
    auto fb = module.lookupSymbol<func::FuncOp>(kForwardBackward);
    if (!fb)
      return module.emitError() << "mega-training-precision: no function @" << kForwardBackward
                                << " in the module (run mega-training-loss first)";
    if (fb.isExternal() || !fb.getBody().hasOneBlock())
      return fb.emitError() << "mega-training-precision: @" << kForwardBackward
                            << " must have a body of one block";
    for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
      if (fb.getArgAttr(i, kStateAttr))
        return fb.emitError() << "mega-training-precision: @" << kForwardBackward
                              << " already has state arguments; run it before "
                                 "mega-training-autodiff";
      if (auto in = fb.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
          in && in.getValue() == kLossScale)
        return fb.emitError() << "mega-training-precision: @" << kForwardBackward
                              << " already has a loss_scale input";
      if (auto type = dyn_cast<RankedTensorType>(fb.getArgumentTypes()[i]);
          type && isa<FloatType>(type.getElementType()) && !type.getElementType().isF32())
        return fb.emitError() << "mega-training-precision: argument " << i << " is " << type
                              << "; mixed precision starts from an f32 model";
    }
    MLIRContext *ctx = module.getContext();
    FloatType half =
        precision == "bf16" ? FloatType(BFloat16Type::get(ctx)) : FloatType(Float16Type::get(ctx));
    return MixedPrecision(fb, half).run(precision == "fp16");
  }
};

} // namespace
} // namespace megac::passes
