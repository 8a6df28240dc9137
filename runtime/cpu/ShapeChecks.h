// Argument checks and geometry shared by the CPU kernels and the CUDA host-side launchers, so
// both backends reject the same arguments with the same messages (errors start with the op's
// name) and compute the same source/destination strides. Defined in ShapeChecks.cpp.
#pragma once

#include "runtime/cpu/Kernels.h"

#include <vector>

namespace megac::runtime::cpu::detail {

/// Where a Slice reads: the element offset of out[0...] in x and x's stride per out dim.
struct SliceSource {
  int64_t base = 0;
  std::vector<int64_t> strides;
};
/// Slice's checks (dtype, ranks, no zero stride, every read inside x) and its source
/// geometry; errors start with "Slice: ".
StatusOr<SliceSource> sliceSource(const TensorRef &x, std::span<const int64_t> starts,
                                  std::span<const int64_t> strides, const TensorRef &out);

/// Transpose's checks (dtype, perm a permutation of x's dims, out of the permuted shape) and
/// x's stride (in elements) for each out dim.
StatusOr<std::vector<int64_t>> checkTranspose(const TensorRef &x, std::span<const int64_t> perm,
                                              const TensorRef &out);

/// Broadcast's checks (dtype, x broadcastable to out, numpy-style) and x's stride (in elements)
/// for each out dim, 0 on broadcast dims.
StatusOr<std::vector<int64_t>> checkBroadcast(const TensorRef &x, const TensorRef &out);

/// Where Pad writes: x's element (i0, i1, ...) lands at out element base + sum(i_d * strides[d]).
struct PadTarget {
  int64_t base = 0;
  std::vector<int64_t> strides;
};
/// Pad's checks (dtype, ranks, no negative amount, out of the padded shape) and its geometry.
StatusOr<PadTarget> checkPad(const TensorRef &x, std::span<const int64_t> low,
                             std::span<const int64_t> high, std::span<const int64_t> interior,
                             const TensorRef &out);

/// Concat as [outer, ...] blocks: per outer index, input i contributes inner[i] contiguous
/// elements, and out has outInner (their sum times the dims after axis) elements.
struct ConcatGeometry {
  int64_t outer = 0;
  int64_t outInner = 0;
  std::vector<int64_t> inner;
};
/// Concat's checks (inputs, axis, dtypes, shapes outside axis, sizes along axis).
StatusOr<ConcatGeometry> checkConcat(std::span<const TensorRef> inputs, int64_t axis,
                                     const TensorRef &out);

/// Gather viewed as data [outer, dim, inner] and out [outer, count, inner] (count = number of
/// indices).
struct GatherGeometry {
  int64_t outer = 0, dim = 0, count = 0, inner = 0;
};
/// Gather's checks (dtypes, axis, out shape); the index values are the kernels' to check.
StatusOr<GatherGeometry> checkGather(const TensorRef &data, const TensorRef &indices, int64_t axis,
                                     const TensorRef &out);

/// Embedding's checks (dtypes, table [V, h], out [ids..., h]); the id values are the kernels'
/// to check. Errors start with "Embedding: ".
Status checkEmbedding(const TensorRef &table, const TensorRef &ids, const TensorRef &out);
/// EmbeddingGrad's checks (ids i64/i32, dtable [V, h] of dy's dtype, dy [ids..., h]); the id
/// values and dy's dtype are the kernels' to check. Errors start with "EmbeddingGrad: ".
Status checkEmbeddingGrad(const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable);

/// Runs after a contraction's dtype-equality checks and before its shape checks: a backend's
/// own "is this dtype supported" check (CUDA's cuBLASLt dtypes), so its errors keep that order.
using DtypeCheck = Status (*)(const char *op, DType dtype);

/// MatMul as out [batch..., m, n] = op(lhs) [lhsBatch..., m, k] x op(rhs) [rhsBatch..., k, n],
/// the batch dims broadcast numpy-style; op transposes the last two dims where transLhs/transRhs
/// say so (lhs stored [..., k, m], rhs [..., n, k]).
struct MatMulGeometry {
  int64_t m = 0, n = 0, k = 0;
  bool transLhs = false, transRhs = false;
  std::span<const int64_t> lhsBatch, rhsBatch; // views of lhs.shape and rhs.shape
  std::vector<int64_t> batch;
  int64_t batches = 0; // product(batch)
  /// One rhs matrix and an unbroadcast, untransposed lhs: the batch folds into m (one
  /// [batches*m, k] GEMM).
  bool foldBatch = false;
  /// Element strides of lhs's and rhs's matrices over `batch` (0 on broadcast dims).
  std::vector<int64_t> lhsStrides, rhsStrides;
};
/// MatMul's checks (rhs and output of lhs's dtype, ranks >= 2, contraction dims, batch dims
/// broadcast, output shape; an accumulator `acc` of the output's dtype and shape) and its
/// geometry; `dtypeCheck` as above; transLhs/transRhs as in MatMulGeometry. With an accumulator
/// the output (and accumulator) may be f32 under bf16/f16 operands: mixed-precision gradient
/// accumulation (the product summed in f32, never rounded to half).
StatusOr<MatMulGeometry> checkMatMul(const TensorRef &lhs, const TensorRef &rhs,
                                     const TensorRef &out, DtypeCheck dtypeCheck = nullptr,
                                     bool transLhs = false, bool transRhs = false,
                                     const TensorRef *acc = nullptr);

/// Linear as out [rows, outF] = x [rows, inF] weight^T (+ bias [outF]), rows = x's leading dims.
struct LinearGeometry {
  int64_t rows = 0, inF = 0, outF = 0;
};
/// Linear's checks (weight, output and bias of x's dtype, weight [out, in], output and bias
/// shapes) and its geometry; `dtypeCheck` as above.
StatusOr<LinearGeometry> checkLinear(const TensorRef &x, const TensorRef &weight,
                                     const TensorRef *bias, const TensorRef &out,
                                     DtypeCheck dtypeCheck = nullptr);

/// Reduce: the output has x's dtype, the axes are distinct dims of x, the output has the kept
/// shape (reduced dims 1 or dropped), and max/min (and an integer mean) of an empty set with
/// outputs is refused. `reduced[d]`: dim d is reduced; `count`: elements per output;
/// `outputs`: output elements.
struct ReduceGeometry {
  std::vector<bool> reduced;
  int64_t count = 1, outputs = 1;
};
StatusOr<ReduceGeometry> checkReduce(ReduceKind kind, const TensorRef &x,
                                     std::span<const int64_t> axes, const TensorRef &out);

/// CumSum's checks (axis, out of x's shape and dtype); the geometry around the axis.
struct AxisGeometry {
  int64_t outer = 1, dim = 1, inner = 1;
};
StatusOr<AxisGeometry> checkCumSum(const TensorRef &x, int64_t axis, const TensorRef &out);
/// GatherElements' and ScatterElements' checks (indices of data's rank, no dim but `axis` larger
/// than data's; out and updates of the right shapes and dtypes); updates may be null (gather).
Status checkElementIndexing(const char *op, const TensorRef &data, const TensorRef &indices,
                            const TensorRef *updates, int64_t axis, const TensorRef &out);
/// ScatterND's checks; returns (tuples, k, slice elements).
struct ScatterNdGeometry {
  int64_t tuples = 0, k = 0, slice = 0;
};
StatusOr<ScatterNdGeometry> checkScatterNd(const TensorRef &data, const TensorRef &indices,
                                           const TensorRef &updates, const TensorRef &out);

/// The mixture-of-experts kernels' geometry (plan.fbs MoeDispatch ... MoeMatmulWeightGrad):
/// experts E, tokens T (the product of the routing weights' leading dims) and the feature sizes
/// of the routed input (`in`) and output (`out`).
struct MoeGeometry {
  int64_t experts = 0, tokens = 0, in = 0, out = 0;
};
enum class MoeKernel { dispatch, combine, matmul, rowDot, weightGrad };
/// The checks of one MoE kernel: routing weights w [t..., E]; `a`, `b` its other inputs (b is
/// null for dispatch and combine); every tensor of one floating dtype; shapes as plan.fbs says.
StatusOr<MoeGeometry> checkMoe(MoeKernel kernel, const TensorRef &a, const TensorRef *b,
                               const TensorRef &w, bool transposeWeight, const TensorRef &out);
/// TopKMask's checks: x [..., E] float, 1 <= k <= E, out of x's shape and dtype. Returns E.
StatusOr<int64_t> checkTopKMask(const TensorRef &x, int64_t k, const TensorRef &out);

} // namespace megac::runtime::cpu::detail
