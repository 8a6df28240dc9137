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

/// Copies rows [r0, r0 + n) of a [.., heads, dim] tensor into dst [n][ld] unconverted, zero
/// beyond `count` rows and `dim` columns (up to D).
template <typename T, int D>
__device__ void copyTile(T *dst, int ld, int n, const T *src, int64_t base, int64_t rowStride,
                         int64_t r0, int64_t count, int64_t dim) {
  for (int idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
    int rr = idx / D, c = idx % D;
    int64_t r = r0 + rr;
    dst[rr * ld + c] = (r < count && c < dim) ? src[base + r * rowStride + c] : T(0.0f);
  }
}

/// Without kStats writes out; with kStats writes lse (+inf for a row that sees no key) and
/// delta = dout . out per row ([b,h,s] f32) for the backward instead.
template <typename T, int D, bool kStats>
__global__ void __launch_bounds__(kThreads)
    flashForwardWmma(const T *q, const T *k, const T *v, T *out, const T *dout, float *lse,
                     float *delta, AttnArgs a) {
  namespace wmma = nvcuda::wmma;
  constexpr int LD = tiling::wmmaLdIn(D), LS = tiling::kWmmaLdS, LP = tiling::kWmmaLdP;
  constexpr int LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaForwardLayout Lay = tiling::wmmaForwardLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  extern __shared__ __align__(32) unsigned char wmmaSmem[];
  T *Qs = reinterpret_cast<T *>(wmmaSmem + Lay.q);         // [64][LD]
  T *Ks = reinterpret_cast<T *>(wmmaSmem + Lay.k);         // [64][LD]
  T *Vs = reinterpret_cast<T *>(wmmaSmem + Lay.v);         // [64][LD]
  T *Ps = reinterpret_cast<T *>(wmmaSmem + Lay.p);         // [64][LP], 16 rows per warp
  float *Ss = reinterpret_cast<float *>(wmmaSmem + Lay.s); // [64][LS]
  float *Os = reinterpret_cast<float *>(wmmaSmem + Lay.o); // [64][LO]
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t bi = blockIdx.z, hi = blockIdx.y, q0 = int64_t(blockIdx.x) * kWmmaBQ;
  int64_t kh = hi / (a.h / a.hk);
  copyTile<T, D>(Qs, LD, kWmmaBQ, q, qIndex(a, bi, 0, hi), a.h * a.d, q0, a.s, a.d);
  for (int idx = threadIdx.x; idx < kWmmaBQ * LO; idx += blockDim.x)
    Os[idx] = 0.0f;
  __syncthreads();                       // Q and O ready even when no key tile follows
  int rowBase = warp * kWmmaRowsPerWarp; // this warp's rows in the block's tiles
  float m[kWmmaRowsPerWarp], l[kWmmaRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kWmmaRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  int64_t kEnd = keyEnd(a, q0, kWmmaBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kWmmaBK) {
    __syncthreads(); // the previous tile's readers are done
    copyTile<T, D>(Ks, LD, kWmmaBK, k, kIndex(a, bi, 0, kh), a.hk * a.d, k0, a.t, a.d);
    copyTile<T, D>(Vs, LD, kWmmaBK, v, vIndex(a, bi, 0, kh), a.hk * a.dv, k0, a.t, a.dv);
    __syncthreads();
    // 1. S = Q K^T for the warp's 16 rows: K [key][d] is B = K^T read column-major.
    for (int nk = 0; nk < kWmmaBK / 16; ++nk) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, Qs + rowBase * LD + kd * 16, LD);
        wmma::load_matrix_sync(fb, Ks + nk * 16 * LD + kd * 16, LD);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Ss + rowBase * LS + nk * 16, acc, LS, wmma::mem_row_major);
    }
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
    for (int nd = 0; nd < D / 16; ++nd) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + rowBase * LO + nd * 16, LO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kWmmaBK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, Ps + rowBase * LP + kk * 16, LP);
        wmma::load_matrix_sync(fb, Vs + kk * 16 * LD + nd * 16, LD);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Os + rowBase * LO + nd * 16, acc, LO, wmma::mem_row_major);
    }
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
      if (lane == 0) {
        int64_t at = (bi * a.h + hi) * a.s + i;
        lse[at] = l[r] > 0.0f ? m[r] + logf(l[r]) : INFINITY;
        delta[at] = dd;
      }
    }
  }
}
