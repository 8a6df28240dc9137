// The GEMM path of CUDA attention (AttentionGemm.cu) as pure functions of the shape: which heads
// go in one chunk, where a chunk's operands start, and each GEMM's column-major descriptor.
// tests/unit/cuda/AttentionGemmShapeTest.cpp runs these descriptors through a naive column-major
// GEMM, with the softmax rows in double, against the CPU kernels. No CUDA headers.
//
// Per batch index bi, position g in a GQA group and chunk of n kv heads from kh0 (the query
// heads kh * group + g of the chunk are one strided batch: stride group * d in q, d in k), with
// row-major scores S [n][s][t]:
//   forward   S = q k^T, P = softmax(scale S) over the visible keys, out = P v;
//   backward  S = q k^T and dP = dout v^T, per row P, delta = sum_j P dP and
//             dS = scale P (dP - delta), then dv = P^T dout, dk = dS^T q, dq = dS k.
// A row-major [rows][ld] operand is a column-major [.., rows] one with the same ld, so q [s, d]
// (ld h d) is read as q^T [d, s]; each GEMM below says what it computes in those terms.
#pragma once

#include "runtime/cuda/kernels/GemmShape.h"

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

/// Scratch bytes per score in the backward: S and dP in f32, P and dS in the input type.
int64_t gemmAttentionBytesPerScore(DType dtype);

/// Whether the GEMM path takes this shape: f32, bf16 or f16, no dim 0, and one head's backward
/// scratch (s * t * gemmAttentionBytesPerScore) within kGemmAttentionScratchBytes.
bool gemmAttentionFits(const AttentionShape &a, DType dtype);

/// Kv heads per chunk: as many as fit the scratch cap, at least one, at most hk.
int64_t gemmAttentionHeadsPerChunk(const AttentionShape &a, DType dtype);

/// A chunk: n kv heads from kh0, at batch index bi and group position g; element offsets of its
/// first query head in q/dq and out/dout, and of its first kv head in k/dk and v/dv.
struct AttentionChunk {
  int64_t n = 0;
  int64_t q = 0, o = 0, k = 0, v = 0;
};
AttentionChunk gemmAttentionChunk(const AttentionShape &a, int64_t bi, int64_t g, int64_t kh0,
                                  int64_t n);

/// S [n][s][t] (f32) = x y^T over `width` columns: A = y, the key side (k, or v for dP; ld
/// hk*width, batch stride width), transposed; B = x, the query side (q, or dout; ld h*width,
/// batch stride group*width); D = S^T [t, s] column-major (ld t, batch stride s*t).
StridedGemm attentionScoresGemm(const AttentionShape &a, int64_t n, int64_t width, DType dtype);

/// out^T [dv, s] = v^T [dv, t] P^T [t, s]: A = v (ld hk*dv), B = P [n][s][t] (ld t),
/// D = out (ld h*dv, batch stride group*dv); all in the input type.
StridedGemm attentionOutputGemm(const AttentionShape &a, int64_t n, DType dtype);

/// The key side's gradient over `width` columns: dst^T [width, t] = x^T [width, s] X [s, t], X
/// the row-major scratch [n][s][t] (P with x = dout for dv, dS with x = q for dk), B transposed.
/// D is the key-side tensor (ld hk*width, batch stride width, the input type), or with `viaF32`
/// f32 scratch [n][t][width] (ld width, batch stride t*width) that a group sums into.
StridedGemm attentionKeyGradGemm(const AttentionShape &a, int64_t n, int64_t width, DType dtype,
                                 bool viaF32);

/// dq^T [d, s] = k^T [d, t] dS^T [t, s]: A = k (ld hk*d), B = dS [n][s][t] (ld t), D = dq (ld
/// h*d, batch stride group*d).
StridedGemm attentionQueryGradGemm(const AttentionShape &a, int64_t n, DType dtype);

/// Whether dk and dv of a GQA group are summed in f32 scratch (half types with group > 1);
/// f32 sums in place, one head per group writes directly.
bool gemmAttentionSumsViaF32(const AttentionShape &a, DType dtype);

} // namespace megac::runtime::cuda
