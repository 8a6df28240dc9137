// MatMul's and Linear's cuBLASLt problem as a pure function of their row-major geometry: which
// operand goes where, transposes, leading dims and batch strides in cuBLASLt's column-major terms.
// Gemm.cpp builds its descriptors from it; tests/unit/cuda/GemmShapeTest.cpp runs it through a
// naive column-major GEMM against the CPU kernels. No CUDA headers.
#pragma once

#include "runtime/cpu/ShapeChecks.h"

#include <cstdint>
#include <vector>

namespace megac::runtime::cuda {

/// The row-major tensor a cuBLASLt operand reads: MatMul's lhs or rhs, Linear's x (Lhs) or
/// weight (Rhs).
enum class GemmOperand { Lhs, Rhs };

/// Column-major D [rows, cols] (ld ldd) = op(A) op(B), A stored [aRows(), aCols()] (ld lda),
/// op(A) = A^T with transA, B stored [bRows(), bCols()] (ld ldb), op(B) = B^T with transB;
/// `batch` strided batches (element strides strideA,
/// strideB, strideD). The whole is called outerCount times, over `outerSizes` (row-major, the
/// last fastest); offsets() gives each call's element offsets.
struct GemmProblem {
  GemmOperand a = GemmOperand::Rhs, b = GemmOperand::Lhs;
  bool transA = false, transB = false;
  int64_t rows = 0, cols = 0, inner = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
  std::vector<int64_t> outerSizes, outerStepA, outerStepB; // per outer dim, element steps
  int64_t outerCount = 1;
  int64_t outerStepD = 0; // D elements per call

  int64_t aRows() const { return transA ? inner : rows; }
  int64_t aCols() const { return transA ? rows : inner; }
  int64_t bRows() const { return transB ? cols : inner; }
  int64_t bCols() const { return transB ? inner : cols; }
  /// Element offsets of A, B and D for call o (0 <= o < outerCount).
  void offsets(int64_t o, int64_t &offA, int64_t &offB, int64_t &offD) const;
};

/// One GEMM in cuBLASLt's column-major terms, for kernels built from GEMMs (StridedGemm.h):
/// D [rows, cols] (ld ldd) = op(A) op(B) (+ D when accumulating), A stored [inner, rows] when
/// transA else [rows, inner] (ld lda), B stored [cols, inner] when transB else [inner, cols]
/// (ld ldb); `batch` strided batches (element strides). A and B are `dtype`; D is `outDtype`:
/// dtype, or f32 under bf16/f16 A and B (computed in f32 either way; f32 A and B on TF32 only
/// with the context's allowTf32).
struct StridedGemm {
  DType dtype = DType::f32, outDtype = DType::f32;
  bool transA = false, transB = false;
  int64_t rows = 0, cols = 0, inner = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
};

/// Row-major out [.., m, n] = lhs [.., m, k] rhs [.., k, n] is column-major out^T [n, m] = rhs^T
/// [n, k] lhs^T [k, m]: A = rhs (ld n), B = lhs (ld k), D = out (ld n), no transposes; a
/// transposed rhs (stored [n, k]) is A transposed (ld k), a transposed lhs (stored [k, m]) B
/// transposed (ld m). One rhs
/// folds lhs's batch into the columns; otherwise the longest suffix of batch dims that one stride
/// per operand describes is a strided batch and the rest is looped. m, n, k, batches > 0.
GemmProblem matmulProblem(const cpu::detail::MatMulGeometry &g);

/// Row-major out [rows, outF] = x [rows, inF] weight^T is column-major out^T [outF, rows] =
/// W x^T: A = the weight buffer, which column-major reads as W^T [inF, outF] (ld inF), transposed;
/// B = x^T [inF, rows] (ld inF); D = out^T (ld outF). A bias [outF] adds to each of D's columns.
/// rows, inF, outF > 0.
GemmProblem linearProblem(const cpu::detail::LinearGeometry &g);

} // namespace megac::runtime::cuda
