// Attention and AttentionGrad. q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv], out [b,s,h,dv]; query
// head hi reads kv head hi / (h / hk); `causal` hides key j > i + (t - s).
//
// GEMM path (no mask, f32/bf16/f16; AttentionGemm.cu; scratch up to 1 GiB, long sequences in
// chunks of query rows):
// the scores of a chunk of heads materialized, every product on cuBLASLt. The fastest where it
// fits; MEGAC_CUDA_ATTENTION=flash turns it off.
//
// Fused path (no mask, d and dv <= 128, f32/bf16/f16): flash-attention style, nothing of size
// s*t stored. The bf16/f16 forward runs on tensor cores (WMMA, AttentionWmma.cuh). The f32
// forward and every backward are SIMT kernels (no tensor cores): a block of 4 warps takes 16
// query rows of one (batch, head), 4 rows per warp; key tiles of 32 go through shared memory
// (as f32); a lane computes one key's score, the warp keeps a running max and sum per row
// (online softmax) and each lane accumulates 1..4 output dims (head dims padded to 32/64/128
// with zeros). The backward recomputes probabilities from q, k and each row's logsumexp: a
// first pass (the SIMT forward in "stats" mode) writes lse and delta = dout . out per row into
// scratch; dq comes from a pass per query tile over the key tiles in order, dk and dv from a
// pass per (batch, kv head, 16 keys) over the group's query heads and the query tiles in
// order: deterministic, no atomics.
//
// Fallback (a mask tensor, f64, or head dims > 128): the probabilities [b,h,s,t] are
// materialized in scratch (f32, f64 for f64) by a block per query row, then simple reduction
// kernels (a thread per output element, sums in a fixed order) give out, dq, dk, dv and dmask.
#include "runtime/cpu/AttentionDims.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/AttentionGemm.h"
#include "runtime/cuda/kernels/AttentionTiling.h"
#include "runtime/cuda/kernels/BlockReduce.cuh"
#include "runtime/cuda/kernels/CpuChecks.cuh"

#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace megac::runtime::cuda {

namespace {

struct AttnArgs {
  int64_t b, s, h, d, t, hk, dv;
  int causal;
  double scale;
};

AttentionShape shapeOf(const AttnArgs &a) {
  return {a.b, a.s, a.h, a.d, a.t, a.hk, a.dv, a.causal != 0, a.scale};
}

/// Keys query i may see: j < visible(i) (AttentionTiling.h).
__device__ __forceinline__ int64_t visible(const AttnArgs &a, int64_t i) {
  return tiling::attnVisible(a.causal, a.s, a.t, i);
}
/// Keys a block of query rows [q0, q0 + rows) visits; later key tiles are masked for every row.
__device__ __forceinline__ int64_t keyEnd(const AttnArgs &a, int64_t q0, int64_t rows) {
  return tiling::attnKeyEnd(a.causal, a.s, a.t, q0, rows);
}
/// First query a block of keys from k0 visits; earlier queries see none of its keys.
__device__ __forceinline__ int64_t queryStart(const AttnArgs &a, int64_t k0) {
  return tiling::attnQueryStart(a.causal, a.s, a.t, k0);
}

__device__ __forceinline__ int64_t qIndex(const AttnArgs &a, int64_t bi, int64_t i, int64_t hi) {
  return ((bi * a.s + i) * a.h + hi) * a.d;
}
__device__ __forceinline__ int64_t oIndex(const AttnArgs &a, int64_t bi, int64_t i, int64_t hi) {
  return ((bi * a.s + i) * a.h + hi) * a.dv;
}
__device__ __forceinline__ int64_t kIndex(const AttnArgs &a, int64_t bi, int64_t j, int64_t kh) {
  return ((bi * a.t + j) * a.hk + kh) * a.d;
}
__device__ __forceinline__ int64_t vIndex(const AttnArgs &a, int64_t bi, int64_t j, int64_t kh) {
  return ((bi * a.t + j) * a.hk + kh) * a.dv;
}

// ---- Pieces shared by the fused kernels (SIMT here, WMMA in AttentionWmma*.cuh) ---------------

/// Copies rows [r0, r0 + n) (of `count`) of a [.., heads, dim] tensor at row stride `rowStride`
/// into dst [n][ld], zero beyond `count` rows and `dim` columns (up to D): as f32 into a float
/// tile (the SIMT kernels), unconverted into a tile of the input type (the WMMA kernels).
template <typename T, int D, typename Dst>
__device__ void loadTile(Dst *dst, int ld, int n, const T *src, int64_t base, int64_t rowStride,
                         int64_t r0, int64_t count, int64_t dim) {
  for (int idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
    int rr = idx / D, c = idx % D;
    int64_t r = r0 + rr;
    bool in = r < count && c < dim;
    if constexpr (std::is_same_v<Dst, T>)
      dst[rr * ld + c] = in ? src[base + r * rowStride + c] : T(0.0f);
    else
      dst[rr * ld + c] = in ? load(src, base + r * rowStride + c) : 0.0f;
  }
}

/// Which attention tensor a tile comes from: q and dout have a row per query and h heads, k and
/// v a row per key and hk heads; q and k rows are d wide, dout and v rows dv.
enum class Operand { Q, Dout, K, V };

/// loadTile of rows [r0, r0 + n) of operand X (batch bi, head `head`) into dst [n][ld].
template <Operand X, int D, typename T, typename Dst>
__device__ __forceinline__ void loadRows(Dst *dst, int ld, int n, const T *src, const AttnArgs &a,
                                         int64_t bi, int64_t head, int64_t r0) {
  constexpr bool kQuery = X == Operand::Q || X == Operand::Dout;
  constexpr bool kWide = X == Operand::Dout || X == Operand::V;
  int64_t rows = kQuery ? a.s : a.t, heads = kQuery ? a.h : a.hk, dim = kWide ? a.dv : a.d;
  loadTile<T, D>(dst, ld, n, src, (bi * rows * heads + head) * dim, heads * dim, r0, rows, dim);
}

/// A fused block's place: its warp and lane, batch blockIdx.z, (query or kv) head blockIdx.y and
/// first (query or key) row blockIdx.x * rowsPerBlock.
struct Place {
  int warp, lane;
  int64_t bi, head, row0;
};
__device__ __forceinline__ Place placeOf(int rowsPerBlock) {
  return {static_cast<int>(threadIdx.x >> 5), static_cast<int>(threadIdx.x & 31), blockIdx.z,
          blockIdx.y, int64_t(blockIdx.x) * rowsPerBlock};
}

/// lse and delta of query row i of head hi ([b,h,s]); +inf and 0 past s (a row that sees no key).
__device__ __forceinline__ void readRowStats(const AttnArgs &a, const float *lse,
                                             const float *delta, int64_t bi, int64_t hi, int64_t i,
                                             float &L, float &Dl) {
  int64_t at = (bi * a.h + hi) * a.s + i;
  L = i < a.s ? lse[at] : INFINITY;
  Dl = i < a.s ? delta[at] : 0.0f;
}
/// The stats pass's result for query row i: lse (+inf for a row that sees no key) and delta.
__device__ __forceinline__ void writeRowStats(const AttnArgs &a, float *lse, float *delta,
                                              int64_t bi, int64_t hi, int64_t i, float m, float l,
                                              float dd) {
  int64_t at = (bi * a.h + hi) * a.s + i;
  lse[at] = l > 0.0f ? m + logf(l) : INFINITY;
  delta[at] = dd;
}

/// Loads keys [k0, k0 + n) of k and v (kv head kh) into Ks [n][ldk] and Vs [n][ldv] between two
/// barriers: the previous tile's readers are done before, the tile is complete after.
template <int D, typename T, typename Dst>
__device__ __forceinline__ void loadKeyTile(Dst *Ks, int ldk, Dst *Vs, int ldv, int n, const T *k,
                                            const T *v, const AttnArgs &a, int64_t bi, int64_t kh,
                                            int64_t k0) {
  __syncthreads();
  loadRows<Operand::K, D>(Ks, ldk, n, k, a, bi, kh, k0);
  loadRows<Operand::V, D>(Vs, ldv, n, v, a, bi, kh, k0);
  __syncthreads();
}

/// The online softmax's start for N rows: running max -inf, running sum 0.
template <int N> __device__ __forceinline__ void startSoftmax(float (&m)[N], float (&l)[N]) {
#pragma unroll
  for (int r = 0; r < N; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
}

// ---- Fused (flash) SIMT kernels --------------------------------------------------------------

constexpr int kWarps = tiling::kAttnWarps;
constexpr int kRows = tiling::kSimtRows; // query (or key) rows per warp
constexpr int kBQ = tiling::kSimtBQ;     // rows per block
constexpr int kBK = tiling::kSimtBK;     // keys (or queries) per shared tile, one per lane
constexpr int kThreads = tiling::kAttnThreads;

template <int DC> __device__ __forceinline__ void zeroRows(float (&acc)[kRows][DC]) {
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr)
#pragma unroll
    for (int cc = 0; cc < DC; ++cc)
      acc[rr][cc] = 0.0f;
}

/// x . y over D columns of two shared rows, in column order.
template <int D> __device__ __forceinline__ float rowDot(const float *x, const float *y) {
  float dot = 0.0f;
#pragma unroll 16
  for (int c = 0; c < D; ++c)
    dot += x[c] * y[c];
  return dot;
}

/// sum over the kBK rows jj of a shared tile of w[jj] * col[jj * ld], in row order.
__device__ __forceinline__ float columnSum(const float *w, const float *col, int ld) {
  float sum = 0.0f;
#pragma unroll 8
  for (int jj = 0; jj < kBK; ++jj)
    sum += w[jj] * col[jj * ld];
  return sum;
}

/// Stores acc * scale of the warp's rows p.row0 + warp * kRows + rr below `count`, columns
/// c < dim, at dst[index(row) + c].
template <typename T, int DC, typename Index>
__device__ __forceinline__ void storeRows(T *dst, const float (&acc)[kRows][DC], float scale,
                                          const Place &p, int64_t count, int64_t dim, Index index) {
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    int64_t i = p.row0 + p.warp * kRows + rr;
    if (i >= count)
      break;
#pragma unroll
    for (int cc = 0; cc < DC; ++cc) {
      int c = cc * 32 + p.lane;
      if (c < dim)
        store(dst, index(i) + c, acc[rr][cc] * scale);
    }
  }
}

/// Forward over 16 query rows of head (blockIdx.z, blockIdx.y). Without kStats writes out;
/// with kStats writes lse (+inf for a row that sees no key) and delta = dout . out per row
/// ([b,h,s] f32) for the backward instead.
template <typename T, int DC, bool kStats>
__global__ void __launch_bounds__(kThreads)
    flashForward(const T *q, const T *k, const T *v, T *out, const T *dout, float *lse,
                 float *delta, AttnArgs a) {
  constexpr int D = DC * 32, KP = D + 1;
  const float scale = static_cast<float>(a.scale);
  extern __shared__ float smem[];
  float *Qs = smem;          // [kBQ][D]
  float *Ks = Qs + kBQ * D;  // [kBK][KP]
  float *Vs = Ks + kBK * KP; // [kBK][D]
  float *Ps = Vs + kBK * D;  // [kWarps][32]
  const Place p = placeOf(kBQ);
  const int warp = p.warp, lane = p.lane;
  const int64_t bi = p.bi, hi = p.head, q0 = p.row0, kh = hi / (a.h / a.hk);
  loadRows<Operand::Q, D>(Qs, D, kBQ, q, a, bi, hi, q0);
  float m[kRows], l[kRows], acc[kRows][DC];
  zeroRows(acc);
  startSoftmax(m, l);
  int64_t kEnd = keyEnd(a, q0, kBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kBK) {
    loadKeyTile<D>(Ks, KP, Vs, D, kBK, k, v, a, bi, kh, k0);
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      int r = warp * kRows + rr;
      int64_t i = q0 + r;
      if (i >= a.s)
        break; // uniform in the warp
      int64_t j = k0 + lane;
      bool ok = j < visible(a, i);
      float dot = rowDot<D>(Qs + r * D, Ks + lane * KP);
      float sc = ok ? dot * scale : -INFINITY;
      float mNew = maxNaN(m[rr], warpMax(sc));
      if (mNew == -INFINITY)
        continue; // nothing visible yet in this row (uniform in the warp)
      float pr = ok ? expf(sc - mNew) : 0.0f;
      float alpha = expf(m[rr] - mNew); // 0 for the first visible tile
      l[rr] = l[rr] * alpha + warpSum(pr);
      m[rr] = mNew;
      Ps[warp * 32 + lane] = pr;
      __syncwarp();
#pragma unroll
      for (int cc = 0; cc < DC; ++cc)
        acc[rr][cc] = acc[rr][cc] * alpha + columnSum(Ps + warp * 32, Vs + cc * 32 + lane, D);
      __syncwarp();
    }
  }
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    int64_t i = q0 + warp * kRows + rr;
    if (i >= a.s)
      break;
    float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f; // a row that sees no key gives zeros
    if constexpr (!kStats) {
#pragma unroll
      for (int cc = 0; cc < DC; ++cc) {
        int c = cc * 32 + lane;
        if (c < a.dv)
          store(out, oIndex(a, bi, i, hi) + c, acc[rr][cc] * inv);
      }
    } else {
      float dd = 0.0f;
#pragma unroll
      for (int cc = 0; cc < DC; ++cc) {
        int c = cc * 32 + lane;
        if (c < a.dv)
          dd += acc[rr][cc] * inv * load(dout, oIndex(a, bi, i, hi) + c);
      }
      dd = warpSum(dd);
      if (lane == 0)
        writeRowStats(a, lse, delta, bi, hi, i, m[rr], l[rr], dd);
    }
  }
}

/// dq for 16 query rows: dq_i = scale * sum_j P_ij (dP_ij - delta_i) k_j, key tiles in order.
template <typename T, int DC>
__global__ void __launch_bounds__(kThreads)
    flashGradQ(const T *q, const T *k, const T *v, const T *dout, const float *lse,
               const float *delta, T *dq, AttnArgs a) {
  constexpr int D = DC * 32, KP = D + 1;
  const float scale = static_cast<float>(a.scale);
  extern __shared__ float smem[];
  float *Qs = smem;          // [kBQ][D]
  float *Os = Qs + kBQ * D;  // [kBQ][D] dout rows
  float *Ks = Os + kBQ * D;  // [kBK][KP]
  float *Vs = Ks + kBK * KP; // [kBK][KP]
  float *Ss = Vs + kBK * KP; // [kWarps][32] dS
  const Place p = placeOf(kBQ);
  const int64_t bi = p.bi, hi = p.head, q0 = p.row0, kh = hi / (a.h / a.hk);
  loadRows<Operand::Q, D>(Qs, D, kBQ, q, a, bi, hi, q0);
  loadRows<Operand::Dout, D>(Os, D, kBQ, dout, a, bi, hi, q0);
  float L[kRows], Dl[kRows], acc[kRows][DC];
  zeroRows(acc);
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr)
    readRowStats(a, lse, delta, bi, hi, q0 + p.warp * kRows + rr, L[rr], Dl[rr]);
  int64_t kEnd = keyEnd(a, q0, kBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kBK) {
    loadKeyTile<D>(Ks, KP, Vs, KP, kBK, k, v, a, bi, kh, k0);
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) {
      int r = p.warp * kRows + rr;
      int64_t i = q0 + r;
      if (i >= a.s)
        break;
      if (L[rr] == INFINITY)
        continue; // a row that sees no key passes nothing back
      bool ok = k0 + p.lane < visible(a, i);
      float dot = rowDot<D>(Qs + r * D, Ks + p.lane * KP);
      float dp = rowDot<D>(Os + r * D, Vs + p.lane * KP);
      float pr = ok ? expf(dot * scale - L[rr]) : 0.0f;
      Ss[p.warp * 32 + p.lane] = ok ? pr * (dp - Dl[rr]) : 0.0f;
      __syncwarp();
#pragma unroll
      for (int cc = 0; cc < DC; ++cc)
        acc[rr][cc] += columnSum(Ss + p.warp * 32, Ks + cc * 32 + p.lane, KP);
      __syncwarp();
    }
  }
  storeRows(dq, acc, scale, p, a.s, a.d, [&](int64_t i) { return qIndex(a, bi, i, hi); });
}

/// dk and dv for 16 keys of kv head (blockIdx.z, blockIdx.y): over the group's query heads in
/// order and their query tiles in order, dv_j += P_ij dout_i, dk_j += scale dS_ij q_i.
template <typename T, int DC>
__global__ void __launch_bounds__(kThreads)
    flashGradKV(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                const float *delta, T *dk, T *dv, AttnArgs a) {
  constexpr int D = DC * 32, KP = D + 1;
  const float scale = static_cast<float>(a.scale);
  extern __shared__ float smem[];
  float *Ks = smem;             // [kBQ][D] this block's keys
  float *Vs = Ks + kBQ * D;     // [kBQ][D]
  float *Qs = Vs + kBQ * D;     // [kBK][KP] a tile of queries
  float *Os = Qs + kBK * KP;    // [kBK][KP] their dout rows
  float *Ls = Os + kBK * KP;    // [kBK] lse
  float *Ds = Ls + kBK;         // [kBK] delta
  float *Ps = Ds + kBK;         // [kWarps][32]
  float *Ss = Ps + kWarps * 32; // [kWarps][32]
  const Place p = placeOf(kBQ);
  const int warp = p.warp, lane = p.lane;
  const int64_t bi = p.bi, kh = p.head, k0 = p.row0, group = a.h / a.hk;
  loadRows<Operand::K, D>(Ks, D, kBQ, k, a, bi, kh, k0);
  loadRows<Operand::V, D>(Vs, D, kBQ, v, a, bi, kh, k0);
  float accK[kRows][DC], accV[kRows][DC];
  zeroRows(accK);
  zeroRows(accV);
  int64_t qStart = queryStart(a, k0);
  for (int64_t g = 0; g < group; ++g) {
    int64_t hi = kh * group + g;
    for (int64_t i0 = qStart; i0 < a.s; i0 += kBK) {
      __syncthreads();
      loadRows<Operand::Q, D>(Qs, KP, kBK, q, a, bi, hi, i0);
      loadRows<Operand::Dout, D>(Os, KP, kBK, dout, a, bi, hi, i0);
      if (threadIdx.x < kBK)
        readRowStats(a, lse, delta, bi, hi, i0 + threadIdx.x, Ls[threadIdx.x], Ds[threadIdx.x]);
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRows; ++rr) {
        int r = warp * kRows + rr;
        int64_t j = k0 + r;
        if (j >= a.t)
          break;
        int64_t i = i0 + lane;
        bool ok = i < a.s && Ls[lane] != INFINITY && j < visible(a, i);
        float dot = rowDot<D>(Qs + lane * KP, Ks + r * D);
        float dp = rowDot<D>(Os + lane * KP, Vs + r * D);
        float pr = ok ? expf(dot * scale - Ls[lane]) : 0.0f;
        Ps[warp * 32 + lane] = pr;
        Ss[warp * 32 + lane] = ok ? pr * (dp - Ds[lane]) : 0.0f;
        __syncwarp();
#pragma unroll
        for (int cc = 0; cc < DC; ++cc) {
          accV[rr][cc] += columnSum(Ps + warp * 32, Os + cc * 32 + lane, KP);
          accK[rr][cc] += columnSum(Ss + warp * 32, Qs + cc * 32 + lane, KP);
        }
        __syncwarp();
      }
    }
  }
  storeRows(dk, accK, scale, p, a.t, a.d, [&](int64_t j) { return kIndex(a, bi, j, kh); });
  storeRows(dv, accV, 1.0f, p, a.t, a.dv, [&](int64_t j) { return vIndex(a, bi, j, kh); });
}

#include "runtime/cuda/kernels/AttentionWmma.cuh"
#include "runtime/cuda/kernels/AttentionWmmaGrad.cuh"

/// The launch sizes of a fused kernel (AttentionTiling.h).
template <typename T, int D> LaunchConfig launchOf(tiling::AttnKernel kernel, const AttnArgs &a) {
  tiling::AttnLaunchShape shape{a.b, a.s, a.h, a.t, a.hk, D, sizeof(T), !std::is_same_v<T, float>};
  return tiling::attnLaunch(kernel, shape);
}
inline dim3 gridOf(const LaunchConfig &c) {
  return dim3(static_cast<unsigned>(c.grid[0]), static_cast<unsigned>(c.grid[1]),
              static_cast<unsigned>(c.grid[2]));
}

/// Sets the dynamic shared memory limit of `kernel` to `bytes` (above 48 KiB needs opting in).
template <typename K> Status allowSmem(const char *op, K kernel, size_t bytes) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes)) != cudaSuccess)
    return launchStatus(op);
  return Status::ok();
}

/// The fused kernels of storage type T: the forward writing out, the forward in stats mode
/// (lse, delta), dq and dk/dv.
template <typename T> struct FusedKernels {
  using Forward = void (*)(const T *, const T *, const T *, T *, const T *, float *, float *,
                           AttnArgs);
  Forward forward, stats;
  void (*gradQ)(const T *, const T *, const T *, const T *, const float *, const float *, T *,
                AttnArgs);
  void (*gradKV)(const T *, const T *, const T *, const T *, const float *, const float *, T *, T *,
                 AttnArgs);
};
/// Tensor cores for bf16/f16 (AttentionWmma*.cuh), the SIMT kernels for f32; head dims padded
/// to DC * 32.
template <typename T, int DC> FusedKernels<T> fusedKernels() {
  if constexpr (std::is_same_v<T, float>) {
    return {flashForward<T, DC, false>, flashForward<T, DC, true>, flashGradQ<T, DC>,
            flashGradKV<T, DC>};
  } else {
    constexpr int D = DC * 32;
    return {flashForwardWmma<T, D, false>, flashForwardWmma<T, D, true>, flashGradQWmma<T, D>,
            flashGradKVWmma<T, D>};
  }
}

/// Launches a fused kernel with `which`'s launch sizes (AttentionTiling.h) on ctx's stream,
/// after allowing its shared memory.
template <typename T, int DC, typename... P>
Status launchFused(const char *op, const Context &ctx, tiling::AttnKernel which,
                   void (*kernel)(P...), std::type_identity_t<P>... args) {
  const AttnArgs &a = std::get<sizeof...(P) - 1>(std::forward_as_tuple(args...));
  LaunchConfig c = launchOf<T, DC * 32>(which, a);
  RETURN_IF_ERROR(allowSmem(op, kernel, c.smem));
  kernel<<<gridOf(c), kThreads, c.smem, ctx.stream>>>(args...);
  return launchStatus(op);
}

template <typename T, int DC>
Status fusedForward(const char *op, const Context &ctx, const TensorRef &q, const TensorRef &k,
                    const TensorRef &v, const TensorRef &out, const AttnArgs &a) {
  return launchFused<T, DC>(op, ctx, tiling::AttnKernel::Forward, fusedKernels<T, DC>().forward,
                            q.as<const T>(), k.as<const T>(), v.as<const T>(), out.as<T>(), nullptr,
                            nullptr, nullptr, a);
}

/// The backward: lse/delta (the forward in stats mode), then dq and dk/dv.
template <typename T, int DC>
Status fusedBackward(const char *op, const Context &ctx, const TensorRef &dout, const TensorRef &q,
                     const TensorRef &k, const TensorRef &v, const TensorRef &dq,
                     const TensorRef &dk, const TensorRef &dv, const AttnArgs &a) {
  const FusedKernels<T> f = fusedKernels<T, DC>();
  size_t rows = static_cast<size_t>(a.b * a.h * a.s);
  ASSIGN_OR_RETURN(void *lseMem, ctx.scratch(std::max<size_t>(rows, 1) * sizeof(float)));
  ASSIGN_OR_RETURN(void *deltaMem, ctx.scratch(std::max<size_t>(rows, 1) * sizeof(float)));
  float *lse = static_cast<float *>(lseMem), *delta = static_cast<float *>(deltaMem);
  const T *qp = q.as<const T>(), *kp = k.as<const T>(), *vp = v.as<const T>();
  const T *doutp = dout.as<const T>();
  if (a.s > 0) {
    RETURN_IF_ERROR((launchFused<T, DC>(op, ctx, tiling::AttnKernel::Forward, f.stats, qp, kp, vp,
                                        nullptr, doutp, lse, delta, a)));
    RETURN_IF_ERROR((launchFused<T, DC>(op, ctx, tiling::AttnKernel::GradQ, f.gradQ, qp, kp, vp,
                                        doutp, lse, delta, dq.as<T>(), a)));
  }
  if (a.t > 0)
    RETURN_IF_ERROR((launchFused<T, DC>(op, ctx, tiling::AttnKernel::GradKV, f.gradKV, qp, kp, vp,
                                        doutp, lse, delta, dk.as<T>(), dv.as<T>(), a)));
  return Status::ok();
}

#include "runtime/cuda/kernels/AttentionFallback.cuh"

// ---- Host side -------------------------------------------------------------------------------

/// attentionDims of the CPU kernels (runtime/cpu/AttentionUtil.h), same messages.
StatusOr<AttnArgs> attentionArgs(const char *name, const TensorRef &q, const TensorRef &k,
                                 const TensorRef &v, bool causal, double scale) {
  ASSIGN_OR_RETURN(cpu::detail::AttentionDims dims, cpu::detail::attentionDims(name, q, k, v));
  AttnArgs a{dims.b, dims.s, dims.h, dims.d, dims.t, dims.hk, dims.dv, causal ? 1 : 0, scale};
  if (!std::isfinite(scale))
    return fail(name, "scale " + std::to_string(scale) + " is not finite");
  if (!isFloat(q.dtype))
    return unsupportedDtype(name, q.dtype);
  if (a.b > 65535 || a.h > 65535)
    return fail(name, "batch " + std::to_string(a.b) + " or heads " + std::to_string(a.h) +
                          " exceed the CUDA grid (65535)");
  return a;
}

/// expectDtype, then expectShape.
Status expectLike(const char *name, const char *what, const TensorRef &t, DType dtype,
                  std::span<const int64_t> shape) {
  RETURN_IF_ERROR(expectDtype(name, what, t, dtype));
  return expectShape(name, what, t, shape);
}

/// The mask's strides over [b,h,s,t], after checking that it broadcasts there.
Status maskArgs(const char *name, const TensorRef &mask, const AttnArgs &a, MaskArgs &out) {
  std::vector<int64_t> full{a.b, a.h, a.s, a.t}, joined;
  if (mask.shape.size() > 4 || !broadcastShapes(mask.shape, full, joined) ||
      !sameShape(joined, full))
    return fail(name, "mask shape " + shapeString(mask.shape) + " does not broadcast to " +
                          shapeString(full) + " [b,h,s,t]");
  std::vector<int64_t> strides = broadcastStrides(mask.shape, full, 1);
  for (int d = 0; d < 4; ++d)
    out.stride[d] = strides[d];
  out.data = mask.data;
  out.kind = mask.dtype == DType::i1 ? 2 : 1;
  return Status::ok();
}

bool useFused(const TensorRef &q, const TensorRef *mask, const AttnArgs &a) {
  return !mask && q.dtype != DType::f64 && a.d <= 128 && a.dv <= 128;
}

/// 1, 2 or 4 chunks of 32 for head dims up to 32, 64, 128.
int chunksFor(const AttnArgs &a) {
  int64_t w = std::max(a.d, a.dv);
  return w <= 32 ? 1 : (w <= 64 ? 2 : 4);
}

/// Calls f(T{}) (returning a Status) for the storage type T of a float dtype.
template <typename F> Status dispatchFloat(DType dtype, F &&f) {
  switch (dtype) {
  case DType::f64:
    return f(double{});
  case DType::f32:
    return f(float{});
  case DType::bf16:
    return f(__nv_bfloat16{});
  case DType::f16:
    return f(__half{});
  default:
    return unsupportedDtype("Attention", dtype);
  }
}

/// Calls f(T{}, std::integral_constant<int, DC>{}) for q's storage type T (f32, bf16 or f16;
/// f64 is never fused, useFused) and DC = chunksFor(a).
template <typename F> Status dispatchFused(DType dtype, const AttnArgs &a, F &&f) {
  return dispatchFloat(dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      return Status::ok(); // not fused (useFused)
    } else {
      int dc = chunksFor(a);
      return dc == 1   ? f(tag, std::integral_constant<int, 1>{})
             : dc == 2 ? f(tag, std::integral_constant<int, 2>{})
                       : f(tag, std::integral_constant<int, 4>{});
    }
  });
}

template <typename T> using ComputeC = Compute<T>;

/// Whether this call takes the GEMM path (no mask, a shape and dtype it fits under the cap, not
/// MEGAC_CUDA_ATTENTION=flash) and the cap; the environment is read once (attentionPathFrom).
Status useGemm(const char *op, const TensorRef &q, const TensorRef *mask, const AttnArgs &a,
               bool &use, size_t &capBytes) {
  static const AttentionPath path = attentionPathFrom(std::getenv("MEGAC_CUDA_ATTENTION"),
                                                      std::getenv("MEGAC_CUDA_ATTENTION_SCRATCH"));
  if (!path.error.empty())
    return fail(op, path.error);
  capBytes = path.capBytes;
  use = path.gemm && !mask && gemmAttentionFits(shapeOf(a), q.dtype, capBytes);
  return Status::ok();
}

} // namespace

Status attention(const Context &ctx, const TensorRef &q, const TensorRef &k, const TensorRef &v,
                 const TensorRef *mask, bool causal, double scale, const TensorRef &out) {
  const char *name = "Attention";
  RETURN_IF_ERROR(expectDtype(name, "k", k, q.dtype));
  RETURN_IF_ERROR(expectDtype(name, "v", v, q.dtype));
  RETURN_IF_ERROR(expectDtype(name, "output", out, q.dtype));
  ASSIGN_OR_RETURN(AttnArgs a, attentionArgs(name, q, k, v, causal, scale));
  RETURN_IF_ERROR(expectShape(name, "output", out, std::vector<int64_t>{a.b, a.s, a.h, a.dv}));
  MaskArgs margs;
  if (mask) {
    if (mask->dtype != q.dtype && mask->dtype != DType::i1)
      return fail(name, std::string("mask is ") + dtypeName(mask->dtype) + ", expected " +
                            dtypeName(q.dtype) + " (added) or i1 (kept where true)");
    RETURN_IF_ERROR(maskArgs(name, *mask, a, margs));
  }
  if (a.b * a.s * a.h * a.dv == 0)
    return Status::ok();
  bool gemm = false;
  size_t cap = 0;
  RETURN_IF_ERROR(useGemm(name, q, mask, a, gemm, cap));
  if (gemm)
    return gemmAttention(ctx, q, k, v, out, shapeOf(a), cap);
  if (useFused(q, mask, a))
    return dispatchFused(q.dtype, a, [&](auto tag, auto dc) {
      return fusedForward<decltype(tag), decltype(dc)::value>(name, ctx, q, k, v, out, a);
    });
  return dispatchFloat(q.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    using C = ComputeC<T>;
    ASSIGN_OR_RETURN(void *pMem,
                     ctx.scratch(std::max<int64_t>(a.b * a.h * a.s * a.t, 1) * sizeof(C)));
    C *P = static_cast<C *>(pMem);
    probsKernel<T, C><<<rowBlocks(a.b * a.h * a.s), rowThreads(a.t), 0, ctx.stream>>>(
        q.as<const T>(), k.as<const T>(), margs, P, a);
    probsTimesV<T, C>
        <<<blocksFor(out.numElements()), 256, 0, ctx.stream>>>(P, v.as<const T>(), out.as<T>(), a);
    return launchStatus(name);
  });
}

Status attentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                     const TensorRef &k, const TensorRef &v, const TensorRef *mask, bool causal,
                     double scale, const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                     const TensorRef *dmask) {
  const char *name = "AttentionGrad";
  RETURN_IF_ERROR(expectDtype(name, "k", k, q.dtype));
  RETURN_IF_ERROR(expectDtype(name, "v", v, q.dtype));
  ASSIGN_OR_RETURN(AttnArgs a, attentionArgs(name, q, k, v, causal, scale));
  RETURN_IF_ERROR(
      expectLike(name, "dout", dout, q.dtype, std::vector<int64_t>{a.b, a.s, a.h, a.dv}));
  RETURN_IF_ERROR(expectLike(name, "dq", dq, q.dtype, q.shape));
  RETURN_IF_ERROR(expectLike(name, "dk", dk, k.dtype, k.shape));
  RETURN_IF_ERROR(expectLike(name, "dv", dv, v.dtype, v.shape));
  if (bool(mask) != bool(dmask))
    return fail(name, "there is a mask gradient exactly when there is a mask");
  MaskArgs margs;
  if (mask) {
    if (mask->dtype != q.dtype)
      return fail(name, std::string("mask is ") + dtypeName(mask->dtype) + ", expected " +
                            dtypeName(q.dtype) + " (an additive mask; a boolean one has no " +
                            "gradient)");
    RETURN_IF_ERROR(maskArgs(name, *mask, a, margs));
    RETURN_IF_ERROR(expectDtype(name, "dmask", *dmask, mask->dtype));
    RETURN_IF_ERROR(expectShape(name, "dmask", *dmask, mask->shape));
  }
  bool gemm = false;
  size_t cap = 0;
  RETURN_IF_ERROR(useGemm(name, q, mask, a, gemm, cap));
  if (gemm)
    return gemmAttentionGrad(ctx, dout, q, k, v, dq, dk, dv, shapeOf(a), cap);
  if (useFused(q, mask, a)) {
    if (a.b == 0 || a.h == 0)
      return Status::ok();
    return dispatchFused(q.dtype, a, [&](auto tag, auto dc) {
      return fusedBackward<decltype(tag), decltype(dc)::value>(name, ctx, dout, q, k, v, dq, dk, dv,
                                                               a);
    });
  }
  return dispatchFloat(q.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    using C = ComputeC<T>;
    size_t bytes = std::max<int64_t>(a.b * a.h * a.s * a.t, 1) * sizeof(C);
    ASSIGN_OR_RETURN(void *pMem, ctx.scratch(bytes));
    ASSIGN_OR_RETURN(void *dsMem, ctx.scratch(bytes));
    C *P = static_cast<C *>(pMem), *dS = static_cast<C *>(dsMem);
    int64_t rows = a.b * a.h * a.s;
    if (rows > 0) {
      probsKernel<T, C><<<rowBlocks(rows), rowThreads(a.t), 0, ctx.stream>>>(
          q.as<const T>(), k.as<const T>(), margs, P, a);
      dScoresKernel<T, C><<<rowBlocks(rows), rowThreads(a.t), 0, ctx.stream>>>(
          P, dout.as<const T>(), v.as<const T>(), dS, a);
    }
    if (dq.numElements() > 0)
      dqKernel<T, C>
          <<<blocksFor(dq.numElements()), 256, 0, ctx.stream>>>(dS, k.as<const T>(), dq.as<T>(), a);
    int64_t kv = a.b * a.t * a.hk * std::max(a.d, a.dv);
    if (kv > 0)
      dkdvKernel<T, C><<<blocksFor(kv), 256, 0, ctx.stream>>>(
          P, dS, q.as<const T>(), dout.as<const T>(), dk.as<T>(), dv.as<T>(), a);
    if (mask && dmask->numElements() > 0) {
      Dims msize;
      msize.rank = 4;
      int rank = static_cast<int>(mask->shape.size());
      for (int d = 0; d < 4; ++d)
        msize.size[d] = d < 4 - rank ? 1 : mask->shape[d - (4 - rank)];
      dmaskKernel<T, C>
          <<<blocksFor(dmask->numElements()), 256, 0, ctx.stream>>>(dS, dmask->as<T>(), msize, a);
    }
    return launchStatus(name);
  });
}

} // namespace megac::runtime::cuda
