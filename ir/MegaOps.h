// The ops of the `mega` dialect and their cost, gradient, sharding and plan-opcode interfaces.
#pragma once

#include "ir/MegaCost.h"
#include "ir/MegaDialect.h"
#include "ir/MegaTraits.h"
#include "ir/ShardingRule.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mega {
/// True when both ranges have the same length and each pair of ranked tensors agrees in shape
/// and element type (encodings may differ).
bool sameShapesAndElementTypes(mlir::TypeRange lhs, mlir::TypeRange rhs);
} // namespace mega

#include "ir/MegaInterfaces.h.inc"

#define GET_OP_CLASSES
#include "ir/MegaOps.h.inc"
