// Attention through cuBLASLt GEMMs and softmax rows in scratch (AttentionGemm.h).
//
// Per batch index, per position g in a GQA group and per chunk of n kv heads (the query heads
// kh * group + g of the chunk are one strided batch: stride group * d in q, d in k), with
// row-major S [n][s][t]:
//   forward   S = q k^T (f32), P = softmax(scale S) over the visible keys (rounded to the input
//             type), out = P v;
//   backward  S = q k^T and dP = dout v^T (f32), then per row P (recomputed), delta = sum_j P dP
//             and dS = scale P (dP - delta) (both rounded to the input type), dv = P^T dout,
//             dq = dS k, dk = dS^T q.
// Each GEMM is one cuBLASLt call in column-major terms: a row-major [rows][ld] operand is a
// column-major [.., rows] one with the same ld, so q [s, d] (ld h d) is read as q^T [d, s].
// GQA: dk and dv sum over the group's g; under bf16/f16 they are summed in f32 scratch and
// rounded once (scatterHeads), under f32 in place (beta = 1).
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

/// P = softmax(scale S) over each row's visible keys, zeros elsewhere (a row that sees no key is
/// all zeros). Rows are [chunk][s] with query index r % s; a block per row.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    softmaxRows(const float *S, T *P, int64_t rows, int64_t s, int64_t t, int causal,
                float scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t visible = tiling::attnVisible(causal, s, t, r % s);
    const float *row = S + r * t;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      m = maxNaN(m, row[j] * scale);
    m = blockReduce(m, MaxOp{});
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      sum += expf(row[j] * scale - m);
    sum = blockReduce(sum, SumOp{});
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
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
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      m = maxNaN(m, row[j] * scale);
    m = blockReduce(m, MaxOp{});
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < visible; j += blockDim.x)
      sum += expf(row[j] * scale - m);
    sum = blockReduce(sum, SumOp{});
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
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

int64_t backwardBytesPerScore(DType dtype) {
  return 2 * 4 + 2 * static_cast<int64_t>(dtypeSize(dtype));
}

/// Kv heads per chunk: as many as the backward's scores fit the scratch cap, at least one.
int64_t headsPerChunk(const AttentionShape &a, DType dtype) {
  int64_t perHead = a.s * a.t * backwardBytesPerScore(dtype);
  int64_t n = static_cast<int64_t>(kGemmAttentionScratchBytes) / std::max<int64_t>(perHead, 1);
  return std::clamp<int64_t>(n, 1, a.hk);
}

template <typename T> constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::bf16;
  else
    return DType::f16;
}

/// The GEMMs' common operand geometry for one (batch index, g, first kv head) chunk.
struct Chunk {
  int64_t n;               // kv heads (batch count)
  int64_t q, kv, kvV, o;   // element offsets of q/dq, k/dk, v/dv, out/dout
};

Chunk chunkAt(const AttentionShape &a, int64_t bi, int64_t g, int64_t kh0, int64_t n) {
  int64_t group = a.h / a.hk, hq = kh0 * group + g;
  return {n, (bi * a.s * a.h + hq) * a.d, (bi * a.t * a.hk + kh0) * a.d,
          (bi * a.t * a.hk + kh0) * a.dv, (bi * a.s * a.h + hq) * a.dv};
}

/// S [n][s][t] (f32) = x y^T with x the query-side rows (ld h*width, batch stride
/// group*width) and y the key-side rows (ld hk*width, batch stride width).
template <typename T>
Status scores(const char *op, const Context &ctx, const AttentionShape &a, int64_t n,
              int64_t width, const T *x, const T *y, float *S) {
  int64_t group = a.h / a.hk;
  StridedGemm g;
  g.dtype = dtypeOf<T>();
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
  g.strideB = group * width;
  g.strideD = a.s * a.t;
  return stridedGemm(op, ctx, g, y, x, S);
}

template <typename T>
Status forward(const char *op, const Context &ctx, const T *q, const T *k, const T *v, T *out,
               const AttentionShape &a) {
  const int64_t group = a.h / a.hk, chunk = headsPerChunk(a, dtypeOf<T>());
  const int64_t scoresPerChunk = chunk * a.s * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  float *S = static_cast<float *>(sMem);
  T *P = static_cast<T *>(pMem);
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += chunk)
      for (int64_t g = 0; g < group; ++g) {
        Chunk c = chunkAt(a, bi, g, kh0, std::min(chunk, a.hk - kh0));
        RETURN_IF_ERROR(scores(op, ctx, a, c.n, a.d, q + c.q, k + c.kv, S));
        int64_t rows = c.n * a.s;
        softmaxRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(S, P, rows, a.s, a.t,
                                                                         a.causal, scale);
        RETURN_IF_ERROR(launchStatus(op));
        // out^T [dv, s] = v^T [dv, t] P^T [t, s].
        StridedGemm pv;
        pv.dtype = pv.outDtype = dtypeOf<T>();
        pv.rows = a.dv;
        pv.cols = a.s;
        pv.inner = a.t;
        pv.lda = a.hk * a.dv;
        pv.ldb = a.t;
        pv.ldd = a.h * a.dv;
        pv.batch = c.n;
        pv.strideA = a.dv;
        pv.strideB = a.s * a.t;
        pv.strideD = group * a.dv;
        RETURN_IF_ERROR(stridedGemm(op, ctx, pv, v + c.kvV, P, out + c.o));
      }
  return Status::ok();
}

/// dst^T [width, t] (+)= x^T [width, s] X [s, t], X the row-major [s][t] scratch `scoresLike`
/// (P for dv with x = dout, dS for dk with x = q); into f32 `acc` [n][t][width] when given,
/// else into dst's rows (ld hk*width, batch stride width).
template <typename T>
Status keySideGrad(const char *op, const Context &ctx, const AttentionShape &a, int64_t n,
                   int64_t width, const T *x, const T *scoresLike, T *dst, float *acc,
                   bool accumulate) {
  int64_t group = a.h / a.hk;
  StridedGemm g;
  g.dtype = dtypeOf<T>();
  g.outDtype = acc ? DType::f32 : dtypeOf<T>();
  g.transB = true;
  g.rows = width;
  g.cols = a.t;
  g.inner = a.s;
  g.lda = a.h * width;
  g.ldb = a.t;
  g.ldd = acc ? width : a.hk * width;
  g.batch = n;
  g.strideA = group * width;
  g.strideB = a.s * a.t;
  g.strideD = acc ? a.t * width : width;
  return stridedGemm(op, ctx, g, x, scoresLike, acc ? static_cast<void *>(acc) : dst, accumulate);
}

template <typename T>
Status backward(const char *op, const Context &ctx, const T *dout, const T *q, const T *k,
                const T *v, T *dq, T *dk, T *dv, const AttentionShape &a) {
  const int64_t group = a.h / a.hk, chunk = headsPerChunk(a, dtypeOf<T>());
  const int64_t scoresPerChunk = chunk * a.s * a.t;
  ASSIGN_OR_RETURN(void *sMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *dpMem, ctx.scratch(scoresPerChunk * sizeof(float)));
  ASSIGN_OR_RETURN(void *pMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  ASSIGN_OR_RETURN(void *dsMem, ctx.scratch(scoresPerChunk * sizeof(T)));
  float *S = static_cast<float *>(sMem), *dP = static_cast<float *>(dpMem);
  T *P = static_cast<T *>(pMem), *dS = static_cast<T *>(dsMem);
  // A group's dk and dv sum over g: in f32 scratch under half types, in place under f32.
  const bool viaF32 = group > 1 && !std::is_same_v<T, float>;
  float *dkAcc = nullptr, *dvAcc = nullptr;
  if (viaF32) {
    ASSIGN_OR_RETURN(void *m, ctx.scratch(chunk * a.t * a.d * sizeof(float)));
    dkAcc = static_cast<float *>(m);
    ASSIGN_OR_RETURN(m, ctx.scratch(chunk * a.t * a.dv * sizeof(float)));
    dvAcc = static_cast<float *>(m);
  }
  const float scale = static_cast<float>(a.scale);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t kh0 = 0; kh0 < a.hk; kh0 += chunk) {
      const int64_t n = std::min(chunk, a.hk - kh0);
      for (int64_t g = 0; g < group; ++g) {
        Chunk c = chunkAt(a, bi, g, kh0, n);
        RETURN_IF_ERROR(scores(op, ctx, a, n, a.d, q + c.q, k + c.kv, S));
        RETURN_IF_ERROR(scores(op, ctx, a, n, a.dv, dout + c.o, v + c.kvV, dP));
        int64_t rows = n * a.s;
        softmaxGradRows<T><<<rowBlocks(rows), kRowThreads, 0, ctx.stream>>>(
            S, dP, P, dS, rows, a.s, a.t, a.causal, scale);
        RETURN_IF_ERROR(launchStatus(op));
        const bool sum = g > 0;
        RETURN_IF_ERROR(
            keySideGrad(op, ctx, a, n, a.dv, dout + c.o, P, dv + c.kvV, dvAcc, sum));
        RETURN_IF_ERROR(keySideGrad(op, ctx, a, n, a.d, q + c.q, dS, dk + c.kv, dkAcc, sum));
        // dq^T [d, s] = k^T [d, t] dS^T [t, s].
        StridedGemm gq;
        gq.dtype = gq.outDtype = dtypeOf<T>();
        gq.rows = a.d;
        gq.cols = a.s;
        gq.inner = a.t;
        gq.lda = a.hk * a.d;
        gq.ldb = a.t;
        gq.ldd = a.h * a.d;
        gq.batch = n;
        gq.strideA = a.d;
        gq.strideB = a.s * a.t;
        gq.strideD = group * a.d;
        RETURN_IF_ERROR(stridedGemm(op, ctx, gq, k + c.kv, dS, dq + c.q));
      }
      if (viaF32) {
        Chunk c = chunkAt(a, bi, 0, kh0, n);
        scatterHeads<T><<<blocksFor(n * a.t * a.d), 256, 0, ctx.stream>>>(
            dkAcc, dk + c.kv, n, a.t, a.d, a.hk * a.d);
        scatterHeads<T><<<blocksFor(n * a.t * a.dv), 256, 0, ctx.stream>>>(
            dvAcc, dv + c.kvV, n, a.t, a.dv, a.hk * a.dv);
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

bool gemmAttentionFits(const AttentionShape &a, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    return false;
  if (a.b <= 0 || a.s <= 0 || a.t <= 0 || a.h <= 0 || a.hk <= 0 || a.d <= 0 || a.dv <= 0)
    return false;
  double perHead = double(a.s) * double(a.t) * double(backwardBytesPerScore(dtype));
  return perHead <= double(kGemmAttentionScratchBytes);
}

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
