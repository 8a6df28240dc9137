// CPU reference kernels for contractions and coarse NN ops: MatMul and Linear (OpenBLAS gemm),
// LayerNorm, RmsNorm, Rope and Attention.
#include "runtime/cpu/AttentionUtil.h"
#include "runtime/cpu/HalfCompute.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"

#include <array>
#include <climits>
#include <cmath>
#include <limits>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

/// BLAS takes int dimensions.
Status checkBlasDims(const char *op, int64_t m, int64_t n, int64_t k) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return fail(op, "a matrix dimension exceeds the BLAS int range (m=" + std::to_string(m) +
                        ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ")");
  return Status::ok();
}

/// C[M,N] = A[M,K] * op(B) + beta * C, row-major; op(B) is B [K,N] or, with transB, B^T for
/// B [N,K]. Handles the empty cases BLAS rejects (a zero leading dimension).
template <typename T>
void gemm(bool transB, int64_t m, int64_t n, int64_t k, const T *a, const T *b, T beta, T *c) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i)
      c[i] = beta == T(0) ? T(0) : c[i] * beta;
    return;
  }
  gemmStrided<T>(false, transB, m, n, k, T(1), a, k, b, transB ? k : n, beta, c, n);
}

Status expectSameFloat(const char *op, const TensorRef &ref, const TensorRef &t, const char *what) {
  return expectDtype(op, what, t, ref.dtype);
}

} // namespace

Status matmul(const TensorRef &lhs, const TensorRef &rhs, const TensorRef &out, MatMulFlags flags,
              const TensorRef *acc) {
  const char *name = "MatMul";
  ASSIGN_OR_RETURN(MatMulGeometry g, checkMatMul(lhs, rhs, out, nullptr, flags.transposeLhs,
                                                 flags.transposeRhs, acc));
  if (isHalf(lhs)) // bf16/f16 into an f32 accumulator: the f32 GEMM on the widened operands
    return computeInF32(std::array{lhs, rhs}, {},
                        [&](std::span<const TensorRef> in, std::span<const TensorRef>) {
                          return matmul(in[0], in[1], out, flags, acc);
                        });
  int64_t m = g.m, n = g.n, k = g.k, batches = g.batches;
  const std::vector<int64_t> &batch = g.batch, &ls = g.lhsStrides, &rs = g.rhsStrides;
  // Stored leading dims: lhs [m, k] or, transposed, [k, m]; rhs [k, n] or [n, k].
  int64_t lda = g.transLhs ? m : k, ldb = g.transRhs ? k : n;
  return dispatchFloat(name, lhs.dtype, [&](auto tag) -> Status {
    using T = decltype(tag);
    const T *a = lhs.as<const T>(), *b = rhs.as<const T>();
    T *c = out.as<T>();
    // Accumulation is beta = 1 on out, which first holds acc (no copy when acc is out itself,
    // the in-place gradient accumulator).
    if (acc && acc->data != out.data)
      copyBytes(c, acc->as<const T>(), out.byteSize());
    T beta = acc ? T(1) : T(0);
    if (g.foldBatch) { // one rhs: fold the batch into m
      RETURN_IF_ERROR(checkBlasDims(name, batches * m, n, k));
      gemmStrided<T>(false, g.transRhs, batches * m, n, k, T(1), a, lda, b, ldb, beta, c, n);
      return Status::ok();
    }
    RETURN_IF_ERROR(checkBlasDims(name, m, n, k));
    std::vector<int64_t> index(batch.size(), 0);
    int64_t la = 0, rbOff = 0;
    for (int64_t i = 0; i < batches; ++i) {
      gemmStrided<T>(g.transLhs, g.transRhs, m, n, k, T(1), a + la, lda, b + rbOff, ldb, beta,
                     c + i * m * n, n);
      for (size_t d = batch.size(); d-- > 0;) {
        la += ls[d];
        rbOff += rs[d];
        if (++index[d] < batch[d])
          break;
        la -= ls[d] * batch[d];
        rbOff -= rs[d] * batch[d];
        index[d] = 0;
      }
    }
    return Status::ok();
  });
}

Status linear(const TensorRef &x, const TensorRef &weight, const TensorRef *bias,
              const TensorRef &out) {
  const char *name = "Linear";
  ASSIGN_OR_RETURN(LinearGeometry g, checkLinear(x, weight, bias, out));
  int64_t rows = g.rows, inF = g.inF, outF = g.outF;
  RETURN_IF_ERROR(checkBlasDims(name, rows, outF, inF));
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *y = out.as<T>();
    if (bias)
      for (int64_t r = 0; r < rows; ++r)
        copyBytes(y + r * outF, bias->as<const T>(), outF * sizeof(T));
    gemm<T>(true, rows, outF, inF, x.as<const T>(), weight.as<const T>(), bias ? T(1) : T(0), y);
    return Status::ok();
  });
}

namespace {

template <typename T, typename RowFn>
Status normRows(const char *name, const TensorRef &x, const TensorRef &weight,
                const TensorRef *bias, double epsilon, const TensorRef &out, RowFn rowStats) {
  int64_t n = x.shape.back(), rows = product(x.shape.first(x.shape.size() - 1));
  const T *w = weight.as<const T>();
  const T *b = bias ? bias->as<const T>() : nullptr;
  // Rows are independent: split over the kernel threads (the same bits on any count).
  parallelFor(rows, grainFor(4 * n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *in = x.as<const T>() + r * n;
      T *y = out.as<T>() + r * n;
      auto [shift, rstd] = rowStats(in, n, epsilon); // y = (x - shift) * rstd * w (+ b)
      for (int64_t j = 0; j < n; ++j) {
        double v = (static_cast<double>(in[j]) - shift) * rstd * static_cast<double>(w[j]);
        y[j] = static_cast<T>(b ? v + static_cast<double>(b[j]) : v);
      }
    }
  });
  return Status::ok();
}

} // namespace

Status detail::checkNorm(const char *name, const TensorRef &x, const TensorRef &weight,
                         const TensorRef *bias, double epsilon, const TensorRef &out) {
  RETURN_IF_ERROR(expectSameFloat(name, x, weight, "weight"));
  RETURN_IF_ERROR(expectSameFloat(name, x, out, "output"));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  if (x.shape.empty())
    return fail(name, "the input needs a dim to normalize, not shape []");
  std::vector<int64_t> last{x.shape.back()};
  RETURN_IF_ERROR(expectShape(name, "weight", weight, last));
  if (bias) {
    RETURN_IF_ERROR(expectSameFloat(name, x, *bias, "bias"));
    RETURN_IF_ERROR(expectShape(name, "bias", *bias, last));
  }
  if (!(epsilon >= 0.0) || std::isinf(epsilon))
    return fail(name, "epsilon " + std::to_string(epsilon) + " must be finite and >= 0");
  return Status::ok();
}

Status layerNorm(const TensorRef &x, const TensorRef &weight, const TensorRef *bias, double epsilon,
                 const TensorRef &out) {
  RETURN_IF_ERROR(checkNorm("LayerNorm", x, weight, bias, epsilon, out));
  return dispatchFloat("LayerNorm", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return normRows<T>("LayerNorm", x, weight, bias, epsilon, out,
                       [](const T *in, int64_t n, double eps) {
                         double mean = 0.0, var = 0.0;
                         for (int64_t j = 0; j < n; ++j)
                           mean += static_cast<double>(in[j]);
                         mean /= static_cast<double>(n);
                         for (int64_t j = 0; j < n; ++j) {
                           double d = static_cast<double>(in[j]) - mean;
                           var += d * d;
                         }
                         var /= static_cast<double>(n); // biased, as torch.nn.LayerNorm
                         return std::pair{mean, 1.0 / std::sqrt(var + eps)};
                       });
  });
}

Status rmsNorm(const TensorRef &x, const TensorRef &weight, double epsilon, const TensorRef &out) {
  RETURN_IF_ERROR(checkNorm("RmsNorm", x, weight, nullptr, epsilon, out));
  return dispatchFloat("RmsNorm", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    return normRows<T>("RmsNorm", x, weight, nullptr, epsilon, out,
                       [](const T *in, int64_t n, double eps) {
                         double sumSq = 0.0;
                         for (int64_t j = 0; j < n; ++j)
                           sumSq += static_cast<double>(in[j]) * static_cast<double>(in[j]);
                         return std::pair{0.0, 1.0 / std::sqrt(sumSq / double(n) + eps)};
                       });
  });
}

Status attention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef *mask,
                 bool causal, double scale, const TensorRef &out, AttentionPositions positions) {
  const char *name = "Attention";
  RETURN_IF_ERROR(expectSameFloat(name, q, k, "k"));
  RETURN_IF_ERROR(expectSameFloat(name, q, v, "v"));
  RETURN_IF_ERROR(expectSameFloat(name, q, out, "output"));
  ASSIGN_OR_RETURN(AttentionDims dims, attentionDims(name, q, k, v));
  auto [b, s, h, d, t, hk, dv] = dims;
  RETURN_IF_ERROR(expectShape(name, "output", out, std::vector<int64_t>{b, s, h, dv}));
  if (!std::isfinite(scale))
    return fail(name, "scale " + std::to_string(scale) + " is not finite");
  RETURN_IF_ERROR(
      checkAttentionPositions(name, dims, positions.query, positions.key, causal, mask));
  std::vector<int64_t> full{b, h, s, t}, maskStrides(4, 0);
  if (mask) {
    if (mask->dtype != q.dtype && mask->dtype != DType::i1)
      return fail(name, std::string("mask is ") + dtypeName(mask->dtype) + ", expected " +
                            dtypeName(q.dtype) + " (added) or i1 (kept where true)");
    std::vector<int64_t> joined;
    if (mask->shape.size() > 4 || !broadcastShapes(mask->shape, full, joined) ||
        !sameShape(joined, full))
      return fail(name, "mask shape " + shapeString(mask->shape) + " does not broadcast to " +
                            shapeString(full) + " [b,h,s,t]");
    maskStrides = broadcastStrides(mask->shape, full, 1);
  }
  AttentionShape shape{b, s, h, d, t, hk, dv, mask, std::move(maskStrides), causal, scale};
  if (positions.query) {
    shape.queryPositions = positions.query->as<const int64_t>();
    shape.keyPositions = positions.key->as<const int64_t>();
  }
  if (!shape.fitsBlas())
    return fail(name, "a dimension exceeds the BLAS int range");
  return dispatchFloat(name, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Per (batch, head): P = softmax(scale * Q K^T + mask) [s,t], then O = P V, both through
    // gemm on the strided [b,s,h,d] layouts (no copies). The heads are independent: they run on
    // the kernel threads, each product on one BLAS thread (the same bits on any count).
    parallelForSerialBlas(b * h, 1, [&](int64_t begin, int64_t end) {
      std::vector<T> p(static_cast<size_t>(s * t));
      for (int64_t unit = begin; unit < end; ++unit) {
        int64_t bi = unit / h, hi = unit % h;
        attentionProbs<T>(shape, q.as<const T>(), k.as<const T>(), bi, hi, p.data());
        shape.forRowBlocks([&](int64_t i0, int64_t i1, int64_t keys) {
          gemmStrided<T>(false, false, i1 - i0, dv, keys, T(1), p.data() + i0 * t, t,
                         v.as<const T>() + shape.vOffset(bi, hi), hk * dv, T(0),
                         out.as<T>() + shape.oOffset(bi, hi) + i0 * h * dv, h * dv);
        });
      }
    });
    return Status::ok();
  });
}

Status detail::checkRope(const TensorRef &x, const TensorRef &cos, const TensorRef &sin,
                         const TensorRef &out) {
  const char *name = "Rope";
  RETURN_IF_ERROR(expectLike(name, x, out, "output"));
  RETURN_IF_ERROR(expectDtype(name, "cos", cos, x.dtype));
  RETURN_IF_ERROR(expectDtype(name, "sin", sin, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "sin", sin, cos.shape));
  if (x.shape.empty() || x.shape.back() % 2 != 0)
    return fail(name, "x " + shapeString(x.shape) + " must end in an even head dim");
  std::vector<int64_t> joined;
  if (cos.shape.empty() || cos.shape.back() != x.shape.back() ||
      !broadcastShapes(cos.shape, x.shape, joined) || !sameShape(joined, x.shape))
    return fail(name, "tables " + shapeString(cos.shape) + " must broadcast to x " +
                          shapeString(x.shape) + " and end in its head dim");
  if (out.data == x.data && x.numElements() > 0)
    return fail(name, "the output must not alias x (each element reads the other half)");
  return Status::ok();
}

Status rope(const TensorRef &x, const TensorRef &cos, const TensorRef &sin, const TensorRef &out) {
  const char *name = "Rope";
  RETURN_IF_ERROR(checkRope(x, cos, sin, out));
  int64_t d = x.shape.back(), half = d / 2, rows = d ? x.numElements() / d : 0;
  size_t lead = x.shape.size() - 1;
  std::vector<int64_t> tstrides = broadcastStrides(cos.shape, x.shape, 1);
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.as<const T>(), *cp = cos.as<const T>(), *sp = sin.as<const T>();
    T *yp = out.as<T>();
    std::vector<int64_t> idx(lead, 0);
    int64_t toff = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = xp + r * d, *cr = cp + toff, *sr = sp + toff;
      T *yr = yp + r * d;
      for (int64_t j = 0; j < half; ++j) {
        yr[j] = xr[j] * cr[j] - xr[j + half] * sr[j];
        yr[j + half] = xr[j + half] * cr[j + half] + xr[j] * sr[j + half];
      }
      // Next row: odometer over x's leading dims, moving the table offset along.
      for (size_t k = lead; k-- > 0;) {
        toff += tstrides[k];
        if (++idx[k] < x.shape[k])
          break;
        toff -= tstrides[k] * x.shape[k];
        idx[k] = 0;
      }
    }
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
