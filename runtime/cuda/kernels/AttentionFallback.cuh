// Part of Attention.cu (included there, inside its anonymous namespace, after AttnArgs and the
// index helpers): the fallback kernels for a mask tensor, f64 or head dims above 128. The
// probabilities [b,h,s,t] are materialized in scratch (C: f32, f64 for f64) by a block per query
// row; a thread per output element then sums in a fixed order (deterministic).
#pragma once

/// How a mask is read: kind 0 none, 1 additive (q's dtype), 2 boolean (keep where true);
/// strides over [b,h,s,t] (0 on broadcast dims).
struct MaskArgs {
  const void *data = nullptr;
  int kind = 0;
  int64_t stride[4] = {0, 0, 0, 0};
};

/// P [b,h,s,t] (C) = softmax over visible, unmasked keys of scale * q.k + mask; a block per
/// query row; a row with no visible key is all zeros.
template <typename T, typename C>
__global__ void probsKernel(const T *q, const T *k, MaskArgs mask, C *P, AttnArgs a) {
  int64_t rows = a.b * a.h * a.s;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t i = row % a.s, hi = (row / a.s) % a.h, bi = row / (a.s * a.h);
    int64_t kh = hi / (a.h / a.hk), vis = visible(a, i);
    C *pr = P + row * a.t;
    C best = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x) {
      C sc = -INFINITY;
      if (j < vis) {
        C dot = 0;
        for (int64_t c = 0; c < a.d; ++c)
          dot += static_cast<C>(load(q, qIndex(a, bi, i, hi) + c)) *
                 static_cast<C>(load(k, kIndex(a, bi, j, kh) + c));
        sc = dot * static_cast<C>(a.scale);
        int64_t mo =
            bi * mask.stride[0] + hi * mask.stride[1] + i * mask.stride[2] + j * mask.stride[3];
        if (mask.kind == 1)
          sc += static_cast<C>(load(static_cast<const T *>(mask.data), mo));
        else if (mask.kind == 2 && !static_cast<const uint8_t *>(mask.data)[mo])
          sc = -INFINITY;
      }
      pr[j] = sc;
      best = maxNaN(best, sc);
    }
    best = blockMax(best);
    if (best == C(-INFINITY)) { // every key masked: zeros rather than 0/0
      for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x)
        pr[j] = 0;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x) {
      C e = exp(pr[j] - best);
      pr[j] = e;
      sum += static_cast<double>(e);
    }
    C inv = static_cast<C>(1.0 / blockSum(sum));
    for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x)
      pr[j] *= inv;
  }
}

/// dst [b,s,h,width] = scale * R X with R [b,h,s,t] (C) and X a key-side tensor (k or v, read at
/// index(bi, j, kh) + c); a thread per element, keys in order.
template <typename T, typename C, typename Index>
__device__ void rowsTimesKeys(const C *R, const T *x, T *dst, int64_t width, C scale,
                              const AttnArgs &a, Index index) {
  int64_t total = a.b * a.s * a.h * width;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = e % width, hi = (e / width) % a.h, i = (e / (width * a.h)) % a.s;
    int64_t bi = e / (width * a.h * a.s), kh = hi / (a.h / a.hk);
    const C *rr = R + ((bi * a.h + hi) * a.s + i) * a.t;
    C sum = 0;
    for (int64_t j = 0; j < a.t; ++j)
      sum += rr[j] * static_cast<C>(load(x, index(bi, j, kh) + c));
    store(dst, e, sum * scale);
  }
}

/// out [b,s,h,dv] = P V, a thread per element.
template <typename T, typename C>
__global__ void probsTimesV(const C *P, const T *v, T *out, AttnArgs a) {
  rowsTimesKeys(P, v, out, a.dv, C(1), a,
                [&](int64_t bi, int64_t j, int64_t kh) { return vIndex(a, bi, j, kh); });
}

/// dS [b,h,s,t] = P (dP - sum_j P dP) with dP_ij = dout_i . v_j; a block per query row.
template <typename T, typename C>
__global__ void dScoresKernel(const C *P, const T *dout, const T *v, C *dS, AttnArgs a) {
  int64_t rows = a.b * a.h * a.s;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t i = row % a.s, hi = (row / a.s) % a.h, bi = row / (a.s * a.h);
    int64_t kh = hi / (a.h / a.hk);
    const C *pr = P + row * a.t;
    C *dr = dS + row * a.t;
    double pdp = 0.0;
    for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x) {
      C dp = 0;
      for (int64_t c = 0; c < a.dv; ++c)
        dp += static_cast<C>(load(dout, oIndex(a, bi, i, hi) + c)) *
              static_cast<C>(load(v, vIndex(a, bi, j, kh) + c));
      dr[j] = dp;
      if (pr[j] != C(0))
        pdp += static_cast<double>(pr[j]) * static_cast<double>(dp);
    }
    pdp = blockSum(pdp);
    for (int64_t j = threadIdx.x; j < a.t; j += blockDim.x)
      dr[j] = pr[j] == C(0)
                  ? C(0)
                  : static_cast<C>(static_cast<double>(pr[j]) * (static_cast<double>(dr[j]) - pdp));
  }
}

/// dq [b,s,h,d] = scale * dS K, a thread per element.
template <typename T, typename C>
__global__ void dqKernel(const C *dS, const T *k, T *dq, AttnArgs a) {
  rowsTimesKeys(dS, k, dq, a.d, static_cast<C>(a.scale), a,
                [&](int64_t bi, int64_t j, int64_t kh) { return kIndex(a, bi, j, kh); });
}

/// dk [b,t,hk,d] = scale * sum over the group's heads of dS^T Q, dv [b,t,hk,dv] = sum of P^T dO;
/// a thread per (b, j, kv head, c < max(d, dv)), heads then queries in order.
template <typename T, typename C>
__global__ void dkdvKernel(const C *P, const C *dS, const T *q, const T *dout, T *dk, T *dv,
                           AttnArgs a) {
  int64_t width = a.d > a.dv ? a.d : a.dv, group = a.h / a.hk;
  int64_t total = a.b * a.t * a.hk * width;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t c = e % width, kh = (e / width) % a.hk, j = (e / (width * a.hk)) % a.t;
    int64_t bi = e / (width * a.hk * a.t);
    C sk = 0, sv = 0;
    for (int64_t g = 0; g < group; ++g) {
      int64_t hi = kh * group + g;
      for (int64_t i = 0; i < a.s; ++i) {
        int64_t at = ((bi * a.h + hi) * a.s + i) * a.t + j;
        if (c < a.d)
          sk += dS[at] * static_cast<C>(load(q, qIndex(a, bi, i, hi) + c));
        if (c < a.dv)
          sv += P[at] * static_cast<C>(load(dout, oIndex(a, bi, i, hi) + c));
      }
    }
    if (c < a.d)
      store(dk, kIndex(a, bi, j, kh) + c, sk * static_cast<C>(a.scale));
    if (c < a.dv)
      store(dv, vIndex(a, bi, j, kh) + c, sv);
  }
}

/// dmask (the mask's shape, right-aligned to [b,h,s,t] as msize) = dS summed over the dims the
/// mask broadcasts along, in row-major order of those dims; a thread per mask element.
template <typename T, typename C>
__global__ void dmaskKernel(const C *dS, T *dmask, Dims msize, AttnArgs a) {
  const int64_t full[4] = {a.b, a.h, a.s, a.t};
  int64_t total = msize.size[0] * msize.size[1] * msize.size[2] * msize.size[3];
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t idx[4], rest = e, loops = 1;
    for (int d = 3; d >= 0; --d) {
      idx[d] = rest % msize.size[d];
      rest /= msize.size[d];
      if (msize.size[d] != full[d])
        loops *= full[d];
    }
    double sum = 0.0;
    for (int64_t n = 0; n < loops; ++n) {
      int64_t at[4], r = n;
      for (int d = 3; d >= 0; --d) {
        if (msize.size[d] != full[d]) {
          at[d] = r % full[d];
          r /= full[d];
        } else {
          at[d] = idx[d];
        }
      }
      sum += static_cast<double>(dS[((at[0] * a.h + at[1]) * a.s + at[2]) * a.t + at[3]]);
    }
    store(dmask, e, static_cast<Compute<T>>(sum));
  }
}
