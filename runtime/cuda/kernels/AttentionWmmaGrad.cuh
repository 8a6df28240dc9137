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

// Shared-memory layouts: AttentionTiling.h (wmmaGradQLayout, wmmaGradKVLayout); the products
// (wmmaops::productNT, productNNAccumulate): AttentionWmma.cuh.

/// Stores acc * scale of the warp's 16 rows p.row0 + warp * 16 + r below `count` (f32 [64][ld] in
/// shared memory), columns c < dim, at dst[index(row) + c].
template <typename T, typename Index>
__device__ __forceinline__ void storeAccRows(T *dst, const float *acc, int ld, float scale,
                                             const Place &p, int64_t count, int64_t dim,
                                             Index index) {
  for (int r = 0; r < 16; ++r) {
    int64_t i = p.row0 + p.warp * 16 + r;
    if (i >= count)
      break;
    for (int c = p.lane; c < dim; c += 32)
      store(dst, index(i) + c, acc[(p.warp * 16 + r) * ld + c] * scale);
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flashGradQWmma(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                   const float *delta, T *dq, AttnArgs a) {
  constexpr int LD = tiling::wmmaLdIn(D), LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaGradQLayout Lay = tiling::wmmaGradQLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  // q, its dout rows, k, v [64][LD] and dS [64][LP]; S, dP [64][LS] and the dQ sums [64][LO].
  T *Qs = smemAt<T>(Lay.q), *Os = smemAt<T>(Lay.dout), *Ks = smemAt<T>(Lay.k),
    *Vs = smemAt<T>(Lay.v);
  T *Gs = smemAt<T>(Lay.ds);
  float *Ss = smemAt<float>(Lay.s), *Ps = smemAt<float>(Lay.dp), *Acc = smemAt<float>(Lay.acc);
  const Place p = placeOf(64);
  const int lane = p.lane, rowBase = p.warp * 16;
  const int64_t bi = p.bi, hi = p.head, q0 = p.row0, kh = hi / (a.h / a.hk);
  loadRows<Operand::Q, D>(Qs, LD, 64, q, a, bi, hi, q0);
  loadRows<Operand::Dout, D>(Os, LD, 64, dout, a, bi, hi, q0);
  for (int idx = threadIdx.x; idx < 64 * LO; idx += blockDim.x)
    Acc[idx] = 0.0f;
  int64_t kEnd = keyEnd(a, q0, kWmmaBQ);
  for (int64_t k0 = 0; k0 < kEnd; k0 += 64) {
    loadKeyTile<D>(Ks, LD, Vs, LD, 64, k, v, a, bi, kh, k0);
    wmmaops::productNT<T, D>(Ss + rowBase * LS, LS, Qs + rowBase * LD, LD, Ks, LD);
    wmmaops::productNT<T, D>(Ps + rowBase * LS, LS, Os + rowBase * LD, LD, Vs, LD);
    __syncwarp();
    for (int r = 0; r < 16; ++r) {
      int64_t i = q0 + rowBase + r;
      float L, Dl;
      readRowStats(a, lse, delta, bi, hi, i, L, Dl);
      int64_t vis = i < a.s && L != INFINITY ? visible(a, i) : 0;
      for (int cc = lane; cc < 64; cc += 32) {
        bool ok = k0 + cc < vis;
        float p = ok ? expf(Ss[(rowBase + r) * LS + cc] * scale - L) : 0.0f;
        float ds = ok ? p * (Ps[(rowBase + r) * LS + cc] - Dl) : 0.0f;
        Gs[(rowBase + r) * LP + cc] = T(ds);
      }
    }
    __syncwarp();
    wmmaops::productNNAccumulate<T, D>(Acc + rowBase * LO, LO, Gs + rowBase * LP, LP, Ks, LD);
    __syncwarp();
  }
  __syncthreads(); // Acc zeroed by other threads even when no key tile ran
  storeAccRows(dq, Acc, LO, scale, p, a.s, a.d, [&](int64_t i) { return qIndex(a, bi, i, hi); });
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flashGradKVWmma(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                    const float *delta, T *dk, T *dv, AttnArgs a) {
  constexpr int LD = tiling::wmmaLdIn(D), LO = tiling::wmmaLdAcc(D);
  constexpr tiling::WmmaGradKVLayout Lay = tiling::wmmaGradKVLayout(D, sizeof(T));
  const float scale = static_cast<float>(a.scale);
  // This block's keys and values, a query tile and its dout rows [64][LD]; P^T (key rows) and
  // dS^T [64][LP]; S^T, dP^T [64][LS]; the dK, dV sums [64][LO]; the tile's lse, delta [64].
  T *Ks = smemAt<T>(Lay.k), *Vs = smemAt<T>(Lay.v), *Qs = smemAt<T>(Lay.q),
    *Os = smemAt<T>(Lay.dout);
  T *Pt = smemAt<T>(Lay.pt), *Gt = smemAt<T>(Lay.dst);
  float *St = smemAt<float>(Lay.st), *Dt = smemAt<float>(Lay.dpt);
  float *AccK = smemAt<float>(Lay.accK), *AccV = smemAt<float>(Lay.accV);
  float *Ls = smemAt<float>(Lay.lse), *Ds = smemAt<float>(Lay.delta);
  const Place p = placeOf(64);
  const int lane = p.lane, rowBase = p.warp * 16;
  const int64_t bi = p.bi, kh = p.head, k0 = p.row0, group = a.h / a.hk;
  loadRows<Operand::K, D>(Ks, LD, 64, k, a, bi, kh, k0);
  loadRows<Operand::V, D>(Vs, LD, 64, v, a, bi, kh, k0);
  for (int idx = threadIdx.x; idx < 64 * LO; idx += blockDim.x)
    AccK[idx] = AccV[idx] = 0.0f;
  int64_t qStart = queryStart(a, k0);
  for (int64_t g = 0; g < group; ++g) {
    int64_t hi = kh * group + g;
    for (int64_t i0 = qStart; i0 < a.s; i0 += 64) {
      __syncthreads();
      loadRows<Operand::Q, D>(Qs, LD, 64, q, a, bi, hi, i0);
      loadRows<Operand::Dout, D>(Os, LD, 64, dout, a, bi, hi, i0);
      for (int ii = threadIdx.x; ii < 64; ii += blockDim.x)
        readRowStats(a, lse, delta, bi, hi, i0 + ii, Ls[ii], Ds[ii]);
      __syncthreads();
      // S^T [16 keys, 64 queries] = K Q^T and dP^T = V dO^T for the warp's keys.
      wmmaops::productNT<T, D>(St + rowBase * LS, LS, Ks + rowBase * LD, LD, Qs, LD);
      wmmaops::productNT<T, D>(Dt + rowBase * LS, LS, Vs + rowBase * LD, LD, Os, LD);
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
      wmmaops::productNNAccumulate<T, D>(AccV + rowBase * LO, LO, Pt + rowBase * LP, LP, Os, LD);
      wmmaops::productNNAccumulate<T, D>(AccK + rowBase * LO, LO, Gt + rowBase * LP, LP, Qs, LD);
      __syncwarp();
    }
  }
  __syncthreads(); // accumulators zeroed by other threads even when no query tile ran
  storeAccRows(dk, AccK, LO, scale, p, a.t, a.d, [&](int64_t j) { return kIndex(a, bi, j, kh); });
  storeAccRows(dv, AccV, LO, 1.0f, p, a.t, a.dv, [&](int64_t j) { return vIndex(a, bi, j, kh); });
}
