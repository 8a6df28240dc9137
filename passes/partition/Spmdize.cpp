// mega-spmdize: the sharded @forward_backward becomes one rank's program over local shapes,
// with collectives where layouts change (Passes.td).
#include "passes/partition/Passes.h"
#include "passes/partition/Sharding.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <map>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_SPMDIZE
#include "passes/partition/Passes.h.inc"

namespace {

using partition::AxisList;
using partition::Sharding;

bool isFloatTensor(Type t) {
  auto tensor = dyn_cast<RankedTensorType>(t);
  return tensor && isa<FloatType>(tensor.getElementType());
}

AxisList minus(const AxisList &a, const AxisList &b) {
  AxisList out;
  for (unsigned x : a)
    if (!llvm::is_contained(b, x))
      out.push_back(x);
  return out;
}

class Spmdizer {
public:
  Spmdizer(func::FuncOp f, mega::MeshAttr mesh) : f_(f), mesh_(mesh) {}

  LogicalResult run() {
    Block &body = f_.getBody().front();
    // Global types and layouts first, then everything becomes local.
    auto record = [&](Value v) {
      auto type = dyn_cast<RankedTensorType>(v.getType());
      if (!type)
        return;
      Sharding layout = partition::shardingOf(type, mesh_);
      global_[v] = RankedTensorType::get(type.getShape(), type.getElementType());
      layout_[v] = layout;
      v.setType(partition::localType(global_[v], layout, mesh_));
    };
    for (BlockArgument arg : body.getArguments())
      record(arg);
    for (Operation &op : body)
      for (Value r : op.getResults())
        record(r);

    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto reshard = dyn_cast<mega::ReshardOp>(op)) {
        if (failed(lowerReshard(reshard)))
          return failure();
        continue;
      }
      if (isa<func::ReturnOp>(op))
        continue;
      markVocabParallel(op);
      localizeAttributes(op);
      markGradientSums(op);
    }
    finishParameters();
    annotateSignature();
    return success();
  }

private:
  Sharding shardingOf(Value v) const {
    auto it = layout_.find(v);
    if (it != layout_.end())
      return it->second;
    return Sharding::replicated(cast<RankedTensorType>(v.getType()).getRank());
  }

  /// Mesh axes the op's computation is split over: any axis an operand or result is split or
  /// partial over.
  AxisList splitAxes(Operation *op) const {
    AxisList axes;
    auto add = [&](Value v) {
      if (!isa<RankedTensorType>(v.getType()))
        return;
      for (unsigned a : shardingOf(v).allAxes())
        if (!llvm::is_contained(axes, a))
          axes.push_back(a);
    };
    for (Value v : op->getOperands())
      add(v);
    for (Value v : op->getResults())
      add(v);
    return axes;
  }

  /// A layout change as collectives, one mesh axis at a time. A dim split over several axes
  /// (the batch over dp and ep) lists them major first, so axes leave a dim from its minor end
  /// (all-gather, reduce of nothing else) and join it there (shard_slice, reduce_scatter): every
  /// step keeps each rank's piece one contiguous block.
  LogicalResult lowerReshard(mega::ReshardOp reshard) {
    Value value = reshard.getInput();
    Sharding have = shardingOf(value), need = shardingOf(reshard.getResult());
    RankedTensorType global = global_[reshard.getResult()];
    Operation *user = reshard->hasOneUse() ? *reshard->getUsers().begin() : nullptr;
    AxisList userSplit = user ? splitAxes(user) : AxisList{};
    OpBuilder b(reshard);
    Location loc = reshard.getLoc();
    MLIRContext *context = b.getContext();
    auto step = [&](Sharding next, auto build) {
      value = build(partition::localType(global, next, mesh_));
      have = next;
    };
    auto isPrefix = [](const AxisList &a, const AxisList &b) {
      return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
    };
    for (unsigned axis : need.partial)
      if (!have.isPartialOver(axis))
        return reshard.emitError() << "mega-spmdize: cannot make a partial sum over "
                                   << mesh_.getAxisNames()[axis] << " from "
                                   << partition::describe(have, mesh_);
    // Partial sums: reduce-scattered onto the dim that takes the axis next, else all-reduced
    // (one all-reduce over every such axis: dp and ep of a dense gradient together).
    AxisList reduced;
    for (unsigned axis : AxisList(have.partial)) {
      if (need.isPartialOver(axis))
        continue;
      int to = need.dimOf(axis);
      if (to < 0 || !isPrefix(have.dims[to], need.dims[to]) ||
          need.dims[to][have.dims[to].size()] != axis) {
        reduced.push_back(axis);
        continue;
      }
      Sharding next = have;
      next.partial = minus(have.partial, {axis});
      next.dims[to].push_back(axis);
      ArrayAttr axes = partition::axisNames(context, mesh_, {axis});
      step(next, [&](Type t) {
        return mega::ReduceScatterOp::create(b, loc, t, mega::ReduceKind::sum, value, mesh_, axes,
                                             static_cast<uint64_t>(to))
            .getResult();
      });
    }
    if (!reduced.empty()) {
      llvm::sort(reduced);
      Sharding next = have;
      next.partial = minus(have.partial, reduced);
      ArrayAttr axes = partition::axisNames(context, mesh_, reduced);
      step(next, [&](Type t) {
        return mega::AllReduceOp::create(b, loc, t, mega::ReduceKind::sum, value, mesh_, axes)
            .getResult();
      });
    }
    // Gathers, minor axis first, until each dim's axes begin the needed ones.
    for (size_t d = 0; d < have.dims.size(); ++d)
      while (!isPrefix(have.dims[d], need.dims[d])) {
        unsigned axis = have.dims[d].back();
        Sharding next = have;
        next.dims[d].pop_back();
        bool gradPartial = llvm::is_contained(userSplit, axis) && need.dimOf(axis) < 0;
        ArrayAttr axes = partition::axisNames(context, mesh_, {axis});
        step(next, [&](Type t) {
          return mega::AllGatherOp::create(b, loc, t, value, mesh_, axes,
                                           b.getI64IntegerAttr(static_cast<int64_t>(d)),
                                           gradPartial ? b.getUnitAttr() : UnitAttr())
              .getResult();
        });
      }
    // Slices, major axis first.
    for (size_t d = 0; d < need.dims.size(); ++d)
      while (have.dims[d].size() < need.dims[d].size()) {
        unsigned axis = need.dims[d][have.dims[d].size()];
        Sharding next = have;
        next.dims[d].push_back(axis);
        ArrayAttr axes = partition::axisNames(context, mesh_, {axis});
        step(next, [&](Type t) {
          return mega::ShardSliceOp::create(b, loc, t, value, mesh_, axes,
                                            b.getI64IntegerAttr(static_cast<int64_t>(d)))
              .getResult();
        });
      }
    reshard.getResult().replaceAllUsesWith(value);
    layout_[value] = need;
    reshard.erase();
    return success();
  }

  /// Attributes that spell out global sizes: a slice keeps split dims whole (start 0, step 1),
  /// so its limit there becomes the local size.
  void localizeAttributes(Operation *op) {
    // A shard of the experts records how many there are in all (its share of the rows).
    if (isa<mega::MoeMatmulOp>(op)) {
      auto moe = cast<mega::MoeMatmulOp>(op);
      Value w = moe.getWeight();
      const AxisList &split = shardingOf(w).dims[0];
      if (!moe.getGlobalExperts() && !split.empty())
        moe.setGlobalExperts(cast<RankedTensorType>(w.getType()).getDimSize(0) *
                             partition::groupSize(mesh_, split));
      return;
    }
    auto slice = dyn_cast<mega::SliceOp>(op);
    if (!slice)
      return;
    SmallVector<int64_t> limits(slice.getLimits());
    ArrayRef<int64_t> local = cast<RankedTensorType>(slice.getResult().getType()).getShape();
    Sharding layout = shardingOf(slice.getResult());
    for (size_t d = 0; d < limits.size(); ++d)
      if (!layout.dims[d].empty())
        limits[d] = local[d];
    slice.setLimits(limits);
  }

  void markVocabParallel(Operation *op) {
    MLIRContext *context = op->getContext();
    if (auto embedding = dyn_cast<mega::EmbeddingOp>(op)) {
      AxisList vocab = shardingOf(embedding.getTable()).dims[0];
      if (!vocab.empty())
        embedding.setVocabAxesAttr(partition::axisNames(context, mesh_, vocab));
    } else if (auto ce = dyn_cast<mega::CrossEntropyOp>(op)) {
      AxisList vocab = shardingOf(ce.getLogits()).dims.back();
      if (!vocab.empty())
        ce.setVocabAxesAttr(partition::axisNames(context, mesh_, vocab));
    }
  }

  /// A whole value entering a computation split over some axes gets its gradient summed over
  /// them: copy_to_shards for activations; parameters are collected and decided at the end.
  void markGradientSums(Operation *op) {
    AxisList split = splitAxes(op);
    if (split.empty())
      return;
    for (OpOperand &use : op->getOpOperands()) {
      Value v = use.get();
      if (!isFloatTensor(v.getType()))
        continue;
      // An auxiliary loss term takes no part in the split computation: every rank seeds its own
      // copy (a replicated term) or share (a partial one), which is its whole gradient.
      if (isa<mega::AddAuxLossOp>(op) && use.getOperandNumber() == 1)
        continue;
      // Nor does a token exchange's routing: it only says which rows move.
      if (isa<mega::MoeExchangeOp>(op) && use.getOperandNumber() > 0)
        continue;
      AxisList missing = minus(split, shardingOf(v).allAxes());
      if (auto gather = v.getDefiningOp<mega::AllGatherOp>(); gather && gather.getGradPartial())
        missing = minus(missing, layoutAxes(gather.getAxes()));
      if (missing.empty())
        continue;
      if (Value param = parameterBehind(v)) {
        paramUses_[param].push_back({&use, missing});
        continue;
      }
      insertCopy(use, missing);
    }
  }

  AxisList layoutAxes(ArrayAttr names) const {
    AxisList axes;
    for (Attribute name : names)
      axes.push_back(*mesh_.findAxis(cast<StringAttr>(name).getValue()));
    return axes;
  }

  void insertCopy(OpOperand &use, const AxisList &axes) {
    OpBuilder b(use.getOwner());
    Value v = use.get();
    auto copy = mega::CopyToShardsOp::create(b, use.getOwner()->getLoc(), v.getType(), v, mesh_,
                                             partition::axisNames(b.getContext(), mesh_, axes));
    layout_[copy.getResult()] = shardingOf(v);
    use.set(copy.getResult());
  }

  /// The parameter `v` is, directly or through casts (mixed precision's bf16 copies of the f32
  /// master weights: a cast is linear, so a partial gradient passes through it), or null.
  Value parameterBehind(Value v) const {
    while (auto cast = v.getDefiningOp<mega::CastOp>())
      v = cast.getInput();
    auto arg = dyn_cast<BlockArgument>(v);
    if (arg && arg.getOwner()->getParentOp() == f_ &&
        f_.getArgAttr(arg.getArgNumber(), mega::kParamAttr))
      return v;
    return Value();
  }

  /// The uses of a parameter that compute with it: through casts, the casts' uses.
  static size_t computingUses(Value v) {
    size_t n = 0;
    for (OpOperand &use : v.getUses())
      n += isa<mega::CastOp>(use.getOwner()) ? computingUses(use.getOwner()->getResult(0)) : 1;
    return n;
  }

  /// A parameter's gradient is a partial sum over the axes every use of it is split over
  /// (reduced once per step); a use split over more axes sums its own share at once.
  void finishParameters() {
    for (auto &[param, uses] : paramUses_) {
      AxisList common = uses.front().second;
      for (auto &[use, missing] : uses)
        common.erase(llvm::remove_if(common, [&](unsigned a) {
                       return !llvm::is_contained(missing, a);
                     }),
                     common.end());
      size_t totalUses = computingUses(param);
      if (uses.size() != totalUses)
        common.clear(); // some use is not split: its gradient share is whole
      for (auto &[use, missing] : uses) {
        AxisList extra = minus(missing, common);
        if (!extra.empty())
          insertCopy(*use, extra);
      }
      if (!common.empty())
        f_.setArgAttr(cast<BlockArgument>(param).getArgNumber(), kGradPartialAttr,
                      partition::axisNames(f_.getContext(), mesh_, common));
    }
  }

  void annotateSignature() {
    Block &body = f_.getBody().front();
    MLIRContext *context = f_.getContext();
    Builder b(context);
    for (BlockArgument arg : body.getArguments()) {
      auto it = global_.find(arg);
      if (it == global_.end())
        continue;
      Sharding layout = shardingOf(arg);
      SmallVector<Attribute> dims;
      for (const AxisList &d : layout.dims)
        dims.push_back(partition::axisNames(context, mesh_, d));
      f_.setArgAttr(arg.getArgNumber(), kGlobalShapeAttr,
                    b.getDenseI64ArrayAttr(it->second.getShape()));
      f_.setArgAttr(arg.getArgNumber(), kDimAxesAttr, b.getArrayAttr(dims));
    }
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    for (OpOperand &result : ret->getOpOperands()) {
      Sharding layout = shardingOf(result.get());
      if (!layout.partial.empty())
        f_.setResultAttr(result.getOperandNumber(), kPartialAxesAttr,
                         partition::axisNames(context, mesh_, layout.partial));
    }
    f_.setType(FunctionType::get(context, body.getArgumentTypes(), ret.getOperandTypes()));
  }

  mutable func::FuncOp f_;
  mega::MeshAttr mesh_;
  llvm::DenseMap<Value, RankedTensorType> global_;
  llvm::DenseMap<Value, Sharding> layout_;
  llvm::MapVector<Value, SmallVector<std::pair<OpOperand *, AxisList>>> paramUses_;
};

struct SpmdizePass : public impl::SpmdizeBase<SpmdizePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto mesh = module->getAttrOfType<mega::MeshAttr>(kMeshAttr);
    auto f = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!mesh || !f)
      return; // nothing was partitioned
    if (failed(Spmdizer(f, mesh).run()))
      return signalPassFailure();
  }
};

} // namespace
} // namespace megac::passes
