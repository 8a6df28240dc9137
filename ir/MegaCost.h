// Helpers behind the cost interface: element counts and bytes of tensor values.
#pragma once

#include <cstdint>

namespace mlir {
class Operation;
class Type;
class TypeRange;
} // namespace mlir

namespace mega::cost {

/// Elements of a ranked tensor type (1 for a scalar), 0 for anything else.
int64_t numElements(mlir::Type type);
/// Bytes of a ranked tensor type; i1 counts as one byte.
int64_t numBytes(mlir::Type type);
/// One flop per result element.
int64_t defaultFlops(mlir::Operation *op);
int64_t operandBytes(mlir::Operation *op);
int64_t resultBytes(mlir::Operation *op);

} // namespace mega::cost
