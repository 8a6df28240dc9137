// Attention through cuBLASLt GEMMs and softmax rows in scratch (AttentionGemm.h).
//
// The chunks (heads, or query rows of one head for long sequences) and the GEMMs' descriptors are
// AttentionGemmShape.h's; here the scratch, the softmax rows (forward: P; backward: P recomputed,
// delta = sum_j P dP, dS = scale P (dP - delta), zeros past the visible keys) and the f32 sums of
// dk and dv over a GQA group and the query chunks (scatterHeads).
//
// Error model (tests/unit/cuda/AttentionKernelsTest.cpp): the GEMMs and rows compute in f32; a
// half input type adds one rounding of P before P v and one of dS before dS k and dS^T q, each
// a relative 2^-8 (bf16) or 2^-11 (f16) of a term of a convex (P) or bounded (dS) combination,
// which stays inside the tests' output tolerances. Every reduction has a fixed order for a given
// shape (block reductions; cuBLASLt's algorithm is fixed per shape by the cached heuristic), so
// a call gives the same bits on every run.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/AttentionGemm.h"
#include "runtime/cuda/kernels/AttentionTiling.h"
#include "runtime/cuda/kernels/BlockReduce.cuh"
#include "runtime/cuda/kernels/StridedGemm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace megac::runtime::cuda {

using namespace detail;

namespace {

constexpr int kRowThreads = 256;

/// Row r's softmax over its `visible` keys: the max of scale S and 1 / sum exp(scale S - max)
/// (0 for a row that sees no key), reduced over the block (every thread gets them).
__device__ void rowSoftmaxStats(const float *row, int64_t visible, float scale, float &m,
                                float &inv) {
  m = -INFINITY;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
    m = maxNaN(m, row[j] * scale);
  m = blockReduce(m, MaxOp{});
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
    sum += expf(row[j] * scale - m);
  sum = blockReduce(sum, SumOp{});
  inv = sum > 0.0f ? 1.0f / sum : 0.0f;
}

/// P = softmax(scale S) over each row's visible keys, zeros elsewhere (a row that sees no key is
/// all zeros). Rows are [heads][headRows] with query index i0 + r % headRows; a block per row.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmaxRows(const float *S, T *P, int64_t rows, int64_t headRows, int64_t i0, int64_t s,
                int64_t t, int causal, float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t visible = tiling::attnVisible(causal, s, t, i0 + r % headRows);
    const float *row = S + r * t;
    float m, inv;
    rowSoftmaxStats(row, visible, scale, m, inv);
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x)
      store(P, r * t + j, j < visible ? expf(row[j] * scale - m) * inv : 0.0f);
  }
}

/// From S and dP: P recomputed as softmaxRows does, delta = sum_j P dP over the row, and
/// dS = scale P (dP - delta); zeros past the visible keys.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmaxGradRows(const float *S, const float *dP, T *P, T *dS, int64_t rows, int64_t headRows,
                    int64_t i0, int64_t s, int64_t t, int causal, float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t visible = tiling::attnVisible(causal, s, t, i0 + r % headRows);
    const float *row = S + r * t, *drow = dP + r * t;
    float m, inv;
    rowSoftmaxStats(row, visible, scale, m, inv);
    float delta = 0.0f;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      delta += expf(row[j] * scale - m) * inv * drow[j];
    delta = blockReduce(delta, SumOp{});
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
      float p = j < visible ? expf(row[j] * scale - m) * inv : 0.0f;
      store(P, r * t + j, p);
      store(dS, r * t + j, j < visible ? scale * p * (drow[j] - delta) : 0.0f);
    }
  }
}

/// dst[j * ld + n * width + c] = acc[n][j][c] (rounded to T): the f32 sums of n kv heads' dk or
/// dv into their [t, hk, width] rows.
template <typename T>
__global__ void scatterHeads(const float *acc, T *dst, int64_t n, int64_t t, int64_t width,
                             int64_t ld) {
  GRID_STRIDE(e, n * t * width) {
    int64_t head = e / (t * width), rest = e % (t * width);
    int64_t j = rest / width, c = rest % width;
    store(dst, j * ld + head * width + c, acc[e]);
  }
}

template <typename T> constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::bf16;
  else
    return DType::f16;
}

template <typename T>
Status forward(const char *op, const Context &ctx, const T *q, const T *k, const T *v, T *out,
               const AttentionShape &a, size_t capBytes) {
  constexpr DType dtype = dtypeOf<T>();
  const int64_t group = a.h / a.hk;
  const GemmAttentionTiles tiles = gemmAttentionTiles(a, dtype, capBytes);
  const int64_t scores = tiles.heads * tiles.rows * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scores * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scores * sizeof(T)));
  float *S = static_cast<float *>(sMem);
  T *P = static_cast<T *>(pMem);
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += tiles.heads)
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i0 = 0; i0 < a.s; i0 += tiles.rows) {
          AttentionChunk c = gemmAttentionChunk(a, bi, g, kh0, std::min(tiles.heads, a.hk - kh0),
                                                i0, std::min(tiles.rows, a.s - i0));
          RETURN_IF_ERROR(
              stridedGemm(op, ctx, attentionScoresGemm(a, c, a.d, dtype), k + c.k, q + c.q, S));
          int64_t rows = c.n * c.rows;
          softmaxRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
              S, P, rows, c.rows, c.i0, a.s, a.t, a.causal, scale);
          RETURN_IF_ERROR(launchStatus(op));
          RETURN_IF_ERROR(
              stridedGemm(op, ctx, attentionOutputGemm(a, c, dtype), v + c.v, P, out + c.o));
        }
  return Status::ok();
}

template <typename T>
Status backward(const char *op, const Context &ctx, const T *dout, const T *q, const T *k,
                const T *v, T *dq, T *dk, T *dv, const AttentionShape &a, size_t capBytes) {
  constexpr DType dtype = dtypeOf<T>();
  const int64_t group = a.h / a.hk;
  const GemmAttentionTiles tiles = gemmAttentionTiles(a, dtype, capBytes);
  const int64_t scores = tiles.heads * tiles.rows * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scores * sizeof(float)));
  ASSIGN_OR_RETURN(void *dpMem, ctx.scratch(scores * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scores * sizeof(T)));
  ASSIGN_OR_RETURN(void *dsMem, ctx.scratch(scores * sizeof(T)));
  float *S = static_cast<float *>(sMem), *dP = static_cast<float *>(dpMem);
  T *P = static_cast<T *>(pMem), *dS = static_cast<T *>(dsMem);
  // dk and dv sum over a group's positions and the query chunks: in f32 scratch under half
  // types, in place under f32.
  const bool viaF32 = gemmAttentionSumsViaF32(a, tiles, dtype);
  float *dkSum = nullptr, *dvSum = nullptr;
  if (viaF32) {
    ASSIGN_OR_RETURN(void *m, ctx.scratch(tiles.heads * a.t * a.d * sizeof(float)));
    dkSum = static_cast<float *>(m);
    ASSIGN_OR_RETURN(m, ctx.scratch(tiles.heads * a.t * a.dv * sizeof(float)));
    dvSum = static_cast<float *>(m);
  }
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += tiles.heads) {
      const int64_t n = std::min(tiles.heads, a.hk - kh0);
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i0 = 0; i0 < a.s; i0 += tiles.rows) {
          AttentionChunk c =
              gemmAttentionChunk(a, bi, g, kh0, n, i0, std::min(tiles.rows, a.s - i0));
          RETURN_IF_ERROR(
              stridedGemm(op, ctx, attentionScoresGemm(a, c, a.d, dtype), k + c.k, q + c.q, S));
          RETURN_IF_ERROR(stridedGemm(op, ctx, attentionScoresGemm(a, c, a.dv, dtype), v + c.v,
                                      dout + c.o, dP));
          int64_t rows = n * c.rows;
          softmaxGradRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
              S, dP, P, dS, rows, c.rows, c.i0, a.s, a.t, a.causal, scale);
          RETURN_IF_ERROR(launchStatus(op));
          // Every product after the chunk's first adds to dk and dv (beta 1).
          const bool sum = g > 0 || i0 > 0;
          void *dvDst = viaF32 ? static_cast<void *>(dvSum) : dv + c.v;
          void *dkDst = viaF32 ? static_cast<void *>(dkSum) : dk + c.k;
          RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, c, a.dv, dtype, viaF32),
                                      dout + c.o, P, dvDst, sum));
          RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, c, a.d, dtype, viaF32),
                                      q + c.q, dS, dkDst, sum));
          RETURN_IF_ERROR(
              stridedGemm(op, ctx, attentionQueryGradGemm(a, c, dtype), k + c.k, dS, dq + c.q));
        }
      if (viaF32) {
        AttentionChunk c = gemmAttentionChunk(a, bi, 0, kh0, n, 0, a.s);
        scatterHeads<T><<<blocksFor(n * a.t * a.d), 256, 0, ctx.stream>>>(
            dkSum, dk + c.k, n, a.t, a.d, a.hk * a.d);
        scatterHeads<T><<<blocksFor(n * a.t * a.dv), 256, 0, ctx.stream>>>(
            dvSum, dv + c.v, n, a.t, a.dv, a.hk * a.dv);
        RETURN_IF_ERROR(launchStatus(op));
      }
    }
  return Status::ok();
}

/// Calls f(T{}) for f32, bf16 and f16.
template <typename F> Status dispatchGemmType(const char *op, DType dtype, F &&f) {
  switch (dtype) {
  case DType::f32:
    return f(float{});
  case DType::bf16:
    return f(__nv_bfloat16{});
  case DType::f16:
    return f(__half{});
  default:
    return cpu::detail::fail(op, std::string("the GEMM path takes f32, bf16 or f16, not ") +
                                     dtypeName(dtype) + " (internal: gemmAttentionFits)");
  }
}

} // namespace

Status gemmAttention(const Context &ctx, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef &out, const AttentionShape &a,
                     size_t capBytes) {
  const char *op = "Attention";
  return dispatchGemmType(op, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    return forward<T>(op, ctx, q.as<const T>(), k.as<const T>(), v.as<const T>(), out.as<T>(), a,
                      capBytes);
  });
}

Status gemmAttentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                         const TensorRef &k, const TensorRef &v, const TensorRef &dq,
                         const TensorRef &dk, const TensorRef &dv, const AttentionShape &a,
                         size_t capBytes) {
  const char *op = "AttentionGrad";
  return dispatchGemmType(op, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    return backward<T>(op, ctx, dout.as<const T>(), q.as<const T>(), k.as<const T>(),
                       v.as<const T>(), dq.as<T>(), dk.as<T>(), dv.as<T>(), a, capBytes);
  });
}

} // namespace megac::runtime::cuda
