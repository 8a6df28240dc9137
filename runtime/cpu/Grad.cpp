// CPU reference kernels for the backward ops: LayerNormGrad, RmsNormGrad, AttentionGrad,
// GeluGrad, SoftmaxGrad, CrossEntropyGrad and EmbeddingGrad.
#include "runtime/cpu/AttentionUtil.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cpu/VectorMath.h"

#include <cmath>
#include <numbers>

namespace megac::runtime::cpu {

using namespace detail;

namespace detail {

Status expectLike(const char *op, const TensorRef &ref, const TensorRef &t, const char *what) {
  RETURN_IF_ERROR(expectDtype(op, what, t, ref.dtype));
  return expectShape(op, what, t, ref.shape);
}

/// The checks LayerNormGrad and RmsNormGrad share: dy, x, dx of one shape; weight [n].
Status checkNormGrad(const char *op, const TensorRef &dy, const TensorRef &x,
                     const TensorRef &weight, double epsilon, const TensorRef &dx) {
  if (x.shape.empty())
    return fail(op, "the input needs a dim to normalize, not shape []");
  RETURN_IF_ERROR(expectLike(op, x, dy, "dy"));
  RETURN_IF_ERROR(expectLike(op, x, dx, "dx"));
  RETURN_IF_ERROR(expectDtype(op, "weight", weight, x.dtype));
  RETURN_IF_ERROR(expectShape(op, "weight", weight, std::vector<int64_t>{x.shape.back()}));
  if (!(epsilon >= 0.0) || std::isinf(epsilon))
    return fail(op, "epsilon " + std::to_string(epsilon) + " must be finite and >= 0");
  return Status::ok();
}

} // namespace detail

namespace {

template <typename T> void store(const std::vector<double> &from, const TensorRef &to) {
  T *out = to.as<T>();
  for (size_t i = 0; i < from.size(); ++i)
    out[i] = static_cast<T>(from[i]);
}

} // namespace

Status layerNormGrad(const TensorRef &dy, const TensorRef &x, const TensorRef &weight,
                     double epsilon, const TensorRef &dx, const TensorRef &dweight,
                     const TensorRef &dbias) {
  const char *name = "LayerNormGrad";
  RETURN_IF_ERROR(checkNormGrad(name, dy, x, weight, epsilon, dx));
  RETURN_IF_ERROR(expectLike(name, weight, dweight, "dweight"));
  RETURN_IF_ERROR(expectLike(name, weight, dbias, "dbias"));
  int64_t n = x.shape.back(), rows = product(x.shape.first(x.shape.size() - 1));
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *w = weight.as<const T>(), *xs = x.as<const T>(), *dys = dy.as<const T>();
    // Three passes, each split over the kernel threads where its items are independent, with
    // every value computed by the same expressions in the same order as one serial loop: the
    // rows' mean and 1/std; the weight and bias gradients, whose columns are independent (each
    // sums its rows in order); then dx row by row (last, so dx may be dy or x).
    std::vector<double> means(static_cast<size_t>(rows)), rstds(static_cast<size_t>(rows));
    parallelFor(rows, grainFor(2 * n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T *xr = xs + r * n;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < n; ++j)
          mean += static_cast<double>(xr[j]);
        mean /= static_cast<double>(n);
        for (int64_t j = 0; j < n; ++j) {
          double d = static_cast<double>(xr[j]) - mean;
          var += d * d;
        }
        var /= static_cast<double>(n);
        means[size_t(r)] = mean;
        rstds[size_t(r)] = 1.0 / std::sqrt(var + epsilon);
      }
    });
    std::vector<double> gw(static_cast<size_t>(n), 0.0), gb(static_cast<size_t>(n), 0.0);
    constexpr int64_t kBlock = 64; // columns per task: 64 double pairs stay in L1 over the rows
    parallelFor((n + kBlock - 1) / kBlock, grainFor(rows * kBlock), [&](int64_t b0, int64_t b1) {
      int64_t j0 = b0 * kBlock, j1 = std::min(n, b1 * kBlock);
      for (int64_t r = 0; r < rows; ++r) {
        const T *xr = xs + r * n, *dyr = dys + r * n;
        double mean = means[size_t(r)], rstd = rstds[size_t(r)];
        for (int64_t j = j0; j < j1; ++j) {
          double xhat = (static_cast<double>(xr[j]) - mean) * rstd;
          gw[size_t(j)] += static_cast<double>(dyr[j]) * xhat;
          gb[size_t(j)] += static_cast<double>(dyr[j]);
        }
      }
    });
    parallelFor(rows, grainFor(4 * n), [&](int64_t begin, int64_t end) {
      std::vector<double> xhat(static_cast<size_t>(n)), g(static_cast<size_t>(n));
      for (int64_t r = begin; r < end; ++r) {
        const T *xr = xs + r * n, *dyr = dys + r * n;
        double mean = means[size_t(r)], rstd = rstds[size_t(r)];
        // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w.
        double meanG = 0.0, meanGX = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          xhat[j] = (static_cast<double>(xr[j]) - mean) * rstd;
          g[j] = static_cast<double>(dyr[j]) * static_cast<double>(w[j]);
          meanG += g[j];
          meanGX += g[j] * xhat[j];
        }
        meanG /= static_cast<double>(n);
        meanGX /= static_cast<double>(n);
        T *dxr = dx.as<T>() + r * n;
        for (int64_t j = 0; j < n; ++j)
          dxr[j] = static_cast<T>(rstd * (g[j] - meanG - xhat[j] * meanGX));
      }
    });
    store<T>(gw, dweight);
    store<T>(gb, dbias);
    return Status::ok();
  });
}

Status rmsNormGrad(const TensorRef &dy, const TensorRef &x, const TensorRef &weight, double epsilon,
                   const TensorRef &dx, const TensorRef &dweight) {
  const char *name = "RmsNormGrad";
  RETURN_IF_ERROR(checkNormGrad(name, dy, x, weight, epsilon, dx));
  RETURN_IF_ERROR(expectLike(name, weight, dweight, "dweight"));
  int64_t n = x.shape.back(), rows = product(x.shape.first(x.shape.size() - 1));
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *w = weight.as<const T>();
    std::vector<double> gw(static_cast<size_t>(n), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x.as<const T>() + r * n, *dyr = dy.as<const T>() + r * n;
      double sumSq = 0.0;
      for (int64_t j = 0; j < n; ++j)
        sumSq += static_cast<double>(xr[j]) * static_cast<double>(xr[j]);
      double rrms = 1.0 / std::sqrt(sumSq / static_cast<double>(n) + epsilon);
      // dx = rrms * g - x * rrms^3 * mean(g * x) with g = dy * w.
      double meanGX = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        double xj = static_cast<double>(xr[j]), dyj = static_cast<double>(dyr[j]);
        meanGX += dyj * static_cast<double>(w[j]) * xj;
        gw[j] += dyj * xj * rrms;
      }
      meanGX /= static_cast<double>(n);
      T *dxr = dx.as<T>() + r * n;
      for (int64_t j = 0; j < n; ++j) {
        double xj = static_cast<double>(xr[j]);
        double gj = static_cast<double>(dyr[j]) * static_cast<double>(w[j]);
        dxr[j] = static_cast<T>(rrms * gj - xj * rrms * rrms * rrms * meanGX);
      }
    }
    store<T>(gw, dweight);
    return Status::ok();
  });
}

namespace {

/// One (batch, head) of AttentionGrad: recomputes P, then dV += P^T dO, dS, dQ = scale dS K and
/// dK += scale dS^T Q, and adds dS into the mask gradient gm (when there is a mask). p and ds
/// are [s,t] scratch.
template <typename T>
void attentionGradHead(const AttentionShape &a, const T *qs, const T *ks, const T *vs, const T *dos,
                       int64_t bi, int64_t hi, T *p, T *ds, T *gq, T *gk, T *gv, double *gm) {
  int64_t t = a.t, d = a.d, dv = a.dv;
  const std::vector<int64_t> &ms = a.maskStrides;
  const T *qh = qs + a.qOffset(bi, hi), *kh = ks + a.kOffset(bi, hi);
  const T *vh = vs + a.vOffset(bi, hi), *doh = dos + a.oOffset(bi, hi);
  // The forward's probabilities, exactly as attention() computes them.
  attentionProbs<T>(a, qs, ks, bi, hi, p);
  T sc = static_cast<T>(a.scale);
  // By row blocks, each over the keys it sees (P and dS are exactly 0 after them).
  a.forRowBlocks([&](int64_t i0, int64_t i1, int64_t keys) {
    int64_t rows = i1 - i0;
    const T *pb = p + i0 * t, *dob = doh + i0 * a.h * dv;
    T *db = ds + i0 * t;
    // dV += P^T dO; dP = dO V^T.
    gemmStrided<T>(true, false, keys, dv, rows, T(1), pb, t, dob, a.h * dv, T(1),
                   gv + a.vOffset(bi, hi), a.hk * dv);
    gemmStrided<T>(false, true, rows, keys, dv, T(1), dob, a.h * dv, vh, a.hk * dv, T(0), db, t);
    // dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij'); masked keys (P = 0) get exactly 0, so a fully
    // masked row passes nothing back.
    for (int64_t i = i0; i < i1; ++i) {
      const T *pr = p + i * t;
      T *dr = ds + i * t;
      if constexpr (std::is_same_v<T, float>) { // vectorised, the sum in double (VectorMath.h)
        vmath::softmaxGradRowF32(pr, dr, keys);
      } else {
        double pdp = 0.0;
        for (int64_t j = 0; j < keys; ++j)
          if (pr[j] != T(0))
            pdp += static_cast<double>(pr[j]) * static_cast<double>(dr[j]);
        for (int64_t j = 0; j < keys; ++j)
          dr[j] =
              pr[j] == T(0)
                  ? T(0)
                  : static_cast<T>(static_cast<double>(pr[j]) * (static_cast<double>(dr[j]) - pdp));
      }
      if (gm) { // keys after `keys` would add exact zeros
        double *gmr = gm + bi * ms[0] + hi * ms[1] + i * ms[2];
        for (int64_t j = 0; j < keys; ++j)
          gmr[j * ms[3]] += static_cast<double>(dr[j]);
      }
    }
    // dQ = scale dS K; dK += scale dS^T Q.
    gemmStrided<T>(false, false, rows, d, keys, sc, db, t, kh, a.hk * d, T(0),
                   gq + a.qOffset(bi, hi) + i0 * a.h * d, a.h * d);
    gemmStrided<T>(true, false, keys, d, rows, sc, db, t, qh + i0 * a.h * d, a.h * d, T(1),
                   gk + a.kOffset(bi, hi), a.hk * d);
  });
}

} // namespace

Status attentionGrad(const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef *mask, bool causal, double scale,
                     const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                     const TensorRef *dmask, AttentionPositions positions) {
  const char *name = "AttentionGrad";
  RETURN_IF_ERROR(expectDtype(name, "k", k, q.dtype));
  RETURN_IF_ERROR(expectDtype(name, "v", v, q.dtype));
  ASSIGN_OR_RETURN(AttentionDims dims, attentionDims(name, q, k, v));
  auto [b, s, h, d, t, hk, dvDim] = dims;
  RETURN_IF_ERROR(expectDtype(name, "dout", dout, q.dtype));
  RETURN_IF_ERROR(expectShape(name, "dout", dout, std::vector<int64_t>{b, s, h, dvDim}));
  RETURN_IF_ERROR(expectLike(name, q, dq, "dq"));
  RETURN_IF_ERROR(expectLike(name, k, dk, "dk"));
  RETURN_IF_ERROR(expectLike(name, v, dv, "dv"));
  if (!std::isfinite(scale))
    return fail(name, "scale " + std::to_string(scale) + " is not finite");
  if (bool(mask) != bool(dmask))
    return fail(name, "there is a mask gradient exactly when there is a mask");
  RETURN_IF_ERROR(
      checkAttentionPositions(name, dims, positions.query, positions.key, causal, mask));
  std::vector<int64_t> full{b, h, s, t}, maskStrides(4, 0);
  if (mask) {
    if (mask->dtype != q.dtype)
      return fail(name, std::string("mask is ") + dtypeName(mask->dtype) + ", expected " +
                            dtypeName(q.dtype) + " (an additive mask; a boolean one has no " +
                            "gradient)");
    std::vector<int64_t> joined;
    if (mask->shape.size() > 4 || !broadcastShapes(mask->shape, full, joined) ||
        !sameShape(joined, full))
      return fail(name, "mask shape " + shapeString(mask->shape) + " does not broadcast to " +
                            shapeString(full) + " [b,h,s,t]");
    RETURN_IF_ERROR(expectLike(name, *mask, *dmask, "dmask"));
    maskStrides = broadcastStrides(mask->shape, full, 1);
  }
  AttentionShape shape{b, s, h, d, t, hk, dvDim, mask, std::move(maskStrides), causal, scale};
  if (positions.query) {
    shape.queryPositions = positions.query->as<const int64_t>();
    shape.keyPositions = positions.key->as<const int64_t>();
  }
  if (!shape.fitsBlas())
    return fail(name, "a dimension exceeds the BLAS int range");
  const std::vector<int64_t> &ms = shape.maskStrides;
  return dispatchFloat(name, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *qs = q.as<const T>(), *ks = k.as<const T>(), *vs = v.as<const T>();
    const T *dos = dout.as<const T>();
    T *gq = dq.as<T>(), *gk = dk.as<T>(), *gv = dv.as<T>();
    // dk and dv sum over the query heads sharing a kv head (GQA); dq is written per head.
    std::fill(gk, gk + k.numElements(), T(0));
    std::fill(gv, gv + v.numElements(), T(0));
    std::vector<double> gm(mask ? static_cast<size_t>(mask->numElements()) : 0, 0.0);
    // The heads run on the kernel threads, each product on one BLAS thread. A task is every
    // head that adds into the same dk/dv rows (the query heads of one kv head) or the same mask
    // gradient rows (all batches or heads a broadcast mask spans), run in the serial loop's
    // order (batch, then head), so every sum adds in the same order on any thread count.
    int64_t groupSize = h / hk;
    int64_t batchTasks = mask && ms[0] == 0 ? 1 : b;
    int64_t headTasks = mask && ms[1] == 0 ? 1 : hk;
    int64_t batchesPerTask = b / batchTasks, kvHeadsPerTask = hk / headTasks;
    parallelForSerialBlas(batchTasks * headTasks, 1, [&](int64_t taskBegin, int64_t taskEnd) {
      std::vector<T> p(static_cast<size_t>(s * t)), ds(static_cast<size_t>(s * t));
      for (int64_t task = taskBegin; task < taskEnd; ++task) {
        int64_t b0 = task / headTasks * batchesPerTask;
        int64_t h0 = task % headTasks * kvHeadsPerTask * groupSize;
        for (int64_t bi = b0; bi < b0 + batchesPerTask; ++bi)
          for (int64_t hi = h0; hi < h0 + kvHeadsPerTask * groupSize; ++hi)
            attentionGradHead<T>(shape, qs, ks, vs, dos, bi, hi, p.data(), ds.data(), gq, gk, gv,
                                 mask ? gm.data() : nullptr);
      }
    });
    if (mask)
      store<T>(gm, *dmask);
    return Status::ok();
  });
}

Status geluGrad(const TensorRef &dy, const TensorRef &x, bool tanh, const TensorRef &dx) {
  const char *name = "GeluGrad";
  RETURN_IF_ERROR(expectLike(name, x, dy, "dy"));
  RETURN_IF_ERROR(expectLike(name, x, dx, "dx"));
  int64_t n = x.numElements();
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *xs = x.as<const T>(), *dys = dy.as<const T>();
    T *out = dx.as<T>();
    if constexpr (std::is_same_v<T, float>)
      if (!tanh) { // the vectorised erf and exp (VectorMath.h), in f32
        parallelFor(n, 1 << 12, [&](int64_t begin, int64_t end) {
          vmath::geluErfGradF32(dys + begin, xs + begin, out + begin, end - begin);
        });
        return Status::ok();
      }
    const double kBeta = std::sqrt(2.0 / std::numbers::pi), kKappa = 0.044715;
    const double kInvSqrt2Pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
    // Elements are independent: contiguous ranges of them run on the kernel threads.
    parallelFor(n, 1 << 12, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        double v = static_cast<double>(xs[i]), slope;
        if (tanh) {
          // d/dx 0.5 x (1 + tanh(u)), u = beta (x + kappa x^3).
          double th = std::tanh(kBeta * (v + kKappa * v * v * v));
          slope =
              0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * kBeta * (1.0 + 3.0 * kKappa * v * v);
        } else {
          // d/dx x Phi(x) = Phi(x) + x phi(x).
          slope = 0.5 * (1.0 + std::erf(v / std::numbers::sqrt2)) +
                  v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
        }
        out[i] = static_cast<T>(static_cast<double>(dys[i]) * slope);
      }
    });
    return Status::ok();
  });
}

Status softmaxGrad(const TensorRef &dy, const TensorRef &y, int64_t axis, const TensorRef &dx) {
  const char *name = "SoftmaxGrad";
  RETURN_IF_ERROR(expectLike(name, y, dy, "dy"));
  RETURN_IF_ERROR(expectLike(name, y, dx, "dx"));
  int64_t rank = static_cast<int64_t>(y.shape.size());
  if (axis < 0 || axis >= rank)
    return fail(name, "axis " + std::to_string(axis) + " is out of range for rank " +
                          std::to_string(rank));
  int64_t outer = product(y.shape.first(axis)), dim = y.shape[axis];
  int64_t inner = product(y.shape.subspan(axis + 1));
  return dispatchFloat(name, y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *ys = y.as<const T>(), *dys = dy.as<const T>();
    T *out = dx.as<T>();
    // Every (o, in) row is independent: split them over the kernel threads.
    parallelFor(outer * inner, grainFor(4 * dim), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        int64_t o = row / inner, in = row % inner;
        int64_t base = o * dim * inner + in;
        double dot = 0.0;
        for (int64_t j = 0; j < dim; ++j)
          dot += static_cast<double>(dys[base + j * inner]) *
                 static_cast<double>(ys[base + j * inner]);
        for (int64_t j = 0; j < dim; ++j) {
          int64_t at = base + j * inner;
          out[at] =
              static_cast<T>(static_cast<double>(ys[at]) * (static_cast<double>(dys[at]) - dot));
        }
      }
    });
    return Status::ok();
  });
}

Status crossEntropyGrad(const TensorRef &dloss, const TensorRef &logits, const TensorRef &labels,
                        std::optional<int64_t> ignoreIndex, const TensorRef &dlogits) {
  const char *name = "CrossEntropyGrad";
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  std::span<const int64_t> rows = logits.shape.first(logits.shape.size() - 1);
  RETURN_IF_ERROR(expectShape(name, "labels", labels, rows));
  RETURN_IF_ERROR(expectDtype(name, "dloss", dloss, logits.dtype));
  RETURN_IF_ERROR(expectShape(name, "dloss", dloss, rows));
  RETURN_IF_ERROR(expectLike(name, logits, dlogits, "dlogits"));
  int64_t vocab = logits.shape.back(), count = labels.numElements();
  for (int64_t r = 0; r < count; ++r) {
    int64_t label = loadIndex(labels, r);
    if (!(ignoreIndex && label == *ignoreIndex) && (label < 0 || label >= vocab))
      return fail(name, "label " + std::to_string(label) + " (element " + std::to_string(r) +
                            " of the labels) is outside [0, " + std::to_string(vocab) + ")");
  }
  return dispatchFloat(name, logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Rows are independent: split them over the kernel threads.
    parallelFor(count, grainFor(4 * vocab), [&](int64_t begin, int64_t end) {
      std::vector<double> e(static_cast<size_t>(vocab)); // exp(logit - max), computed once
      for (int64_t r = begin; r < end; ++r) {
        int64_t label = loadIndex(labels, r);
        T *out = dlogits.as<T>() + r * vocab;
        if (ignoreIndex && label == *ignoreIndex) {
          std::fill(out, out + vocab, T(0));
          continue;
        }
        const T *row = logits.as<const T>() + r * vocab;
        double m = vmath::contiguousRowMax(row, vocab);
        double dl = static_cast<double>(dloss.as<const T>()[r]);
        if constexpr (std::is_same_v<T, float>) {
          // f32: the vectorised exp (VectorMath.h) into the output, then dl p_j in f32, and the
          // label's dl (p - 1) from the unscaled exp, in double.
          double sum = vmath::expShiftSumF32(row, static_cast<float>(m), out, vocab);
          double labelExp = static_cast<double>(out[label]);
          vmath::scaleF32(out, static_cast<float>(dl / sum), vocab);
          out[label] = static_cast<float>(dl * (labelExp / sum - 1.0));
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < vocab; ++j) {
          e[j] = std::exp(static_cast<double>(row[j]) - m);
          sum += e[j];
        }
        for (int64_t j = 0; j < vocab; ++j) {
          double p = e[j] / sum;
          out[j] = static_cast<T>(dl * (p - (j == label ? 1.0 : 0.0)));
        }
      }
    });
    return Status::ok();
  });
}

Status embeddingGrad(const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable) {
  const char *name = "EmbeddingGrad";
  RETURN_IF_ERROR(checkEmbeddingGrad(dy, ids, dtable));
  int64_t vocab = dtable.shape[0], hidden = dtable.shape[1];
  int64_t count = ids.numElements();
  for (int64_t j = 0; j < count; ++j) {
    int64_t id = loadIndex(ids, j);
    if (id < 0 || id >= vocab)
      return fail(name, "id " + std::to_string(id) + " (element " + std::to_string(j) +
                            " of the ids) is outside the table's " + std::to_string(vocab) +
                            " rows");
  }
  return dispatchFloat(name, dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *out = dtable.as<T>();
    std::fill(out, out + vocab * hidden, T(0));
    // Positions in order: a fixed summation order per row, so the result is deterministic.
    for (int64_t j = 0; j < count; ++j) {
      T *row = out + loadIndex(ids, j) * hidden;
      const T *src = dy.as<const T>() + j * hidden;
      for (int64_t e = 0; e < hidden; ++e)
        row[e] += src[e];
    }
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
