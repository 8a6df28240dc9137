// mega-backward-weight-split: each chunk's @backward.c<c> becomes @backward_input.c<c> (the
// input gradient the previous chunk waits for) and @backward_weight.c<c> (the weight gradients
// and accumulator updates), for the zero-bubble pipeline schedules (docs/pipeline.md).
#include "passes/schedule/ChunkFunctions.h"
#include "passes/schedule/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_BACKWARDWEIGHTSPLIT
#include "passes/schedule/Passes.h.inc"

namespace {

// The training step's signature attributes (passes/training/Passes.h).
constexpr const char *kStateAttr = "mega.state";
constexpr const char *kUpdatesAttr = "mega.updates";

/// @backward.c<c> -> @backward_input.c<c> + @backward_weight.c<c>.
class WeightSplitter {
public:
  explicit WeightSplitter(func::FuncOp f)
      : f_(f), ret_(cast<func::ReturnOp>(f.getBody().front().getTerminator())),
        suffix_(f.getSymName().drop_front(strlen("backward")).str()) {}

  LogicalResult run() {
    for (unsigned i = 0; i < f_.getNumResults(); ++i)
      (f_.getResultAttr(i, kUpdatesAttr) ? weightResults_ : inputResults_).push_back(i);
    if (weightResults_.empty())
      return f_.emitError() << "mega-backward-weight-split: @" << f_.getSymName()
                            << " updates no gradient accumulator (mega.updates); run "
                               "mega-forward-backward-split on a differentiated chunk first";
    // B: every op the input gradients need. W: the rest, in program order.
    SmallVector<Operation *> work;
    for (unsigned i : inputResults_)
      if (Operation *def = ret_.getOperand(i).getDefiningOp())
        work.push_back(def);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!input_.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          work.push_back(def);
    }
    Block &block = f_.getBody().front();
    for (Operation &op : block.without_terminator())
      (input_.contains(&op) ? inputOps_ : weightOps_).push_back(&op);
    collectPorts();
    OpBuilder b(f_);
    buildInput(b);
    buildWeight(b);
    f_.erase();
    return success();
  }

private:
  /// What W reads from B: B's op results (constants are cloned instead), in B's order.
  void collectPorts() {
    DenseMap<Operation *, int64_t> order;
    for (auto [i, op] : llvm::enumerate(inputOps_))
      order[op] = i;
    auto fromInput = [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && input_.contains(def) && !def->hasTrait<OpTrait::ConstantLike>();
    };
    llvm::SetVector<Value> ports;
    for (Operation *op : weightOps_)
      for (Value v : op->getOperands())
        if (fromInput(v))
          ports.insert(v);
    for (unsigned i : weightResults_)
      if (Value v = ret_.getOperand(i); fromInput(v))
        ports.insert(v);
    ports_.assign(ports.begin(), ports.end());
    llvm::stable_sort(ports_, [&](Value a, Value b) {
      return std::make_pair(order.lookup(a.getDefiningOp()), cast<OpResult>(a).getResultNumber()) <
             std::make_pair(order.lookup(b.getDefiningOp()), cast<OpResult>(b).getResultNumber());
    });
  }

  /// "stash.c<c>.w<k>": kept by the pipeline runner per (chunk, micro-batch) from B to W, like
  /// the forward's stash.c<c>.<k> from F to B.
  StringAttr portName(unsigned k) {
    return StringAttr::get(f_.getContext(), "stash" + suffix_ + ".w" + std::to_string(k));
  }

  /// The arguments of f that `ops` or the results `results` read, in argument order; state
  /// arguments only when `withState` (W takes every accumulator, B none). B (!withState) takes
  /// every incoming gradient grad.act.c<c+1>, read or not: the runner receives what it lists.
  SmallVector<unsigned> argumentsRead(ArrayRef<Operation *> ops, ArrayRef<unsigned> results,
                                      bool withState) {
    llvm::SmallDenseSet<unsigned> read;
    for (Operation *op : ops)
      for (Value v : op->getOperands())
        if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == &f_.getBody().front())
          read.insert(arg.getArgNumber());
    for (unsigned i : results)
      if (auto arg = dyn_cast<BlockArgument>(ret_.getOperand(i)))
        read.insert(arg.getArgNumber());
    SmallVector<unsigned> args;
    for (unsigned i = 0; i < f_.getNumArguments(); ++i) {
      bool state = bool(f_.getArgAttr(i, kStateAttr));
      auto in = f_.getArgAttrOfType<StringAttr>(i, mega::kInputAttr);
      bool gradIn = in && in.getValue().starts_with("grad.act.c");
      if (state ? withState : read.contains(i) || (gradIn && !withState))
        args.push_back(i);
    }
    return args;
  }

  /// Clones `ops` into a new function `name`(args of f, then the ports as inputs) returning
  /// f's results `results`, then the ports as outputs.
  void build(OpBuilder &b, const std::string &name, ArrayRef<unsigned> args, bool portsIn,
             ArrayRef<Operation *> ops, ArrayRef<unsigned> results, bool portsOut) {
    SmallVector<Type> argTypes, resultTypes;
    SmallVector<DictionaryAttr> argAttrs, resultAttrs;
    for (unsigned i : args) {
      argTypes.push_back(f_.getArgument(i).getType());
      argAttrs.push_back(f_.getArgAttrDict(i));
    }
    auto portAttr = [&](unsigned k, const char *attr) {
      return b.getDictionaryAttr(b.getNamedAttr(attr, portName(k)));
    };
    if (portsIn)
      for (auto [k, v] : llvm::enumerate(ports_)) {
        argTypes.push_back(v.getType());
        argAttrs.push_back(portAttr(k, mega::kInputAttr));
      }
    for (unsigned i : results) {
      resultTypes.push_back(f_.getResultTypes()[i]);
      resultAttrs.push_back(f_.getResultAttrDict(i));
    }
    if (portsOut)
      for (auto [k, v] : llvm::enumerate(ports_)) {
        resultTypes.push_back(v.getType());
        resultAttrs.push_back(portAttr(k, mega::kOutputAttr));
      }
    func::FuncOp g = createLike(b, f_, name, argTypes, argAttrs, resultTypes, resultAttrs);
    Block *entry = &g.getBody().front();
    IRMapping map;
    for (auto [k, i] : llvm::enumerate(args))
      map.map(f_.getArgument(i), entry->getArgument(k));
    if (portsIn)
      for (auto [k, v] : llvm::enumerate(ports_))
        map.map(v, entry->getArgument(args.size() + k));
    OpBuilder gb = OpBuilder::atBlockEnd(entry);
    // Constants of B that W reads are cloned, not passed.
    auto cloneConstants = [&](Operation *op) {
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp();
            def && !map.contains(v) && def->hasTrait<OpTrait::ConstantLike>())
          gb.clone(*def, map);
    };
    for (Operation *op : ops) {
      cloneConstants(op);
      gb.clone(*op, map);
    }
    SmallVector<Value> values;
    for (unsigned i : results) {
      Value v = ret_.getOperand(i);
      if (Operation *def = v.getDefiningOp(); def && !map.contains(v))
        gb.clone(*def, map); // a constant result
      values.push_back(map.lookup(v));
    }
    if (portsOut)
      for (Value v : ports_)
        values.push_back(map.lookup(v));
    func::ReturnOp::create(gb, ret_.getLoc(), values);
  }

  /// @backward_input.c<c>(params, stash.c<c>.<k>, grad.act.c<c+1>, data it reads)
  ///     -> (grad.act.c<c>, stash.c<c>.w<k>).
  void buildInput(OpBuilder &b) {
    build(b, "backward_input" + suffix_, argumentsRead(inputOps_, inputResults_, false),
          /*portsIn=*/false, inputOps_, inputResults_, /*portsOut=*/true);
  }

  /// @backward_weight.c<c>(params, stash.c<c>.<k>, grad.act.c<c+1>, data it reads, accumulators,
  ///     stash.c<c>.w<k>) -> (accumulator updates).
  void buildWeight(OpBuilder &b) {
    build(b, "backward_weight" + suffix_, argumentsRead(weightOps_, weightResults_, true),
          /*portsIn=*/true, weightOps_, weightResults_, /*portsOut=*/false);
  }

  func::FuncOp f_;
  func::ReturnOp ret_;
  std::string suffix_; // ".c<c>"
  SmallVector<unsigned> inputResults_, weightResults_;
  DenseSet<Operation *> input_;
  SmallVector<Operation *> inputOps_, weightOps_;
  SmallVector<Value> ports_;
};

struct BackwardWeightSplitPass : impl::BackwardWeightSplitBase<BackwardWeightSplitPass> {
  using BackwardWeightSplitBase::BackwardWeightSplitBase;

  void runOnOperation() override {
    SmallVector<func::FuncOp> chunks;
    getOperation().walk([&](func::FuncOp f) {
      if (f.getSymName().starts_with("backward.c"))
        chunks.push_back(f);
    });
    if (chunks.empty()) {
      getOperation().emitError() << "mega-backward-weight-split: no @backward.c<c> functions; "
                                    "run mega-pipeline-split and mega-forward-backward-split "
                                    "first (pp > 1)";
      return signalPassFailure();
    }
    for (func::FuncOp f : chunks) {
      if (f.isExternal() || !f.getBody().hasOneBlock()) {
        f.emitError() << "mega-backward-weight-split: @" << f.getSymName()
                      << " must have a body of one block";
        return signalPassFailure();
      }
      if (failed(WeightSplitter(f).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace megac::passes
