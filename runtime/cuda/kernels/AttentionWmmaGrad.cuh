// Part of Attention.cu (included there after AttentionWmma.cuh): the tensor-core backward for
// bf16/f16, no mask, head dims up to 128. lse and delta per row come from flashForwardWmma in
// stats mode. Both kernels recompute S = Q K^T and dP = dO V^T per 64x64 tile with WMMA (f32
// accumulation), form P = exp(scale S - lse) and dS = P (dP - delta) in f32 (rounded to the
// input type for the next product, as FlashAttention-2 does), and accumulate in f32 in shared
// memory, tiles in a fixed order (deterministic, no atomics):
// - flashGradQWmma: a block per 64 query rows of (batch, head) over the key tiles in order,
//   dQ += dS K; dq = scale dQ.
// - flashGradKVWmma: a block per 64 keys of (batch, kv head) over the group's query heads and
//   their query tiles in order, dV += P^T dO and dK += dS^T Q; dk = scale dK.
#pragma once

// Shared-memory layouts: AttentionTiling.h (wmmaGradQLayout, wmmaGradKVLayout).

namespace wmmagrad {

namespace wmma = nvcuda::wmma;

/// C [16, 64] (f32, ldc) = A [16, D] (row-major, lda) times B^T, B [64][D] (row-major, ldb):
/// the 64 columns are B's rows. Warp-collective.
template <typename T, int D>
__device__ void productNT(float *c, int ldc, const T *a, int lda, const T *b, int ldb) {
  for (int n = 0; n < 64 / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kd = 0; kd < D / 16; ++kd) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, a + kd * 16, lda);
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + kd * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

/// C [16, D] (f32, ldc) += A [16, 64] (row-major, lda) times B [64][D] (row-major, ldb).
/// Warp-collective.
template <typename T, int D>
__device__ void productNNAccumulate(float *c, int ldc, const T *a, int lda, const T *b, int ldb) {
  for (int n = 0; n < D / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c + n * 16, ldc, wmma::mem_row_major);
#pragma unroll
    for (int kk = 0; kk < 64 / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b + kk * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
  }
}

} // namespace wmmagrad

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flashGradQWmma(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                   const float *delta, T *dq, AttnArgs a) {
  constexpr int LD = tiling::wmmaLdIn(D), LS = tiling::kWmmaLdS, LP = tiling::kWmmaLdP;
  constexpr int LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaGradQLayout Lay = tiling::wmmaGradQLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  extern __shared__ __align__(32) unsigned char wmmaSmem[];
  T *Qs = reinterpret_cast<T *>(wmmaSmem + Lay.q);            // [64][LD]
  T *Os = reinterpret_cast<T *>(wmmaSmem + Lay.dout);         // [64][LD] dout rows
  T *Ks = reinterpret_cast<T *>(wmmaSmem + Lay.k);            // [64][LD]
  T *Vs = reinterpret_cast<T *>(wmmaSmem + Lay.v);            // [64][LD]
  T *Gs = reinterpret_cast<T *>(wmmaSmem + Lay.ds);           // [64][LP] dS
  float *Ss = reinterpret_cast<float *>(wmmaSmem + Lay.s);    // [64][LS] S
  float *Ps = reinterpret_cast<float *>(wmmaSmem + Lay.dp);   // [64][LS] dP
  float *Acc = reinterpret_cast<float *>(wmmaSmem + Lay.acc); // [64][LO] dQ
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rowBase = warp * 16;
  int64_t bi = blockIdx.z, hi = blockIdx.y, q0 = int64_t(blockIdx.x) * 64;
  int64_t kh = hi / (a.h / a.hk);
  copyTile<T, D>(Qs, LD, 64, q, qIndex(a, bi, 0, hi), a.h * a.d, q0, a.s, a.d);
  copyTile<T, D>(Os, LD, 64, dout, oIndex(a, bi, 0, hi), a.h * a.dv, q0, a.s, a.dv);
  for (int idx = threadIdx.x; idx < 64 * LO; idx += blockDim.x)
    Acc[idx] = 0.0f;
  int64_t kEnd = keyEnd(a, q0, kWmmaBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += 64) {
    __syncthreads();
    copyTile<T, D>(Ks, LD, 64, k, kIndex(a, bi, 0, kh), a.hk * a.d, k0, a.t, a.d);
    copyTile<T, D>(Vs, LD, 64, v, vIndex(a, bi, 0, kh), a.hk * a.dv, k0, a.t, a.dv);
    __syncthreads();
    wmmagrad::productNT<T, D>(Ss + rowBase * LS, LS, Qs + rowBase * LD, LD, Ks, LD);
    wmmagrad::productNT<T, D>(Ps + rowBase * LS, LS, Os + rowBase * LD, LD, Vs, LD);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      int64_t i = q0 + rowBase + r;
      bool rowOk = i < a.s;
      float L = rowOk ? lse[(bi * a.h + hi) * a.s + i] : INFINITY;
      float Dl = rowOk ? delta[(bi * a.h + hi) * a.s + i] : 0.0f;
      int64_t vis = rowOk && L != INFINITY ? visible(a, i) : 0;
      for (int cc = lane; cc < 64; cc += 32) {
        bool ok = k0 + cc < vis;
        float p = ok ? expf(Ss[(rowBase + r) * LS + cc] * scale - L) : 0.0f;
        float ds = ok ? p * (Ps[(rowBase + r) * LS + cc] - Dl) : 0.0f;
        Gs[(rowBase + r) * LP + cc] = T(ds);
      }
    }
    __syncwarp();
    wmmagrad::productNNAccumulate<T, D>(Acc + rowBase * LO, LO, Gs + rowBase * LP, LP, Ks, LD);
    __syncwarp();
  }
  __syncthreads(); // Acc zeroed by other threads even when no key tile ran
  for (int r = 0; r < 16; ++r) {
    int64_t i = q0 + rowBase + r;
    if (i >= a.s)
      break;
    for (int c = lane; c < a.d; c += 32)
      store(dq, qIndex(a, bi, i, hi) + c, Acc[(rowBase + r) * LO + c] * scale);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flashGradKVWmma(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                    const float *delta, T *dk, T *dv, AttnArgs a) {
  constexpr int LD = tiling::wmmaLdIn(D), LS = tiling::kWmmaLdS, LP = tiling::kWmmaLdP;
  constexpr int LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaGradKVLayout Lay = tiling::wmmaGradKVLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  extern __shared__ __align__(32) unsigned char wmmaSmem[];
  T *Ks = reinterpret_cast<T *>(wmmaSmem + Lay.k);              // [64][LD] this block's keys
  T *Vs = reinterpret_cast<T *>(wmmaSmem + Lay.v);              // [64][LD]
  T *Qs = reinterpret_cast<T *>(wmmaSmem + Lay.q);              // [64][LD] a query tile
  T *Os = reinterpret_cast<T *>(wmmaSmem + Lay.dout);           // [64][LD] its dout rows
  T *Pt = reinterpret_cast<T *>(wmmaSmem + Lay.pt);             // [64][LP] P^T (key rows)
  T *Gt = reinterpret_cast<T *>(wmmaSmem + Lay.dst);            // [64][LP] dS^T
  float *St = reinterpret_cast<float *>(wmmaSmem + Lay.st);     // [64][LS] S^T
  float *Dt = reinterpret_cast<float *>(wmmaSmem + Lay.dpt);    // [64][LS] dP^T
  float *AccK = reinterpret_cast<float *>(wmmaSmem + Lay.accK); // [64][LO]
  float *AccV = reinterpret_cast<float *>(wmmaSmem + Lay.accV); // [64][LO]
  float *Ls = reinterpret_cast<float *>(wmmaSmem + Lay.lse);    // [64]
  float *Ds = reinterpret_cast<float *>(wmmaSmem + Lay.delta);  // [64]
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rowBase = warp * 16;
  int64_t bi = blockIdx.z, kh = blockIdx.y, k0 = int64_t(blockIdx.x) * 64;
  int64_t group = a.h / a.hk;
  copyTile<T, D>(Ks, LD, 64, k, kIndex(a, bi, 0, kh), a.hk * a.d, k0, a.t, a.d);
  copyTile<T, D>(Vs, LD, 64, v, vIndex(a, bi, 0, kh), a.hk * a.dv, k0, a.t, a.dv);
  for (int idx = threadIdx.x; idx < 64 * LO; idx += blockDim.x)
    AccK[idx] = AccV[idx] = 0.0f;
  int64_t qStart = queryStart(a, k0);
  for (int64_t g = 0; g < group; ++g) {
    int64_t hi = kh * group + g;
    for (int64_t i0 = qStart; i0 < a.s; i0 += 64) {
      __syncthreads();
      copyTile<T, D>(Qs, LD, 64, q, qIndex(a, bi, 0, hi), a.h * a.d, i0, a.s, a.d);
      copyTile<T, D>(Os, LD, 64, dout, oIndex(a, bi, 0, hi), a.h * a.dv, i0, a.s, a.dv);
      for (int ii = threadIdx.x; ii < 64; ii += blockDim.x) {
        int64_t i = i0 + ii, at = (bi * a.h + hi) * a.s + i;
        Ls[ii] = i < a.s ? lse[at] : INFINITY;
        Ds[ii] = i < a.s ? delta[at] : 0.0f;
      }
      __syncthreads();
      // S^T [16 keys, 64 queries] = K Q^T and dP^T = V dO^T for the warp's keys.
      wmmagrad::productNT<T, D>(St + rowBase * LS, LS, Ks + rowBase * LD, LD, Qs, LD);
      wmmagrad::productNT<T, D>(Dt + rowBase * LS, LS, Vs + rowBase * LD, LD, Os, LD);
      __syncwarp();
      for (int r = 0; r < 16; ++r) {
        int64_t j = k0 + rowBase + r;
        for (int cc = lane; cc < 64; cc += 32) {
          int64_t i = i0 + cc;
          float L = Ls[cc];
          bool ok = j < a.t && i < a.s && L != INFINITY && j < visible(a, i);
          float p = ok ? expf(St[(rowBase + r) * LS + cc] * scale - L) : 0.0f;
          float ds = ok ? p * (Dt[(rowBase + r) * LS + cc] - Ds[cc]) : 0.0f;
          Pt[(rowBase + r) * LP + cc] = T(p);
          Gt[(rowBase + r) * LP + cc] = T(ds);
        }
      }
      __syncwarp();
      wmmagrad::productNNAccumulate<T, D>(AccV + rowBase * LO, LO, Pt + rowBase * LP, LP, Os, LD);
      wmmagrad::productNNAccumulate<T, D>(AccK + rowBase * LO, LO, Gt + rowBase * LP, LP, Qs, LD);
      __syncwarp();
    }
  }
  __syncthreads(); // accumulators zeroed by other threads even when no query tile ran
  for (int r = 0; r < 16; ++r) {
    int64_t j = k0 + rowBase + r;
    if (j >= a.t)
      break;
    for (int c = lane; c < D; c += 32) {
      if (c < a.d)
        store(dk, kIndex(a, bi, j, kh) + c, AccK[(rowBase + r) * LO + c] * scale);
      if (c < a.dv)
        store(dv, vIndex(a, bi, j, kh) + c, AccV[(rowBase + r) * LO + c]);
    }
  }
}
