// Re-gathering in the backward pass (Regather.h).
#include "passes/partition/Regather.h"

#include "ir/MegaDialect.h"

#include "llvm/ADT/SmallVector.h"

using namespace mlir;

namespace megac::passes {

bool isBackwardResult(func::FuncOp f, unsigned i) {
  if (f.getResultAttr(i, "mega.updates"))
    return true;
  auto out = f.getResultAttrOfType<StringAttr>(i, mega::kOutputAttr);
  return out && out.getValue().starts_with("grad.");
}

DenseSet<Operation *> forwardOps(func::FuncOp f, bool &hasBackward) {
  hasBackward = false;
  DenseSet<Operation *> forward;
  if (f.isExternal())
    return forward;
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  SmallVector<Operation *> work;
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    if (isBackwardResult(f, i))
      hasBackward = true;
    else if (Operation *def = ret.getOperand(i).getDefiningOp())
      work.push_back(def);
  }
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!forward.insert(op).second)
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  return forward;
}

void gatherBeforeFirstUse(OpBuilder &b, ArrayRef<OpOperand *> uses, bool again,
                          function_ref<Value(OpBuilder &)> make) {
  if (uses.empty())
    return;
  Operation *first = uses.front()->getOwner();
  for (OpOperand *use : uses)
    if (use->getOwner()->isBeforeInBlock(first))
      first = use->getOwner();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(first);
  Value whole = make(b);
  if (again)
    whole.getDefiningOp()->setAttr(kRegatherAttr, b.getUnitAttr());
  for (OpOperand *use : uses)
    use->set(whole);
}

} // namespace megac::passes
