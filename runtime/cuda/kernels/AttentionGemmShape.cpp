// The GEMM path's chunks and descriptors (AttentionGemmShape.h).
#include "runtime/cuda/kernels/AttentionGemmShape.h"

#include <algorithm>

namespace megac::runtime::cuda {

int64_t gemmAttentionBytesPerScore(DType dtype) {
  return 2 * 4 + 2 * static_cast<int64_t>(dtypeSize(dtype));
}

bool gemmAttentionFits(const AttentionShape &a, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    return false;
  if (a.b <= 0 || a.s <= 0 || a.t <= 0 || a.h <= 0 || a.hk <= 0 || a.d <= 0 || a.dv <= 0)
    return false;
  double perHead = double(a.s) * double(a.t) * double(gemmAttentionBytesPerScore(dtype));
  return perHead <= double(kGemmAttentionScratchBytes);
}

int64_t gemmAttentionHeadsPerChunk(const AttentionShape &a, DType dtype) {
  int64_t perHead = a.s * a.t * gemmAttentionBytesPerScore(dtype);
  int64_t n = static_cast<int64_t>(kGemmAttentionScratchBytes) / std::max<int64_t>(perHead, 1);
  return std::clamp<int64_t>(n, 1, std::max<int64_t>(a.hk, 1));
}

AttentionChunk gemmAttentionChunk(const AttentionShape &a, int64_t bi, int64_t g, int64_t kh0,
                                  int64_t n) {
  int64_t group = a.h / a.hk, hq = kh0 * group + g;
  AttentionChunk c;
  c.n = n;
  c.q = (bi * a.s * a.h + hq) * a.d;
  c.o = (bi * a.s * a.h + hq) * a.dv;
  c.k = (bi * a.t * a.hk + kh0) * a.d;
  c.v = (bi * a.t * a.hk + kh0) * a.dv;
  return c;
}

StridedGemm attentionScoresGemm(const AttentionShape &a, int64_t n, int64_t width, DType dtype) {
  StridedGemm g;
  g.dtype = dtype;
  g.outDtype = DType::f32;
  g.transA = true;
  g.rows = a.t;
  g.cols = a.s;
  g.inner = width;
  g.lda = a.hk * width;
  g.ldb = a.h * width;
  g.ldd = a.t;
  g.batch = n;
  g.strideA = width;
  g.strideB = (a.h / a.hk) * width;
  g.strideD = a.s * a.t;
  return g;
}

StridedGemm attentionOutputGemm(const AttentionShape &a, int64_t n, DType dtype) {
  StridedGemm g;
  g.dtype = g.outDtype = dtype;
  g.rows = a.dv;
  g.cols = a.s;
  g.inner = a.t;
  g.lda = a.hk * a.dv;
  g.ldb = a.t;
  g.ldd = a.h * a.dv;
  g.batch = n;
  g.strideA = a.dv;
  g.strideB = a.s * a.t;
  g.strideD = (a.h / a.hk) * a.dv;
  return g;
}

StridedGemm attentionKeyGradGemm(const AttentionShape &a, int64_t n, int64_t width, DType dtype,
                                 bool viaF32) {
  StridedGemm g;
  g.dtype = dtype;
  g.outDtype = viaF32 ? DType::f32 : dtype;
  g.transB = true;
  g.rows = width;
  g.cols = a.t;
  g.inner = a.s;
  g.lda = a.h * width;
  g.ldb = a.t;
  g.ldd = viaF32 ? width : a.hk * width;
  g.batch = n;
  g.strideA = (a.h / a.hk) * width;
  g.strideB = a.s * a.t;
  g.strideD = viaF32 ? a.t * width : width;
  return g;
}

StridedGemm attentionQueryGradGemm(const AttentionShape &a, int64_t n, DType dtype) {
  StridedGemm g;
  g.dtype = g.outDtype = dtype;
  g.rows = a.d;
  g.cols = a.s;
  g.inner = a.t;
  g.lda = a.hk * a.d;
  g.ldb = a.t;
  g.ldd = a.h * a.d;
  g.batch = n;
  g.strideA = a.d;
  g.strideB = a.s * a.t;
  g.strideD = (a.h / a.hk) * a.d;
  return g;
}

bool gemmAttentionSumsViaF32(const AttentionShape &a, DType dtype) {
  return a.h / a.hk > 1 && dtype != DType::f32;
}

} // namespace megac::runtime::cuda
