// The training phase as one call: precision (fp64), loss, precision (bf16/fp16), autodiff and
// optimizer passes, then canonicalize and CSE, turning a forward model into @forward,
// @forward_backward and @apply_gradients (and @check_gradients for fp16).
#pragma once

#include "parallel/Layout.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>

namespace megac::passes {

/// The loss of the training step; the driver takes it from the model (driver/ModelSource.h).
enum class LossKind { causal, mlm, seq2seq };

/// One validated set of training-step settings (the passes' options, docs/training-step.md).
struct TrainingOptions {
  /// The model function; empty: the module's only function.
  std::string function;
  /// The mega.output name of the logits; empty: the model's only floating-point result.
  std::string logits;
  LossKind lossKind = LossKind::causal;
  /// Labels with this value get no loss.
  int64_t ignoreIndex = -100;
  // AdamW (torch.optim.AdamW defaults); weight decay applies to parameters of rank >= 2.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
  /// Clip the global gradient norm to this value; 0: no clipping.
  double clipGrad = 0.0;
  /// Mixture of experts: the load-balancing loss's and the router z-loss's coefficients.
  double moeAuxLossCoeff = 0.01;
  double moeZLossCoeff = 0.0;
  /// Elements per bucket of the dp gradient reduction and of ZeRO-1's parameter all-gather
  /// (`--bucket-size`); 0: Megatron's max(40000000, 1000000 x dp). A setting of the optimizer
  /// pass, not of the Layout: it changes no state's shape or placement (checkpoints do not
  /// record it) and the planner does not search it.
  int64_t bucketSize = 0;
  /// Run mega-schedule-latency-hiding last (`--overlap on`): collectives as start/done pairs
  /// spread apart so communication overlaps compute (docs/training-step.md "Overlap").
  bool overlap = false;
  /// How the step is partitioned, recomputed and in which precision it computes.
  Layout layout;
};

const char *lossKindName(LossKind kind);

/// Runs the training phase on `module`. Errors are emitted as diagnostics on the module's
/// context.
mlir::LogicalResult buildTrainingStep(mlir::ModuleOp module, const TrainingOptions &options);

} // namespace megac::passes
