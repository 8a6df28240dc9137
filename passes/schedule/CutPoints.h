// Where a function's op list can be cut: the activations crossing each position, shared by
// mega-pipeline-split (pipeline chunks) and mega-forward-backward-split (full recompute's layer
// checkpoints).
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace megac::passes {

/// The cut analysis of one function with a body of one block. Position k (1 <= k < N) lies
/// between ops k-1 and k of `ops`.
struct CutPoints {
  /// The body's ops without the terminator, in program order.
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  /// Results that depend on nothing but parameters and constants (a position table, a cast
  /// weight), or nothing but data inputs and constants (an attention mask): recomputed where
  /// needed, never crossing a cut.
  llvm::DenseSet<mlir::Value> invariant;
  /// Per position (0..N): bytes of the activations crossing it.
  llvm::SmallVector<int64_t> crossingBytes;
  /// Positions with a parameter read on both sides and at least one activation crossing.
  llvm::SmallVector<unsigned> eligible;
  /// The least crossing bytes over `eligible` (0 when there is none).
  int64_t minBytes = 0;

  /// The activations crossing position k, in definition order: non-invariant op results defined
  /// before k and used at or after it (the terminator counts as position N).
  llvm::SmallVector<mlir::Value> crossing(unsigned k) const;
  /// Eligible positions whose crossing bytes are at most `factor` times the minimum.
  llvm::SmallVector<unsigned> candidates(int64_t factor) const;
  /// The positions of `candidates(factor)` that separate layers: a position with only
  /// invariant ops since the previous one is dropped, and where the segments between positions
  /// repeat with a period (a layer: attention block, MLP block, ...), only the positions between
  /// whole periods are kept.
  llvm::SmallVector<unsigned> layerCuts(int64_t factor) const;

  /// The analysis of `ops` (ops of f's body, in program order) computing `outputs`: uses
  /// outside `ops` are ignored, `outputs` count as used at position N.
  static CutPoints analyze(mlir::func::FuncOp f, llvm::ArrayRef<mlir::Operation *> ops,
                           mlir::ValueRange outputs);

private:
  llvm::DenseMap<mlir::Value, unsigned> lastUse_;
};

/// Bytes of a ranked tensor (0 for other types).
int64_t tensorBytes(mlir::Type type);

} // namespace megac::passes
