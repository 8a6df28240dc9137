// mega-training-autodiff: reverse-mode differentiation of @forward_backward's loss through the
// ops' GradientOpInterface, accumulated into one `grad.<param>` state per parameter.
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <cassert>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGAUTODIFF
#include "passes/training/Passes.h.inc"

namespace {

bool isFloatTensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && isa<FloatType>(tensor.getElementType());
}
bool isFloatTensor(Value v) { return isFloatTensor(v.getType()); }

/// The reverse walk over one function's single block.
class Differentiator {
public:
  Differentiator(func::FuncOp f) : f_(f), block_(f.getBody().front()) {}

  /// Adds the accumulators and their updates; on failure a diagnostic was emitted.
  /// `seed`: the value of d(loss), or null for 1.
  LogicalResult run(unsigned lossIndex, Value seed);

private:
  /// Marks the float values that depend on a parameter (`varied_`) and those the loss depends
  /// on through float values (`useful_`).
  void markActive(Value loss);
  bool active(Operation &op) const;
  /// Adds `grad` to the gradient of `v`.
  void accumulate(OpBuilder &b, Value v, Value grad);

  func::FuncOp f_;
  Block &block_;
  SmallVector<BlockArgument> params_;
  SmallVector<StringAttr> names_;
  DenseSet<Value> varied_, useful_;
  DenseMap<Value, Value> grads_;
};

void Differentiator::markActive(Value loss) {
  for (BlockArgument p : params_)
    varied_.insert(p);
  for (Operation &op : block_)
    if (llvm::any_of(op.getOperands(), [&](Value v) { return varied_.contains(v); }))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied_.insert(r);
  useful_.insert(loss);
  for (Operation &op : llvm::reverse(block_))
    if (llvm::any_of(op.getResults(), [&](Value r) { return useful_.contains(r); }))
      for (Value v : op.getOperands())
        if (isFloatTensor(v))
          useful_.insert(v);
}

/// An op the gradient flows through: a parameter-dependent operand and a result the loss
/// depends on.
bool Differentiator::active(Operation &op) const {
  return llvm::any_of(op.getOperands(),
                      [&](Value v) { return varied_.contains(v) && useful_.contains(v); }) &&
         llvm::any_of(op.getResults(),
                      [&](Value r) { return varied_.contains(r) && useful_.contains(r); });
}

void Differentiator::accumulate(OpBuilder &b, Value v, Value grad) {
  auto [it, inserted] = grads_.try_emplace(v, grad);
  if (!inserted)
    it->second = mega::AddOp::create(b, grad.getLoc(), v.getType(), it->second, grad);
}

LogicalResult Differentiator::run(unsigned lossIndex, Value seed) {
  MLIRContext *ctx = f_.getContext();
  for (BlockArgument arg : f_.getArguments()) {
    Attribute name = f_.getArgAttr(arg.getArgNumber(), mega::kParamAttr);
    if (!name)
      continue;
    if (!isa<StringAttr>(name))
      return f_.emitError() << "mega-training-autodiff: argument " << arg.getArgNumber()
                            << " has a mega.param that is not a name";
    if (!isFloatTensor(arg))
      return f_.emitError() << "mega-training-autodiff: parameter '"
                            << cast<StringAttr>(name).getValue() << "' is " << arg.getType()
                            << "; parameters must be floating-point tensors";
    params_.push_back(arg);
    names_.push_back(cast<StringAttr>(name));
  }
  if (params_.empty())
    return f_.emitError() << "mega-training-autodiff: @" << f_.getSymName()
                          << " has no parameters (arguments with mega.param) to differentiate";
  for (unsigned i = 0; i < f_.getNumArguments(); ++i)
    if (f_.getArgAttr(i, kStateAttr))
      return f_.emitError() << "mega-training-autodiff: @" << f_.getSymName()
                            << " already has state arguments (it was differentiated before)";

  auto ret = cast<func::ReturnOp>(block_.getTerminator());
  Value loss = ret.getOperand(lossIndex);
  markActive(loss);

  // Every op the gradient must pass through needs a rule; report them all before failing.
  bool missing = false;
  for (Operation &op : block_)
    if (active(op) && !isa<mega::GradientOpInterface>(op)) {
      op.emitError() << op.getName() << " has no gradient rule (it lies between a parameter "
                     << "and the loss)";
      missing = true;
    }
  if (missing)
    return failure();

  OpBuilder b(ret);
  auto lossType = cast<RankedTensorType>(loss.getType());
  APFloat one(1.0);
  bool lost = false;
  one.convert(cast<FloatType>(lossType.getElementType()).getFloatSemantics(),
              APFloat::rmNearestTiesToEven, &lost);
  grads_[loss] = seed ? seed
                      : Value(mega::ConstantOp::create(b, loss.getLoc(),
                                                       DenseElementsAttr::get(lossType, one)));

  // Ops in reverse: all uses of a value come after it, so its gradient is complete when its
  // producer is reached.
  SmallVector<Operation *> forward;
  for (Operation &op : block_)
    if (active(op))
      forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    for (Value r : op->getResults())
      resultGrads.push_back(grads_.lookup(r));
    if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
      continue;
    SmallVector<Value> operandGrads;
    if (failed(cast<mega::GradientOpInterface>(op).buildGradient(b, resultGrads, operandGrads)))
      return failure();
    assert(operandGrads.size() == op->getNumOperands() && "one gradient per operand");
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      if (!grad || !varied_.contains(operand) || !useful_.contains(operand))
        continue;
      assert(mega::sameShapesAndElementTypes(TypeRange(operand.getType()),
                                             TypeRange(grad.getType())) &&
             "a gradient has its operand's type");
      accumulate(b, operand, grad);
    }
  }

  // acc' = acc + grad per parameter, as new state arguments and results.
  unsigned nArgs = f_.getNumArguments(), nResults = f_.getNumResults();
  SmallVector<unsigned> argIndices, resultIndices;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> argAttrs, resultAttrs;
  SmallVector<Location> locs;
  for (auto [param, name] : llvm::zip(params_, names_)) {
    StringAttr state = StringAttr::get(ctx, "grad." + name.getValue());
    argIndices.push_back(nArgs);
    resultIndices.push_back(nResults);
    types.push_back(param.getType());
    argAttrs.push_back(DictionaryAttr::get(ctx, {NamedAttribute(kStateAttr, state)}));
    resultAttrs.push_back(DictionaryAttr::get(ctx, {NamedAttribute(kUpdatesAttr, state)}));
    locs.push_back(param.getLoc());
  }
  if (failed(f_.insertArguments(argIndices, types, argAttrs, locs)))
    return f_.emitError() << "mega-training-autodiff: cannot add the gradient accumulators";
  SmallVector<Value> updated;
  for (auto [i, param] : llvm::enumerate(params_)) {
    Value acc = f_.getArgument(nArgs + i);
    Value grad = grads_.lookup(param);
    updated.push_back(grad ? Value(mega::AddOp::create(b, param.getLoc(), acc.getType(), acc, grad))
                           : acc);
  }
  ret->insertOperands(ret->getNumOperands(), updated);
  if (failed(f_.insertResults(resultIndices, types, resultAttrs)))
    return f_.emitError() << "mega-training-autodiff: cannot add the accumulator updates";

  // Drop what nobody reads: halves of rules whose operand needs no gradient, and forward
  // values only the dropped outputs used.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block_)))
    if (isOpTriviallyDead(&op))
      op.erase();
  return success();
}

struct TrainingAutodiffPass : impl::TrainingAutodiffBase<TrainingAutodiffPass> {
  using TrainingAutodiffBase::TrainingAutodiffBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult run(ModuleOp module) {
    auto f = module.lookupSymbol<func::FuncOp>(function);
    if (!f)
      return module.emitError() << "mega-training-autodiff: no function @" << function
                                << " in the module (run mega-training-loss first)";
    if (f.isExternal() || !f.getBody().hasOneBlock())
      return f.emitError() << "mega-training-autodiff: @" << function
                           << " must have a body of one block";
    std::optional<unsigned> lossIndex;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (auto out = f.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr);
          out && out.getValue() == loss)
        lossIndex = i;
    if (!lossIndex)
      return f.emitError() << "mega-training-autodiff: @" << function << " has no result named \""
                           << loss << "\" (mega.output)";
    auto type = dyn_cast<RankedTensorType>(f.getResultTypes()[*lossIndex]);
    if (!type || type.getRank() != 0 || !isFloatTensor(type))
      return f.emitError() << "mega-training-autodiff: the loss must be a 0-d float tensor, not "
                           << f.getResultTypes()[*lossIndex];
    Value seed;
    if (!lossScale.empty())
      for (unsigned i = 0; i < f.getNumArguments(); ++i)
        if (auto in = f.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
            in && in.getValue() == lossScale) {
          if (f.getArgumentTypes()[i] != type)
            return f.emitError() << "mega-training-autodiff: the loss scale '" << lossScale
                                 << "' is " << f.getArgumentTypes()[i] << "; it must be " << type
                                 << ", the loss's type";
          seed = f.getArgument(i);
        }
    return Differentiator(f).run(*lossIndex, seed);
  }
};

} // namespace
} // namespace megac::passes
