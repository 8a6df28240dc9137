// One cuBLASLt GEMM described in cuBLASLt's own column-major terms (StridedGemm, GemmShape.h),
// for kernels built from GEMMs (AttentionGemm.cu) rather than from one plan opcode's row-major
// geometry (Gemm.cpp's matmul and linear). The descriptors, layouts and algorithm are cached
// with matmul's.
#pragma once

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/GemmShape.h"

namespace megac::runtime::cuda {

/// Runs `g` on ctx's stream; rows, cols, inner and batch > 0. Errors start with `op`.
Status stridedGemm(const char *op, const Context &ctx, const StridedGemm &g, const void *a,
                   const void *b, void *d, bool accumulate = false);

} // namespace megac::runtime::cuda
