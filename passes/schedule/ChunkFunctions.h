// Helpers shared by the schedule passes that split one function of a stage module into several
// (mega-forward-backward-split, mega-backward-weight-split): a new function beside the old one.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <string>

namespace megac::passes {

/// A new function named `name` at `b`'s insertion point with these argument and result types and
/// attributes (a null dictionary: none), the function attributes of `f` (mega.loss_kind) and an
/// empty entry block.
mlir::func::FuncOp createLike(mlir::OpBuilder &b, mlir::func::FuncOp f, const std::string &name,
                              llvm::ArrayRef<mlir::Type> argTypes,
                              llvm::ArrayRef<mlir::DictionaryAttr> argAttrs,
                              llvm::ArrayRef<mlir::Type> resultTypes,
                              llvm::ArrayRef<mlir::DictionaryAttr> resultAttrs);

} // namespace megac::passes
