// Attention and AttentionGrad through cuBLASLt (AttentionGemm.cu): the scores of a chunk of heads
// are materialized in scratch, so the FLOPs run on tensor cores at GEMM speed and only the
// softmax rows are hand-written. Attention.cu chooses this path where a head's scores fit the
// scratch cap (gemmAttentionFits) and otherwise its flash kernels (nothing of size s*t stored).
#pragma once

#include "runtime/cuda/Kernels.h"

#include <cstddef>
#include <cstdint>

namespace megac::runtime::cuda {

/// q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv]; query head hi reads kv head hi / (h / hk);
/// `causal` hides key j > i + (t - s).
struct AttentionShape {
  int64_t b = 0, s = 0, h = 0, d = 0, t = 0, hk = 0, dv = 0;
  bool causal = false;
  double scale = 1.0;
};

/// The most scratch one GEMM-path call takes (1 GiB): heads are processed in chunks whose
/// scores, probabilities and their gradients fit it.
constexpr size_t kGemmAttentionScratchBytes = size_t(1) << 30;

/// Whether the GEMM path takes this shape: f32, bf16 or f16, no dim 0, and the backward's
/// per-head scratch (s * t * (8 + 2 * element size) bytes) within kGemmAttentionScratchBytes.
bool gemmAttentionFits(const AttentionShape &a, DType dtype);

/// out = softmax(scale q k^T, causal) v for the shapes gemmAttentionFits takes; the arguments
/// were checked by the caller (Attention.cu).
Status gemmAttention(const Context &ctx, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef &out, const AttentionShape &a);
/// dq, dk, dv of gemmAttention from dout (the probabilities recomputed from q and k).
Status gemmAttentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                         const TensorRef &k, const TensorRef &v, const TensorRef &dq,
                         const TensorRef &dk, const TensorRef &dv, const AttentionShape &a);

} // namespace megac::runtime::cuda
