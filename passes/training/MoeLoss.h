// The mixture-of-experts terms of the training objective and their metrics, added by
// mega-training-loss to @forward_backward (docs/moe.md).
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"

namespace megac::passes {

struct MoeLossOptions {
  /// Megatron's switch load-balancing loss coefficient (0: none).
  double auxCoeff = 0.01;
  /// The router z-loss coefficient (0: none).
  double zCoeff = 0.0;
};

/// For every MoE layer of `fb` (a `mega.moe_dispatch` whose routing weights come from a
/// `mega.topk_mask` of the router probabilities p = softmax(logits)): per sequence (batch row,
/// `rows` of them, S tokens each),
///   aux = auxCoeff * E / (k * S^2) * sum_e (sum_s p[s, e]) * (sum_s m[s, e])
///   z   = zCoeff / S * sum_s logsumexp(logits[s])^2
/// with m the dispatched 0/1 routing (after capacity dropping), summed over the rows and scaled
/// by the new input `row_normalizer` (1 / rows of the global batch): the mean over the global
/// batch's sequences. The terms join the objective through `mega.add_aux_loss` on the
/// dispatched tokens. `fb` returns three more results: `moe.load` [layers, E] (assignments
/// per expert), `moe.dropped` (assignments dropped by capacity) and `moe.aux_loss` (the terms'
/// sum). No MoE layer: nothing changes.
mlir::LogicalResult addMoeLosses(mlir::func::FuncOp fb, int64_t rows,
                                 const MoeLossOptions &options);

} // namespace megac::passes
