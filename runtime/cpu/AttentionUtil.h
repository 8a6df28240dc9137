// Internal helpers of the Attention and AttentionGrad kernels (Nn.cpp, Grad.cpp): a strided
// cblas gemm and the per-(batch, head) softmax probabilities both kernels compute.
#pragma once

#include "runtime/cpu/AttentionDims.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/VectorMath.h"

#ifdef MEGAC_HAVE_BLAS
#include <cblas.h>
#endif

#include <climits>
#include <cmath>
#include <limits>
#include <type_traits>

namespace megac::runtime::cpu::detail {

/// C[m,n] = alpha * op(A) op(B) + beta * C, row-major with leading dims lda, ldb, ldc (in
/// elements); op(A) is A [m,k] or, with transA, A^T for A [k,m]; likewise op(B) is B [k,n] or
/// B^T for B [n,k]. Handles the empty cases BLAS rejects. The caller checks blasFits().
template <typename T>
void gemmStrided(bool transA, bool transB, int64_t m, int64_t n, int64_t k, T alpha, const T *a,
                 int64_t lda, const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : c[i * ldc + j] * beta;
    return;
  }
#ifdef MEGAC_HAVE_BLAS
  CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb),
                beta, c, int(ldc));
#else
  // Without BLAS (MEGAC_BLAS=OFF: a runtime-only build for a machine without OpenBLAS, e.g. the
  // GPU test machine): the same product by loops, accumulated in T in k order.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T sum = T(0);
      for (int64_t p = 0; p < k; ++p)
        sum +=
            (transA ? a[p * lda + i] : a[i * lda + p]) * (transB ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * sum + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
    }
#endif
}

/// Whether every dim and leading dim fits BLAS's int.
inline bool blasFits(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > INT_MAX)
      return false;
  return true;
}

/// Shapes of one attention call: q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv], the mask read through
/// maskStrides over [b,h,s,t] (0 on broadcast dims); with query and key positions (i64 [s],
/// [t]) query i sees key j iff keyPositions[j] <= queryPositions[i].
struct AttentionShape {
  int64_t b, s, h, d, t, hk, dv;
  const TensorRef *mask;
  std::vector<int64_t> maskStrides;
  bool causal;
  double scale;
  const int64_t *queryPositions = nullptr, *keyPositions = nullptr;

  int64_t kvHead(int64_t hi) const { return hi / (h / hk); }
  /// Offsets of head (bi, hi)'s first row in q (or dq), k/v's kv head, and out (or dout).
  int64_t qOffset(int64_t bi, int64_t hi) const { return (bi * s * h + hi) * d; }
  int64_t kOffset(int64_t bi, int64_t hi) const { return (bi * t * hk + kvHead(hi)) * d; }
  int64_t vOffset(int64_t bi, int64_t hi) const { return (bi * t * hk + kvHead(hi)) * dv; }
  int64_t oOffset(int64_t bi, int64_t hi) const { return (bi * s * h + hi) * dv; }
  /// Keys query i may see: j < visible(i) (all t without causal; j <= i + (t - s) with it).
  int64_t visible(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + (t - s) + 1, 0, t) : t;
  }
  bool fitsBlas() const { return blasFits({s, t, d, dv, h * d, hk * d, h * dv, hk * dv}); }

  /// Rows per block of a causal head's products.
  static constexpr int64_t kCausalRowBlock = 64;
  /// Calls f(i0, i1, keys) for the head's row blocks [i0, i1) in order, keys = the keys its last
  /// row sees: P is exactly 0 after them in every row of the block, so the block's products run
  /// over those keys only (with causal and s = t = 256, 5/8 of the whole head's work). Without
  /// causal, one block of every row and key.
  template <typename F> void forRowBlocks(F &&f) const {
    int64_t rows = causal ? kCausalRowBlock : std::max<int64_t>(s, 1);
    for (int64_t i0 = 0; i0 < s; i0 += rows) {
      int64_t i1 = std::min(s, i0 + rows);
      f(i0, i1, visible(i1 - 1));
    }
  }
};

/// p [s,t] (row-major) = the attention probabilities of head (bi, hi):
/// softmax_j(scale * q_i . k_j + mask_ij) over the visible, unmasked keys, computed in T (f32
/// for f32 inputs, its exps VectorMath.h's expF32) with the row max subtracted and the row sum
/// accumulated in double. Masked keys get exactly 0, and a row that sees no key at all is all
/// zeros (so it contributes nothing forward or backward). A NaN score makes its row NaN, as the
/// softmax would.
template <typename T>
void attentionProbs(const AttentionShape &a, const T *q, const T *k, int64_t bi, int64_t hi, T *p) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  int64_t s = a.s, t = a.t;
  // Scores = scale * Q K^T, one gemm per row block, over the keys it sees (the rest of each row
  // is set below, from the visible count).
  a.forRowBlocks([&](int64_t i0, int64_t i1, int64_t keys) {
    gemmStrided<T>(false, true, i1 - i0, keys, a.d, static_cast<T>(a.scale),
                   q + a.qOffset(bi, hi) + i0 * a.h * a.d, a.h * a.d, k + a.kOffset(bi, hi),
                   a.hk * a.d, T(0), p + i0 * t, t);
  });
  const std::vector<int64_t> &ms = a.maskStrides;
  // The rows are independent (each its own max, exps and double sum): split over the kernel
  // threads, the same bits on any count (the exps were half of a mid GPT's Attention time).
  parallelFor(s, grainFor(8 * t), [&](int64_t rowBegin, int64_t rowEnd) {
    for (int64_t i = rowBegin; i < rowEnd; ++i) {
      T *row = p + i * t;
      int64_t n = a.visible(i);
      if (a.queryPositions) { // causal by global position: exactly causal's -inf
        int64_t at = a.queryPositions[i];
        for (int64_t j = 0; j < n; ++j)
          if (a.keyPositions[j] > at)
            row[j] = kNegInf;
      }
      if (a.mask) {
        int64_t base = bi * ms[0] + hi * ms[1] + i * ms[2];
        if (a.mask->dtype == DType::i1) {
          const uint8_t *keep = a.mask->as<const uint8_t>() + base;
          for (int64_t j = 0; j < n; ++j)
            row[j] = keep[j * ms[3]] ? row[j] : kNegInf;
        } else {
          const T *add = a.mask->as<const T>() + base;
          for (int64_t j = 0; j < n; ++j)
            row[j] += add[j * ms[3]];
        }
      }
      T best = kNegInf;
      if constexpr (std::is_same_v<T, float>)
        best = vmath::maxF32(row, n);
      else
        for (int64_t j = 0; j < n; ++j)
          if (row[j] > best || row[j] != row[j])
            best = row[j];
      if (best == kNegInf) { // every key masked: zeros rather than 0/0
        std::fill(row, row + t, T(0));
        continue;
      }
      if constexpr (std::is_same_v<T, float>) { // the vectorised exp (VectorMath.h)
        double sum = vmath::expShiftSumF32(row, best, row, n);
        vmath::scaleF32(row, static_cast<float>(1.0 / sum), n);
      } else {
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          row[j] = std::exp(row[j] - best);
          sum += static_cast<double>(row[j]);
        }
        T inv = static_cast<T>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j)
          row[j] *= inv;
      }
      std::fill(row + n, row + t, T(0)); // keys after the causal limit
    }
  });
}

} // namespace megac::runtime::cpu::detail
