// Part of Attention.cu (included there, inside its anonymous namespace, after AttnArgs and the
// index helpers): the tensor-core forward for bf16/f16, no mask, head dims up to 128.
//
// A block of 4 warps takes 64 query rows of one (batch, head), 16 per warp. Per key tile of 64
// keys (q, k, v tiles in shared memory in the input type, head dims zero-padded to D = 32, 64
// or 128):
//   1. S [16, 64] = Q K^T per warp with WMMA (16x16x16 fragments, f32 accumulation) -> shared;
//   2. online softmax in f32 over each row of S (a warp per row: lanes take columns lane and
//      lane + 32): running max m and sum l, P = exp(scale S - m) rounded to the input type,
//      and the warp's f32 output rows O [16, D] (shared) rescaled by exp(m_old - m_new);
//   3. O += P V with WMMA (accumulator fragments loaded from and stored back to O).
// At the end out = O / l (0 for a row that sees no key). Causal tiles past the last row's
// limit are skipped.
#pragma once

// Needs <mma.h>, included at the top of Attention.cu.

// Tile sizes, leading dims and the shared-memory layout are AttentionTiling.h's (checked there
// with static_asserts: 32-byte aligned fragments, under 227 KiB).
using tiling::kWmmaBK;
using tiling::kWmmaBQ;
using tiling::kWmmaRowsPerWarp;
// Leading dims of the f32 score tiles (S, dP) and of the P / dS tiles in the input type.
constexpr int LS = tiling::kWmmaLdS, LP = tiling::kWmmaLdP;

/// The WMMA kernels' dynamic shared memory at `offset` bytes (AttentionTiling.h's layouts), as P.
template <typename P> __device__ __forceinline__ P *smemAt(size_t offset) {
  extern __shared__ __align__(32) unsigned char wmmaSmem[];
  return reinterpret_cast<P *>(wmmaSmem + offset);
}

// The warp-level products of the forward and the backward (AttentionWmmaGrad.cuh).
namespace wmmaops {

namespace wmma = nvcuda::wmma;

/// C [16, N] (f32, ldc) = A [16, K] (row-major, lda) times B, or C += that with kAccumulate;
/// B is [K][N] (row-major, ldb) or, with kBt, B^T for B [N][K] (row-major, ldb): the N columns
/// are B's rows. Warp-collective.
template <typename T, int N, int K, bool kBt, bool kAccumulate>
__device__ void product(float *c, int ldc, const T *a, int lda, const T *b, int ldb) {
  using BLayout = std::conditional_t<kBt, wmma::col_major, wmma::row_major>;
  for (int n = 0; n < N / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if constexpr (kAccumulate)
      wmma::load_matrix_sync(acc, c + n * 16, ldc, wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, kBt ? b + n * 16 * ldb + kk * 16 : b + kk * 16 * ldb + n * 16,
                             ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

/// C [16, 64] = A [16, D] times B^T, B [64][D].
template <typename T, int D>
__device__ __forceinline__ void productNT(float *c, int ldc, const T *a, int lda, const T *b,
                                          int ldb) {
  product<T, 64, D, true, false>(c, ldc, a, lda, b, ldb);
}
/// C [16, D] += A [16, 64] times B [64][D].
template <typename T, int D>
__device__ __forceinline__ void productNNAccumulate(float *c, int ldc, const T *a, int lda,
                                                    const T *b, int ldb) {
  product<T, D, 64, false, true>(c, ldc, a, lda, b, ldb);
}

} // namespace wmmaops

/// Without kStats writes out; with kStats writes lse (+inf for a row that sees no key) and
/// delta = dout . out per row ([b,h,s] f32) for the backward instead.
template <typename T, int D, bool kStats>
__global__ void __launch_bounds__(kThreads)
    flashForwardWmma(const T *q, const T *k, const T *v, T *out, const T *dout, float *lse,
                     float *delta, AttnArgs a) {
  constexpr int LD = tiling::wmmaLdIn(D), LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaForwardLayout Lay = tiling::wmmaForwardLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  // q, k, v [64][LD] and P [64][LP] (16 rows per warp) in the input type; S [64][LS], O [64][LO].
  T *Qs = smemAt<T>(Lay.q), *Ks = smemAt<T>(Lay.k), *Vs = smemAt<T>(Lay.v), *Ps = smemAt<T>(Lay.p);
  float *Ss = smemAt<float>(Lay.s), *Os = smemAt<float>(Lay.o);
  const Place p = placeOf(kWmmaBQ);
  const int warp = p.warp, lane = p.lane;
  const int64_t bi = p.bi, hi = p.head, q0 = p.row0, kh = hi / (a.h / a.hk);
  loadRows<Operand::Q, D>(Qs, LD, kWmmaBQ, q, a, bi, hi, q0);
  for (int idx = threadIdx.x; idx < kWmmaBQ * LO; idx += blockDim.x)
    Os[idx] = 0.0f;
  __syncthreads();                       // Q and O ready even when no key tile follows
  int rowBase = warp * kWmmaRowsPerWarp; // this warp's rows in the block's tiles
  float m[kWmmaRowsPerWarp], l[kWmmaRowsPerWarp];
  startSoftmax(m, l);
  int64_t kEnd = keyEnd(a, q0, kWmmaBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kWmmaBK) {
    loadKeyTile<D>(Ks, LD, Vs, LD, kWmmaBK, k, v, a, bi, kh, k0);
    // 1. S = Q K^T for the warp's 16 rows: K [key][d] is B = K^T read column-major.
    wmmaops::productNT<T, D>(Ss + rowBase * LS, LS, Qs + rowBase * LD, LD, Ks, LD);
    __syncwarp();
    // 2. Online softmax per row; P into shared (input type), O rows rescaled.
#pragma unroll
    for (int r = 0; r < kWmmaRowsPerWarp; ++r) {
      int64_t i = q0 + rowBase + r;
      int64_t vis = i < a.s ? visible(a, i) : 0; // rows past s: everything masked
      int64_t j0 = k0 + lane, j1 = k0 + lane + 32;
      bool ok0 = j0 < vis, ok1 = j1 < vis;
      float s0 = ok0 ? Ss[(rowBase + r) * LS + lane] * scale : -INFINITY;
      float s1 = ok1 ? Ss[(rowBase + r) * LS + lane + 32] * scale : -INFINITY;
      float mNew = maxNaN(m[r], warpMax(maxNaN(s0, s1)));
      float alpha = 1.0f, p0 = 0.0f, p1 = 0.0f;
      if (mNew != -INFINITY) { // else nothing visible yet: P = 0, O and l stay 0
        alpha = expf(m[r] - mNew);
        p0 = ok0 ? expf(s0 - mNew) : 0.0f;
        p1 = ok1 ? expf(s1 - mNew) : 0.0f;
        l[r] = l[r] * alpha + warpSum(p0 + p1);
        m[r] = mNew;
      }
      Ps[(rowBase + r) * LP + lane] = T(p0);
      Ps[(rowBase + r) * LP + lane + 32] = T(p1);
      for (int c = lane; c < D; c += 32)
        Os[(rowBase + r) * LO + c] *= alpha;
    }
    __syncwarp();
    // 3. O += P V: P [16, 64] (row-major) times V [64 keys][D] (row-major B).
    wmmaops::productNNAccumulate<T, D>(Os + rowBase * LO, LO, Ps + rowBase * LP, LP, Vs, LD);
    __syncwarp();
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < kWmmaRowsPerWarp; ++r) {
    int64_t i = q0 + rowBase + r;
    if (i >= a.s)
      break;
    float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; // a row that sees no key gives zeros
    if constexpr (!kStats) {
      for (int c = lane; c < a.dv; c += 32)
        store(out, oIndex(a, bi, i, hi) + c, Os[(rowBase + r) * LO + c] * inv);
    } else {
      float dd = 0.0f;
      for (int c = lane; c < a.dv; c += 32)
        dd += Os[(rowBase + r) * LO + c] * inv * load(dout, oIndex(a, bi, i, hi) + c);
      dd = warpSum(dd);
      if (lane == 0)
        writeRowStats(a, lse, delta, bi, hi, i, m[r], l[r], dd);
    }
  }
}
