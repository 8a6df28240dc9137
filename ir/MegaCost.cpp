// Defaults of the cost interface: element counts and bytes of an op's tensors.
#include "ir/MegaCost.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

#include <algorithm>

using namespace mlir;
using namespace mega;

int64_t cost::numElements(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

int64_t cost::numBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t)
    return 0;
  int64_t bits = t.getElementType().getIntOrFloatBitWidth();
  return numElements(type) * std::max<int64_t>(1, bits / 8);
}

int64_t cost::defaultFlops(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getResultTypes())
    n += numElements(t);
  return n;
}

int64_t cost::operandBytes(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getOperandTypes())
    n += numBytes(t);
  return n;
}

int64_t cost::resultBytes(Operation *op) {
  int64_t n = 0;
  for (Type t : op->getResultTypes())
    n += numBytes(t);
  return n;
}

