// C++ side of the mega dialect's op traits (ir/MegaOps.td): Mega_Elementwise, the partial-sum
// traits of the elementwise sharding rule, and the plan opcode an op names.
#pragma once

#include "mlir/IR/OpDefinition.h"

namespace mega::OpTrait {

/// One result of the operands' shape, element i computed from the operands' elements i alone
/// (the plan opcode it lowers to is flagged Elementwise in runtime/plan/Opcodes.def). Its
/// sharding rule is the elementwise one (ir/ShardingRules.cpp). A marker: the ops' own traits
/// and verifiers check the shapes (MLIR's Elementwise trait would report shape errors before
/// the ops' located messages).
template <typename ConcreteType>
class Elementwise : public mlir::OpTrait::TraitBase<ConcreteType, Elementwise> {};

/// An elementwise op that commutes with a pending sum over ranks, f(x1 + x2) = f(x1) + f(x2)
/// (neg, cast): a partial operand gives a partial result.
template <typename ConcreteType>
class PartialLinear : public mlir::OpTrait::TraitBase<ConcreteType, PartialLinear> {};

/// An elementwise sum or difference: operands partial over the same axes give a result partial
/// over them.
template <typename ConcreteType>
class PartialSum : public mlir::OpTrait::TraitBase<ConcreteType, PartialSum> {};

/// The op lowers to one plan instruction; the op class gets `static StringLiteral
/// getPlanOpcode()` (the opcode's name in runtime/plan/Opcodes.def) from Mega_Plan<"Name">, and
/// PlanOpInterface exposes it.
template <typename ConcreteType>
class PlanOpcode : public mlir::OpTrait::TraitBase<ConcreteType, PlanOpcode> {};

} // namespace mega::OpTrait
