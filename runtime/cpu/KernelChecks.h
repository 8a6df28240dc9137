// Operand checks a CPU reference kernel and its CUDA kernel share, so that both reject the same
// operands with the same message: defined with the CPU kernels (runtime/cpu/Elementwise.cpp,
// Grad.cpp, Nn.cpp, Optim.cpp), called by both. The CUDA kernels add their own dtype and rank
// limits after them.
#pragma once

#include "runtime/cpu/Kernels.h"

#include <span>

namespace megac::runtime::cpu::detail {

/// b has a's dtype and shape; out has a's shape and the dtype outDtype (Binary, Compare).
Status checkElementwise(const char *op, const TensorRef &a, const TensorRef &b,
                        const TensorRef &out, DType outDtype);
/// Where: an i1 condition, two values and an output of one dtype, all of out's shape.
Status checkWhere(const TensorRef &cond, const TensorRef &a, const TensorRef &b,
                  const TensorRef &out);
/// Dropout: out like x, a 0-d index seed, ratio in [0, 1].
Status checkDropout(const TensorRef &x, const TensorRef &seed, double ratio, const TensorRef &out);
/// DropoutShard: x is a shard of globalShape at shardOffset (one entry a dim).
Status checkDropoutShard(const TensorRef &x, std::span<const int64_t> globalShape,
                         std::span<const int64_t> shardOffset);

/// t has ref's dtype and shape; `what` names t.
Status expectLike(const char *op, const TensorRef &ref, const TensorRef &t, const char *what);
/// LayerNorm and RmsNorm: weight (and bias) [n] for x [..., n], out like x, all of x's dtype;
/// epsilon finite, >= 0.
Status checkNorm(const char *name, const TensorRef &x, const TensorRef &weight,
                 const TensorRef *bias, double epsilon, const TensorRef &out);
/// LayerNormGrad and RmsNormGrad: dy, x, dx of one shape; weight [n]; epsilon finite, >= 0.
Status checkNormGrad(const char *op, const TensorRef &dy, const TensorRef &x,
                     const TensorRef &weight, double epsilon, const TensorRef &dx);

/// Rope: x ending in an even head dim, cos and sin tables broadcasting to it, out like x and
/// not aliasing it.
Status checkRope(const TensorRef &x, const TensorRef &cos, const TensorRef &sin,
                 const TensorRef &out);

/// AdamW: step a 0-d index tensor (its value, on the host or the device, is the kernel's to
/// check); betas in [0, 1), eps and the weight decay finite, eps >= 0.
Status checkAdamWStep(const TensorRef &step, const AdamWConfig &config);

/// ClipByNorm: out like x, a 0-d norm of x's dtype, maxNorm finite and > 0.
Status checkClipByNorm(const TensorRef &x, const TensorRef &norm, double maxNorm,
                       const TensorRef &out);

} // namespace megac::runtime::cpu::detail
