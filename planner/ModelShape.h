// The planner's view of a model: a TransformerShape (planner/Planner.h) read from a forward
// graph in mega IR — blocks, dims and heads from the ops' shapes, the exact parameter count
// and FLOPs from the cost interface — so a zoo spec and an ONNX export plan the same way.
#pragma once

#include "planner/Planner.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>
#include <string>

namespace megac::planner {

struct ModelShapeResult {
  std::optional<TransformerShape> shape;
  std::string error;
};

/// The shape of the module's only function (the forward model, one micro-batch of any size:
/// counts are per sample). `name` labels it in reports.
ModelShapeResult computeModelShape(mlir::ModuleOp module, const std::string &name);

} // namespace megac::planner
