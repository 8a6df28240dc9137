// Internal to passes/input: matching helpers shared by the raising patterns.
#pragma once

#include "ir/MegaOps.h"

#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace megac::passes {

/// The value of a constant whose elements are all equal (mega.constant splat or one
/// element), seen through broadcasts and reshapes; nullopt otherwise.
std::optional<double> splatValue(mlir::Value v);
/// True when `v` is a splat constant within `relTol` (relative) of `want`.
bool isSplat(mlir::Value v, double want, double relTol = 1e-3);
/// `v` without the mega.broadcast ops producing it.
mlir::Value stripBroadcast(mlir::Value v);
/// True for a function argument marked `mega.param`.
bool isParameter(mlir::Value v);
/// The static shape of a ranked tensor value.
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);

/// `v` transposed by `perm`, looking through the transposes that produced `v`: returns their
/// source when the permutations cancel, else one transpose of it.
mlir::Value transposeThrough(mlir::PatternRewriter &rewriter, mlir::Location loc, mlir::Value v,
                             llvm::ArrayRef<int64_t> perm);

/// Adds the attention pattern (AttentionPattern.cpp).
void populateAttentionPattern(mlir::RewritePatternSet &patterns);
/// Adds the Llama-family patterns (LlamaPatterns.cpp): SiLU, rotary embeddings and
/// grouped-query attention, each when its flag is set.
void populateLlamaPatterns(mlir::RewritePatternSet &patterns, bool silu, bool rope, bool gqa);

} // namespace megac::passes
