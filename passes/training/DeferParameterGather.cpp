// mega-training-defer-parameter-gather: ZeRO-1/2's all-gather of the updated parameter shards
// moves from the end of @forward_backward_apply to the next step's forward, where each bucket is
// gathered ahead of its first use (Megatron's --overlap-param-gather) (Passes.td;
// docs/training-step.md "Overlap").
#include "passes/training/ArgumentBindings.h"
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <string>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGDEFERPARAMETERGATHER
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kForwardBackward = "forward_backward";
constexpr StringLiteral kFused = "forward_backward_apply";
constexpr StringLiteral kGatherPrefix = "gather_";
constexpr StringLiteral kGatherParameters = "gather_parameters";
constexpr StringLiteral kPendingPrefix = "zero.gather.";
constexpr StringLiteral kOutputPrefix = "gathered.";

/// One all-gather of updated shards that the pass defers: the gather, the data movement after
/// it (block order) and the function results it becomes (`mega.updates` of a parameter or a
/// state), each with its target's name.
struct Deferred {
  mutable mega::AllGatherOp gather; // op handles are not const-correct in MLIR
  SmallVector<Operation *> unpack;
  SmallVector<unsigned> results; // indices in the function's results as found
  SmallVector<Value> returned;   // the values those results returned
  SmallVector<std::string> targets;
  std::string pending; // the state holding the packed shard between the steps
};

/// The all-gather's deferral, when everything reading its result is pure data movement (no
/// other collective, nothing with an effect) that ends only in results updating a parameter or
/// a state of `f`, and its input is computed in `f` (the updated shards, not an argument).
std::optional<Deferred> deferrable(func::FuncOp f, mega::AllGatherOp gather) {
  Block &body = f.getBody().front();
  if (gather->getBlock() != &body || isa<BlockArgument>(gather.getInput()))
    return std::nullopt;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Deferred d;
  d.gather = gather;
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> work{gather.getResult()};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (user == ret.getOperation()) {
        unsigned i = use.getOperandNumber();
        auto target = f.getResultAttrOfType<StringAttr>(i, kUpdatesAttr);
        if (!target || !storageArgument(f, target.getValue()))
          return std::nullopt;
        d.results.push_back(i);
        d.returned.push_back(v);
        d.targets.push_back(target.getValue().str());
        continue;
      }
      if (user->getBlock() != &body || user->getNumRegions() != 0 || !isMemoryEffectFree(user) ||
          user->hasAttr("mesh") || user->getNumResults() != 1)
        return std::nullopt;
      if (slice.insert(user))
        work.push_back(user->getResult(0));
    }
  }
  if (d.results.empty())
    return std::nullopt;
  for (Operation &op : body)
    if (slice.contains(&op))
      d.unpack.push_back(&op);
  return d;
}

/// `f`'s first op (block order) reading one of `values`, or its terminator.
Operation *firstUse(func::FuncOp f, ArrayRef<Value> values) {
  Block &body = f.getBody().front();
  Operation *first = body.getTerminator();
  for (Value v : values)
    for (Operation *user : v.getUsers())
      if (Operation *at = body.findAncestorOpInBlock(*user); at && at->isBeforeInBlock(first))
        first = at;
  return first;
}

/// Appends an argument bound to `name` (attribute `attr`) of `type` to `f`.
BlockArgument addArgument(func::FuncOp f, StringRef attr, StringRef name, Type type) {
  OpBuilder b(f.getContext());
  unsigned i = f.getNumArguments();
  if (failed(f.insertArgument(
          i, type, b.getDictionaryAttr({b.getNamedAttr(attr, b.getStringAttr(name))}), f.getLoc())))
    return nullptr;
  return f.getArgument(i);
}

/// Appends result `value` to `f` with `attrs`.
void addResult(func::FuncOp f, Value value, DictionaryAttr attrs) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  unsigned i = f.getNumResults();
  if (failed(f.insertResult(i, value.getType(), attrs)))
    return;
  ret->insertOperands(ret->getNumOperands(), value);
}

/// Clones `d`'s gather and unpacking at `b`'s insertion point, reading `pending` instead of the
/// updated shards; returns each target's gathered value (its results' order).
SmallVector<Value> cloneGather(OpBuilder &b, const Deferred &d, Value pending) {
  IRMapping map;
  map.map(d.gather.getInput(), pending);
  b.clone(*d.gather, map);
  for (Operation *op : d.unpack)
    b.clone(*op, map);
  SmallVector<Value> values;
  for (Value v : d.returned)
    values.push_back(map.lookup(v));
  return values;
}

/// Makes `copy` (a copy of a step function) first gather the parameters (and states) each
/// deferred gather updates from their pending shards: each gather and its unpacking just before
/// the first op reading one of its targets, every read of a target then reading the gathered
/// value, which the function returns as the target's update. Outputs are renamed
/// "gathered.<name>" (output names are unique in a module).
LogicalResult gatherFirst(func::FuncOp copy, ArrayRef<Deferred> deferred) {
  OpBuilder b(copy.getContext());
  for (unsigned i = 0; i < copy.getNumResults(); ++i)
    if (auto out = copy.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr))
      copy.setResultAttr(i, mega::kOutputAttr, b.getStringAttr(kOutputPrefix + out.getValue()));
  for (const Deferred &d : deferred) {
    Value pending = storageArgument(copy, d.pending);
    if (!pending)
      pending = addArgument(copy, kStateAttr, d.pending, d.gather.getInput().getType());
    SmallVector<Value> targets;
    for (const std::string &t : d.targets) {
      Value arg = storageArgument(copy, t);
      if (!arg)
        return copy.emitError() << "mega-training-defer-parameter-gather: @" << copy.getSymName()
                                << " has no argument for '" << t << "', which a gather updates";
      targets.push_back(arg);
    }
    b.setInsertionPoint(firstUse(copy, targets));
    SmallVector<Value> gathered = cloneGather(b, d, pending);
    for (auto [arg, value, t] : llvm::zip(targets, gathered, d.targets)) {
      arg.replaceAllUsesWith(value);
      addResult(copy, value,
                b.getDictionaryAttr({b.getNamedAttr(kUpdatesAttr, b.getStringAttr(t))}));
    }
  }
  return success();
}

/// Erases `ops` (a deferred gather and its unpacking, now read by nothing), last first.
void eraseDead(ArrayRef<Operation *> ops) {
  for (Operation *op : llvm::reverse(ops))
    op->erase();
}

/// Drops the results of `f` marked in `dropped`.
void dropResults(func::FuncOp f, const llvm::BitVector &dropped) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  llvm::BitVector mask(f.getNumResults());
  for (unsigned i = 0; i < dropped.size() && i < mask.size(); ++i)
    mask[i] = dropped[i];
  ret->eraseOperands(mask);
  (void)f.eraseResults(mask);
}

struct TrainingDeferParameterGatherPass
    : impl::TrainingDeferParameterGatherBase<TrainingDeferParameterGatherPass> {
  void runOnOperation() override {
    if (failed(defer(getOperation())))
      signalPassFailure();
  }

  static LogicalResult defer(ModuleOp module) {
    auto fused = module.lookupSymbol<func::FuncOp>(kFused);
    auto fb = module.lookupSymbol<func::FuncOp>(kForwardBackward);
    if (!fused || !fb || fused.isExternal() || fb.isExternal())
      return success();
    std::string fbGathered = (kGatherPrefix + kForwardBackward).str();
    std::string fusedGathered = (kGatherPrefix + kFused).str();
    for (StringRef name :
         {StringRef(kGatherParameters), StringRef(fbGathered), StringRef(fusedGathered)})
      if (Operation *existing = module.lookupSymbol(name))
        return existing->emitError()
               << "mega-training-defer-parameter-gather: the module already has @" << name;
    std::vector<Deferred> deferred;
    for (auto gather : llvm::to_vector(fused.getBody().front().getOps<mega::AllGatherOp>()))
      if (std::optional<Deferred> d = deferrable(fused, gather)) {
        d->pending = (kPendingPrefix + Twine(deferred.size())).str();
        deferred.push_back(std::move(*d));
      }
    if (deferred.empty())
      return success();
    MLIRContext *ctx = module.getContext();
    OpBuilder b(ctx);

    // @gather_parameters: the pending shards gathered into their parameters, alone (before an
    // evaluation, a save, an export, or reading the parameters).
    {
      SmallVector<Type> argTypes, resultTypes;
      SmallVector<DictionaryAttr> argAttrs, resultAttrs;
      for (const Deferred &d : deferred) {
        argTypes.push_back(d.gather.getInput().getType());
        argAttrs.push_back(
            b.getDictionaryAttr({b.getNamedAttr(kStateAttr, b.getStringAttr(d.pending))}));
      }
      for (const Deferred &d : deferred)
        for (const std::string &t : d.targets) {
          BlockArgument arg = storageArgument(fused, t);
          argTypes.push_back(arg.getType());
          argAttrs.push_back(fused.getArgAttrDict(arg.getArgNumber()));
          resultTypes.push_back(arg.getType());
          resultAttrs.push_back(
              b.getDictionaryAttr({b.getNamedAttr(kUpdatesAttr, b.getStringAttr(t))}));
        }
      b.setInsertionPointAfter(fused);
      auto gatherAll = func::FuncOp::create(b, fused.getLoc(), kGatherParameters,
                                            FunctionType::get(ctx, argTypes, resultTypes));
      gatherAll.setAllArgAttrs(argAttrs);
      gatherAll.setAllResultAttrs(resultAttrs);
      Block *body = gatherAll.addEntryBlock();
      b.setInsertionPointToStart(body);
      SmallVector<Value> results;
      for (auto [k, d] : llvm::enumerate(deferred))
        llvm::append_range(results, cloneGather(b, d, body->getArgument(k)));
      func::ReturnOp::create(b, fused.getLoc(), results);
    }

    // @gather_forward_backward: the first micro-batch of a step after a deferred update.
    b.setInsertionPointAfter(fb);
    auto fbCopy = cast<func::FuncOp>(b.clone(*fb));
    fbCopy.setSymName(fbGathered);
    if (failed(gatherFirst(fbCopy, deferred)))
      return failure();

    // @forward_backward_apply: the packed shards become the pending states' updates; the
    // gathers' results (the parameters' updates) go, then the gathers themselves.
    llvm::BitVector dropped(fused.getNumResults());
    for (const Deferred &d : deferred)
      for (unsigned i : d.results)
        dropped.set(i);
    dropResults(fused, dropped);
    for (const Deferred &d : deferred) {
      addArgument(fused, kStateAttr, d.pending, d.gather.getInput().getType());
      addResult(fused, d.gather.getInput(),
                b.getDictionaryAttr({b.getNamedAttr(kUpdatesAttr, b.getStringAttr(d.pending))}));
    }
    // @gather_forward_backward_apply: a one-micro-batch step after a deferred update. Cloned
    // while the gathers (now dead) are still in place; their clones go.
    b.setInsertionPointAfter(fused);
    auto fusedCopy = cast<func::FuncOp>(b.clone(*fused));
    fusedCopy.setSymName(fusedGathered);
    {
      // The copy's ops in the same order: the dead ones at the same positions.
      llvm::DenseMap<Operation *, size_t> position;
      for (auto [i, op] : llvm::enumerate(fused.getBody().front()))
        position[&op] = i;
      SmallVector<Operation *> copyOps =
          llvm::to_vector(llvm::make_pointer_range(fusedCopy.getBody().front().getOperations()));
      SmallVector<Operation *> dead;
      for (const Deferred &d : deferred) {
        dead.push_back(copyOps[position.lookup(d.gather.getOperation())]);
        for (Operation *op : d.unpack)
          dead.push_back(copyOps[position.lookup(op)]);
      }
      llvm::sort(dead, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
      eraseDead(dead);
    }
    if (failed(gatherFirst(fusedCopy, deferred)))
      return failure();
    SmallVector<Operation *> dead;
    for (const Deferred &d : deferred) {
      dead.push_back(d.gather.getOperation());
      llvm::append_range(dead, d.unpack);
    }
    llvm::sort(dead, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    eraseDead(dead);
    return success();
  }
};

} // namespace

} // namespace megac::passes
