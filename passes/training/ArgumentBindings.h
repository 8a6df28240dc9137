// How a training function's arguments are bound to the program's storage: by name, through one
// of the argument attributes mega.param, mega.state or mega.input. Shared by the passes that
// match or create functions by those names (FuseLastMicroBatch, DeferParameterGather).
#pragma once

#include "ir/MegaDialect.h"
#include "passes/training/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>
#include <utility>

namespace megac::passes {

/// The attribute binding argument `i` of `f` (mega.param, mega.state or mega.input) and the name
/// it binds, or nullopt.
inline std::optional<std::pair<mlir::StringRef, mlir::StringRef>>
argumentBinding(mlir::func::FuncOp f, unsigned i) {
  for (const char *attr : {mega::kParamAttr, kStateAttr, mega::kInputAttr})
    if (auto name = f.getArgAttrOfType<mlir::StringAttr>(i, attr))
      return std::make_pair(mlir::StringRef(attr), name.getValue());
  return std::nullopt;
}

/// The argument of `f` bound to `name` as a parameter or a state (storage a function may update),
/// or null.
inline mlir::BlockArgument storageArgument(mlir::func::FuncOp f, mlir::StringRef name) {
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (auto binding = argumentBinding(f, i);
        binding && binding->first != mlir::StringRef(mega::kInputAttr) && binding->second == name)
      return f.getArgument(i);
  return nullptr;
}

} // namespace megac::passes
