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

/// The scratch of one call's scores: S (f32) and P (the input type), and for the backward dP
/// (f32) and dS (the input type), each [heads][rows][t] of the call's tiles.
template <typename T> struct ScoresScratch {
  float *S = nullptr, *dP = nullptr;
  T *P = nullptr, *dS = nullptr;
};

template <typename T>
StatusOr<ScoresScratch<T>> scoresScratch(const Context &ctx, const AttentionShape &a,
                                         const GemmAttentionTiles &tiles, bool backward) {
  const size_t scores = static_cast<size_t>(tiles.heads * tiles.rows * a.t);
  ScoresScratch<T> m;
  ASSIGN_OR_RETURN(void *s, ctx.scratch(scores * sizeof(float)));
  ASSIGN_OR_RETURN(void *p, ctx.scratch(scores * sizeof(T)));
  m.S = static_cast<float *>(s);
  m.P = static_cast<T *>(p);
  if (backward) {
    ASSIGN_OR_RETURN(void *dp, ctx.scratch(scores * sizeof(float)));
    ASSIGN_OR_RETURN(void *ds, ctx.scratch(scores * sizeof(T)));
    m.dP = static_cast<float *>(dp);
    m.dS = static_cast<T *>(ds);
  }
  return m;
}

template <typename T>
Status forward(const char *op, const Context &ctx, const T *q, const T *k, const T *v, T *out,
               const AttentionShape &a, size_t capBytes) {
  constexpr DType dtype = dtypeOf<T>();
  const GemmAttentionTiles tiles = gemmAttentionTiles(a, dtype, capBytes);
  ASSIGN_OR_RETURN(ScoresScratch<T> m, scoresScratch<T>(ctx, a, tiles, false));
  const float scale = static_cast<float>(a.scale);
  return forEachAttentionChunk(
      a, tiles,
      [&](const AttentionChunk &c) -> Status {
        RETURN_IF_ERROR(
            stridedGemm(op, ctx, attentionScoresGemm(a, c, a.d, dtype), k + c.k, q + c.q, m.S));
        int64_t rows = c.n * c.rows;
        softmaxRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
            m.S, m.P, rows, c.rows, c.i0, a.s, a.t, a.causal, scale);
        RETURN_IF_ERROR(launchStatus(op));
        return stridedGemm(op, ctx, attentionOutputGemm(a, c, dtype), v + c.v, m.P, out + c.o);
      },
      [](int64_t, int64_t, int64_t) { return Status::ok(); });
}

template <typename T>
Status backward(const char *op, const Context &ctx, const T *dout, const T *q, const T *k,
                const T *v, T *dq, T *dk, T *dv, const AttentionShape &a, size_t capBytes) {
  constexpr DType dtype = dtypeOf<T>();
  const GemmAttentionTiles tiles = gemmAttentionTiles(a, dtype, capBytes);
  ASSIGN_OR_RETURN(ScoresScratch<T> m, scoresScratch<T>(ctx, a, tiles, true));
  // dk and dv sum over a group's positions and the query chunks: in f32 scratch under half
  // types, in place under f32.
  const bool viaF32 = gemmAttentionSumsViaF32(a, tiles, dtype);
  float *dkSum = nullptr, *dvSum = nullptr;
  if (viaF32) {
    ASSIGN_OR_RETURN(void *sum, ctx.scratch(tiles.heads * a.t * a.d * sizeof(float)));
    dkSum = static_cast<float *>(sum);
    ASSIGN_OR_RETURN(sum, ctx.scratch(tiles.heads * a.t * a.dv * sizeof(float)));
    dvSum = static_cast<float *>(sum);
  }
  const float scale = static_cast<float>(a.scale);
  auto onChunk = [&](const AttentionChunk &c) -> Status {
    RETURN_IF_ERROR(
        stridedGemm(op, ctx, attentionScoresGemm(a, c, a.d, dtype), k + c.k, q + c.q, m.S));
    RETURN_IF_ERROR(stridedGemm(op, ctx, attentionScoresGemm(a, c, a.dv, dtype), v + c.v,
                                dout + c.o, m.dP));
    int64_t rows = c.n * c.rows;
    softmaxGradRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
        m.S, m.dP, m.P, m.dS, rows, c.rows, c.i0, a.s, a.t, a.causal, scale);
    RETURN_IF_ERROR(launchStatus(op));
    void *dvDst = viaF32 ? static_cast<void *>(dvSum) : dv + c.v;
    void *dkDst = viaF32 ? static_cast<void *>(dkSum) : dk + c.k;
    RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, c, a.dv, dtype, viaF32),
                                dout + c.o, m.P, dvDst, c.adds()));
    RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, c, a.d, dtype, viaF32),
                                q + c.q, m.dS, dkDst, c.adds()));
    return stridedGemm(op, ctx, attentionQueryGradGemm(a, c, dtype), k + c.k, m.dS, dq + c.q);
  };
  auto onKvDone = [&](int64_t bi, int64_t kh0, int64_t n) -> Status {
    if (!viaF32)
      return Status::ok();
    AttentionChunk c = gemmAttentionChunk(a, bi, 0, kh0, n, 0, a.s);
    scatterHeads<T><<<blocksFor(n * a.t * a.d), 256, 0, ctx.stream>>>(dkSum, dk + c.k, n, a.t,
                                                                      a.d, a.hk * a.d);
    scatterHeads<T><<<blocksFor(n * a.t * a.dv), 256, 0, ctx.stream>>>(dvSum, dv + c.v, n, a.t,
                                                                       a.dv, a.hk * a.dv);
    return launchStatus(op);
  };
  return forEachAttentionChunk(a, tiles, onChunk, onKvDone);
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
