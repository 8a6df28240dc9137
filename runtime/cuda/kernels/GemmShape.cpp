// MatMul's and Linear's cuBLASLt problem (see GemmShape.h).
#include "runtime/cuda/kernels/GemmShape.h"

#include <span>

namespace megac::runtime::cuda {

namespace {

int64_t product(std::span<const int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

/// Whether one stride describes the flattened batch: offset(i) = i * stride for every i, given
/// per-dim strides (0 on broadcast dims) over `batch`. Dims of size 1 do not matter.
bool linearStride(std::span<const int64_t> batch, std::span<const int64_t> strides,
                  int64_t &stride) {
  int64_t inner = 1; // elements of the flattened batch inside dim d
  bool set = false;
  stride = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1)
      continue;
    if (!set) {
      stride = strides[d];
      set = true;
    } else if (strides[d] != stride * inner) {
      return false;
    }
    inner *= batch[d];
  }
  return true;
}

} // namespace

void GemmProblem::offsets(int64_t o, int64_t &offA, int64_t &offB, int64_t &offD) const {
  offA = offB = 0;
  offD = o * outerStepD;
  for (size_t d = outerSizes.size(); d-- > 0;) {
    int64_t index = o % outerSizes[d];
    o /= outerSizes[d];
    offA += index * outerStepA[d];
    offB += index * outerStepB[d];
  }
}

GemmProblem matmulProblem(const cpu::detail::MatMulGeometry &g) {
  GemmProblem p;
  p.a = GemmOperand::Rhs;
  p.b = GemmOperand::Lhs;
  p.rows = g.n;
  p.cols = g.m;
  p.inner = g.k;
  p.transA = g.transRhs;
  p.transB = g.transLhs;
  p.lda = g.transRhs ? g.k : g.n;
  p.ldb = g.transLhs ? g.m : g.k;
  p.ldd = g.n;
  if (g.foldBatch) { // one rhs: lhs's batch is more columns
    p.cols = g.batches * g.m;
    return p;
  }
  std::span<const int64_t> batch(g.batch), ls(g.lhsStrides), rs(g.rhsStrides);
  size_t split = 0;
  int64_t strideL = 0, strideR = 0;
  for (split = 0; split < batch.size(); ++split)
    if (linearStride(batch.subspan(split), ls.subspan(split), strideL) &&
        linearStride(batch.subspan(split), rs.subspan(split), strideR))
      break;
  if (split == batch.size())
    strideL = strideR = 0;
  p.batch = product(batch.subspan(split));
  p.strideA = strideR;
  p.strideB = strideL;
  p.strideD = g.m * g.n;
  p.outerSizes.assign(batch.begin(), batch.begin() + split);
  p.outerStepA.assign(rs.begin(), rs.begin() + split);
  p.outerStepB.assign(ls.begin(), ls.begin() + split);
  p.outerCount = product(batch.first(split));
  p.outerStepD = p.batch * g.m * g.n;
  return p;
}

GemmProblem linearProblem(const cpu::detail::LinearGeometry &g) {
  GemmProblem p;
  p.a = GemmOperand::Rhs; // the weight [outF, inF], read column-major as [inF, outF]
  p.b = GemmOperand::Lhs; // x [rows, inF], read column-major as [inF, rows]
  p.transA = true;
  p.rows = g.outF;
  p.cols = g.rows;
  p.inner = g.inF;
  p.lda = g.inF;
  p.ldb = g.inF;
  p.ldd = g.outF;
  p.outerStepD = g.rows * g.outF;
  return p;
}

} // namespace megac::runtime::cuda
