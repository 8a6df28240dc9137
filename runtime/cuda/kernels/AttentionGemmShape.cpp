// The GEMM path's chunks and descriptors (AttentionGemmShape.h).
#include "runtime/cuda/kernels/AttentionGemmShape.h"

#include <algorithm>

namespace megac::runtime::cuda {

int64_t gemmAttentionBytesPerScore(DType dtype) {
  return 2 * 4 + 2 * static_cast<int64_t>(dtypeSize(dtype));
}

bool gemmAttentionFits(const AttentionShape &a, DType dtype, size_t capBytes) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    return false;
  if (a.b <= 0 || a.s <= 0 || a.t <= 0 || a.h <= 0 || a.hk <= 0 || a.d <= 0 || a.dv <= 0)
    return false;
  double perRow = double(a.t) * double(gemmAttentionBytesPerScore(dtype));
  return perRow <= double(capBytes);
}

GemmAttentionTiles gemmAttentionTiles(const AttentionShape &a, DType dtype, size_t capBytes) {
  const int64_t cap = static_cast<int64_t>(capBytes);
  const int64_t perRow = std::max<int64_t>(a.t * gemmAttentionBytesPerScore(dtype), 1);
  const int64_t perHead = std::max<int64_t>(a.s, 1) * perRow;
  GemmAttentionTiles tiles;
  if (perHead <= cap) {
    tiles.heads = std::clamp<int64_t>(cap / perHead, 1, std::max<int64_t>(a.hk, 1));
    tiles.rows = std::max<int64_t>(a.s, 1);
  } else {
    tiles.heads = 1;
    tiles.rows = std::clamp<int64_t>(cap / perRow, 1, a.s);
  }
  return tiles;
}

AttentionChunk gemmAttentionChunk(const AttentionShape &a, int64_t bi, int64_t g, int64_t kh0,
                                  int64_t n, int64_t i0, int64_t rows) {
  int64_t group = a.h / a.hk, hq = kh0 * group + g;
  AttentionChunk c;
  c.n = n;
  c.rows = rows;
  c.i0 = i0;
  c.g = g;
  c.q = ((bi * a.s + i0) * a.h + hq) * a.d;
  c.o = ((bi * a.s + i0) * a.h + hq) * a.dv;
  c.k = (bi * a.t * a.hk + kh0) * a.d;
  c.v = (bi * a.t * a.hk + kh0) * a.dv;
  return c;
}

StridedGemm attentionScoresGemm(const AttentionShape &a, const AttentionChunk &c, int64_t width,
                                DType dtype) {
  StridedGemm g;
  g.dtype = dtype;
  g.outDtype = DType::f32;
  g.transA = true;
  g.rows = a.t;
  g.cols = c.rows;
  g.inner = width;
  g.lda = a.hk * width;
  g.ldb = a.h * width;
  g.ldd = a.t;
  g.batch = c.n;
  g.strideA = width;
  g.strideB = (a.h / a.hk) * width;
  g.strideD = c.rows * a.t;
  return g;
}

StridedGemm attentionOutputGemm(const AttentionShape &a, const AttentionChunk &c, DType dtype) {
  StridedGemm g;
  g.dtype = g.outDtype = dtype;
  g.rows = a.dv;
  g.cols = c.rows;
  g.inner = a.t;
  g.lda = a.hk * a.dv;
  g.ldb = a.t;
  g.ldd = a.h * a.dv;
  g.batch = c.n;
  g.strideA = a.dv;
  g.strideB = c.rows * a.t;
  g.strideD = (a.h / a.hk) * a.dv;
  return g;
}

StridedGemm attentionKeyGradGemm(const AttentionShape &a, const AttentionChunk &c, int64_t width,
                                 DType dtype, bool viaF32) {
  StridedGemm g;
  g.dtype = dtype;
  g.outDtype = viaF32 ? DType::f32 : dtype;
  g.transB = true;
  g.rows = width;
  g.cols = a.t;
  g.inner = c.rows;
  g.lda = a.h * width;
  g.ldb = a.t;
  g.ldd = viaF32 ? width : a.hk * width;
  g.batch = c.n;
  g.strideA = (a.h / a.hk) * width;
  g.strideB = c.rows * a.t;
  g.strideD = viaF32 ? a.t * width : width;
  return g;
}

StridedGemm attentionQueryGradGemm(const AttentionShape &a, const AttentionChunk &c,
                                   DType dtype) {
  StridedGemm g;
  g.dtype = g.outDtype = dtype;
  g.rows = a.d;
  g.cols = c.rows;
  g.inner = a.t;
  g.lda = a.hk * a.d;
  g.ldb = a.t;
  g.ldd = a.h * a.d;
  g.batch = c.n;
  g.strideA = a.d;
  g.strideB = c.rows * a.t;
  g.strideD = (a.h / a.hk) * a.d;
  return g;
}

bool gemmAttentionSumsViaF32(const AttentionShape &a, const GemmAttentionTiles &tiles,
                             DType dtype) {
  return dtype != DType::f32 && (a.h / a.hk > 1 || tiles.rows < a.s);
}

AttentionPath attentionPathFrom(const char *mode, const char *scratch) {
  AttentionPath path;
  std::string v = mode ? mode : "";
  if (v == "flash")
    path.gemm = false;
  else if (!v.empty() && v != "auto")
    path.error = "MEGAC_CUDA_ATTENTION='" + v +
                 "' is not auto or flash (auto: cuBLASLt GEMMs with the scores in scratch; "
                 "flash: the fused kernels, nothing of size s*t stored)";
  if (scratch && *scratch) {
    std::string text = scratch;
    bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    unsigned long long bytes = digits && text.size() <= 19 ? std::stoull(text) : 0;
    if (bytes == 0)
      path.error = "MEGAC_CUDA_ATTENTION_SCRATCH='" + text +
                   "' is not a positive number of bytes (the GEMM path's scratch cap; default " +
                   std::to_string(kGemmAttentionScratchBytes) + ")";
    else
      path.capBytes = static_cast<size_t>(bytes);
  }
  return path;
}

} // namespace megac::runtime::cuda
