// Re-gathering in the backward pass (reshard after forward): a value all-gathered for the
// forward is gathered again right before its first backward use instead of being kept whole
// between the two. ZeRO-3's parameters (mega-training-optimizer) and context parallelism's keys
// and values (mega-context-parallel-regather) share it.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace megac::passes {

/// On a second all-gather of a value (before its backward uses): keeps CSE from merging it
/// into the forward's.
inline constexpr const char *kRegatherAttr = "mega.regather";

/// Whether result `i` of a training function belongs to the backward: a gradient out
/// (`mega.output = "grad.*"`) or an accumulator update (`mega.updates`).
bool isBackwardResult(mlir::func::FuncOp f, unsigned i);

/// The forward of `f`: the ops its other results (the loss, activations out) depend on —
/// mega-forward-backward-split's rule. `hasBackward` says whether `f` has backward results.
llvm::DenseSet<mlir::Operation *> forwardOps(mlir::func::FuncOp f, bool &hasBackward);

/// Points `uses` (of one value, none empty) at the result of `make`, built right before the
/// first of them in the block; with `again` (the forward gathered the same value already) the
/// new op carries mega.regather.
void gatherBeforeFirstUse(mlir::OpBuilder &b, llvm::ArrayRef<mlir::OpOperand *> uses, bool again,
                          llvm::function_ref<mlir::Value(mlir::OpBuilder &)> make);

} // namespace megac::passes
