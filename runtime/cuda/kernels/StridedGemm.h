// One cuBLASLt GEMM described in cuBLASLt's own column-major terms, for kernels built from GEMMs
// (AttentionGemm.cu) rather than from one plan opcode's row-major geometry (Gemm.cpp's matmul and
// linear, GemmShape.h). The descriptors, layouts and algorithm are cached with matmul's.
#pragma once

#include "runtime/cuda/Kernels.h"

#include <cstdint>

namespace megac::runtime::cuda {

/// Column-major D [rows, cols] (ld ldd) = op(A) op(B) (+ D with `accumulate`): A stored
/// [inner, rows] when transA else [rows, inner] (ld lda), B stored [cols, inner] when transB
/// else [inner, cols] (ld ldb); `batch` strided batches (element strides). A and B are `dtype`;
/// D is `outDtype`: dtype, or f32 under bf16/f16 A and B (computed in f32 either way; f32 A and
/// B on TF32 only with ctx.allowTf32).
struct StridedGemm {
  DType dtype = DType::f32, outDtype = DType::f32;
  bool transA = false, transB = false;
  int64_t rows = 0, cols = 0, inner = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
};

/// Runs `g` on ctx's stream; rows, cols, inner and batch > 0. Errors start with `op`.
Status stridedGemm(const char *op, const Context &ctx, const StridedGemm &g, const void *a,
                   const void *b, void *d, bool accumulate = false);

} // namespace megac::runtime::cuda
