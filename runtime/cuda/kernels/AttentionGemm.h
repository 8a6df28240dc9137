// Attention and AttentionGrad through cuBLASLt (AttentionGemm.cu): the scores of a chunk of heads
// (or of one head's query rows) are materialized in scratch, so the FLOPs run on tensor cores at
// GEMM speed and only the softmax rows are hand-written; chunks and GEMM descriptors in
// AttentionGemmShape.h. Attention.cu chooses this path where one query row's scores fit the
// scratch cap (gemmAttentionFits: any practical length) and otherwise its flash kernels
// (nothing of size s*t stored).
#pragma once

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/AttentionGemmShape.h"

namespace megac::runtime::cuda {

/// out = softmax(scale q k^T, causal) v for the shapes gemmAttentionFits takes under the same
/// scratch cap; the arguments were checked by the caller (Attention.cu).
Status gemmAttention(const Context &ctx, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef &out, const AttentionShape &a,
                     size_t capBytes);
/// dq, dk, dv of gemmAttention from dout (the probabilities recomputed from q and k).
Status gemmAttentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                         const TensorRef &k, const TensorRef &v, const TensorRef &dq,
                         const TensorRef &dk, const TensorRef &dv, const AttentionShape &a,
                         size_t capBytes);

} // namespace megac::runtime::cuda
