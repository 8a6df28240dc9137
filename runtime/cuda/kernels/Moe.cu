// CUDA kernels of the mixture-of-experts opcodes (plan.fbs TopKMask ... MoeMatmulWeightGrad),
// with the contracts of runtime/cpu/Moe.cpp and its host checks (cpu::detail::checkMoe,
// checkTopKMask). Routing weights w [T, E] (leading token dims flattened), routed tensors
// [E, T, f]; (t, e) is active where w[t, e] != 0.
//
// The two GEMM opcodes work on each expert's active rows only, without a host round trip: a
// routing kernel writes each expert's active tokens (ascending) and their count into scratch
// memory, and one grouped, tiled GEMM kernel reads them on the device — its row tiles past an
// expert's count exit at once, A rows are gathered through the token list as the tiles load,
// and C rows scattered to their tokens as they are stored. So nothing waits for the device, and
// the work follows the real per-expert counts. (Per-expert cuBLASLt GEMMs would need the counts
// on the host: a stream synchronization per call, and a cuBLASLt plan per distinct count.) The
// GEMM runs on CUDA cores in the compute type (f32 for f32 and half types, f64 for f64); no
// tensor cores, no TF32.
//
// Determinism: every output element is computed by one thread (or, for MoeRowDot, one warp with
// a fixed shuffle tree) in a fixed order — experts ascending in MoeCombine, k ascending in a
// GEMM, tokens ascending in MoeMatmulWeightGrad — with no atomics. MoeDispatch and MoeCombine
// round each product before the add (no FMA contraction), as the x86-64 CPU build does, so the
// two backends agree bit for bit there.
//
// Dtypes: f32 and f64 as the CPU kernels; bf16 and f16 too, loaded into f32, computed in f32 and
// rounded once into the output (the CPU executor runs them through computeInF32).
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <algorithm>
#include <climits>

namespace megac::runtime::cuda {

namespace {

using cpu::detail::MoeGeometry;
using cpu::detail::MoeKernel;
using detail::Compute;
using detail::load;
using detail::store;

constexpr int kThreads = 256;

bool isHalf(DType d) { return d == DType::bf16 || d == DType::f16; }

/// checkMoe for every float dtype: operands all of one half type are checked as f32 (the shape
/// rules and messages are the CPU's; half types compute in f32).
StatusOr<MoeGeometry> checkShapes(MoeKernel kernel, const TensorRef &a, const TensorRef *b,
                                  const TensorRef &w, bool transposeWeight, const TensorRef &out) {
  bool half =
      isHalf(w.dtype) && a.dtype == w.dtype && (!b || b->dtype == w.dtype) && out.dtype == w.dtype;
  if (!half)
    return cpu::detail::checkMoe(kernel, a, b, w, transposeWeight, out);
  auto asF32 = [](TensorRef t) {
    t.dtype = DType::f32;
    return t;
  };
  TensorRef a32 = asF32(a), w32 = asF32(w), out32 = asF32(out);
  TensorRef b32 = b ? asF32(*b) : TensorRef{};
  return cpu::detail::checkMoe(kernel, a32, b ? &b32 : nullptr, w32, transposeWeight, out32);
}

/// The routing lists index tokens with int32.
Status checkTokenCount(const char *op, int64_t tokens) {
  if (tokens > INT_MAX)
    return Status::error(std::string(op) + ": " + std::to_string(tokens) +
                         " tokens exceed the CUDA kernels' limit of " + std::to_string(INT_MAX));
  return Status::ok();
}

Status zeroFill(const char *op, const Context &ctx, const TensorRef &out) {
  if (out.byteSize() == 0)
    return Status::ok();
  if (cudaMemsetAsync(out.data, 0, out.byteSize(), ctx.stream) != cudaSuccess)
    return launchStatus(op);
  return Status::ok();
}

/// Products rounded before the add, so that nvcc does not contract them into an FMA (the CPU
/// kernels round both).
__device__ __forceinline__ float mulRounded(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mulRounded(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float addRounded(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double addRounded(double a, double b) { return __dadd_rn(a, b); }
/// a b + c, one rounding (the GEMM's inner step).
__device__ __forceinline__ float mulAdd(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double mulAdd(double a, double b, double c) { return __fma_rn(a, b, c); }

// ---- TopKMask ----------------------------------------------------------------------------------

/// Whether u ranks above v in a top-k choice: larger first, NaN last (cpu ranksAbove).
template <typename C> __device__ __forceinline__ bool ranksAbove(C u, C v) {
  if (u != u)
    return false;
  if (v != v)
    return true;
  return u > v;
}

/// One thread per element: its place in the row's stable order (those ranking above it, and
/// the equal ones at lower indices) decides. O(n) per element: meant for router widths.
template <typename S>
__global__ void topkMaskKernel(const S *x, S *out, int64_t total, int64_t n, int64_t k) {
  using C = Compute<S>;
  GRID_STRIDE(i, total) {
    int64_t c = i % n;
    const S *row = x + (i - c);
    C v = load(row, c);
    int64_t before = 0;
    for (int64_t j = 0; j < n && before < k; ++j) {
      C u = load(row, j);
      if (ranksAbove(u, v) || (j < c && !ranksAbove(v, u)))
        ++before;
    }
    store(out, i, C(before < k ? 1 : 0));
  }
}

// ---- MoeDispatch, MoeCombine, MoeRowDot ---------------------------------------------------------

/// out[e, t, h] = w[t, e] x[t, h] where active, else 0.
template <typename S>
__global__ void dispatchKernel(const S *x, const S *w, S *out, int64_t experts, int64_t tokens,
                               int64_t h) {
  using C = Compute<S>;
  GRID_STRIDE(i, experts * tokens * h) {
    int64_t f = i % h, row = i / h;
    int64_t t = row % tokens, e = row / tokens;
    C scale = load(w, t * experts + e);
    store(out, i, scale != C(0) ? mulRounded(scale, load(x, t * h + f)) : C(0));
  }
}

/// out[t, h] = sum over active e, ascending, of w[t, e] y[e, t, h].
template <typename S>
__global__ void combineKernel(const S *y, const S *w, S *out, int64_t experts, int64_t tokens,
                              int64_t h) {
  using C = Compute<S>;
  GRID_STRIDE(i, tokens * h) {
    int64_t f = i % h, t = i / h;
    C sum = C(0);
    for (int64_t e = 0; e < experts; ++e) {
      C scale = load(w, t * experts + e);
      if (scale != C(0))
        sum = addRounded(sum, mulRounded(scale, load(y, (e * tokens + t) * h + f)));
    }
    store(out, i, sum);
  }
}

/// One warp per output (t, e): lanes sum strided features, then a fixed xor-shuffle tree.
template <typename S>
__global__ void rowDotKernel(const S *y, const S *z, const S *w, S *out, int64_t experts,
                             int64_t tokens, int64_t h) {
  using C = Compute<S>;
  int lane = threadIdx.x & 31;
  int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t o = warp; o < tokens * experts; o += warps) {
    int64_t t = o / experts, e = o % experts;
    C sum = C(0);
    if (load(w, o) != C(0)) { // uniform across the warp
      const S *a = y + (e * tokens + t) * h, *b = z + t * h;
      for (int64_t f = lane; f < h; f += 32)
        sum += load(a, f) * load(b, f);
      for (int offset = 16; offset > 0; offset >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0)
      store(out, o, sum);
  }
}

// ---- Routing lists
// -------------------------------------------------------------------------------

/// One block per expert: rows[e * T + i] = the i-th active token of e (ascending), counts[e] =
/// how many. Each pass over blockDim tokens places its active ones by a block-wide prefix count
/// (warp ballots), so the list is in token order without atomics.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    routesKernel(const S *w, int64_t experts, int64_t tokens, int32_t *rows, int32_t *counts) {
  using C = Compute<S>;
  constexpr int kWarps = kThreads / 32;
  __shared__ int warpTotals[kWarps];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t e = blockIdx.x; e < experts; e += gridDim.x) {
    int placed = 0; // the same in every thread
    for (int64_t t0 = 0; t0 < tokens; t0 += kThreads) {
      int64_t t = t0 + threadIdx.x;
      bool active = t < tokens && load(w, t * experts + e) != C(0);
      unsigned ballot = __ballot_sync(0xffffffffu, active);
      if (lane == 0)
        warpTotals[warp] = __popc(ballot);
      __syncthreads();
      int offset = 0, total = 0;
      for (int i = 0; i < kWarps; ++i) {
        offset += i < warp ? warpTotals[i] : 0;
        total += warpTotals[i];
      }
      if (active)
        rows[e * tokens + placed + offset + __popc(ballot & ((1u << lane) - 1u))] =
            static_cast<int32_t>(t);
      placed += total;
      __syncthreads(); // warpTotals is rewritten by the next pass
    }
    if (threadIdx.x == 0)
      counts[e] = placed;
  }
}

struct Routes {
  const int32_t *rows = nullptr;   // [E, T]: each expert's active tokens, ascending
  const int32_t *counts = nullptr; // [E]
};

template <typename S>
StatusOr<Routes> buildRoutes(const char *op, const Context &ctx, const TensorRef &w,
                             const MoeGeometry &g) {
  if (!ctx.scratch)
    return Status::error(std::string(op) + ": no scratch memory in the context");
  size_t bytes = static_cast<size_t>(g.experts * (g.tokens + 1)) * sizeof(int32_t);
  ASSIGN_OR_RETURN(void *memory, ctx.scratch(bytes));
  int32_t *counts = static_cast<int32_t *>(memory), *rows = counts + g.experts;
  unsigned blocks = static_cast<unsigned>(std::min<int64_t>(g.experts, 65535));
  routesKernel<<<blocks, kThreads, 0, ctx.stream>>>(w.as<const S>(), g.experts, g.tokens, rows,
                                                    counts);
  RETURN_IF_ERROR(launchStatus(op));
  return Routes{rows, counts};
}

// ---- The grouped GEMM
// ---------------------------------------------------------------------------- Per expert e: C[m,
// n] = sum over k ascending of A(m, k) B(k, n). A problem type says how big M, N, K are for e,
// loads the tiles (zeros outside the problem) and stores an element of C.

constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
static_assert(kThreads == 256 && kTileM == 64 && kTileN == 64, "16 x 16 threads, 4 x 4 each");

template <typename C> using TileA = C[kTileK][kTileM + 1]; // [k][m], padded against conflicts
template <typename C> using TileB = C[kTileK][kTileN + 1]; // [k][n]

template <typename S, typename Problem>
__global__ void __launch_bounds__(kThreads)
    groupedGemmKernel(Problem p, int64_t experts, int64_t mTiles, int64_t nTiles) {
  using C = Compute<S>;
  __shared__ TileA<C> as;
  __shared__ TileB<C> bs;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t e = blockIdx.z; e < experts; e += gridDim.z) {
    int64_t m = p.m(e), n = p.n(), k = p.k(e);
    for (int64_t mt = blockIdx.x; mt < mTiles; mt += gridDim.x) {
      int64_t m0 = mt * kTileM;
      if (m0 >= m) // past this expert's rows: the same for the whole block
        break;
      for (int64_t nt = blockIdx.y; nt < nTiles; nt += gridDim.y) {
        int64_t n0 = nt * kTileN;
        C acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            acc[i][j] = C(0);
        for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
          p.loadA(e, m0, k0, m, k, as);
          p.loadB(e, k0, n0, k, n, bs);
          __syncthreads();
#pragma unroll
          for (int kk = 0; kk < kTileK; ++kk) {
            C a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
              a[i] = as[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j)
              b[j] = bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
              for (int j = 0; j < 4; ++j)
                acc[i][j] = mulAdd(a[i], b[j], acc[i][j]);
          }
          __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int64_t row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
            if (row < m && col < n)
              p.store(e, row, col, acc[i][j]);
          }
      }
    }
  }
}

/// MoeMatmul: M = e's active rows, K = in, N = out. A(m, k) = x[e, rows[m], k]; B(k, n) =
/// weight[e, n, k] ([E, out, in]) or, with TransposeWeight, weight[e, k, n] ([E, in, out]);
/// C(m, n) goes to out[e, rows[m], n].
template <typename S, bool TransposeWeight> struct MatmulProblem {
  using C = Compute<S>;
  const S *x, *weight;
  S *out;
  Routes routes;
  int64_t tokens, in, outF;

  __device__ int64_t m(int64_t e) const { return routes.counts[e]; }
  __device__ int64_t n() const { return outF; }
  __device__ int64_t k(int64_t) const { return in; }
  __device__ int64_t token(int64_t e, int64_t i) const { return routes.rows[e * tokens + i]; }

  __device__ void loadA(int64_t e, int64_t m0, int64_t k0, int64_t mEnd, int64_t kEnd,
                        TileA<C> &as) const {
    for (int idx = threadIdx.x; idx < kTileM * kTileK; idx += kThreads) {
      int mm = idx / kTileK, kk = idx % kTileK; // k fastest in memory
      int64_t gm = m0 + mm, gk = k0 + kk;
      as[kk][mm] = gm < mEnd && gk < kEnd ? load(x, (e * tokens + token(e, gm)) * in + gk) : C(0);
    }
  }
  __device__ void loadB(int64_t e, int64_t k0, int64_t n0, int64_t kEnd, int64_t nEnd,
                        TileB<C> &bs) const {
    const S *we = weight + e * in * outF;
    for (int idx = threadIdx.x; idx < kTileK * kTileN; idx += kThreads) {
      int kk, nn;
      if (TransposeWeight) { // [in, out]: n fastest
        kk = idx / kTileN;
        nn = idx % kTileN;
      } else { // [out, in]: k fastest
        nn = idx / kTileK;
        kk = idx % kTileK;
      }
      int64_t gk = k0 + kk, gn = n0 + nn;
      bool inside = gk < kEnd && gn < nEnd;
      bs[kk][nn] = inside ? load(we, TransposeWeight ? gk * outF + gn : gn * in + gk) : C(0);
    }
  }
  __device__ void store(int64_t e, int64_t row, int64_t col, C v) const {
    detail::store(out, (e * tokens + token(e, row)) * outF + col, v);
  }
};

/// MoeMatmulWeightGrad: M = p, N = q, K = e's active rows. A(m, k) = a[e, rows[k], m]; B(k, n)
/// = b[e, rows[k], n]; C(m, n) goes to out[e, m, n] (every element: zero for an idle expert),
/// plus acc[e, m, n] when accumulating (read by the one thread that then writes the element, so
/// acc may be out's memory).
template <typename S> struct WeightGradProblem {
  using C = Compute<S>;
  const S *a, *b;
  S *out;
  const S *acc; // null: no accumulator
  Routes routes;
  int64_t tokens, p, q;

  __device__ int64_t m(int64_t) const { return p; }
  __device__ int64_t n() const { return q; }
  __device__ int64_t k(int64_t e) const { return routes.counts[e]; }
  __device__ int64_t token(int64_t e, int64_t i) const { return routes.rows[e * tokens + i]; }

  __device__ void loadA(int64_t e, int64_t m0, int64_t k0, int64_t mEnd, int64_t kEnd,
                        TileA<C> &as) const {
    for (int idx = threadIdx.x; idx < kTileK * kTileM; idx += kThreads) {
      int kk = idx / kTileM, mm = idx % kTileM; // m fastest in memory
      int64_t gk = k0 + kk, gm = m0 + mm;
      as[kk][mm] = gm < mEnd && gk < kEnd ? load(a, (e * tokens + token(e, gk)) * p + gm) : C(0);
    }
  }
  __device__ void loadB(int64_t e, int64_t k0, int64_t n0, int64_t kEnd, int64_t nEnd,
                        TileB<C> &bs) const {
    for (int idx = threadIdx.x; idx < kTileK * kTileN; idx += kThreads) {
      int kk = idx / kTileN, nn = idx % kTileN; // n fastest in memory
      int64_t gk = k0 + kk, gn = n0 + nn;
      bs[kk][nn] = gk < kEnd && gn < nEnd ? load(b, (e * tokens + token(e, gk)) * q + gn) : C(0);
    }
  }
  __device__ void store(int64_t e, int64_t row, int64_t col, C v) const {
    int64_t i = (e * p + row) * q + col;
    detail::store(out, i, acc ? load(acc, i) + v : v);
  }
};

template <typename S, typename Problem>
Status launchGemm(const char *op, const Context &ctx, const Problem &problem, int64_t experts,
                  int64_t maxM, int64_t n) {
  int64_t mTiles = (maxM + kTileM - 1) / kTileM, nTiles = (n + kTileN - 1) / kTileN;
  LaunchConfig c = detail::groupedGemmLaunch(experts, maxM, n, kTileM, kTileN, kThreads);
  dim3 grid(static_cast<unsigned>(c.grid[0]), static_cast<unsigned>(c.grid[1]),
            static_cast<unsigned>(c.grid[2]));
  groupedGemmKernel<S><<<grid, kThreads, 0, ctx.stream>>>(problem, experts, mTiles, nTiles);
  return launchStatus(op);
}

/// f(S{}) with S the storage type of w's dtype (checkShapes has accepted it).
template <typename F> Status byDtype(const char *op, DType dtype, F &&f) {
  Status status = Status::ok();
  if (!detail::visitFloat(dtype, [&](auto tag) { (void)(status = f(tag)); }))
    return detail::unsupportedDtype(op, dtype);
  return status;
}

} // namespace

Status topkMask(const Context &ctx, const TensorRef &x, int64_t k, const TensorRef &out) {
  const char *op = "TopKMask";
  TensorRef x32 = x, out32 = out;
  if (isHalf(x.dtype) && out.dtype == x.dtype)
    x32.dtype = out32.dtype = DType::f32; // checked as f32, compared in f32
  ASSIGN_OR_RETURN(int64_t n, cpu::detail::checkTopKMask(x32, k, out32));
  int64_t total = x.numElements();
  if (total == 0)
    return Status::ok();
  return byDtype(op, x.dtype, [&](auto tag) {
    using S = decltype(tag);
    topkMaskKernel<<<detail::blocksFor(total, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const S>(), out.as<S>(), total, n, k);
    return launchStatus(op);
  });
}

Status moeDispatch(const Context &ctx, const TensorRef &x, const TensorRef &w,
                   const TensorRef &out) {
  const char *op = "MoeDispatch";
  ASSIGN_OR_RETURN(MoeGeometry g, checkShapes(MoeKernel::dispatch, x, nullptr, w, false, out));
  int64_t total = g.experts * g.tokens * g.in;
  if (total == 0)
    return Status::ok();
  return byDtype(op, w.dtype, [&](auto tag) {
    using S = decltype(tag);
    dispatchKernel<<<detail::blocksFor(total, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const S>(), w.as<const S>(), out.as<S>(), g.experts, g.tokens, g.in);
    return launchStatus(op);
  });
}

Status moeCombine(const Context &ctx, const TensorRef &y, const TensorRef &w,
                  const TensorRef &out) {
  const char *op = "MoeCombine";
  ASSIGN_OR_RETURN(MoeGeometry g, checkShapes(MoeKernel::combine, y, nullptr, w, false, out));
  int64_t total = g.tokens * g.in;
  if (total == 0)
    return Status::ok();
  return byDtype(op, w.dtype, [&](auto tag) {
    using S = decltype(tag);
    combineKernel<<<detail::blocksFor(total, kThreads), kThreads, 0, ctx.stream>>>(
        y.as<const S>(), w.as<const S>(), out.as<S>(), g.experts, g.tokens, g.in);
    return launchStatus(op);
  });
}

Status moeRowDot(const Context &ctx, const TensorRef &y, const TensorRef &z, const TensorRef &w,
                 const TensorRef &out) {
  const char *op = "MoeRowDot";
  ASSIGN_OR_RETURN(MoeGeometry g, checkShapes(MoeKernel::rowDot, y, &z, w, false, out));
  int64_t outputs = g.tokens * g.experts;
  if (outputs == 0)
    return Status::ok();
  return byDtype(op, w.dtype, [&](auto tag) {
    using S = decltype(tag);
    rowDotKernel<<<detail::blocksFor(outputs * 32, kThreads), kThreads, 0, ctx.stream>>>(
        y.as<const S>(), z.as<const S>(), w.as<const S>(), out.as<S>(), g.experts, g.tokens, g.in);
    return launchStatus(op);
  });
}

Status moeMatmul(const Context &ctx, const TensorRef &x, const TensorRef &weight,
                 const TensorRef &w, bool transposeWeight, const TensorRef &out) {
  const char *op = "MoeMatmul";
  ASSIGN_OR_RETURN(MoeGeometry g,
                   checkShapes(MoeKernel::matmul, x, &weight, w, transposeWeight, out));
  RETURN_IF_ERROR(checkTokenCount(op, g.tokens));
  RETURN_IF_ERROR(zeroFill(op, ctx, out)); // inactive rows; the GEMM writes the active ones
  if (g.experts == 0 || g.tokens == 0 || g.out == 0)
    return Status::ok();
  return byDtype(op, w.dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    ASSIGN_OR_RETURN(Routes routes, buildRoutes<S>(op, ctx, w, g));
    auto run = [&](auto problem) {
      return launchGemm<S>(op, ctx, problem, g.experts, g.tokens, g.out);
    };
    if (transposeWeight)
      return run(MatmulProblem<S, true>{x.as<const S>(), weight.as<const S>(), out.as<S>(), routes,
                                        g.tokens, g.in, g.out});
    return run(MatmulProblem<S, false>{x.as<const S>(), weight.as<const S>(), out.as<S>(), routes,
                                       g.tokens, g.in, g.out});
  });
}

Status moeMatmulWeightGrad(const Context &ctx, const TensorRef &a, const TensorRef &b,
                           const TensorRef &w, const TensorRef &out, const TensorRef *acc) {
  const char *op = "MoeMatmulWeightGrad";
  ASSIGN_OR_RETURN(MoeGeometry g, checkShapes(MoeKernel::weightGrad, a, &b, w, false, out));
  RETURN_IF_ERROR(checkTokenCount(op, g.tokens));
  if (acc &&
      (!std::equal(acc->shape.begin(), acc->shape.end(), out.shape.begin(), out.shape.end()) ||
       acc->dtype != out.dtype))
    return Status::error(std::string(op) +
                         ": the accumulator must have the output's shape and dtype");
  if (g.experts == 0 || g.in == 0 || g.out == 0)
    return Status::ok();
  if (g.tokens == 0)
    return acc ? (acc->data == out.data ? Status::ok() : copy(ctx, *acc, out))
               : zeroFill(op, ctx, out);
  return byDtype(op, w.dtype, [&](auto tag) -> Status {
    using S = decltype(tag);
    ASSIGN_OR_RETURN(Routes routes, buildRoutes<S>(op, ctx, w, g));
    WeightGradProblem<S> problem{
        a.as<const S>(), b.as<const S>(), out.as<S>(), acc ? acc->as<const S>() : nullptr,
        routes,          g.tokens,        g.in,        g.out};
    return launchGemm<S>(op, ctx, problem, g.experts, g.in, g.out);
  });
}

} // namespace megac::runtime::cuda
