// Appending kernels and tensor-parallel collectives to a PassKernels (planner/BlockKernels.h):
// what the block, edge and optimizer inventories are written with. MLIR-free.
#pragma once

#include "planner/BlockKernels.h"

namespace megac::planner::detail {

struct Builder {
  PassKernels *pass;
  void gemm(int64_t m, int64_t n, int64_t k, int64_t batch = 1, double count = 1) {
    KernelOp op;
    op.kind = KernelClass::gemm;
    op.m = m;
    op.n = n;
    op.k = k;
    op.batch = batch;
    op.count = count;
    pass->kernels.push_back(op);
  }
  void mem(KernelClass kind, double bytes, double count = 1) {
    if (bytes <= 0 || count <= 0)
      return;
    KernelOp op;
    op.kind = kind;
    op.bytes = bytes;
    op.count = count;
    pass->kernels.push_back(op);
  }
  void attention(int64_t batchHeads, int64_t seq, int64_t headDim, bool backward,
                 double share = 1) {
    KernelOp op;
    op.kind = KernelClass::attention;
    op.batch = batchHeads;
    op.seq = seq;
    op.headDim = headDim;
    op.backward = backward;
    op.share = share;
    pass->kernels.push_back(op);
  }
  /// The last kernel's operands from main memory (KernelOp::coldBytes): a weight or its
  /// gradient.
  void cold(double bytes) { pass->kernels.back().coldBytes = bytes; }
  void comm(Collective kind, double bytes) { pass->tp.push_back({kind, bytes}); }
};

} // namespace megac::planner::detail
