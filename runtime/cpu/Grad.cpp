// CPU reference kernels for the backward ops: LayerNormGrad, RmsNormGrad, AttentionGrad,
// GeluGrad, SoftmaxGrad, CrossEntropyGrad and EmbeddingGrad.
#include "runtime/cpu/KernelUtil.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

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
    const T *w = weight.as<const T>();
    std::vector<double> gw(static_cast<size_t>(n), 0.0), gb(static_cast<size_t>(n), 0.0);
    std::vector<double> xhat(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = x.as<const T>() + r * n, *dyr = dy.as<const T>() + r * n;
      double mean = 0.0, var = 0.0;
      for (int64_t j = 0; j < n; ++j)
        mean += static_cast<double>(xr[j]);
      mean /= static_cast<double>(n);
      for (int64_t j = 0; j < n; ++j) {
        double d = static_cast<double>(xr[j]) - mean;
        var += d * d;
      }
      var /= static_cast<double>(n);
      double rstd = 1.0 / std::sqrt(var + epsilon);
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w.
      double meanG = 0.0, meanGX = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        xhat[j] = (static_cast<double>(xr[j]) - mean) * rstd;
        g[j] = static_cast<double>(dyr[j]) * static_cast<double>(w[j]);
        meanG += g[j];
        meanGX += g[j] * xhat[j];
        gw[j] += static_cast<double>(dyr[j]) * xhat[j];
        gb[j] += static_cast<double>(dyr[j]);
      }
      meanG /= static_cast<double>(n);
      meanGX /= static_cast<double>(n);
      T *dxr = dx.as<T>() + r * n;
      for (int64_t j = 0; j < n; ++j)
        dxr[j] = static_cast<T>(rstd * (g[j] - meanG - xhat[j] * meanGX));
    }
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

Status attentionGrad(const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef *mask, bool causal, double scale,
                     const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                     const TensorRef *dmask) {
  const char *name = "AttentionGrad";
  RETURN_IF_ERROR(expectDtype(name, "k", k, q.dtype));
  RETURN_IF_ERROR(expectDtype(name, "v", v, q.dtype));
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
    return fail(name, "q, k, v must be [b,s,h,d], [b,t,hk,d], [b,t,hk,dv]; got " +
                          shapeString(q.shape) + ", " + shapeString(k.shape) + ", " +
                          shapeString(v.shape));
  int64_t b = q.shape[0], s = q.shape[1], h = q.shape[2], d = q.shape[3];
  int64_t t = k.shape[1], hk = k.shape[2], dvDim = v.shape[3];
  if (k.shape[0] != b || k.shape[3] != d || v.shape[0] != b || v.shape[1] != t || v.shape[2] != hk)
    return fail(name, "q " + shapeString(q.shape) + ", k " + shapeString(k.shape) + ", v " +
                          shapeString(v.shape) + " do not agree on b, t, hk or d");
  if (hk < 1 || h % hk != 0)
    return fail(name, std::to_string(hk) + " kv heads do not divide " + std::to_string(h) +
                          " query heads");
  RETURN_IF_ERROR(expectDtype(name, "dout", dout, q.dtype));
  RETURN_IF_ERROR(expectShape(name, "dout", dout, std::vector<int64_t>{b, s, h, dvDim}));
  RETURN_IF_ERROR(expectLike(name, q, dq, "dq"));
  RETURN_IF_ERROR(expectLike(name, k, dk, "dk"));
  RETURN_IF_ERROR(expectLike(name, v, dv, "dv"));
  if (!std::isfinite(scale))
    return fail(name, "scale " + std::to_string(scale) + " is not finite");
  if (bool(mask) != bool(dmask))
    return fail(name, "there is a mask gradient exactly when there is a mask");
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
  int64_t group = h / hk;
  return dispatchFloat(name, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr double kNegInf = -std::numeric_limits<double>::infinity();
    std::vector<double> gq(static_cast<size_t>(q.numElements()), 0.0);
    std::vector<double> gk(static_cast<size_t>(k.numElements()), 0.0);
    std::vector<double> gv(static_cast<size_t>(v.numElements()), 0.0);
    std::vector<double> gm(mask ? static_cast<size_t>(mask->numElements()) : 0, 0.0);
    std::vector<double> scores(static_cast<size_t>(t)), dp(static_cast<size_t>(t));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t i = 0; i < s; ++i) {
          int64_t kvh = hi / group;
          int64_t qOff = ((bi * s + i) * h + hi) * d;
          const T *qrow = q.as<const T>() + qOff;
          const T *dorow = dout.as<const T>() + ((bi * s + i) * h + hi) * dvDim;
          auto maskOffset = [&](int64_t j) {
            return bi * maskStrides[0] + hi * maskStrides[1] + i * maskStrides[2] +
                   j * maskStrides[3];
          };
          // The forward's scores, exactly as attention() computes them.
          double best = kNegInf;
          for (int64_t j = 0; j < t; ++j) {
            double score = kNegInf;
            if (!causal || j <= i + (t - s)) {
              const T *krow = k.as<const T>() + ((bi * t + j) * hk + kvh) * d;
              double dot = 0.0;
              for (int64_t e = 0; e < d; ++e)
                dot += static_cast<double>(qrow[e]) * static_cast<double>(krow[e]);
              score = scale * dot;
              if (mask)
                score += static_cast<double>(mask->as<const T>()[maskOffset(j)]);
            }
            scores[j] = score;
            if (score > best || score != score)
              best = score;
          }
          if (best == kNegInf) // fully masked: the forward wrote zeros, so nothing flows back
            continue;
          double sum = 0.0;
          for (int64_t j = 0; j < t; ++j) {
            scores[j] = std::exp(scores[j] - best);
            sum += scores[j];
          }
          // p = probabilities; dp_j = dout . v_j; ds_j = p_j (dp_j - sum_k p_k dp_k).
          double pdp = 0.0;
          for (int64_t j = 0; j < t; ++j) {
            double p = scores[j] /= sum;
            dp[j] = 0.0;
            if (p == 0.0)
              continue;
            int64_t vOff = ((bi * t + j) * hk + kvh) * dvDim;
            const T *vrow = v.as<const T>() + vOff;
            double dot = 0.0;
            for (int64_t e = 0; e < dvDim; ++e) {
              double g = static_cast<double>(dorow[e]);
              dot += g * static_cast<double>(vrow[e]);
              gv[vOff + e] += p * g;
            }
            dp[j] = dot;
            pdp += p * dot;
          }
          for (int64_t j = 0; j < t; ++j) {
            double p = scores[j];
            if (p == 0.0)
              continue;
            double ds = p * (dp[j] - pdp);
            if (mask)
              gm[maskOffset(j)] += ds;
            int64_t kOff = ((bi * t + j) * hk + kvh) * d;
            const T *krow = k.as<const T>() + kOff;
            for (int64_t e = 0; e < d; ++e) {
              gq[qOff + e] += scale * ds * static_cast<double>(krow[e]);
              gk[kOff + e] += scale * ds * static_cast<double>(qrow[e]);
            }
          }
        }
    store<T>(gq, dq);
    store<T>(gk, dk);
    store<T>(gv, dv);
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
    const double kBeta = std::sqrt(2.0 / std::numbers::pi), kKappa = 0.044715;
    const double kInvSqrt2Pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
    for (int64_t i = 0; i < n; ++i) {
      double v = static_cast<double>(xs[i]), slope;
      if (tanh) {
        // d/dx 0.5 x (1 + tanh(u)), u = beta (x + kappa x^3).
        double th = std::tanh(kBeta * (v + kKappa * v * v * v));
        slope = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * kBeta * (1.0 + 3.0 * kKappa * v * v);
      } else {
        // d/dx x Phi(x) = Phi(x) + x phi(x).
        slope = 0.5 * (1.0 + std::erf(v / std::numbers::sqrt2)) +
                v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
      }
      out[i] = static_cast<T>(static_cast<double>(dys[i]) * slope);
    }
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
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
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
    for (int64_t r = 0; r < count; ++r) {
      int64_t label = loadIndex(labels, r);
      T *out = dlogits.as<T>() + r * vocab;
      if (ignoreIndex && label == *ignoreIndex) {
        std::fill(out, out + vocab, T(0));
        continue;
      }
      const T *row = logits.as<const T>() + r * vocab;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < vocab; ++j)
        if (row[j] > m || row[j] != row[j])
          m = row[j];
      double sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j)
        sum += std::exp(static_cast<double>(row[j]) - m);
      double dl = static_cast<double>(dloss.as<const T>()[r]);
      for (int64_t j = 0; j < vocab; ++j) {
        double p = std::exp(static_cast<double>(row[j]) - m) / sum;
        out[j] = static_cast<T>(dl * (p - (j == label ? 1.0 : 0.0)));
      }
    }
    return Status::ok();
  });
}

Status embeddingGrad(const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable) {
  const char *name = "EmbeddingGrad";
  RETURN_IF_ERROR(expectIndexDtype(name, "ids", ids));
  RETURN_IF_ERROR(expectDtype(name, "dtable", dtable, dy.dtype));
  if (dtable.shape.size() != 2)
    return fail(name, "dtable must be [V, h], not " + shapeString(dtable.shape));
  int64_t vocab = dtable.shape[0], hidden = dtable.shape[1];
  std::vector<int64_t> expected(ids.shape.begin(), ids.shape.end());
  expected.push_back(hidden);
  RETURN_IF_ERROR(expectShape(name, "dy", dy, expected));
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
