// The training phase as one call: precision (fp64), loss, precision (bf16/fp16), autodiff and
// optimizer passes, then canonicalize and CSE, turning a forward model into @forward,
// @forward_backward and @apply_gradients (and @check_gradients for fp16).
#pragma once

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <string>

namespace megac::passes {

enum class LossKind { causal, mlm, seq2seq };
/// The training precision (mega-training-precision): fp32; fp64 everywhere; bf16/fp16 mixed
/// precision with f32 master weights (fp16 with dynamic loss scaling).
enum class Precision { fp32, fp64, bf16, fp16 };

/// Activation recompute (docs/pipeline.md): none; selective = recompute attention outputs in
/// the backward pass (Megatron's core-attention recompute); full = keep only each chunk's inputs.
enum class Recompute { none, selective, full };

/// How the training step is partitioned over the mesh <pp, dp, tp> (docs/pipeline.md).
/// Degrees of 1 mean no split; the product is the number of ranks.
struct Layout {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  /// Virtual pipeline stages (model chunks) per pipeline rank: interleaved 1F1B when > 1.
  int64_t vpp = 1;
  /// Megatron's sequence parallelism: norms and residuals sharded on the sequence dim over tp.
  bool sequenceParallel = false;
  /// 0: gradients all-reduced over dp; 1: Megatron's distributed optimizer (ZeRO-1).
  int zero = 0;
  Recompute recompute = Recompute::none;
  /// Micro-batches per optimizer step (per data-parallel rank): the pipeline schedule's m.
  int64_t microBatches = 1;
  /// "1f1b" (interleaved when vpp > 1) or "gpipe".
  std::string schedule = "1f1b";

  int64_t ranks() const { return tp * pp * dp; }
  bool partitioned() const { return ranks() > 1; }
};

const char *recomputeName(Recompute recompute);

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
  Precision precision = Precision::fp32;
  Layout layout;
};

const char *lossKindName(LossKind kind);
/// "fp32", "fp64", "bf16", "fp16".
const char *precisionName(Precision precision);

/// Runs the training phase on `module`. Errors are emitted as diagnostics on the module's
/// context.
mlir::LogicalResult buildTrainingStep(mlir::ModuleOp module, const TrainingOptions &options);

} // namespace megac::passes
