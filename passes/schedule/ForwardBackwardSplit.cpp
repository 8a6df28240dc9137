// mega-forward-backward-split: the differentiated pipeline chunks become @forward.c<c> and
// @backward.c<c> joined by stashed residuals, under an activation recompute policy; without
// chunks the policy rewrites @forward_backward in place (docs/pipeline.md).
#include "passes/schedule/ChunkFunctions.h"
#include "passes/schedule/CutPoints.h"
#include "passes/schedule/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_FORWARDBACKWARDSPLIT
#include "passes/schedule/Passes.h.inc"

func::FuncOp createLike(OpBuilder &b, func::FuncOp f, const std::string &name,
                        ArrayRef<Type> argTypes, ArrayRef<DictionaryAttr> argAttrs,
                        ArrayRef<Type> resultTypes, ArrayRef<DictionaryAttr> resultAttrs) {
  auto g = func::FuncOp::create(b, f.getLoc(), name, b.getFunctionType(argTypes, resultTypes));
  for (NamedAttribute attr : f->getDiscardableAttrs())
    g->setAttr(attr.getName(), attr.getValue());
  g.addEntryBlock();
  for (auto [i, attrs] : llvm::enumerate(argAttrs))
    g.setArgAttrs(i, attrs ? attrs : b.getDictionaryAttr({}));
  for (auto [i, attrs] : llvm::enumerate(resultAttrs))
    g.setResultAttrs(i, attrs ? attrs : b.getDictionaryAttr({}));
  return g;
}

namespace {

enum class Policy { none, selective, full };

// The training step's signature attributes (passes/training/Passes.h).
constexpr const char *kStateAttr = "mega.state";
constexpr const char *kUpdatesAttr = "mega.updates";
/// On an op the backward recomputes: keeps CSE from merging it with the forward original.
constexpr const char *kRecomputeAttr = "mega.recompute";

/// A differentiated function's ops split into the forward (what its forward results need) and
/// the backward (the rest), with the rule for which forward values the backward may read.
class Split {
public:
  Split(func::FuncOp f, Policy policy) : f_(f), policy_(policy) {
    Block &block = f.getBody().front();
    auto ret = cast<func::ReturnOp>(block.getTerminator());
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      if (isForwardResult(i))
        forwardResults_.push_back(i);
      else
        backwardResults_.push_back(i);
    }
    SmallVector<Operation *> work;
    for (unsigned i : forwardResults_)
      if (Operation *def = ret.getOperand(i).getDefiningOp())
        work.push_back(def);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!forward_.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          work.push_back(def);
    }
    for (Operation &op : block.without_terminator())
      (forward_.contains(&op) ? forwardOps_ : backwardOps_).push_back(&op);
  }

  /// Results the forward computes: the loss and the activations out (not gradients or
  /// accumulator updates).
  bool isForwardResult(unsigned i) {
    if (f_.getResultAttr(i, kUpdatesAttr))
      return false;
    auto out = f_.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr);
    return !out || !out.getValue().starts_with("grad.");
  }

  bool isForwardValue(Value v) const {
    Operation *def = v.getDefiningOp();
    return def && forward_.contains(def);
  }

  /// Whether the backward may read the forward value `v` as it is (stash it); otherwise it
  /// recomputes it.
  bool stashable(Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return true;
    if (def->hasTrait<OpTrait::ConstantLike>())
      return false;
    switch (policy_) {
    case Policy::none:
      return true;
    case Policy::full:
      return checkpoints_.contains(v);
    case Policy::selective:
      if (isa<mega::AttentionOp>(def))
        return false;
      if (isa<mega::ReshapeOp, mega::TransposeOp>(def))
        return stashable(def->getOperand(0));
      return true;
    }
    return true;
  }

  /// Values `full` keeps besides the arguments (the layer inputs of an unsplit function).
  void keep(ArrayRef<Value> values) { checkpoints_.insert(values.begin(), values.end()); }

  func::FuncOp f_;
  Policy policy_;
  SmallVector<unsigned> forwardResults_, backwardResults_;
  DenseSet<Operation *> forward_;
  SmallVector<Operation *> forwardOps_, backwardOps_;
  DenseSet<Value> checkpoints_;
};

/// Gives the backward ops their forward operands: stashed values through `stashed` (which maps
/// them, e.g. to the backward's stash arguments), the others recomputed by clones of their
/// producers at `b`'s insertion point, memoized in `map`. `stash` collects what is read stashed.
class Materializer {
public:
  Materializer(Split &split, IRMapping &map, std::function<Value(Value)> stashed)
      : split_(split), map_(map), stashed_(std::move(stashed)) {}

  Value get(OpBuilder &b, Value v) {
    if (Value m = map_.lookupOrNull(v))
      return m;
    if (!split_.isForwardValue(v) || split_.stashable(v)) {
      Value s = stashed_(v);
      map_.map(v, s);
      return s;
    }
    Operation *def = v.getDefiningOp();
    for (Value operand : def->getOperands())
      get(b, operand);
    Operation *clone = b.clone(*def, map_);
    // Marked so that CSE does not merge it back into the forward op it recomputes.
    clone->setAttr(kRecomputeAttr, UnitAttr::get(clone->getContext()));
    return map_.lookup(v);
  }

private:
  Split &split_;
  IRMapping &map_;
  std::function<Value(Value)> stashed_;
};

/// @forward_backward.c<c> -> @forward.c<c> + @backward.c<c> (docs/pipeline.md).
class ChunkSplitter {
public:
  ChunkSplitter(func::FuncOp f, Policy policy)
      : f_(f), split_(f, policy), ret_(cast<func::ReturnOp>(f.getBody().front().getTerminator())),
        suffix_(f.getSymName().drop_front(strlen("forward_backward")).str()) {}

  void run() {
    collectStash();
    OpBuilder b(f_);
    buildForward(b);
    buildBackward(b);
    f_.erase();
  }

private:
  enum Role { param, activation, gradIn, data, state };

  Role roleOf(unsigned i) {
    if (f_.getArgAttr(i, mega::kParamAttr))
      return param;
    if (f_.getArgAttr(i, kStateAttr))
      return state;
    auto in = f_.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
    if (in && in.getValue().starts_with("act.c"))
      return activation;
    if (in && in.getValue().starts_with("grad.act.c"))
      return gradIn;
    return data;
  }

  /// Values the backward gets through the stash: forward op results and the chunk's
  /// activations in (parameters and data inputs it reads directly).
  bool isStashed(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return roleOf(arg.getArgNumber()) == activation;
    return split_.isForwardValue(v);
  }

  StringAttr stashName(unsigned k) {
    return StringAttr::get(f_.getContext(), "stash." + suffix_.substr(1) + "." + std::to_string(k));
  }

  /// What the backward reads from the forward (through the producers it recomputes): the
  /// stash, ordered arguments first, then by definition; and the arguments it reads directly.
  void collectStash() {
    llvm::SetVector<Value> stash;
    DenseSet<Value> seen;
    std::function<void(Value)> visit = [&](Value v) {
      if (!seen.insert(v).second)
        return;
      if (split_.isForwardValue(v) && !split_.stashable(v)) {
        for (Value operand : v.getDefiningOp()->getOperands())
          visit(operand);
      } else if (isStashed(v)) {
        stash.insert(v);
      } else if (auto arg = dyn_cast<BlockArgument>(v)) {
        backwardArgs_.insert(arg.getArgNumber());
      }
    };
    for (Operation *op : split_.backwardOps_)
      for (Value v : op->getOperands())
        if (!v.getDefiningOp() || split_.isForwardValue(v))
          visit(v);
    for (unsigned i : split_.backwardResults_)
      if (Value v = ret_.getOperand(i); !v.getDefiningOp() || split_.isForwardValue(v))
        visit(v);
    DenseMap<Operation *, int64_t> order;
    for (auto [i, op] : llvm::enumerate(split_.forwardOps_))
      order[op] = i;
    auto pos = [&](Value v) -> std::pair<int64_t, int64_t> {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return {-1, arg.getArgNumber()};
      return {order.lookup(v.getDefiningOp()), cast<OpResult>(v).getResultNumber()};
    };
    stashed_.assign(stash.begin(), stash.end());
    llvm::stable_sort(stashed_, [&](Value a, Value b) { return pos(a) < pos(b); });
  }

  /// @forward.c<c>(params, act.c<c> | input_ids, data) -> (act.c<c+1> | loss, stash.c<c>.<k>).
  void buildForward(OpBuilder &b) {
    DenseSet<Value> needed(stashed_.begin(), stashed_.end());
    for (unsigned i : split_.forwardResults_)
      needed.insert(ret_.getOperand(i));
    SmallVector<unsigned> args;
    for (unsigned i = 0; i < f_.getNumArguments(); ++i) {
      Value arg = f_.getArgument(i);
      if (roleOf(i) != gradIn && roleOf(i) != state &&
          (needed.contains(arg) ||
           llvm::any_of(arg.getUsers(), [&](Operation *u) { return split_.forward_.contains(u); })))
        args.push_back(i);
    }
    SmallVector<Type> argTypes, resultTypes;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (unsigned i : args) {
      argTypes.push_back(f_.getArgument(i).getType());
      argAttrs.push_back(f_.getArgAttrDict(i));
    }
    SmallVector<Value> outputs;
    for (unsigned i : split_.forwardResults_) {
      outputs.push_back(ret_.getOperand(i));
      resultAttrs.push_back(f_.getResultAttrDict(i));
    }
    for (auto [k, v] : llvm::enumerate(stashed_)) {
      outputs.push_back(v);
      resultAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(mega::kOutputAttr, stashName(k))));
    }
    for (Value v : outputs)
      resultTypes.push_back(v.getType());
    func::FuncOp fwd =
        createLike(b, f_, "forward" + suffix_, argTypes, argAttrs, resultTypes, resultAttrs);
    Block *entry = &fwd.getBody().front();
    IRMapping map;
    for (auto [k, i] : llvm::enumerate(args))
      map.map(f_.getArgument(i), entry->getArgument(k));
    OpBuilder fb = OpBuilder::atBlockEnd(entry);
    for (Operation *op : split_.forwardOps_)
      fb.clone(*op, map);
    SmallVector<Value> results;
    for (Value v : outputs)
      results.push_back(map.lookup(v));
    func::ReturnOp::create(fb, ret_.getLoc(), results);
  }

  /// @backward.c<c>(params, stash.c<c>.<k>, grad.act.c<c+1>, data, accumulators)
  ///     -> (grad.act.c<c>, accumulator updates), recomputing what is not stashed.
  void buildBackward(OpBuilder &b) {
    // Direct arguments by role, the stash before the incoming gradients (~0u marks it). Every
    // parameter of the chunk is an argument, read or not (an embedding's gradient does not
    // read its table): the stage's @apply_gradients takes its parameters from here.
    SmallVector<unsigned> direct;
    for (Role want : {param, gradIn, data, state}) {
      if (want == gradIn)
        direct.push_back(~0u);
      for (unsigned i = 0; i < f_.getNumArguments(); ++i)
        if (roleOf(i) == want && (want != data || backwardArgs_.contains(i)))
          direct.push_back(i);
    }
    SmallVector<Type> argTypes, resultTypes;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (unsigned i : direct) {
      if (i != ~0u) {
        argTypes.push_back(f_.getArgument(i).getType());
        argAttrs.push_back(f_.getArgAttrDict(i));
        continue;
      }
      for (auto [k, v] : llvm::enumerate(stashed_)) {
        argTypes.push_back(v.getType());
        argAttrs.push_back(b.getDictionaryAttr(b.getNamedAttr(mega::kInputAttr, stashName(k))));
      }
    }
    for (unsigned i : split_.backwardResults_) {
      resultTypes.push_back(f_.getResultTypes()[i]);
      resultAttrs.push_back(f_.getResultAttrDict(i));
    }
    func::FuncOp bwd =
        createLike(b, f_, "backward" + suffix_, argTypes, argAttrs, resultTypes, resultAttrs);
    Block *entry = &bwd.getBody().front();
    IRMapping map;
    DenseMap<Value, Value> stashArgs;
    unsigned next = 0;
    for (unsigned i : direct) {
      if (i != ~0u) {
        map.map(f_.getArgument(i), entry->getArgument(next++));
        continue;
      }
      for (Value v : stashed_)
        stashArgs[v] = entry->getArgument(next++);
    }
    OpBuilder bb = OpBuilder::atBlockEnd(entry);
    Materializer mat(split_, map, [&](Value v) -> Value {
      Value s = stashArgs.lookup(v);
      assert(s && "collectStash saw every stashed read");
      return s;
    });
    auto fromForward = [&](Value v) {
      return split_.isForwardValue(v) || (isa<BlockArgument>(v) && isStashed(v));
    };
    for (Operation *op : split_.backwardOps_) {
      for (Value v : op->getOperands())
        if (fromForward(v))
          mat.get(bb, v);
      bb.clone(*op, map);
    }
    SmallVector<Value> results;
    for (unsigned i : split_.backwardResults_) {
      Value v = ret_.getOperand(i);
      results.push_back(fromForward(v) ? mat.get(bb, v) : map.lookup(v));
    }
    func::ReturnOp::create(bb, ret_.getLoc(), results);
  }

  func::FuncOp f_;
  Split split_;
  func::ReturnOp ret_;
  std::string suffix_; // ".c<c>"
  SmallVector<Value> stashed_;
  llvm::SetVector<unsigned> backwardArgs_;
};

/// pp = 1: the backward's reads of non-stashable forward values go to clones placed before
/// their first backward use.
void recomputeInPlace(func::FuncOp f, Policy policy) {
  Split split(f, policy);
  if (policy == Policy::full) {
    // Keep each layer's input: the activations crossing the minimal cut points.
    auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
    SmallVector<Value> outputs;
    for (unsigned i : split.forwardResults_)
      outputs.push_back(ret.getOperand(i));
    CutPoints cuts = CutPoints::analyze(f, split.forwardOps_, outputs);
    for (unsigned k : cuts.candidates(1))
      split.keep(cuts.crossing(k));
  }
  IRMapping map;
  Materializer mat(split, map, [](Value v) { return v; });
  OpBuilder b(f.getContext());
  auto rewire = [&](Operation *user) {
    b.setInsertionPoint(user);
    for (OpOperand &use : user->getOpOperands())
      if (split.isForwardValue(use.get()) && !split.stashable(use.get()))
        use.set(mat.get(b, use.get()));
  };
  for (Operation *op : split.backwardOps_)
    rewire(op);
  Operation *ret = f.getBody().front().getTerminator();
  b.setInsertionPoint(ret);
  for (unsigned i : split.backwardResults_) {
    OpOperand &use = ret->getOpOperand(i);
    if (split.isForwardValue(use.get()) && !split.stashable(use.get()))
      use.set(mat.get(b, use.get()));
  }
}

struct ForwardBackwardSplitPass : impl::ForwardBackwardSplitBase<ForwardBackwardSplitPass> {
  using ForwardBackwardSplitBase::ForwardBackwardSplitBase;

  void runOnOperation() override {
    if (failed(run(getOperation())))
      signalPassFailure();
  }

  LogicalResult run(ModuleOp module) {
    Policy policy;
    if (recompute == "none")
      policy = Policy::none;
    else if (recompute == "selective")
      policy = Policy::selective;
    else if (recompute == "full")
      policy = Policy::full;
    else
      return module.emitError() << "mega-forward-backward-split: unknown recompute policy '"
                                << recompute << "'; use none, selective or full";
    SmallVector<func::FuncOp> chunks, whole;
    module.walk([&](func::FuncOp f) {
      StringRef name = f.getSymName();
      if (name == "forward_backward")
        whole.push_back(f);
      else if (name.starts_with("forward_backward.c"))
        chunks.push_back(f);
    });
    for (func::FuncOp f : llvm::concat<func::FuncOp>(chunks, whole)) {
      if (f.isExternal() || !f.getBody().hasOneBlock())
        return f.emitError() << "mega-forward-backward-split: @" << f.getSymName()
                             << " must have a body of one block";
      if (!llvm::any_of(llvm::seq(f.getNumArguments()),
                        [&](unsigned i) { return bool(f.getArgAttr(i, kStateAttr)); }))
        return f.emitError() << "mega-forward-backward-split: @" << f.getSymName()
                             << " has no gradient accumulators; run mega-training-autodiff "
                                "first";
    }
    for (func::FuncOp f : chunks)
      ChunkSplitter(f, policy).run();
    if (policy != Policy::none)
      for (func::FuncOp f : whole)
        recomputeInPlace(f, policy);
    return success();
  }
};

} // namespace
} // namespace megac::passes
