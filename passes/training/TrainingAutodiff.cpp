// mega-training-autodiff: reverse-mode differentiation of @forward_backward's loss (and of the
// pipeline chunks @forward_backward.c<c>, docs/pipeline.md) through the ops' GradientOpInterface,
// accumulated into one `grad.<param>` state per parameter.
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

/// On a parameter: the mesh axes its local gradient is partial over (docs/pipeline.md).
constexpr const char *kParamGradPartialAttr = "mega.grad_partial";

/// The reverse walk over one function's single block.
class Differentiator {
public:
  Differentiator(func::FuncOp f) : f_(f), block_(f.getBody().front()) {}

  /// Adds the accumulators and their updates; on failure a diagnostic was emitted.
  /// `lossIndex`: the loss result, if the function has it; `seed`: the value of d(loss), or
  /// null for 1. Results named `act.c<c>` (a pipeline chunk's activations out) are seeded by new
  /// `grad.act.c<c>` arguments; arguments named `act.c<c>` get their gradient as results.
  /// `lossScale`: the loss scale input (fp16), which seeds auxiliary losses
  /// (mega.add_aux_loss) as it seeds the loss; null for 1.
  LogicalResult run(std::optional<unsigned> lossIndex, Value seed, Value lossScale);

private:
  /// Marks the float values that depend on a parameter (`varied_`) and those the loss depends
  /// on through float values (`useful_`).
  void markActive(ArrayRef<Value> outputs);
  bool active(Operation &op) const;
  /// Adds `grad` to the gradient of `v`.
  void accumulate(OpBuilder &b, Value v, Value grad);

  func::FuncOp f_;
  Block &block_;
  SmallVector<BlockArgument> params_;
  SmallVector<StringAttr> names_;
  /// Pipeline ports: the chunk's activation arguments and results (docs/pipeline.md).
  SmallVector<BlockArgument> actArgs_;
  SmallVector<unsigned> actResults_;
  DenseSet<Value> varied_, useful_;
  DenseMap<Value, Value> grads_;
};

void Differentiator::markActive(ArrayRef<Value> outputs) {
  for (BlockArgument p : params_)
    varied_.insert(p);
  for (BlockArgument a : actArgs_)
    varied_.insert(a);
  for (Operation &op : block_)
    if (llvm::any_of(op.getOperands(), [&](Value v) { return varied_.contains(v); }))
      for (Value r : op.getResults())
        if (isFloatTensor(r))
          varied_.insert(r);
  for (Value out : outputs)
    useful_.insert(out);
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

bool isActivationPort(StringAttr name) { return name && name.getValue().starts_with("act.c"); }

LogicalResult Differentiator::run(std::optional<unsigned> lossIndex, Value seed,
                                  Value lossScale) {
  MLIRContext *ctx = f_.getContext();
  for (BlockArgument arg : f_.getArguments()) {
    if (isActivationPort(f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kInputAttr)) &&
        isFloatTensor(arg))
      actArgs_.push_back(arg);
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
  for (unsigned i = 0; i < f_.getNumResults(); ++i)
    if (isActivationPort(f_.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr)))
      actResults_.push_back(i);
  if (params_.empty() && actArgs_.empty())
    return f_.emitError() << "mega-training-autodiff: @" << f_.getSymName()
                          << " has no parameters (arguments with mega.param) to differentiate";
  for (unsigned i = 0; i < f_.getNumArguments(); ++i)
    if (f_.getArgAttr(i, kStateAttr))
      return f_.emitError() << "mega-training-autodiff: @" << f_.getSymName()
                            << " already has state arguments (it was differentiated before)";

  auto ret = cast<func::ReturnOp>(block_.getTerminator());
  SmallVector<Value> outputs;
  if (lossIndex)
    outputs.push_back(ret.getOperand(*lossIndex));
  for (unsigned i : actResults_)
    outputs.push_back(ret.getOperand(i));
  markActive(outputs);

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
  if (lossIndex) {
    Value loss = ret.getOperand(*lossIndex);
    auto lossType = cast<RankedTensorType>(loss.getType());
    APFloat one(1.0);
    bool lost = false;
    one.convert(cast<FloatType>(lossType.getElementType()).getFloatSemantics(),
                APFloat::rmNearestTiesToEven, &lost);
    grads_[loss] = seed ? seed
                        : Value(mega::ConstantOp::create(b, loss.getLoc(),
                                                         DenseElementsAttr::get(lossType, one)));
  }
  // Auxiliary losses join the objective where they are computed (Megatron's
  // MoEAuxLossAutoScaler): their gradient is the loss's seed, in whatever pipeline chunk.
  for (Operation &op : block_)
    if (auto aux = dyn_cast<mega::AddAuxLossOp>(op)) {
      Value term = aux.getAux();
      if (!varied_.contains(term) || !useful_.contains(term))
        continue;
      auto type = cast<RankedTensorType>(term.getType());
      Value one = lossScale;
      if (!one) {
        APFloat v(1.0);
        bool lost = false;
        v.convert(cast<FloatType>(type.getElementType()).getFloatSemantics(),
                  APFloat::rmNearestTiesToEven, &lost);
        one = mega::ConstantOp::create(b, aux.getLoc(), DenseElementsAttr::get(type, v));
      } else if (one.getType() != type) {
        one = mega::CastOp::create(b, aux.getLoc(), type, one);
      }
      accumulate(b, term, one);
    }
  // A chunk's activations out are seeded by their gradients, received from the next chunk:
  // new arguments `grad.act.c<c+1>` before the accumulators.
  unsigned nArgs = f_.getNumArguments(), nResults = f_.getNumResults();
  if (!actResults_.empty()) {
    SmallVector<unsigned> argIndices;
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> argAttrs;
    SmallVector<Location> locs;
    for (unsigned i : actResults_) {
      auto name = f_.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr);
      argIndices.push_back(nArgs);
      types.push_back(f_.getResultTypes()[i]);
      argAttrs.push_back(DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, mega::kInputAttr),
                               StringAttr::get(ctx, "grad." + name.getValue()))}));
      locs.push_back(ret.getOperand(i).getLoc());
    }
    if (failed(f_.insertArguments(argIndices, types, argAttrs, locs)))
      return f_.emitError() << "mega-training-autodiff: cannot add the activation gradients";
    for (auto [k, i] : llvm::enumerate(actResults_))
      if (isFloatTensor(ret.getOperand(i)))
        accumulate(b, ret.getOperand(i), f_.getArgument(nArgs + k));
    nArgs = f_.getNumArguments();
  }

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

  // The gradients of a chunk's activations in: results `grad.act.c<c>` before the updates.
  if (!actArgs_.empty()) {
    SmallVector<unsigned> resultIndices;
    SmallVector<Type> types;
    SmallVector<DictionaryAttr> resultAttrs;
    SmallVector<Value> grads;
    for (BlockArgument a : actArgs_) {
      auto name = f_.getArgAttrOfType<StringAttr>(a.getArgNumber(), mega::kInputAttr);
      resultIndices.push_back(nResults);
      types.push_back(a.getType());
      resultAttrs.push_back(DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, mega::kOutputAttr),
                               StringAttr::get(ctx, "grad." + name.getValue()))}));
      Value grad = grads_.lookup(a);
      if (!grad) {
        auto type = cast<RankedTensorType>(a.getType());
        grad = mega::ConstantOp::create(
            b, a.getLoc(),
            DenseElementsAttr::get(
                type,
                APFloat::getZero(cast<FloatType>(type.getElementType()).getFloatSemantics())));
      }
      grads.push_back(grad);
    }
    ret->insertOperands(ret->getNumOperands(), grads);
    if (failed(f_.insertResults(resultIndices, types, resultAttrs)))
      return f_.emitError() << "mega-training-autodiff: cannot add the activation gradients";
    nResults = f_.getNumResults();
  }

  // acc' = acc + grad per parameter, as new state arguments and results.
  SmallVector<unsigned> argIndices, resultIndices;
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> argAttrs, resultAttrs;
  SmallVector<Location> locs;
  for (auto [param, name] : llvm::zip(params_, names_)) {
    StringAttr state = StringAttr::get(ctx, "grad." + name.getValue());
    argIndices.push_back(nArgs);
    resultIndices.push_back(nResults);
    types.push_back(param.getType());
    // A gradient summed over some mesh axes later (docs/pipeline.md) says so on its storage too.
    NamedAttrList attrs{NamedAttribute(kStateAttr, state)};
    if (Attribute partial = f_.getArgAttr(param.getArgNumber(), kParamGradPartialAttr))
      attrs.set(kParamGradPartialAttr, partial);
    argAttrs.push_back(attrs.getDictionary(ctx));
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

  /// `function` itself, or its pipeline chunks `function.c<c>` in any nested module.
  bool selected(func::FuncOp f) const {
    StringRef name = f.getSymName();
    return name == function || (name.starts_with(function + ".c") &&
                                llvm::all_of(name.drop_front(function.size() + 2),
                                             [](char c) { return c >= '0' && c <= '9'; }) &&
                                name.size() > function.size() + 2);
  }

  LogicalResult run(ModuleOp module) {
    SmallVector<func::FuncOp> functions;
    module.walk([&](func::FuncOp f) {
      if (selected(f))
        functions.push_back(f);
    });
    if (functions.empty())
      return module.emitError() << "mega-training-autodiff: no function @" << function
                                << " in the module (run mega-training-loss first)";
    for (func::FuncOp f : functions)
      if (failed(differentiate(f)))
        return failure();
    return success();
  }

  LogicalResult differentiate(func::FuncOp f) {
    StringRef name = f.getSymName();
    if (f.isExternal() || !f.getBody().hasOneBlock())
      return f.emitError() << "mega-training-autodiff: @" << name
                           << " must have a body of one block";
    std::optional<unsigned> lossIndex;
    bool activations = false;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (auto out = f.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr)) {
        if (out.getValue() == loss)
          lossIndex = i;
        activations |= isActivationPort(out);
      }
    if (!lossIndex && !activations)
      return f.emitError() << "mega-training-autodiff: @" << name << " has no result named \""
                           << loss << "\" (mega.output)";
    Value seed, scale;
    if (!lossScale.empty())
      for (unsigned i = 0; i < f.getNumArguments(); ++i)
        if (auto in = f.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
            in && in.getValue() == lossScale)
          scale = f.getArgument(i);
    bool auxLosses = false;
    f.walk([&](mega::AddAuxLossOp) { auxLosses = true; });
    if (auxLosses && !lossScale.empty() && !scale)
      return f.emitError() << "mega-training-autodiff: @" << name << " adds an auxiliary loss "
                           << "(mixture of experts) but has no loss scale input '" << lossScale
                           << "' to seed it; fp16 loss scaling of MoE layers outside the last "
                              "pipeline stage is not supported yet (use bf16)";
    if (lossIndex) {
      auto type = dyn_cast<RankedTensorType>(f.getResultTypes()[*lossIndex]);
      if (!type || type.getRank() != 0 || !isFloatTensor(type))
        return f.emitError() << "mega-training-autodiff: the loss must be a 0-d float tensor, not "
                             << f.getResultTypes()[*lossIndex];
      if (!lossScale.empty())
        for (unsigned i = 0; i < f.getNumArguments(); ++i)
          if (auto in = f.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
              in && in.getValue() == lossScale) {
            if (f.getArgumentTypes()[i] != type)
              return f.emitError()
                     << "mega-training-autodiff: the loss scale '" << lossScale << "' is "
                     << f.getArgumentTypes()[i] << "; it must be " << type << ", the loss's type";
            seed = f.getArgument(i);
          }
    }
    return Differentiator(f).run(lossIndex, seed, scale);
  }
};

} // namespace
} // namespace megac::passes
