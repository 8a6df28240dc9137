// Attention through cuBLASLt GEMMs and softmax rows in scratch (AttentionGemm.h).
//
// The chunks and the GEMMs' descriptors are AttentionGemmShape.h's; here the scratch, the
// softmax rows (forward: P; backward: P recomputed, delta = sum_j P dP, dS = scale P (dP - delta),
// zeros past the visible keys) and the f32 sums of a GQA group's dk and dv (scatterHeads).
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
/// all zeros). Rows are [chunk][s] with query index r % s; a block per row.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmaxRows(const float *S, T *P, int64_t rows, int64_t s, int64_t t, int causal,
                float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t visible = tiling::attnVisible(causal, s, t, r % s);
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
    softmaxGradRows(const float *S, const float *dP, T *P, T *dS, int64_t rows, int64_t s,
                    int64_t t, int causal, float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t visible = tiling::attnVisible(causal, s, t, r % s);
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
               const AttentionShape &a) {
  constexpr DType dtype = dtypeOf<T>();
  const int64_t group = a.h / a.hk, chunk = gemmAttentionHeadsPerChunk(a, dtype);
  const int64_t scoresPerChunk = chunk * a.s * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  float *S = static_cast<float *>(sMem);
  T *P = static_cast<T *>(pMem);
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += chunk)
      for (int64_t g = 0; g < group; ++g) {
        AttentionChunk c = gemmAttentionChunk(a, bi, g, kh0, std::min(chunk, a.hk - kh0));
        RETURN_IF_ERROR(
            stridedGemm(op, ctx, attentionScoresGemm(a, c.n, a.d, dtype), k + c.k, q + c.q, S));
        int64_t rows = c.n * a.s;
        softmaxRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(S, P, rows, a.s, a.t,
                                                                         a.causal, scale);
        RETURN_IF_ERROR(launchStatus(op));
        RETURN_IF_ERROR(
            stridedGemm(op, ctx, attentionOutputGemm(a, c.n, dtype), v + c.v, P, out + c.o));
      }
  return Status::ok();
}

template <typename T>
Status backward(const char *op, const Context &ctx, const T *dout, const T *q, const T *k,
                const T *v, T *dq, T *dk, T *dv, const AttentionShape &a) {
  constexpr DType dtype = dtypeOf<T>();
  const int64_t group = a.h / a.hk, chunk = gemmAttentionHeadsPerChunk(a, dtype);
  const int64_t scoresPerChunk = chunk * a.s * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *dpMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  ASSIGN_OR_RETURN(void *dsMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  float *S = static_cast<float *>(sMem), *dP = static_cast<float *>(dpMem);
  T *P = static_cast<T *>(pMem), *dS = static_cast<T *>(dsMem);
  // A group's dk and dv sum over g: in f32 scratch under half types, in place under f32.
  const bool viaF32 = gemmAttentionSumsViaF32(a, dtype);
  float *dkSum = nullptr, *dvSum = nullptr;
  if (viaF32) {
    ASSIGN_OR_RETURN(void *m, ctx.scratch(chunk * a.t * a.d * sizeof(float)));
    dkSum = static_cast<float *>(m);
    ASSIGN_OR_RETURN(m, ctx.scratch(chunk * a.t * a.dv * sizeof(float)));
    dvSum = static_cast<float *>(m);
  }
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += chunk) {
      const int64_t n = std::min(chunk, a.hk - kh0);
      for (int64_t g = 0; g < group; ++g) {
        AttentionChunk c = gemmAttentionChunk(a, bi, g, kh0, n);
        RETURN_IF_ERROR(
            stridedGemm(op, ctx, attentionScoresGemm(a, n, a.d, dtype), k + c.k, q + c.q, S));
        RETURN_IF_ERROR(stridedGemm(op, ctx, attentionScoresGemm(a, n, a.dv, dtype), v + c.v,
                                    dout + c.o, dP));
        int64_t rows = n * a.s;
        softmaxGradRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
            S, dP, P, dS, rows, a.s, a.t, a.causal, scale);
        RETURN_IF_ERROR(launchStatus(op));
        // g > 0 adds to the group's sums (beta 1).
        const bool sum = g > 0;
        void *dvDst = viaF32 ? static_cast<void *>(dvSum) : dv + c.v;
        void *dkDst = viaF32 ? static_cast<void *>(dkSum) : dk + c.k;
        RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, n, a.dv, dtype, viaF32),
                                    dout + c.o, P, dvDst, sum));
        RETURN_IF_ERROR(stridedGemm(op, ctx, attentionKeyGradGemm(a, n, a.d, dtype, viaF32),
                                    q + c.q, dS, dkDst, sum));
        RETURN_IF_ERROR(
            stridedGemm(op, ctx, attentionQueryGradGemm(a, n, dtype), k + c.k, dS, dq + c.q));
      }
      if (viaF32) {
        AttentionChunk c = gemmAttentionChunk(a, bi, 0, kh0, n);
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
                     const TensorRef &v, const TensorRef &out, const AttentionShape &a) {
  const char *op = "Attention";
  return dispatchGemmType(op, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    return forward<T>(op, ctx, q.as<const T>(), k.as<const T>(), v.as<const T>(), out.as<T>(), a);
  });
}

Status gemmAttentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                         const TensorRef &k, const TensorRef &v, const TensorRef &dq,
                         const TensorRef &dk, const TensorRef &dv, const AttentionShape &a) {
  const char *op = "AttentionGrad";
  return dispatchGemmType(op, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    return backward<T>(op, ctx, dout.as<const T>(), q.as<const T>(), k.as<const T>(),
                       v.as<const T>(), dq.as<T>(), dk.as<T>(), dv.as<T>(), a);
  });
}

} // namespace megac::runtime::cuda
