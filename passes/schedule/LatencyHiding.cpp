// mega-schedule-latency-hiding: blocking collectives become start/done pairs, starts as early
// and dones as late as their block's dependencies and an in-flight byte budget allow
// (Passes.td; docs/training-step.md "Overlap").
#include "passes/schedule/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <vector>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_LATENCYHIDING
#include "passes/schedule/Passes.h.inc"

namespace {

bool isBlockingCollective(Operation *op) {
  return isa<mega::AllReduceOp, mega::AllGatherOp, mega::ReduceScatterOp>(op);
}

int64_t bytesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getNumElements() * std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
}

/// One collective of a block and where its start and done go (indices into the block's ops:
/// the start before ops[anchor], the done before ops[done]).
struct Pair {
  Operation *op;
  size_t at, anchor, done;
  int64_t bytes;
  bool split = false;
};

/// The start twin of a blocking collective, built at the builder's insertion point.
Value buildStart(OpBuilder &b, Operation *op) {
  if (auto c = dyn_cast<mega::AllReduceOp>(op))
    return b.create<mega::AllReduceStartOp>(c.getLoc(), c.getType(), c.getKindAttr(), c.getInput(),
                                            c.getMeshAttr(), c.getAxesAttr());
  if (auto c = dyn_cast<mega::AllGatherOp>(op))
    return b.create<mega::AllGatherStartOp>(c.getLoc(), c.getType(), c.getInput(), c.getMeshAttr(),
                                            c.getAxesAttr(), c.getDimAttr());
  auto c = cast<mega::ReduceScatterOp>(op);
  return b.create<mega::ReduceScatterStartOp>(c.getLoc(), c.getType(), c.getKindAttr(),
                                              c.getInput(), c.getMeshAttr(), c.getAxesAttr(),
                                              c.getDimAttr());
}

void scheduleBlock(Block &block, int64_t budget) {
  std::vector<Operation *> ops;
  llvm::DenseMap<Operation *, size_t> index;
  for (Operation &op : block) {
    index[&op] = ops.size();
    ops.push_back(&op);
  }
  if (ops.empty() || !ops.back()->hasTrait<OpTrait::IsTerminator>())
    return;
  std::vector<Pair> pairs;
  for (size_t i = 0; i < ops.size(); ++i) {
    Operation *op = ops[i];
    if (!isBlockingCollective(op))
      continue;
    // The done goes before the first op of the block that reads the result (or the end).
    size_t done = ops.size() - 1;
    for (Operation *user : op->getResult(0).getUsers())
      if (Operation *inBlock = block.findAncestorOpInBlock(*user))
        done = std::min(done, index.lookup(inBlock));
    pairs.push_back({op, i, i, done, bytesOf(op->getResult(0))});
  }
  if (pairs.empty())
    return;
  // Where each pair's result becomes readable: after its done, or after the blocking op.
  llvm::DenseMap<Operation *, size_t> readyAt;
  auto inFlightAt = [&](size_t q, size_t self) {
    int64_t bytes = 0;
    for (size_t p = 0; p < pairs.size(); ++p)
      if (p != self && pairs[p].anchor <= q && q < pairs[p].done)
        bytes += pairs[p].bytes;
    return bytes;
  };
  for (size_t k = 0; k < pairs.size(); ++k) {
    Pair &pair = pairs[k];
    size_t earliest = 0;
    Value input = pair.op->getOperand(0);
    if (Operation *def = input.getDefiningOp())
      if (Operation *inBlock = block.findAncestorOpInBlock(*def)) {
        auto it = readyAt.find(inBlock);
        earliest = it != readyAt.end() ? it->second : index.lookup(inBlock) + 1;
      }
    // The done sinks only where the bytes in flight over the ops it passes fit the budget.
    bool fits = true;
    for (size_t q = pair.at + 1; q < pair.done && fits; ++q)
      fits = inFlightAt(q, k) + pair.bytes <= budget;
    if (!fits) {
      pair.anchor = pair.done = pair.at; // stays blocking
      continue;
    }
    // Rise op by op while the bytes in flight at each op passed stay within the budget.
    while (pair.anchor > earliest && inFlightAt(pair.anchor - 1, k) + pair.bytes <= budget)
      --pair.anchor;
    // Something other than the collective itself must run between its start and its done.
    pair.split = pair.anchor < pair.at || pair.done > pair.at + 1;
    if (pair.split)
      readyAt[pair.op] = pair.done;
    else
      pair.anchor = pair.done = pair.at; // stays blocking: nothing in flight
  }
  // Materialize in program order, so starts (and dones) sharing a position keep that order.
  OpBuilder b(block.getParentOp()->getContext());
  for (Pair &pair : pairs) {
    if (!pair.split)
      continue;
    b.setInsertionPoint(ops[pair.anchor]);
    Value started = buildStart(b, pair.op);
    b.setInsertionPoint(ops[pair.done]);
    auto done = b.create<mega::CollectiveDoneOp>(pair.op->getLoc(), started.getType(), started);
    pair.op->getResult(0).replaceAllUsesWith(done.getResult());
  }
  for (Pair &pair : pairs)
    if (pair.split)
      pair.op->erase();
}

struct LatencyHidingPass : impl::LatencyHidingBase<LatencyHidingPass> {
  using LatencyHidingBase::LatencyHidingBase;

  void runOnOperation() override {
    if (maxInFlightBytes < 0) {
      getOperation().emitError() << "mega-schedule-latency-hiding: max-in-flight-bytes "
                                 << static_cast<int64_t>(maxInFlightBytes)
                                 << " is negative; give 0 (no overlap) or more";
      return signalPassFailure();
    }
    getOperation().walk([&](func::FuncOp fn) {
      for (Block &block : fn.getBody())
        scheduleBlock(block, maxInFlightBytes);
    });
  }
};

} // namespace

} // namespace megac::passes
