// An op's sharding rule (DESIGN.md "Sharding rule as factors", the idea of GSPMD and Shardy):
// each operand and result dim is a product of named factors, einsum-style, so one propagation
// algorithm (passes/partition) can shard any op: a factor sharded the same way on every operand
// stays sharded; a sharded reduction factor makes the result a partial sum; a `whole` factor
// (a normalized dim, a softmax axis) must not be sharded. Ops whose sharded form is another
// algorithm (vocab-parallel embedding and cross-entropy) name that factor `special`.
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir {
class Operation;
}

namespace mega {

enum class FactorKind : uint8_t {
  parallel,  // sharded on every operand and result that has it, independently
  reduction, // appears only on operands: sharding it makes the result a partial sum
  whole,     // must not be sharded
};

/// How partial sums (pending reductions) pass through the op: `linear` ops of one operand keep
/// a partial operand partial; `sum` (add, sub, concat) needs every operand partial on the same
/// axes; `product` (mul, matmul) keeps the result partial when exactly one operand is;
/// `auxiliary` is `linear` for operand 0 and leaves the other operands' partial sums as they
/// are (add_aux_loss: its aux term only seeds the backward, each rank its own share).
enum class PartialRule : uint8_t { none, linear, sum, product, auxiliary };

struct ShardingRule {
  using DimFactors = llvm::SmallVector<int, 2>;             // major factor first
  using TensorFactors = llvm::SmallVector<DimFactors, 4>;   // one entry per dim

  /// False: the op has no rule and runs replicated (its operands are gathered first).
  bool known = false;
  llvm::SmallVector<int64_t, 8> factorSizes;
  llvm::SmallVector<FactorKind, 8> factorKinds;
  llvm::SmallVector<TensorFactors, 4> operands;
  llvm::SmallVector<TensorFactors, 2> results;
  PartialRule partial = PartialRule::none;
  /// A factor the op shards with a different algorithm (the vocab of embedding and
  /// cross_entropy); -1 if none. `specialResultPartial`: sharding it leaves the result a partial
  /// sum over its axes (embedding), else the result is whole (cross_entropy).
  int specialFactor = -1;
  bool specialResultPartial = false;

  int addFactor(int64_t size, FactorKind kind) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int>(factorSizes.size()) - 1;
  }
};

namespace sharding {
/// The rule of a mega op (ir/ShardingRules.cpp); `known` is false for ops without one.
ShardingRule ruleOf(mlir::Operation *op);
} // namespace sharding

} // namespace mega
