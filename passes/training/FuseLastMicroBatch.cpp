// mega-training-fuse-last-micro-batch: @forward_backward_apply, the last micro-batch's forward
// and backward followed by the optimizer step in one function, so that the latency-hiding
// schedule can start each dp bucket's reduction while the rest of the backward runs
// (Passes.td; docs/training-step.md "Overlap").
#include "passes/training/ArgumentBindings.h"
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGFUSELASTMICROBATCH
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kForwardBackward = "forward_backward";
constexpr StringLiteral kApplyGradients = "apply_gradients";
constexpr StringLiteral kCheckGradients = "check_gradients";
constexpr StringLiteral kFused = "forward_backward_apply";
constexpr StringLiteral kOutputPrefix = "last.";

bool isCollective(Operation *op) {
  return isa<mega::AllReduceOp, mega::ReduceScatterOp, mega::AllGatherOp>(op);
}

/// Result attributes of `f`'s result `i` with its mega.output renamed "last.<name>" (output
/// names are unique across a module; mega.updates names the same storage and stays).
DictionaryAttr renamedResultAttrs(OpBuilder &b, func::FuncOp f, unsigned i) {
  NamedAttrList attrs(f.getResultAttrDict(i));
  if (auto name = attrs.get(mega::kOutputAttr))
    attrs.set(mega::kOutputAttr,
              b.getStringAttr(kOutputPrefix + cast<StringAttr>(name).getValue()));
  return attrs.getDictionary(b.getContext());
}

/// Moves the flattening and concatenation that feed a dp reduction (all_reduce,
/// reduce_scatter) of the optimizer part to just after the last op defining their operands:
/// each bucket is packed as soon as its last gradient is final, so the reduction's start can
/// rise there too. Only data movement moves; the arithmetic keeps its order.
void packBucketsEarly(ArrayRef<Operation *> applyOps) {
  llvm::DenseSet<Operation *> inApply(applyOps.begin(), applyOps.end()), packs;
  for (Operation *op : llvm::reverse(applyOps)) {
    bool feeds = isa<mega::AllReduceOp, mega::ReduceScatterOp>(op) || packs.contains(op);
    if (!feeds)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && inApply.contains(def) && isa<mega::ReshapeOp, mega::ConcatOp>(def))
        packs.insert(def);
  }
  for (Operation *op : applyOps) {
    if (!packs.contains(op))
      continue;
    Operation *latest = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && def->getBlock() == op->getBlock() && (!latest || latest->isBeforeInBlock(def)))
        latest = def;
    if (latest && latest->isBeforeInBlock(op))
      op->moveAfter(latest);
  }
}

struct TrainingFuseLastMicroBatchPass
    : impl::TrainingFuseLastMicroBatchBase<TrainingFuseLastMicroBatchPass> {
  void runOnOperation() override {
    if (failed(fuse(getOperation())))
      signalPassFailure();
  }

  static LogicalResult fuse(ModuleOp module) {
    if (Operation *existing = module.lookupSymbol(kFused))
      return existing->emitError()
             << "mega-training-fuse-last-micro-batch: the module already has @" << kFused;
    auto fb = module.lookupSymbol<func::FuncOp>(kForwardBackward);
    auto apply = module.lookupSymbol<func::FuncOp>(kApplyGradients);
    // Pipeline stages (chunk functions, no @forward_backward), fp16 (the overflow check runs
    // before the update) and steps without a collective in the update keep the separate
    // functions: nothing to fuse, or nothing to overlap.
    if (!fb || !apply || fb.isExternal() || apply.isExternal() ||
        module.lookupSymbol(kCheckGradients))
      return success();
    bool communicates = false;
    apply.walk([&](Operation *op) { communicates |= isCollective(op); });
    if (!communicates)
      return success();

    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);
    // Arguments: @forward_backward's, then @apply_gradients' not bound to the same name. An
    // accumulator of @apply_gradients (mega.state "grad.<p>") reads @forward_backward's update
    // of it instead: the gradient of the whole step, written in place into the accumulator.
    SmallVector<Type> argTypes(fb.getArgumentTypes());
    SmallVector<DictionaryAttr> argAttrs;
    llvm::StringMap<unsigned> fbArg;
    for (unsigned i = 0; i < fb.getNumArguments(); ++i) {
      argAttrs.push_back(fb.getArgAttrDict(i) ? fb.getArgAttrDict(i) : b.getDictionaryAttr({}));
      if (auto binding = argumentBinding(fb, i))
        fbArg[binding->second] = i;
    }
    llvm::StringMap<unsigned> fbUpdate;
    for (unsigned i = 0; i < fb.getNumResults(); ++i)
      if (auto name = fb.getResultAttrOfType<StringAttr>(i, kUpdatesAttr))
        fbUpdate[name.getValue()] = i;
    // Per argument of @apply_gradients: the fused argument it is, or the result of
    // @forward_backward it reads.
    struct Source {
      std::optional<unsigned> arg, update;
    };
    SmallVector<Source> sources;
    for (unsigned j = 0; j < apply.getNumArguments(); ++j) {
      Type type = apply.getArgumentTypes()[j];
      auto binding = argumentBinding(apply, j);
      if (!binding)
        return apply.emitError() << "mega-training-fuse-last-micro-batch: argument " << j << " of @"
                                 << kApplyGradients
                                 << " has no mega.param, mega.state or mega.input name";
      StringRef name = binding->second;
      if (binding->first == StringRef(kStateAttr) && name.starts_with("grad.")) {
        auto it = fbUpdate.find(name);
        if (it == fbUpdate.end() || fb.getResultTypes()[it->second] != type)
          return apply.emitError()
                 << "mega-training-fuse-last-micro-batch: @" << kForwardBackward
                 << " has no update of '" << name << "' of type " << type << " for @"
                 << kApplyGradients << "'s accumulator (run mega-training-autodiff "
                 << "and mega-training-optimizer on the same module)";
        sources.push_back({std::nullopt, it->second});
        continue;
      }
      if (auto it = fbArg.find(name); it != fbArg.end()) {
        if (argTypes[it->second] != type)
          return apply.emitError() << "mega-training-fuse-last-micro-batch: '" << name << "' is "
                                   << argTypes[it->second] << " in @" << kForwardBackward << " but "
                                   << type << " in @" << kApplyGradients;
        sources.push_back({it->second, std::nullopt});
        continue;
      }
      sources.push_back({unsigned(argTypes.size()), std::nullopt});
      argTypes.push_back(type);
      argAttrs.push_back(apply.getArgAttrDict(j) ? apply.getArgAttrDict(j)
                                                 : b.getDictionaryAttr({}));
    }
    SmallVector<Type> resultTypes(fb.getResultTypes());
    llvm::append_range(resultTypes, apply.getResultTypes());
    SmallVector<DictionaryAttr> resultAttrs;
    for (unsigned i = 0; i < fb.getNumResults(); ++i)
      resultAttrs.push_back(renamedResultAttrs(b, fb, i));
    for (unsigned i = 0; i < apply.getNumResults(); ++i)
      resultAttrs.push_back(renamedResultAttrs(b, apply, i));

    b.setInsertionPointAfter(apply);
    auto fused =
        func::FuncOp::create(b, fb.getLoc(), kFused, FunctionType::get(ctx, argTypes, resultTypes));
    fused.setAllArgAttrs(argAttrs);
    fused.setAllResultAttrs(resultAttrs);
    Block *body = fused.addEntryBlock();
    b.setInsertionPointToStart(body);

    IRMapping map;
    for (unsigned i = 0; i < fb.getNumArguments(); ++i)
      map.map(fb.getArgument(i), body->getArgument(i));
    SmallVector<Value> results;
    for (Operation &op : fb.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(map.lookup(v));
        continue;
      }
      b.clone(op, map);
    }
    for (unsigned j = 0; j < apply.getNumArguments(); ++j)
      map.map(apply.getArgument(j),
              sources[j].arg ? body->getArgument(*sources[j].arg) : results[*sources[j].update]);
    SmallVector<Operation *> applyOps;
    for (Operation &op : apply.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(map.lookupOrDefault(v));
        continue;
      }
      applyOps.push_back(b.clone(op, map));
    }
    func::ReturnOp::create(b, fb.getLoc(), results);
    packBucketsEarly(applyOps);
    return success();
  }
};

} // namespace

} // namespace megac::passes
