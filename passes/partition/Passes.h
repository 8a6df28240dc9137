// The partition phase's passes: sharding propagation and spmdize (docs/pipeline.md).
#pragma once

#include "mlir/Pass/Pass.h"

namespace mega {
class MegaDialect;
} // namespace mega

namespace megac::passes {

/// Argument and result attributes of a partitioned function (docs/pipeline.md).
/// On a parameter (and its accumulator): the mesh axes its gradient is a partial sum over.
inline constexpr const char *kGradPartialAttr = "mega.grad_partial";
/// On parameters, inputs and state: the global shape and, per dim, the mesh axes it is split
/// over (an array of string arrays).
inline constexpr const char *kGlobalShapeAttr = "mega.global_shape";
inline constexpr const char *kDimAxesAttr = "mega.dim_axes";
/// On a result: the mesh axes it is a partial sum over (the loss over dp).
inline constexpr const char *kPartialAxesAttr = "mega.partial_axes";
/// On the module: the #mega.mesh of the partitioned program.
inline constexpr const char *kMeshAttr = "mega.mesh";
/// On a mega.gather made by mega-context-parallel: its indices (the sequence's load-balanced
/// permutation) are split over cp, and so is the gathered dim of its result.
inline constexpr const char *kContextParallelSplitAttr = "mega.cp_split";

#define GEN_PASS_DECL
#include "passes/partition/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/partition/Passes.h.inc"

} // namespace megac::passes
