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
#include "support/Status.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace megac::runtime::cuda {

/// q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv]; query head hi reads kv head hi / (h / hk);
/// `causal` hides key j > i + (t - s).
struct AttentionShape {
  int64_t b = 0, s = 0, h = 0, d = 0, t = 0, hk = 0, dv = 0;
  bool causal = false;
  double scale = 1.0;
};

/// The most scratch one GEMM-path call takes by default (1 GiB; MEGAC_CUDA_ATTENTION_SCRATCH
/// sets another cap, Attention.cu): heads, or the query rows of one head, are processed in chunks
/// whose scores, probabilities and their gradients fit the cap.
constexpr size_t kGemmAttentionScratchBytes = size_t(1) << 30;

/// Scratch bytes per score in the backward: S and dP in f32, P and dS in the input type.
int64_t gemmAttentionBytesPerScore(DType dtype);

/// Whether the GEMM path takes this shape: f32, bf16 or f16, no dim 0, and one query row of one
/// head (t * gemmAttentionBytesPerScore) within the scratch cap.
bool gemmAttentionFits(const AttentionShape &a, DType dtype,
                       size_t capBytes = kGemmAttentionScratchBytes);

/// How a call is cut: `heads` kv heads per chunk with all s query rows where a head's scores fit
/// the scratch cap (as many heads as fit, at most hk); else one head and `rows` query rows per
/// chunk (as many as fit; the last chunk may have fewer).
struct GemmAttentionTiles {
  int64_t heads = 1, rows = 1;
};
GemmAttentionTiles gemmAttentionTiles(const AttentionShape &a, DType dtype,
                                      size_t capBytes = kGemmAttentionScratchBytes);

/// A chunk: n kv heads from kh0 at batch index bi and group position g, query rows [i0, i0 +
/// rows); element offsets of its first query head's row i0 in q/dq and out/dout, and of its
/// first kv head in k/dk and v/dv. Its scores are row-major [n][rows][t].
struct AttentionChunk {
  int64_t n = 0, rows = 0, i0 = 0, g = 0;
  int64_t q = 0, o = 0, k = 0, v = 0;
  /// Whether dk and dv already hold this kv-head chunk's earlier products (beta 1).
  bool adds() const { return g > 0 || i0 > 0; }
};
AttentionChunk gemmAttentionChunk(const AttentionShape &a, int64_t bi, int64_t g, int64_t kh0,
                                  int64_t n, int64_t i0, int64_t rows);

/// Visits a call's chunks in the GEMM path's order: per batch index and chunk of kv heads, every
/// group position and chunk of query rows (`chunk(const AttentionChunk &)`, each product after
/// the kv-head chunk's first one adding to its dk and dv, `c.g > 0 || c.i0 > 0`), then
/// `kvDone(bi, kh0, n)` once that chunk's dk and dv sums are complete. Both return Status; the
/// first error stops the walk.
template <typename OnChunk, typename OnKvDone>
Status forEachAttentionChunk(const AttentionShape &a, const GemmAttentionTiles &tiles,
                             OnChunk &&chunk, OnKvDone &&kvDone);

/// S [n][rows][t] (f32) = x y^T over `width` columns: A = y, the key side (k, or v for dP; ld
/// hk*width, batch stride width), transposed; B = x, the query side (q, or dout; ld h*width,
/// batch stride group*width); D = S^T [t, rows] column-major (ld t, batch stride rows*t).
StridedGemm attentionScoresGemm(const AttentionShape &a, const AttentionChunk &c, int64_t width,
                                DType dtype);

/// out^T [dv, rows] = v^T [dv, t] P^T [t, rows]: A = v (ld hk*dv), B = P [n][rows][t] (ld t),
/// D = out (ld h*dv, batch stride group*dv); all in the input type.
StridedGemm attentionOutputGemm(const AttentionShape &a, const AttentionChunk &c, DType dtype);

/// The key side's gradient over `width` columns: dst^T [width, t] (+)= x^T [width, rows]
/// X [rows, t], X the row-major scratch [n][rows][t] (P with x = dout for dv, dS with x = q for
/// dk), B transposed. D is the key-side tensor (ld hk*width, batch stride width, the input
/// type), or with `viaF32` f32 scratch [n][t][width] (ld width, batch stride t*width) that the
/// group's positions and the query chunks sum into.
StridedGemm attentionKeyGradGemm(const AttentionShape &a, const AttentionChunk &c, int64_t width,
                                 DType dtype, bool viaF32);

/// dq^T [d, rows] = k^T [d, t] dS^T [t, rows]: A = k (ld hk*d), B = dS [n][rows][t] (ld t),
/// D = dq (ld h*d, batch stride group*d).
StridedGemm attentionQueryGradGemm(const AttentionShape &a, const AttentionChunk &c,
                                   DType dtype);

/// Whether dk and dv are summed in f32 scratch: half types where more than one product adds
/// into them (a GQA group, or query rows in several chunks); f32 sums in place, and a single
/// product writes directly.
bool gemmAttentionSumsViaF32(const AttentionShape &a, const GemmAttentionTiles &tiles,
                             DType dtype);

/// The attention path the environment asks for (Attention.cu reads it once per process):
/// - MEGAC_CUDA_ATTENTION (`mode`): unset, "" or "auto" takes the GEMM path where one query row
///   of a head fits its scratch cap (any practical length) and the flash kernels otherwise;
///   "flash" always takes the flash kernels (nothing of size s*t stored);
/// - MEGAC_CUDA_ATTENTION_SCRATCH (`scratch`): the GEMM path's scratch cap in bytes, a positive
///   integer (default kGemmAttentionScratchBytes).
/// A malformed value leaves `error` saying which variable and what it takes.
struct AttentionPath {
  bool gemm = true;
  size_t capBytes = kGemmAttentionScratchBytes;
  std::string error;
};
AttentionPath attentionPathFrom(const char *mode, const char *scratch);

template <typename OnChunk, typename OnKvDone>
Status forEachAttentionChunk(const AttentionShape &a, const GemmAttentionTiles &tiles,
                             OnChunk &&chunk, OnKvDone &&kvDone) {
  const int64_t group = a.h / a.hk;
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += tiles.heads) {
      const int64_t n = std::min(tiles.heads, a.hk - kh0);
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i0 = 0; i0 < a.s; i0 += tiles.rows)
          RETURN_IF_ERROR(
              chunk(gemmAttentionChunk(a, bi, g, kh0, n, i0, std::min(tiles.rows, a.s - i0))));
      RETURN_IF_ERROR(kvDone(bi, kh0, n));
    }
  return Status::ok();
}

} // namespace megac::runtime::cuda
