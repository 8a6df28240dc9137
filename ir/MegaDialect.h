// The `mega` dialect, its enums and attributes (mesh, sharding, init).
#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/TensorEncoding.h"

#include "ir/MegaDialect.h.inc"
#include "ir/MegaEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "ir/MegaAttrs.h.inc"

namespace mega {

/// Argument attribute names of a model function: `mega.param` holds a parameter's name and
/// `mega.init` its #mega.init; `mega.input` names a data input; `mega.output` a result.
inline constexpr const char *kParamAttr = "mega.param";
inline constexpr const char *kInitAttr = "mega.init";
inline constexpr const char *kInputAttr = "mega.input";
inline constexpr const char *kOutputAttr = "mega.output";
/// On a parameter whose IR shape differs from the shape the model's own files hold (a fused
/// projection's part dim, mega-split-fused-projections): that shape. The elements are the same,
/// in the same order; weights and exports reshape between the two.
inline constexpr const char *kSourceShapeAttr = "mega.source_shape";
/// On a parameter: the names of the model's own tensors it stacks along dim 0 (a mixture of
/// experts' per-expert weights, held as one [E, ...] tensor); weights files may hold either.
inline constexpr const char *kSourceStackAttr = "mega.source_stack";
/// On a `mega.attention` / `mega.attention_grad` by positions: context parallelism's ring
/// (docs/context-parallel.md "The ring"), the mesh axes (names) of the ring. Its keys and values
/// stay split along the sequence like its queries (the same factor, ShardingRules.cpp); after
/// spmdize each rank's op holds its own block and the kernel passes the blocks around the ring
/// (plan opcodes RingAttention, RingAttentionGrad).
inline constexpr const char *kRingAxesAttr = "mega.ring_axes";

} // namespace mega
