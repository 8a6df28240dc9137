// mega-schedule-latency-hiding: blocking collectives become start/done pairs, starts as early
// and dones as late as their block's dependencies and an in-flight byte budget allow
// (Passes.td; docs/training-step.md "Overlap").
#include "passes/schedule/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

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

/// What a collective holds while in flight: its result, and a reduce-scatter also its whole
/// input (the communicator's copy of it, or the buffer NCCL reads).
int64_t inFlightBytes(Operation *op) {
  return std::max(bytesOf(op->getResult(0)), bytesOf(op->getOperand(0)));
}

/// ZeRO-2/3's accumulation of a micro-batch gradient into its shard, `acc + reduce_scatter(g)`
/// (passes/training/ZeroSharding.h): the add of a block argument whose other operand is a
/// reduce-scatter of the block read by nothing else. Null for any other op.
mega::AddOp accumulationOf(Operation *op) {
  auto scatter = dyn_cast<mega::ReduceScatterOp>(op);
  if (!scatter || !scatter->hasOneUse())
    return nullptr;
  auto add = dyn_cast<mega::AddOp>(*scatter->getUsers().begin());
  if (!add || add->getBlock() != scatter->getBlock())
    return nullptr;
  Value other = add.getLhs() == scatter.getResult() ? add.getRhs() : add.getLhs();
  auto acc = dyn_cast<BlockArgument>(other);
  return acc && acc.getOwner() == add->getBlock() ? add : mega::AddOp();
}

/// Raises each ZeRO accumulation's reduce-scatter to right after its gradient is final: where its
/// input is a cast of the gradient read by nothing else (mixed precision's cast up to the f32
/// accumulator, which mega-training-precision leaves at the end of the backward), the cast moves
/// to just after the op defining the gradient (the block's start for an argument) and the
/// reduce-scatter right after it, so it does not wait for the whole backward.
void raiseAccumulations(Block &block) {
  SmallVector<Operation *> scatters;
  for (Operation &op : block)
    if (accumulationOf(&op))
      scatters.push_back(&op);
  for (Operation *scatter : scatters) {
    auto cast = scatter->getOperand(0).getDefiningOp<mega::CastOp>();
    if (!cast || cast->getBlock() != &block || !cast->hasOneUse() || cast->getNumOperands() != 1)
      continue;
    Value grad = cast->getOperand(0);
    Operation *def = grad.getDefiningOp();
    if (def && def->getBlock() != &block)
      def = block.findAncestorOpInBlock(*def);
    if (def)
      cast->moveAfter(def);
    else if (cast != &block.front())
      cast->moveBefore(&block.front());
    scatter->moveAfter(cast);
  }
}

/// Moves each ZeRO accumulation add down to just before the first op of the block that reads
/// its sum (the terminator in a training function; the global norm or the update in
/// @forward_backward_apply), so that its reduce-scatter's done can sink that far.
/// scheduleBlock moves each back to just after its done.
void sinkAccumulations(Block &block) {
  SmallVector<mega::AddOp> adds;
  for (Operation &op : block)
    if (mega::AddOp add = accumulationOf(&op))
      adds.push_back(add);
  for (mega::AddOp add : adds) {
    Operation *first = block.getTerminator();
    for (Operation *user : add->getUsers())
      if (Operation *at = block.findAncestorOpInBlock(*user); at && at->isBeforeInBlock(first))
        first = at;
    add->moveBefore(first);
  }
}

/// One collective of a block and where its start and done go (indices into the block's ops:
/// the start before ops[anchor], the done before ops[done]). `accumulate`: a ZeRO gradient's
/// reduce-scatter (accumulationOf), whose done goes as late as the in-flight budget allows,
/// at most to `last` (the index of its add).
struct Pair {
  Operation *op;
  size_t at, anchor, done;
  int64_t bytes;
  bool split = false;
  mega::AddOp accumulate = nullptr;
  size_t last = 0;
};

/// The start twin of a blocking collective, built at the builder's insertion point.
Value buildStart(OpBuilder &b, Operation *op) {
  if (auto c = dyn_cast<mega::AllReduceOp>(op))
    return mega::AllReduceStartOp::create(b, c.getLoc(), c.getType(), c.getKindAttr(), c.getInput(),
                                          c.getMeshAttr(), c.getAxesAttr());
  if (auto c = dyn_cast<mega::AllGatherOp>(op))
    return mega::AllGatherStartOp::create(b, c.getLoc(), c.getType(), c.getInput(), c.getMeshAttr(),
                                          c.getAxesAttr(), c.getDimAttr());
  auto c = cast<mega::ReduceScatterOp>(op);
  return mega::ReduceScatterStartOp::create(b, c.getLoc(), c.getType(), c.getKindAttr(),
                                            c.getInput(), c.getMeshAttr(), c.getAxesAttr(),
                                            c.getDimAttr());
}

/// Splits a multi-tensor AdamW whose updated parameters feed several all-gathers (ZeRO-1/2's
/// parameter gather, one per bucket) into one AdamW per gather: a tensor goes with the first
/// all-gather of the block that reads its updated parameter; tensors no gather reads (moments
/// aside: replicated parameters) keep one AdamW of their own, placed after the others. Each
/// tensor's arithmetic is the same element code, so the results are the same bits.
void splitUpdatesByGather(Block &block) {
  for (auto multi : llvm::to_vector(block.getOps<mega::AdamWUpdateMultiOp>())) {
    size_t tensors = multi.getTensors().size() / 4;
    // The first all-gather (block order) each tensor's updated parameter reaches.
    SmallVector<Operation *> firstGather(tensors, nullptr);
    for (size_t k = 0; k < tensors; ++k) {
      SmallVector<Value> work{multi->getResult(3 * k)};
      llvm::DenseSet<Operation *> seen;
      while (!work.empty()) {
        Value v = work.pop_back_val();
        for (Operation *user : v.getUsers()) {
          Operation *at = block.findAncestorOpInBlock(*user);
          if (!at || !seen.insert(at).second)
            continue;
          if (isa<mega::AllGatherOp>(at)) {
            if (!firstGather[k] || at->isBeforeInBlock(firstGather[k]))
              firstGather[k] = at;
            continue;
          }
          llvm::append_range(work, at->getResults());
        }
      }
    }
    SmallVector<Operation *> gathers;
    for (Operation *g : firstGather)
      if (g && !llvm::is_contained(gathers, g))
        gathers.push_back(g);
    if (gathers.size() < 2)
      continue;
    llvm::sort(gathers, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    gathers.push_back(nullptr); // the tensors no gather reads
    OpBuilder b(multi);
    ArrayRef<double> decays = multi.getWeightDecays();
    for (Operation *gather : gathers) {
      SmallVector<size_t> members;
      for (size_t k = 0; k < tensors; ++k)
        if (firstGather[k] == gather)
          members.push_back(k);
      if (members.empty())
        continue;
      SmallVector<Value> operands;
      SmallVector<Type> types;
      SmallVector<double> memberDecays;
      for (size_t k : members) {
        llvm::append_range(operands, multi.getTensors().slice(4 * k, 4));
        for (unsigned r = 0; r < 3; ++r)
          types.push_back(multi->getResult(3 * k + r).getType());
        memberDecays.push_back(decays[k]);
      }
      auto part = mega::AdamWUpdateMultiOp::create(
          b, multi.getLoc(), types, multi.getLr(), multi.getStep(), operands, multi.getNorm(),
          multi.getBeta1Attr(), multi.getBeta2Attr(), multi.getEpsAttr(),
          b.getDenseF64ArrayAttr(memberDecays), multi.getMaxNormAttr());
      for (auto [j, k] : llvm::enumerate(members))
        for (unsigned r = 0; r < 3; ++r)
          multi->getResult(3 * k + r).replaceAllUsesWith(part->getResult(3 * j + r));
    }
    multi->erase();
  }
}

/// Moves, for each all-gather that reads an updated parameter (in block order), the ops it
/// depends on among those from the block's first AdamW onward, and then the gather itself, ahead
/// of the rest of that tail: bucket j's update, packing and gather come before bucket j+1's
/// update, and the unpacking of every gathered bucket follows the last update. The pairs built
/// below then start each gather right after its packing and complete it at its unpacking, so the
/// gathers run behind the remaining buckets' optimizer math (docs/training-step.md "Overlap").
void hoistParameterGathers(Block &block) {
  Operation *terminator = &block.back();
  auto isUpdate = [](Operation &op) {
    return isa<mega::AdamWUpdateOp, mega::AdamWUpdateMultiOp>(op);
  };
  auto first = llvm::find_if(block, isUpdate);
  if (first == block.end())
    return;
  SmallVector<Operation *> tail;
  for (auto it = first; &*it != terminator; ++it)
    tail.push_back(&*it);
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, op] : llvm::enumerate(tail))
    position[op] = i;
  std::vector<bool> emitted(tail.size(), false);
  SmallVector<Operation *> order;
  for (size_t g = 0; g < tail.size(); ++g) {
    if (!isa<mega::AllGatherOp>(tail[g]))
      continue;
    // The gather's backward slice within the tail.
    std::vector<bool> inSlice(tail.size(), false);
    SmallVector<size_t> work{g};
    bool readsUpdate = false;
    while (!work.empty()) {
      size_t i = work.pop_back_val();
      if (inSlice[i] || emitted[i])
        continue;
      inSlice[i] = true;
      readsUpdate = readsUpdate || isUpdate(*tail[i]);
      tail[i]->walk([&](Operation *nested) {
        for (Value operand : nested->getOperands())
          if (Operation *def = operand.getDefiningOp())
            if (Operation *at = block.findAncestorOpInBlock(*def))
              if (auto it = position.find(at); it != position.end())
                work.push_back(it->second);
      });
    }
    if (!readsUpdate)
      continue;
    for (size_t i = 0; i <= g; ++i)
      if (inSlice[i] && !emitted[i]) {
        order.push_back(tail[i]);
        emitted[i] = true;
      }
  }
  if (order.empty())
    return;
  for (size_t i = 0; i < tail.size(); ++i)
    if (!emitted[i])
      order.push_back(tail[i]);
  for (Operation *op : order)
    op->moveBefore(terminator);
}

/// ZeRO's accumulated reduce-scatters, in program order, after every other pair is placed: each
/// starts where it stands (right after its gradient) and is done as late as its add allows, as
/// long as the bytes in flight at every op it spans (`usage`: the other pairs placed) fit the
/// budget. Where they do not, the oldest accumulated reduce-scatters still in flight are done
/// first, right before this one starts (FSDP's order: a reduce-scatter waits for the older
/// ones, not the reverse); with none left to finish, this one is done where the budget is
/// reached. A pair with nothing between start and done stays blocking.
void placeAccumulations(std::vector<Pair> &pairs, std::vector<int64_t> &usage, int64_t budget) {
  auto occupy = [&](const Pair &p, size_t from, size_t to, int64_t sign) {
    for (size_t q = from; q < to; ++q)
      usage[q] += sign * p.bytes;
  };
  std::vector<size_t> open; // accumulated pairs in flight, oldest first
  for (size_t k = 0; k < pairs.size(); ++k) {
    Pair &pair = pairs[k];
    if (!pair.accumulate || pair.bytes > budget)
      continue;
    size_t done = pair.last;
    while (true) {
      size_t q = pair.at;
      while (q < pair.last && usage[q] + pair.bytes <= budget)
        ++q;
      if (q == pair.last)
        break;
      auto oldest = llvm::find_if(open, [&](size_t j) { return pairs[j].done > q; });
      if (oldest == open.end()) {
        done = q;
        break;
      }
      Pair &older = pairs[*oldest];
      open.erase(oldest);
      occupy(older, pair.at, older.done, -1);
      older.done = pair.at;
      older.split = older.done > older.at + 1;
      if (!older.split) { // nothing left between its start and done: blocking after all
        occupy(older, older.anchor, older.done, -1);
        older.anchor = older.done = older.at;
      }
    }
    pair.done = done;
    pair.split = pair.done > pair.at + 1;
    if (!pair.split) {
      pair.done = pair.at;
      continue;
    }
    occupy(pair, pair.anchor, pair.done, +1);
    open.push_back(k);
  }
}

void scheduleBlock(Block &block, int64_t budget) {
  raiseAccumulations(block);
  sinkAccumulations(block);
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
    Pair pair{op, i, i, done, inFlightBytes(op)};
    // An accumulated reduce-scatter waits for placeAccumulations: until then it holds nothing.
    if ((pair.accumulate = accumulationOf(op))) {
      pair.last = done;
      pair.done = i;
    }
    pairs.push_back(pair);
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
    if (pair.accumulate)
      continue;
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
  std::vector<int64_t> usage(ops.size(), 0);
  for (const Pair &pair : pairs)
    if (pair.split)
      for (size_t q = pair.anchor; q < pair.done; ++q)
        usage[q] += pair.bytes;
  placeAccumulations(pairs, usage, budget);
  // Materialize in program order, so starts (and dones) sharing a position keep that order.
  OpBuilder b(block.getParentOp()->getContext());
  for (Pair &pair : pairs) {
    if (!pair.split) {
      if (pair.accumulate) // blocking: its add back right after it, as before sinking
        pair.accumulate->moveAfter(pair.op);
      continue;
    }
    b.setInsertionPoint(ops[pair.anchor]);
    Value started = buildStart(b, pair.op);
    b.setInsertionPoint(ops[pair.done]);
    auto done = mega::CollectiveDoneOp::create(b, pair.op->getLoc(), started.getType(), started);
    pair.op->getResult(0).replaceAllUsesWith(done.getResult());
    // The shard is added into the accumulator as soon as it is here, not where the sum is read.
    if (pair.accumulate)
      pair.accumulate->moveAfter(done);
  }
  for (Pair &pair : pairs)
    if (pair.split)
      pair.op->erase();
}

/// Whether `op` talks to other ranks (a collective, a start, a send or receive, an exchange over
/// a mesh) or has another side effect: such ops keep their order among themselves, so that every
/// rank of a group still posts its collectives in the same order. A done only waits for its own
/// start and may move.
bool keepsItsOrder(Operation *op) {
  if (isa<mega::CollectiveDoneOp>(op))
    return false;
  return op->hasAttr("mesh") || !isMemoryEffectFree(op);
}

/// Orders the ops of the block's tail (after the backward, see below) by when their inputs
/// arrive: a done's
/// arrival is its start's rank among the block's starts (a group's link carries them in posting
/// order), an op's is the latest arrival it depends on. A stable sort on it puts the work on
/// early collectives' results (unpacking, a bucket's squares for the global norm, its update
/// and its parameter gather) ahead of the later collectives' dones, which then wait behind that
/// work instead of in front of it. Only the order changes, never the arithmetic: the order stays
/// a topological one (an op's arrival is at least its operands'), ops that communicate keep
/// their order among themselves (keepsItsOrder), and an op returning a `mega.updates` value,
/// which the plan may write over the state it replaces, stays after every op of the region that
/// read that state before it; a start stays after every done before it (it never rises, so no
/// more is in flight at once). Nothing happens when the bytes of the collectives completed in
/// the region exceed `budget` (they may then be in flight together for longer).
void orderTailByArrival(Block &block, int64_t budget) {
  Operation *terminator = &block.back();
  auto isStart = [](Operation &op) {
    return isa<mega::AllReduceStartOp, mega::AllGatherStartOp, mega::ReduceScatterStartOp>(op);
  };
  auto firstStart = llvm::find_if(block, isStart);
  if (firstStart == block.end())
    return;
  // The tail: after the model's last compute (the backward's last GEMM, attention or norm
  // gradient; the forward's and backward's own pairs are placed by scheduleBlock and
  // mega-training-zero-prefetch), from the first done, or the first blocking collective after a
  // start (left blocking by scheduleBlock because its first reader followed it: the reduction
  // of the gradients made last, whose unpacking came first), to the end. Such a collective
  // becomes a pair here, so that its done can wait behind the work on earlier results too.
  auto from = firstStart;
  for (auto it = firstStart; it != block.end(); ++it)
    if (isa<mega::MatmulOp, mega::LinearOp, mega::AttentionOp, mega::AttentionGradOp,
            mega::MoeMatmulOp, mega::MoeMatmulWeightGradOp, mega::EmbeddingGradOp,
            mega::LayerNormGradOp, mega::RmsNormGradOp, mega::CrossEntropyGradOp>(*it))
      from = std::next(it);
  auto firstDone = std::find_if(from, block.end(), [&](Operation &op) {
    return isa<mega::CollectiveDoneOp>(op) ||
           (isBlockingCollective(&op) && firstStart->isBeforeInBlock(&op));
  });
  if (firstDone == block.end() || &*firstDone == terminator)
    return;
  int64_t bytes = 0;
  for (auto it = firstDone; &*it != terminator; ++it)
    if (isa<mega::CollectiveDoneOp>(*it)) {
      if (Operation *start = it->getOperand(0).getDefiningOp())
        bytes += inFlightBytes(start);
    } else if (isBlockingCollective(&*it)) {
      bytes += inFlightBytes(&*it);
    }
  if (bytes > budget)
    return;
  Operation *tailStart = &*firstDone;
  for (Operation *op : llvm::to_vector(llvm::make_pointer_range(
           llvm::make_range(Block::iterator(tailStart), Block::iterator(terminator))))) {
    if (!isBlockingCollective(op))
      continue;
    OpBuilder b(op);
    Value started = buildStart(b, op);
    auto done = mega::CollectiveDoneOp::create(b, op->getLoc(), started.getType(), started);
    op->getResult(0).replaceAllUsesWith(done.getResult());
    if (op == tailStart)
      tailStart = started.getDefiningOp();
    op->erase();
  }
  llvm::DenseMap<Operation *, int64_t> startRank;
  int64_t starts = 0;
  for (Operation &op : block)
    if (isStart(op))
      startRank[&op] = ++starts;
  SmallVector<Operation *> region;
  for (auto it = Block::iterator(tailStart); &*it != terminator; ++it)
    region.push_back(&*it);
  llvm::DenseMap<Operation *, size_t> position;
  for (auto [i, op] : llvm::enumerate(region))
    position[op] = i;
  // For each op returning a mega.updates value: the region's other readers of the state it
  // replaces that come before it.
  auto ret = cast<func::ReturnOp>(terminator);
  auto fn = cast<func::FuncOp>(block.getParentOp());
  llvm::DenseMap<Operation *, SmallVector<size_t>> readersBefore;
  for (unsigned i = 0; i < ret.getNumOperands() && i < fn.getNumResults(); ++i) {
    auto name = fn.getResultAttrOfType<StringAttr>(i, "mega.updates");
    Operation *writer = ret.getOperand(i).getDefiningOp();
    if (!name || !writer || !position.count(writer))
      continue;
    for (BlockArgument arg : block.getArguments()) {
      bool replaced = false;
      for (StringRef attr : {"mega.param", "mega.state"})
        if (auto bound = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attr))
          replaced |= bound == name;
      if (!replaced)
        continue;
      for (Operation *user : arg.getUsers())
        if (Operation *at = block.findAncestorOpInBlock(*user);
            at && at != writer && position.count(at) && at->isBeforeInBlock(writer))
          readersBefore[writer].push_back(position[at]);
    }
  }
  std::vector<int64_t> arrival(region.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    int64_t chain = 0, dones = 0;
    for (auto [i, op] : llvm::enumerate(region)) {
      int64_t a = arrival[i];
      if (auto done = dyn_cast<mega::CollectiveDoneOp>(op))
        if (Operation *start = done->getOperand(0).getDefiningOp())
          a = std::max(a, startRank.lookup(start));
      // A start stays after the dones before it: it never rises (more bytes in flight).
      if (startRank.count(op))
        a = std::max(a, dones);
      op->walk([&](Operation *nested) {
        for (Value operand : nested->getOperands())
          if (Operation *def = operand.getDefiningOp())
            if (Operation *at = block.findAncestorOpInBlock(*def))
              if (auto it = position.find(at); it != position.end() && it->second != i)
                a = std::max(a, arrival[it->second]);
      });
      if (auto it = readersBefore.find(op); it != readersBefore.end())
        for (size_t r : it->second)
          a = std::max(a, arrival[r]);
      if (keepsItsOrder(op))
        a = chain = std::max(a, chain);
      if (isa<mega::CollectiveDoneOp>(op))
        dones = std::max(dones, a);
      if (a != arrival[i]) {
        arrival[i] = a;
        changed = true;
      }
    }
  }
  std::vector<size_t> order(region.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return arrival[a] < arrival[b]; });
  for (size_t i : order)
    region[i]->moveBefore(terminator);
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
      for (Block &block : fn.getBody()) {
        if (block.empty() || !block.back().hasTrait<OpTrait::IsTerminator>())
          continue;
        splitUpdatesByGather(block);
        hoistParameterGathers(block);
        scheduleBlock(block, maxInFlightBytes);
        orderTailByArrival(block, maxInFlightBytes);
      }
    });
  }
};

} // namespace

} // namespace megac::passes
