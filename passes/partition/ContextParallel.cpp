// mega-context-parallel: prepares @forward_backward for context parallelism (Passes.td,
// docs/context-parallel.md): the sequence permuted for causal load balancing, per-position
// tables permuted alike, causal attention masked by the query and key global positions.
#include "passes/partition/Passes.h"
#include "passes/partition/Regather.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_CONTEXTPARALLEL
#define GEN_PASS_DEF_CONTEXTPARALLELREGATHER
#include "passes/partition/Passes.h.inc"

namespace {

/// The permutation: 2·cp chunks of S / (2·cp) positions; cp rank i's contiguous S / cp holds
/// chunks i and 2·cp − 1 − i, so every rank's causal attention work is the same.
SmallVector<int64_t> loadBalancedOrder(int64_t seq, int64_t cp) {
  int64_t chunk = seq / (2 * cp);
  SmallVector<int64_t> order;
  for (int64_t i = 0; i < cp; ++i)
    for (int64_t c : {i, 2 * cp - 1 - i})
      for (int64_t p = 0; p < chunk; ++p)
        order.push_back(c * chunk + p);
  return order;
}

class Rewriter {
public:
  Rewriter(func::FuncOp f, int64_t cp, bool ring)
      : f_(f), cp_(cp), ring_(ring), b_(f.getContext()) {}

  LogicalResult run() {
    SmallVector<mega::AttentionOp> attentions;
    f_.walk([&](mega::AttentionOp op) { attentions.push_back(op); });
    // Scores [b, h, s, t] softmaxed outside mega.attention: the input phase did not raise it.
    WalkResult unraised = f_.walk([&](mega::SoftmaxOp op) {
      if (cast<RankedTensorType>(op.getType()).getRank() >= 4) {
        op.emitError() << "context parallelism needs attention raised to mega.attention, but "
                          "this softmax over rank-4 scores is attention the input phase did not "
                          "raise (export the model with a standard attention pattern)";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (unraised.wasInterrupted())
      return failure();
    if (attentions.empty())
      return f_.emitError() << "context parallelism splits the sequence of mega.attention, but "
                               "the model has none (a model without attention gains nothing "
                               "from --cp; use --dp)";
    seq_ = cast<RankedTensorType>(attentions.front().getQuery().getType()).getDimSize(1);
    for (mega::AttentionOp op : attentions) {
      int64_t s = cast<RankedTensorType>(op.getQuery().getType()).getDimSize(1);
      int64_t t = cast<RankedTensorType>(op.getKey().getType()).getDimSize(1);
      if (s != seq_ || t != seq_)
        return op.emitError() << "context parallelism supports self-attention over the whole "
                                 "sequence; this attention has "
                              << s << " queries and " << t << " keys (the first has " << seq_
                              << ")";
      if (!op.getCausal())
        return op.emitError() << "context parallelism supports causal attention only so far; "
                                 "this attention is not causal (bidirectional models: use --dp "
                                 "or --tp)";
      if (Value mask = op.getMask(); mask && failed(checkPaddingMask(op, mask)))
        return failure();
    }
    // A running sum along the sequence (MoE capacity dropping keeps each expert's first tokens
    // in position order) would count in the permuted order.
    WalkResult ordered = f_.walk([&](mega::CumSumOp op) {
      auto type = cast<RankedTensorType>(op.getType());
      int64_t axis = static_cast<int64_t>(op.getAxis());
      if (axis < 0)
        axis += type.getRank();
      if (axis < 0 || axis >= type.getRank() || type.getDimSize(axis) != seq_)
        return WalkResult::advance();
      op.emitError() << "context parallelism permutes the sequence, but this cumsum runs along "
                        "it (MoE capacity dropping counts tokens in position order); use a "
                        "dropless MoE (no capacity) with --cp";
      return WalkResult::interrupt();
    });
    if (ordered.wasInterrupted())
      return failure();
    if (seq_ % (2 * cp_) != 0)
      return f_.emitError() << "context parallelism splits the sequence into 2 * cp = " << 2 * cp_
                            << " chunks, but the sequence has " << seq_
                            << " positions (choose a sequence length that is a multiple of "
                            << 2 * cp_ << ")";
    b_.setInsertionPointToStart(&f_.getBody().front());
    Location loc = f_.getLoc();
    order_ = loadBalancedOrder(seq_, cp_);
    auto indexType = RankedTensorType::get({seq_}, b_.getI64Type());
    positions_ =
        mega::ConstantOp::create(b_, loc, DenseElementsAttr::get(indexType, ArrayRef(order_)));
    if (failed(permuteInputs()) || failed(permuteParameters()))
      return failure();
    for (mega::AttentionOp op : attentions) {
      permuteRotaryTables(op.getQuery());
      permuteRotaryTables(op.getKey());
      auto [queries, keys] = causalPositions();
      op.getQueryPositionsMutable().assign(queries);
      op.getKeyPositionsMutable().assign(keys);
      op.removeCausalAttr();
      if (ring_) // k and v stay split with q; the kernel passes the blocks around the cp ring
        op->setAttr(mega::kRingAxesAttr, b_.getStrArrayAttr({"cp"}));
    }
    return success();
  }

private:
  /// A mask context parallelism can split: an additive key padding mask [b or 1, 1, 1, S]
  /// (broadcast over heads and queries) computed elementwise (casts, compares, selects,
  /// arithmetic, reshapes, broadcasts) from integer token inputs [b, S], such as the zoo's
  /// attention_mask, and from values without a sequence dim. permuteInputs reads those inputs in
  /// the permuted order, so the mask's keys are permuted like the keys it masks; sharding
  /// propagation splits it over cp with them (all-gathered with k and v for the attention, or,
  /// in the ring, a block of it travelling with each k/v block).
  /// Anything else over the sequence (a relative position bias, a per-query mask, a constant or
  /// parameter over the positions) would keep the original order, and is refused.
  LogicalResult checkPaddingMask(mega::AttentionOp op, Value mask) {
    auto type = cast<RankedTensorType>(mask.getType());
    ArrayRef<int64_t> m = type.getShape();
    if (m.size() != 4 || m[1] != 1 || m[2] != 1 || m[3] != seq_)
      return op.emitError() << "context parallelism supports a key padding mask [b, 1, 1, " << seq_
                            << "] (broadcast over heads and queries); this attention's mask is "
                            << type << " (a relative position bias or a per-query mask is not "
                            << "supported with --cp; use --tp or --dp)";
    auto overSequence = [&](Type t) {
      auto ranked = dyn_cast<RankedTensorType>(t);
      return ranked && llvm::is_contained(ranked.getShape(), seq_);
    };
    SmallVector<Value> work{mask};
    DenseSet<Value> seen;
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        bool functionArg = arg.getOwner() == &f_.getBody().front();
        auto name = functionArg
                        ? f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kInputAttr)
                        : StringAttr();
        auto argType = dyn_cast<RankedTensorType>(arg.getType());
        bool tokens = name && argType && isa<IntegerType>(argType.getElementType()) &&
                      argType.getRank() >= 2 && argType.getDimSize(1) == seq_;
        if (functionArg && (tokens || !overSequence(arg.getType())))
          continue;
        return op.emitError() << "context parallelism permutes the padding mask with the "
                                 "sequence, but this attention's mask reads argument "
                              << arg.getArgNumber() << " " << arg.getType()
                              << ", which is not an integer token input [b, " << seq_
                              << "] (give the padding as an integer attention_mask input)";
      }
      Operation *def = v.getDefiningOp();
      if (auto constant = dyn_cast<mega::ConstantOp>(def)) {
        if (!overSequence(v.getType()) || constant.getValue().isSplat())
          continue; // the same at every position
        return op.emitError() << "context parallelism permutes the padding mask with the "
                                 "sequence, but this attention's mask reads a constant "
                              << v.getType() << " over the positions, which would keep their order";
      }
      if (!def->hasTrait<mega::OpTrait::Elementwise>() &&
          !isa<mega::CastOp, mega::ReshapeOp, mega::BroadcastOp>(def))
        return op.emitError() << "context parallelism permutes the padding mask with the "
                                 "sequence, but this attention's mask is computed by '"
                              << def->getName()
                              << "' (only elementwise ops, casts, reshapes and broadcasts of "
                                 "the token inputs keep it in the permuted order)";
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    return success();
  }

  /// `v` gathered along `axis` by the permutation, marked so that sharding propagation splits
  /// the permutation (and so the result's `axis`) over cp.
  Value permuted(Value v, int64_t axis) {
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[axis] = seq_;
    auto gather =
        mega::GatherOp::create(b_, v.getLoc(), RankedTensorType::get(shape, type.getElementType()),
                               v, positions_, b_.getI64IntegerAttr(axis));
    gather->setAttr(kContextParallelSplitAttr, b_.getUnitAttr());
    return gather.getResult();
  }

  /// Token ids and labels [b, S] read in the permuted order.
  LogicalResult permuteInputs() {
    for (BlockArgument arg : f_.getArguments()) {
      auto name = f_.getArgAttrOfType<StringAttr>(arg.getArgNumber(), mega::kInputAttr);
      auto type = cast<RankedTensorType>(arg.getType());
      if (!name || type.getRank() < 2 || type.getDimSize(1) != seq_)
        continue;
      if (!isa<IntegerType>(type.getElementType()))
        return f_.emitError() << "context parallelism permutes token inputs; input '"
                              << name.getValue()
                              << "' is a float tensor over the sequence, which --cp does not "
                                 "permute (give a padding mask as an integer attention_mask "
                                 "[b, S] of 1 and 0, as the zoo's models take it)";
      Value p = permuted(arg, 1);
      arg.replaceAllUsesExcept(p, p.getDefiningOp());
    }
    return success();
  }

  /// A learned position table [S, h] added to the hidden states (GPT's wpe): its rows
  /// permuted as the tokens are. Its gradient (the gather's scatter) is then partial over cp.
  LogicalResult permuteParameters() {
    for (BlockArgument arg : f_.getArguments()) {
      if (!f_.getArgAttr(arg.getArgNumber(), mega::kParamAttr))
        continue;
      auto type = cast<RankedTensorType>(arg.getType());
      if (type.getRank() != 2 || type.getDimSize(0) != seq_ || arg.use_empty())
        continue;
      bool added = llvm::all_of(arg.getUsers(), [](Operation *user) {
        return isa<mega::BroadcastOp, mega::CastOp>(user);
      });
      if (!added)
        continue; // an [S, x] weight used otherwise (a linear of width S) is no position table
      Value p = permuted(arg, 0);
      arg.replaceAllUsesExcept(p, p.getDefiningOp());
    }
    return success();
  }

  /// The rotary tables of the mega.rope producing `v` (through reshapes and transposes): the
  /// dim of size S (aligned with the input's sequence dim) gathered by the permutation.
  void permuteRotaryTables(Value v) {
    while (Operation *def = v.getDefiningOp()) {
      if (auto rope = dyn_cast<mega::RopeOp>(def)) {
        for (OpOperand *table : {&rope.getCosMutable(), &rope.getSinMutable()})
          table->set(permutedTable(table->get()));
        return;
      }
      if (!isa<mega::ReshapeOp, mega::TransposeOp, mega::CastOp>(def))
        return;
      v = def->getOperand(0);
    }
  }

  Value permutedTable(Value table) {
    if (Value done = tables_.lookup(table))
      return done;
    if (table.getDefiningOp<mega::GatherOp>() &&
        table.getDefiningOp()->hasAttr(kContextParallelSplitAttr))
      return table; // already permuted (shared between q and k)
    auto type = cast<RankedTensorType>(table.getType());
    // The sequence dim: the last of size S before the rotary dims.
    std::optional<int64_t> axis;
    for (int64_t d = 0; d + 1 < type.getRank(); ++d)
      if (type.getDimSize(d) == seq_)
        axis = d;
    if (!axis)
      return table; // one row for every position: nothing to permute
    OpBuilder::InsertionGuard guard(b_);
    if (Operation *def = table.getDefiningOp())
      b_.setInsertionPointAfter(def);
    Value p = permuted(table, *axis);
    tables_[table] = p;
    tables_[p] = p;
    return p;
  }

  /// The global positions of the permuted sequence for causal attention (query i sees key j
  /// iff P[j] <= P[i]), i64 [S] each: the queries' from a gather split over cp (each rank reads
  /// only its own S / cp), the keys' whole (every rank's k and v are all-gathered over cp in
  /// the same permuted order) or, for the ring, the queries' (each rank's key block travels
  /// with its positions). Nothing of size S x S exists.
  std::pair<Value, Value> causalPositions() {
    if (queryPositions_)
      return {queryPositions_, keyPositions_};
    Location loc = f_.getLoc();
    auto type = RankedTensorType::get({seq_}, b_.getI64Type());
    SmallVector<int64_t> iota(seq_);
    for (int64_t i = 0; i < seq_; ++i)
      iota[i] = i;
    Value positions =
        mega::ConstantOp::create(b_, loc, DenseElementsAttr::get(type, ArrayRef(iota)));
    queryPositions_ = permuted(positions, 0);
    keyPositions_ =
        ring_ ? queryPositions_
              : mega::ConstantOp::create(b_, loc, DenseElementsAttr::get(type, ArrayRef(order_)))
                    .getResult();
    return {queryPositions_, keyPositions_};
  }

  func::FuncOp f_;
  int64_t cp_;
  bool ring_;
  OpBuilder b_;
  int64_t seq_ = 0;
  SmallVector<int64_t> order_;
  Value positions_;
  llvm::DenseMap<Value, Value> tables_;
  Value queryPositions_, keyPositions_;
};

struct ContextParallelPass : public impl::ContextParallelBase<ContextParallelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (cp < 1) {
      module.emitError() << "mega-context-parallel: cp must be >= 1, not "
                         << static_cast<int64_t>(cp);
      return signalPassFailure();
    }
    if (cp == 1)
      return;
    auto f = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!f) {
      module.emitError() << "mega-context-parallel: no @forward_backward (run "
                            "mega-training-loss first)";
      return signalPassFailure();
    }
    if (failed(Rewriter(f, cp, ring).run()))
      return signalPassFailure();
  }
};

/// The keys and values each attention reads whole (all-gathered over cp) are gathered again
/// before their first backward use, so only their 1/cp shards live between forward and
/// backward (Regather.h, as ZeRO-3's parameters).
struct ContextParallelRegatherPass
    : public impl::ContextParallelRegatherBase<ContextParallelRegatherPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation().walk([](func::FuncOp f) {
      bool backward = false;
      DenseSet<Operation *> forward = forwardOps(f, backward);
      if (!backward || forward.empty())
        return;
      SmallVector<mega::AllGatherOp> gathers;
      f.walk([&](mega::AllGatherOp g) {
        if (forward.contains(g) && !g->hasAttr(kRegatherAttr) &&
            llvm::is_contained(g.getAxes().getAsValueRange<StringAttr>(), "cp"))
          gathers.push_back(g);
      });
      OpBuilder b(f.getContext());
      for (mega::AllGatherOp g : gathers) {
        SmallVector<OpOperand *> backwardUses;
        bool forwardUse = false;
        for (OpOperand &use : g->getUses())
          if (forward.contains(use.getOwner()))
            forwardUse = true;
          else
            backwardUses.push_back(&use);
        if (!forwardUse)
          continue; // read by the backward alone: already where it is needed
        gatherBeforeFirstUse(b, backwardUses, true,
                             [&](OpBuilder &at) { return at.clone(*g)->getResult(0); });
      }
    });
  }
};

} // namespace
} // namespace megac::passes
