// mega-training-loss: renames the model @forward and adds @forward_backward's forward half,
// the model followed by the summed, normalized cross-entropy loss.
#include "passes/training/Passes.h"
#include "passes/training/MoeLoss.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGLOSS
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kForward = "forward";
constexpr StringLiteral kForwardBackward = "forward_backward";

bool isFloatTensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && isa<FloatType>(tensor.getElementType());
}

/// The model function: the one named `name`, or the module's only function.
func::FuncOp findModel(ModuleOp module, StringRef name) {
  if (!name.empty()) {
    auto f = module.lookupSymbol<func::FuncOp>(name);
    if (!f)
      module.emitError() << "mega-training-loss: no function @" << name << " in the module";
    return f;
  }
  auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
  if (funcs.size() == 1)
    return funcs.front();
  if (funcs.empty()) {
    module.emitError() << "mega-training-loss: the module has no function";
    return nullptr;
  }
  module.emitError() << "mega-training-loss: the module has " << funcs.size()
                     << " functions; name the model with function=<name>";
  return nullptr;
}

/// The index of the logits result: the one named `name`, or the only float result.
FailureOr<unsigned> findLogits(func::FuncOp model, StringRef name) {
  unsigned n = model.getNumResults();
  if (!name.empty()) {
    for (unsigned i = 0; i < n; ++i)
      if (auto out = model.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr);
          out && out.getValue() == name)
        return i;
    return model.emitError() << "mega-training-loss: @" << model.getSymName()
                             << " has no result named \"" << name << "\" (mega.output)";
  }
  SmallVector<unsigned> floats;
  for (unsigned i = 0; i < n; ++i)
    if (isFloatTensor(model.getResultTypes()[i]))
      floats.push_back(i);
  if (floats.size() != 1)
    return model.emitError() << "mega-training-loss: @" << model.getSymName() << " has "
                             << floats.size()
                             << " floating-point results; name the logits with logits=<name>";
  return floats.front();
}

/// True when an argument of `f` is the input `name`.
bool hasInput(func::FuncOp f, StringRef name) {
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (auto in = f.getArgAttrOfType<StringAttr>(i, mega::kInputAttr); in && in.getValue() == name)
      return true;
  return false;
}

/// Removes ops whose results nobody reads (the model's dropped outputs), last first.
void eraseDeadOps(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (isOpTriviallyDead(&op))
      op.erase();
}

struct TrainingLossPass : impl::TrainingLossBase<TrainingLossPass> {
  using TrainingLossBase::TrainingLossBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult run(ModuleOp module) {
    if (lossKind != "causal" && lossKind != "mlm" && lossKind != "seq2seq")
      return module.emitError() << "mega-training-loss: loss-kind '" << lossKind
                                << "' is not supported; use causal, mlm or seq2seq";
    func::FuncOp model = findModel(module, function);
    if (!model)
      return failure();
    if (model.isExternal() || !model.getBody().hasOneBlock())
      return model.emitError() << "mega-training-loss: @" << model.getSymName()
                               << " must have a body of one block";
    if (module.lookupSymbol(kForwardBackward))
      return module.emitError() << "mega-training-loss: the module already has @"
                                << kForwardBackward;
    if (Operation *other = module.lookupSymbol(kForward); other && other != model)
      return other->emitError() << "mega-training-loss: @" << kForward
                                << " is taken by another function than the model @"
                                << model.getSymName();
    for (StringRef taken : {"labels", "loss_normalizer"})
      if (hasInput(model, taken))
        return model.emitError() << "mega-training-loss: the model already has an input named \""
                                 << taken << "\"";

    FailureOr<unsigned> logitsIndex = findLogits(model, logits);
    if (failed(logitsIndex))
      return failure();
    auto logitsType = cast<RankedTensorType>(model.getResultTypes()[*logitsIndex]);
    Type element = logitsType.getElementType();
    if (!element.isF32() && !element.isF64())
      return model.emitError() << "mega-training-loss: the logits are " << logitsType
                               << "; the loss is computed on f32 or f64 logits";
    if (logitsType.getRank() < 1)
      return model.emitError() << "mega-training-loss: the logits " << logitsType
                               << " have no vocab dim";

    // The model stays as @forward; @forward_backward starts as its copy.
    if (model.getSymName() != kForward) {
      SymbolTable symbols(module);
      if (failed(symbols.rename(model, kForward)))
        return model.emitError() << "mega-training-loss: cannot rename the model to @" << kForward;
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(model);
    auto fb = cast<func::FuncOp>(b.clone(*model));
    fb.setSymName(kForwardBackward);
    fb->setAttr(kLossKindAttr, b.getStringAttr(lossKind));

    Location loc = fb.getLoc();
    auto scalar = RankedTensorType::get({}, element);
    auto labelsType = RankedTensorType::get(logitsType.getShape().drop_back(), b.getI64Type());
    unsigned nArgs = fb.getNumArguments();
    auto inputAttrs = [&](StringRef name) {
      return b.getDictionaryAttr(b.getNamedAttr(mega::kInputAttr, b.getStringAttr(name)));
    };
    if (failed(fb.insertArguments({nArgs, nArgs}, {labelsType, scalar},
                                  {inputAttrs("labels"), inputAttrs("loss_normalizer")},
                                  {loc, loc})))
      return fb.emitError() << "mega-training-loss: cannot add the labels and loss_normalizer";
    Value labels = fb.getArgument(nArgs), normalizer = fb.getArgument(nArgs + 1);

    Block &body = fb.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value z = ret.getOperand(*logitsIndex);
    b.setInsertionPoint(ret);
    auto ce =
        mega::CrossEntropyOp::create(b, loc, RankedTensorType::get(labelsType.getShape(), element),
                                     z, labels, b.getI64IntegerAttr(ignoreIndex),
                                     ArrayAttr());
    Value sum = ce;
    if (labelsType.getRank() > 0) {
      auto axes = llvm::to_vector(llvm::seq<int64_t>(0, labelsType.getRank()));
      sum = mega::ReduceOp::create(b, loc, scalar, mega::ReduceKind::sum, ce, axes, false);
    }
    Value loss = mega::MulOp::create(b, loc, scalar, sum, normalizer);
    func::ReturnOp::create(b, ret.getLoc(), ValueRange{loss});
    ret.erase();

    fb.setType(FunctionType::get(module.getContext(), fb.getArgumentTypes(), {scalar}));
    fb.setAllResultAttrs(ArrayRef<DictionaryAttr>{
        b.getDictionaryAttr(b.getNamedAttr(mega::kOutputAttr, b.getStringAttr("loss")))});
    int64_t rows = labelsType.getRank() > 0 ? labelsType.getDimSize(0) : 1;
    if (failed(addMoeLosses(fb, rows, {moeAuxLossCoeff, moeZLossCoeff})))
      return failure();
    eraseDeadOps(body);
    return success();
  }
};

} // namespace
} // namespace megac::passes
