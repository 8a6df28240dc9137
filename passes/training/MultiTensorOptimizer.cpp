// mega-training-multi-tensor-optimizer: groups @apply_gradients' per-parameter adamw_update ops
// into one adamw_update_multi per (dtype, lr, step, betas, eps, clip) — one optimizer instruction
// per dtype instead of one per tensor, with the same arithmetic and the same state buffers — and
// folds the gradients' clip_by_norm into it (no clipping pass of its own over the gradients).
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <tuple>

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGMULTITENSOROPTIMIZER
#include "passes/training/Passes.h.inc"

namespace {

constexpr StringLiteral kApplyGradients = "apply_gradients";

/// The clip_by_norm that makes `op`'s gradient and nothing else, or null.
mega::ClipByNormOp foldableClip(mega::AdamWUpdateOp op) {
  auto clip = op.getGrad().getDefiningOp<mega::ClipByNormOp>();
  return clip && op.getGrad().hasOneUse() ? clip : mega::ClipByNormOp();
}

/// What the updates of one group share: the parameter and gradient element types, lr, step,
/// the betas and eps, and the clip folded in (its norm and max_norm, or none) (each update keeps
/// its own weight decay).
using GroupKey = std::tuple<Type, Type, Value, Value, double, double, double, Value, double>;

GroupKey keyOf(mega::AdamWUpdateOp op) {
  mega::ClipByNormOp clip = foldableClip(op);
  return {getElementTypeOrSelf(op.getParam().getType()),
          getElementTypeOrSelf(op.getGrad().getType()),
          op.getLr(),
          op.getStep(),
          op.getBeta1().convertToDouble(),
          op.getBeta2().convertToDouble(),
          op.getEps().convertToDouble(),
          clip ? clip.getNorm() : Value(),
          clip ? clip.getMaxNorm().convertToDouble() : 0.0};
}

/// Whether every use of `op`'s results (the user's ancestor in `op`'s block) comes after
/// `last`, where the grouped op will stand.
bool usesFollow(Operation *op, Operation *last) {
  Block *block = op->getBlock();
  for (Value result : op->getResults())
    for (Operation *user : result.getUsers()) {
      Operation *at = block->findAncestorOpInBlock(*user);
      if (!at || at == last || at->isBeforeInBlock(last))
        return false;
    }
  return true;
}

/// Replaces `members` (in block order, at least two, one group key) by one adamw_update_multi at
/// the last; their gradients' clip_by_norm (the key's) is folded into it.
void group(ArrayRef<mega::AdamWUpdateOp> members) {
  mega::AdamWUpdateOp last = members.back();
  mega::ClipByNormOp lastClip = foldableClip(last);
  OpBuilder b(last);
  SmallVector<Value> operands;
  SmallVector<Type> types;
  SmallVector<double> decays;
  SmallVector<Location> locs;
  SmallVector<mega::ClipByNormOp> clips;
  for (mega::AdamWUpdateOp op : members) {
    Value grad = op.getGrad();
    if (mega::ClipByNormOp clip = foldableClip(op)) {
      grad = clip.getInput();
      clips.push_back(clip);
    }
    operands.append({op.getParam(), grad, op.getExpAvg(), op.getExpAvgSq()});
    llvm::append_range(types, op->getResultTypes());
    decays.push_back(op.getWeightDecay().convertToDouble());
    locs.push_back(op.getLoc());
  }
  auto multi = mega::AdamWUpdateMultiOp::create(
      b, b.getFusedLoc(locs), types, last.getLr(), last.getStep(), operands,
      lastClip ? lastClip.getNorm() : Value(), last.getBeta1Attr(), last.getBeta2Attr(),
      last.getEpsAttr(), b.getDenseF64ArrayAttr(decays),
      lastClip ? lastClip.getMaxNormAttr() : FloatAttr());
  for (auto [k, op] : llvm::enumerate(members)) {
    op->replaceAllUsesWith(multi->getResults().slice(3 * k, 3));
    op->erase();
  }
  for (mega::ClipByNormOp clip : clips)
    clip->erase();
}

void groupBlock(Block &block) {
  // Groups in order of their first member; members in block order.
  SmallVector<std::pair<GroupKey, SmallVector<mega::AdamWUpdateOp>>> groups;
  for (auto op : block.getOps<mega::AdamWUpdateOp>()) {
    GroupKey key = keyOf(op);
    auto it = llvm::find_if(groups, [&](const auto &g) { return g.first == key; });
    if (it == groups.end())
      groups.push_back({key, {op}});
    else
      it->second.push_back(op);
  }
  for (auto &[key, members] : groups) {
    // An update whose result is read before the group's last member stays on its own (the
    // optimizer pass reads none before the all-gathers that follow every update).
    bool changed = true;
    while (changed && members.size() >= 2) {
      changed = false;
      Operation *last = members.back();
      for (size_t k = 0; k + 1 < members.size(); ++k)
        if (!usesFollow(members[k], last)) {
          members.erase(members.begin() + k);
          changed = true;
          break;
        }
    }
    if (members.size() >= 2)
      group(members);
  }
}

struct TrainingMultiTensorOptimizerPass
    : impl::TrainingMultiTensorOptimizerBase<TrainingMultiTensorOptimizerPass> {
  void runOnOperation() override {
    getOperation().walk([](func::FuncOp f) {
      if (f.getSymName() == kApplyGradients)
        for (Block &block : f.getBody())
          groupBlock(block);
    });
  }
};

} // namespace

} // namespace megac::passes
