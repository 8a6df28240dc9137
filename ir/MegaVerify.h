// Verifier checks the forward ops (MegaOps.cpp) and the backward ops (MegaGradOps.cpp) share.
#pragma once

#include "ir/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

namespace mega {

inline shape::Dims dimsOf(mlir::Type type) {
  auto t = mlir::cast<mlir::RankedTensorType>(type);
  return {t.getShape().data(), t.getShape().size()};
}
inline shape::Dims dimsOf(mlir::Value v) { return dimsOf(v.getType()); }
inline shape::Dims span(llvm::ArrayRef<int64_t> a) { return {a.data(), a.size()}; }

/// Fails, naming both, unless `axis` is in range for `rank` (negative axes count from the end).
inline mlir::LogicalResult verifyAxis(mlir::Operation *op, int64_t axis, int64_t rank) {
  if (!shape::normalizeAxis(axis, rank))
    return op->emitOpError() << "axis " << axis << " is out of range for rank " << rank;
  return mlir::success();
}

/// A norm's (or its backward's) parameters fit input `x`, and epsilon is > 0.
inline mlir::LogicalResult verifyNormParams(mlir::Operation *op, const char *name, shape::Dims x,
                                            shape::Dims w, std::optional<shape::Shape> bias,
                                            const llvm::APFloat &epsilon) {
  std::string why = shape::checkNormParams(name, x, w, bias);
  if (!why.empty())
    return op->emitOpError() << why;
  if (!(epsilon.convertToDouble() > 0))
    return op->emitOpError() << "epsilon must be > 0";
  return mlir::success();
}

/// An attention's `mega.ring_axes` (MegaDialect.h), if any: mesh axis names, with positions.
mlir::LogicalResult verifyRingAxes(mlir::Operation *op, bool hasPositions);

} // namespace mega
