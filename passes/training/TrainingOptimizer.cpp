// mega-training-optimizer: builds @apply_gradients (global norm, optional clipping, one AdamW
// update per parameter) from @forward_backward's parameters and gradient accumulators.
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGOPTIMIZER
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kForwardBackward = "forward_backward";
constexpr StringLiteral kApplyGradients = "apply_gradients";
constexpr StringLiteral kCheckGradients = "check_gradients";
constexpr StringLiteral kLossScale = "loss_scale";

/// One parameter of the step: its argument attributes (name, init), type and accumulator.
struct Param {
  StringRef name;
  DictionaryAttr attrs;
  RankedTensorType type;
};

struct TrainingOptimizerPass : impl::TrainingOptimizerBase<TrainingOptimizerPass> {
  using TrainingOptimizerBase::TrainingOptimizerBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult checkOptions(ModuleOp module) {
    auto inUnit = [](double x) { return x >= 0.0 && x < 1.0; };
    if (!inUnit(beta1) || !inUnit(beta2))
      return module.emitError() << "mega-training-optimizer: beta1 and beta2 must be in [0, 1), "
                                << "got " << beta1 << " and " << beta2;
    if (!(eps > 0) || !std::isfinite(eps))
      return module.emitError() << "mega-training-optimizer: eps must be > 0, got " << eps;
    if (!(weightDecay >= 0) || !std::isfinite(weightDecay))
      return module.emitError() << "mega-training-optimizer: weight-decay must be >= 0, got "
                                << weightDecay;
    if (!(clipGrad >= 0) || !std::isfinite(clipGrad))
      return module.emitError() << "mega-training-optimizer: clip-grad must be >= 0 (0: off), got "
                                << clipGrad;
    return success();
  }

  /// The parameters of @forward_backward, each with a `grad.<name>` accumulator.
  FailureOr<SmallVector<Param>> collectParams(func::FuncOp fb) {
    SmallVector<Param> params;
    llvm::StringSet<> accumulators;
    for (unsigned i = 0; i < fb.getNumArguments(); ++i)
      if (auto state = fb.getArgAttrOfType<StringAttr>(i, kStateAttr))
        accumulators.insert(state.getValue());
    for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
      auto name = fb.getArgAttrOfType<StringAttr>(i, mega::kParamAttr);
      if (!name)
        continue;
      auto type = dyn_cast<RankedTensorType>(fb.getArgumentTypes()[i]);
      if (!type || !isa<FloatType>(type.getElementType()))
        return fb.emitError() << "mega-training-optimizer: parameter '" << name.getValue()
                              << "' is not a floating-point tensor";
      if (!accumulators.contains(("grad." + name.getValue()).str()))
        return fb.emitError() << "mega-training-optimizer: parameter '" << name.getValue()
                              << "' has no gradient accumulator grad." << name.getValue()
                              << " (run mega-training-autodiff first)";
      params.push_back({name.getValue(), fb.getArgAttrDict(i), type});
    }
    if (params.empty())
      return fb.emitError() << "mega-training-optimizer: @" << kForwardBackward
                            << " has no parameters";
    return params;
  }

  LogicalResult run(ModuleOp module) {
    if (failed(checkOptions(module)))
      return failure();
    auto fb = module.lookupSymbol<func::FuncOp>(kForwardBackward);
    if (!fb)
      return module.emitError() << "mega-training-optimizer: no function @" << kForwardBackward
                                << " in the module (run mega-training-loss and "
                                   "mega-training-autodiff first)";
    if (Operation *existing = module.lookupSymbol(kApplyGradients))
      return existing->emitError()
             << "mega-training-optimizer: the module already has @" << kApplyGradients;
    FailureOr<SmallVector<Param>> params = collectParams(fb);
    if (failed(params))
      return failure();
    // Dynamic loss scaling (fp16): @forward_backward's gradients are scaled by loss_scale.
    Type scaleType;
    for (unsigned i = 0; i < fb.getNumArguments(); ++i)
      if (auto in = fb.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
          in && in.getValue() == kLossScale)
        scaleType = fb.getArgumentTypes()[i];
    if (scaleType) {
      auto scalar = dyn_cast<RankedTensorType>(scaleType);
      if (!scalar || scalar.getRank() != 0 || llvm::any_of(*params, [&](const Param &p) {
            return p.type.getElementType() != scalar.getElementType();
          }))
        return fb.emitError() << "mega-training-optimizer: the loss_scale input is " << scaleType
                              << "; it must be a 0-d tensor of the parameters' float type";
      if (Operation *existing = module.lookupSymbol(kCheckGradients))
        return existing->emitError()
               << "mega-training-optimizer: the module already has @" << kCheckGradients;
    }

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    Location loc = fb.getLoc();
    // lr in the parameters' precision: f64 only for an all-f64 (reference) model.
    bool allF64 =
        llvm::all_of(*params, [](const Param &p) { return p.type.getElementType().isF64(); });
    auto lrType = RankedTensorType::get({}, allF64 ? Type(b.getF64Type()) : Type(b.getF32Type()));
    auto stepType = RankedTensorType::get({}, b.getI64Type());

    auto named = [&](StringRef attr, const Twine &value) {
      return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
    };
    size_t n = params->size();
    SmallVector<Type> argTypes, resultTypes;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (const Param &p : *params) {
      argTypes.push_back(p.type);
      argAttrs.push_back(p.attrs);
    }
    for (StringRef prefix : {"grad.", "adam.m.", "adam.v."})
      for (const Param &p : *params) {
        argTypes.push_back(p.type);
        argAttrs.push_back(named(kStateAttr, prefix + p.name));
      }
    argTypes.append({lrType, stepType});
    argAttrs.push_back(named(mega::kInputAttr, "lr"));
    argAttrs.push_back(named(mega::kInputAttr, "step"));
    if (scaleType) {
      argTypes.push_back(scaleType);
      argAttrs.push_back(named(mega::kInputAttr, kLossScale));
    }
    for (StringRef prefix : {"", "adam.m.", "adam.v."})
      for (const Param &p : *params) {
        resultTypes.push_back(p.type);
        resultAttrs.push_back(named(kUpdatesAttr, prefix + p.name));
      }

    b.setInsertionPointAfter(fb);
    auto apply = func::FuncOp::create(b, loc, kApplyGradients,
                                      FunctionType::get(ctx, argTypes, resultTypes));
    Block *body = apply.addEntryBlock();
    b.setInsertionPointToStart(body);
    auto args = body->getArguments();
    auto paramArgs = args.slice(0, n), grads = args.slice(n, n), ms = args.slice(2 * n, n),
         vs = args.slice(3 * n, n);
    Value lr = args[4 * n], step = args[4 * n + 1];

    SmallVector<Value> gradValues(grads.begin(), grads.end());
    if (scaleType)
      for (Value &g : gradValues)
        g = mega::DivOp::create(b, loc, g.getType(), g, splat(b, loc, args[4 * n + 2], g));
    Value norm = mega::GlobalNormOp::create(b, loc, gradValues);
    if (clipGrad > 0)
      for (Value &g : gradValues)
        g = mega::ClipByNormOp::create(b, loc, g.getType(), g, norm, b.getF64FloatAttr(clipGrad));

    SmallVector<Value> newParams, newMs, newVs;
    for (size_t i = 0; i < n; ++i) {
      double decay = (*params)[i].type.getRank() >= 2 ? weightDecay : 0.0;
      auto update = mega::AdamWUpdateOp::create(
          b, loc, paramArgs[i].getType(), ms[i].getType(), vs[i].getType(), paramArgs[i],
          gradValues[i], ms[i], vs[i], lr, step, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
          b.getF64FloatAttr(eps), b.getF64FloatAttr(decay));
      newParams.push_back(update.getNewParam());
      newMs.push_back(update.getNewExpAvg());
      newVs.push_back(update.getNewExpAvgSq());
    }
    SmallVector<Value> results;
    llvm::append_range(results, newParams);
    llvm::append_range(results, newMs);
    llvm::append_range(results, newVs);
    results.push_back(norm);
    func::ReturnOp::create(b, loc, results);

    resultTypes.push_back(norm.getType());
    resultAttrs.push_back(named(mega::kOutputAttr, "grad_norm"));
    apply.setType(FunctionType::get(ctx, argTypes, resultTypes));
    apply.setAllArgAttrs(argAttrs);
    apply.setAllResultAttrs(resultAttrs);
    if (scaleType)
      buildCheckGradients(b, apply, *params, scaleType);
    return success();
  }

  /// `scalar` (0-d) broadcast to `like`'s type.
  static Value splat(OpBuilder &b, Location loc, Value scalar, Value like) {
    auto type = cast<RankedTensorType>(like.getType());
    if (type.getRank() == 0)
      return scalar;
    auto ones =
        RankedTensorType::get(SmallVector<int64_t>(type.getRank(), 1), type.getElementType());
    Value r = mega::ReshapeOp::create(b, loc, ones, scalar);
    return mega::BroadcastOp::create(b, loc, type, r);
  }

  /// @check_gradients(grad accumulators, loss_scale) -> unscaled_grad_norm: the norm the CLI
  /// tests for overflow (inf or nan) before it runs @apply_gradients.
  void buildCheckGradients(OpBuilder &b, func::FuncOp after, ArrayRef<Param> params,
                           Type scaleType) {
    MLIRContext *ctx = b.getContext();
    Location loc = after.getLoc();
    auto named = [&](StringRef attr, const Twine &value) {
      return b.getDictionaryAttr(b.getNamedAttr(attr, b.getStringAttr(value)));
    };
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    for (const Param &p : params) {
      argTypes.push_back(p.type);
      argAttrs.push_back(named(kStateAttr, "grad." + p.name));
    }
    argTypes.push_back(scaleType);
    argAttrs.push_back(named(mega::kInputAttr, kLossScale));
    b.setInsertionPointAfter(after);
    auto check = func::FuncOp::create(b, loc, kCheckGradients,
                                      FunctionType::get(ctx, argTypes, {scaleType}));
    Block *body = check.addEntryBlock();
    b.setInsertionPointToStart(body);
    SmallVector<Value> grads(body->getArguments().drop_back());
    Value norm = mega::GlobalNormOp::create(b, loc, grads);
    Value unscaled = mega::DivOp::create(b, loc, scaleType, norm, body->getArguments().back());
    func::ReturnOp::create(b, loc, unscaled);
    check.setAllArgAttrs(argAttrs);
    check.setAllResultAttrs(
        ArrayRef<DictionaryAttr>{named(mega::kOutputAttr, "unscaled_grad_norm")});
  }
};

} // namespace
} // namespace megac::passes
