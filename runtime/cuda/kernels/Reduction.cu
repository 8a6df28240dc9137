// Reduce, Softmax, SoftmaxGrad, CrossEntropy, CrossEntropyGrad and the vocab-parallel
// cross-entropy pieces. Float sums accumulate in double (as the CPU reference does), in a fixed
// order per shape: a thread or a block per output, no atomics. Row kernels (softmax along the
// last dim, cross entropy) use one block per row.
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cuda/kernels/BlockReduce.cuh"
#include "runtime/cuda/kernels/CpuChecks.cuh"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace megac::runtime::cuda {

using cpu::detail::expectIndexDtype;
using cpu::detail::product;

namespace {

// ---- Reduce ----------------------------------------------------------------------------------

/// An element as the reduction sees it: double for floats (exact for every float type), the
/// integer itself for integers.
template <typename T> __device__ __forceinline__ auto loadValue(const T *p, int64_t i) {
  if constexpr (std::is_integral_v<T>)
    return p[i];
  else
    return static_cast<double>(load(p, i));
}

/// out[o] = reduction over the `count` elements of the box `red` at the kept index o. With
/// kBlock one block per output (threads stride over the box, then a block tree), else one
/// thread per output.
template <typename T, bool kBlock>
__global__ void reduceKernel(const T *x, T *y, Dims kept, Dims red, int64_t outputs, int64_t count,
                             int kind) {
  using V = decltype(loadValue(x, 0));
  // Integers sum in uint64 (wrapping, as the CPU); floats in double.
  using S = std::conditional_t<std::is_integral_v<T>, unsigned long long, double>;
  int64_t first = kBlock ? blockIdx.x : blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t step = kBlock ? gridDim.x : int64_t(gridDim.x) * blockDim.x;
  int64_t r0 = kBlock ? threadIdx.x : 0, rs = kBlock ? blockDim.x : 1;
  for (int64_t o = first; o < outputs; o += step) {
    int64_t base = offsetOf(kept, o);
    if (kind == int(ReduceKind::sum) || kind == int(ReduceKind::mean)) {
      S acc = 0;
      for (int64_t r = r0; r < count; r += rs)
        acc += static_cast<S>(loadValue(x, base + offsetOf(red, r)));
      if (kBlock)
        acc = blockSum(acc);
      if (!kBlock || threadIdx.x == 0) {
        if constexpr (std::is_integral_v<T>) {
          int64_t sum = static_cast<int64_t>(acc);
          y[o] = static_cast<T>(kind == int(ReduceKind::mean) ? sum / count : sum);
        } else {
          double v = kind == int(ReduceKind::mean) ? acc / static_cast<double>(count) : acc;
          store(y, o, static_cast<Compute<T>>(v));
        }
      }
    } else {
      bool isMax = kind == int(ReduceKind::max);
      V best = loadValue(x, base); // count >= 1 (checked on the host)
      for (int64_t r = r0; r < count; r += rs) {
        V v = loadValue(x, base + offsetOf(red, r));
        best = isMax ? maxNaN(best, v) : minNaN(best, v);
      }
      if (kBlock)
        best = isMax ? blockReduce(best, MaxOp{}) : blockReduce(best, MinOp{});
      if (!kBlock || threadIdx.x == 0) {
        if constexpr (std::is_integral_v<T>)
          y[o] = best;
        else
          store(y, o, static_cast<Compute<T>>(best));
      }
    }
  }
}

// ---- Softmax ---------------------------------------------------------------------------------

/// The largest element of row xr [n] in double (NaN wins), over the block; every thread gets it.
template <typename T> __device__ double blockRowMax(const T *xr, int64_t n) {
  double m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    m = maxNaN(m, static_cast<double>(load(xr, j)));
  return blockMax(m);
}

/// Softmax of rows x [rows, n] (the last dim): a block per row, max and sum in double.
template <typename T> __global__ void softmaxRows(const T *x, T *y, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    double m = blockRowMax(xr, n);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += exp(static_cast<double>(load(xr, j)) - m);
    double inv = 1.0 / blockSum(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      store(y + r * n, j, static_cast<Compute<T>>(exp(static_cast<double>(load(xr, j)) - m) * inv));
  }
}

/// Softmax along a middle dim: x viewed as [outer, n, inner], one thread per (outer, inner).
template <typename T>
__global__ void softmaxStrided(const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < outer * inner;
       c += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j)
      m = maxNaN(m, static_cast<double>(load(x, base + j * inner)));
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j)
      s += exp(static_cast<double>(load(x, base + j * inner)) - m);
    double inv = 1.0 / s;
    for (int64_t j = 0; j < n; ++j)
      store(y, base + j * inner,
            static_cast<Compute<T>>(exp(static_cast<double>(load(x, base + j * inner)) - m) * inv));
  }
}

/// dx = y * (dy - sum(dy * y)) along the last dim, a block per row.
template <typename T>
__global__ void softmaxGradRows(const T *dy, const T *y, T *dx, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *dyr = dy + r * n, *yr = y + r * n;
    double dot = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot += static_cast<double>(load(dyr, j)) * static_cast<double>(load(yr, j));
    dot = blockSum(dot);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      store(dx + r * n, j,
            static_cast<Compute<T>>(static_cast<double>(load(yr, j)) *
                                    (static_cast<double>(load(dyr, j)) - dot)));
  }
}

template <typename T>
__global__ void softmaxGradStrided(const T *dy, const T *y, T *dx, int64_t outer, int64_t n,
                                   int64_t inner) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < outer * inner;
       c += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (c / inner) * n * inner + c % inner;
    double dot = 0.0;
    for (int64_t j = 0; j < n; ++j)
      dot += static_cast<double>(load(dy, base + j * inner)) *
             static_cast<double>(load(y, base + j * inner));
    for (int64_t j = 0; j < n; ++j) {
      int64_t at = base + j * inner;
      store(dx, at,
            static_cast<Compute<T>>(static_cast<double>(load(y, at)) *
                                    (static_cast<double>(load(dy, at)) - dot)));
    }
  }
}

// ---- Cross entropy ---------------------------------------------------------------------------

__device__ __forceinline__ int64_t loadLabel(const void *labels, bool i64, int64_t r) {
  return i64 ? static_cast<const int64_t *>(labels)[r]
             : static_cast<int64_t>(static_cast<const int32_t *>(labels)[r]);
}

/// Row max and log-sum-exp pieces of row xr [n] over the block: m and sum(exp(x - m)).
template <typename T> __device__ void rowMaxSum(const T *xr, int64_t n, double &m, double &sum) {
  m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    m = maxNaN(m, static_cast<double>(load(xr, j)));
  m = blockMax(m);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    s += exp(static_cast<double>(load(xr, j)) - m);
  sum = blockSum(s);
}

/// loss[r] = logsumexp(logits[r, :]) - logits[r, label]; ignored rows 0; a label outside [0, V)
/// raises labelOutOfRange and leaves 0. With dlogits, the gradient instead:
/// dlogits[r, j] = dloss[r] * (softmax_j - (j == label)).
template <typename T>
__global__ void crossEntropyRows(const T *logits, const void *labels, bool labelsI64,
                                 bool hasIgnore, int64_t ignoreIndex, int64_t rows, int64_t vocab,
                                 T *loss, const T *dloss, T *dlogits, int *errors) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = loadLabel(labels, labelsI64, r);
    bool ignored = hasIgnore && label == ignoreIndex;
    bool bad = !ignored && (label < 0 || label >= vocab);
    if (bad && threadIdx.x == 0)
      raise(errors, DeviceError::labelOutOfRange);
    if (ignored || bad) {
      if (loss && threadIdx.x == 0)
        store(loss, r, Compute<T>(0));
      if (dlogits)
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
          store(dlogits + r * vocab, j, Compute<T>(0));
      continue; // uniform across the block: no barrier is skipped by some threads only
    }
    const T *xr = logits + r * vocab;
    double m, sum;
    rowMaxSum(xr, vocab, m, sum);
    if (loss && threadIdx.x == 0)
      store(loss, r, static_cast<Compute<T>>(m + log(sum) - static_cast<double>(load(xr, label))));
    if (dlogits) {
      double dl = static_cast<double>(load(dloss, r)), inv = 1.0 / sum;
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        double p = exp(static_cast<double>(load(xr, j)) - m) * inv;
        store(dlogits + r * vocab, j, static_cast<Compute<T>>(dl * (p - (j == label ? 1.0 : 0.0))));
      }
    }
  }
}

/// Shard statistics: rowMax[r] and targetLogit[r] (S: float, or double for f64 logits).
template <typename T, typename S>
__global__ void shardStats(const T *logits, const void *labels, bool labelsI64, int64_t rows,
                           int64_t vocab, int64_t vocabStart, S *rowMax, S *target) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = logits + r * vocab;
    double m = blockRowMax(xr, vocab);
    if (threadIdx.x == 0) {
      int64_t local = loadLabel(labels, labelsI64, r) - vocabStart;
      rowMax[r] = static_cast<S>(m);
      target[r] = local >= 0 && local < vocab ? static_cast<S>(load(xr, local)) : S(0);
    }
  }
}

template <typename T, typename S>
__global__ void shardSumExp(const T *logits, const S *globalMax, S *sumExp, int64_t rows,
                            int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = logits + r * vocab;
    double m = static_cast<double>(globalMax[r]), s = 0.0;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      s += exp(static_cast<double>(load(xr, j)) - m);
    s = blockSum(s);
    if (threadIdx.x == 0)
      sumExp[r] = static_cast<S>(s);
  }
}

template <typename T, typename S>
__global__ void shardLoss(const S *globalMax, const S *sumExp, const S *target, const void *labels,
                          bool labelsI64, bool hasIgnore, int64_t ignoreIndex, T *out,
                          int64_t rows) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    bool ignored = hasIgnore && loadLabel(labels, labelsI64, r) == ignoreIndex;
    double v = ignored ? 0.0
                       : log(static_cast<double>(sumExp[r])) + static_cast<double>(globalMax[r]) -
                             static_cast<double>(target[r]);
    store(out, r, static_cast<Compute<T>>(v));
  }
}

template <typename T, typename S>
__global__ void shardGrad(const T *dloss, const T *logits, const void *labels, bool labelsI64,
                          int64_t vocabStart, const S *globalMax, const S *sumExp, bool hasIgnore,
                          int64_t ignoreIndex, T *dlogits, int64_t rows, int64_t vocab) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = loadLabel(labels, labelsI64, r);
    T *out = dlogits + r * vocab;
    if (hasIgnore && label == ignoreIndex) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
        store(out, j, Compute<T>(0));
      continue;
    }
    const T *xr = logits + r * vocab;
    double m = static_cast<double>(globalMax[r]), inv = 1.0 / static_cast<double>(sumExp[r]);
    double dl = static_cast<double>(load(dloss, r));
    int64_t local = label - vocabStart;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      double p = exp(static_cast<double>(load(xr, j)) - m) * inv;
      store(out, j, static_cast<Compute<T>>(dl * (p - (j == local ? 1.0 : 0.0))));
    }
  }
}

/// Calls f(T{}, S{}) with S the statistics type of float dtype T's logits.
template <typename F> bool visitFloatStats(DType dtype, F &&f) {
  return visitFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    f(T{}, S{});
  });
}

/// A softmax over `axis` of x: the rows before it, its length and the elements after it.
struct SoftmaxSplit {
  int64_t outer, n, inner;
};
/// Checks the axis and x's dtype (a float) and splits x's shape around the axis.
StatusOr<SoftmaxSplit> softmaxSplit(const char *name, const TensorRef &x, int64_t axis) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0 || axis >= rank)
    return fail(name, "axis " + std::to_string(axis) + " is out of range for rank " +
                          std::to_string(rank));
  if (!isFloat(x.dtype))
    return unsupportedDtype(name, x.dtype);
  return SoftmaxSplit{product(x.shape.first(axis)), x.shape[axis],
                      product(x.shape.subspan(axis + 1))};
}

/// Checks and splits x around `axis` (softmaxSplit), then, unless x is empty, calls
/// launch(T{}, split) for x's float storage type T; the launches' status.
template <typename Launch>
Status alongAxis(const char *name, const TensorRef &x, int64_t axis, Launch launch) {
  ASSIGN_OR_RETURN(SoftmaxSplit sp, softmaxSplit(name, x, axis));
  if (sp.outer * sp.n * sp.inner == 0)
    return Status::ok();
  visitFloat(x.dtype, [&](auto tag) { launch(tag, sp); });
  return launchStatus(name);
}

/// rows(args..., outer, n) with a block per row when the axis is innermost, else
/// strided(args..., outer, n, inner) with a thread per (outer, inner) pair.
template <typename Rows, typename Strided, typename... A>
void rowsOrStrided(const Context &ctx, const SoftmaxSplit &sp, Rows rows, Strided strided,
                   A... args) {
  if (sp.inner == 1)
    rows<<<rowBlocks(sp.outer), rowThreads(sp.n), 0, ctx.stream>>>(args..., sp.outer, sp.n);
  else
    strided<<<blocksFor(sp.outer * sp.inner), 256, 0, ctx.stream>>>(args..., sp.outer, sp.n,
                                                                    sp.inner);
}

DType statsDtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

Status expectLike(const char *op, const TensorRef &ref, const TensorRef &t, const char *what) {
  RETURN_IF_ERROR(expectDtype(op, what, t, ref.dtype));
  return expectShape(op, what, t, ref.shape);
}

/// The checks every cross-entropy kernel makes on logits [..., V] and labels [...].
Status checkLogits(const char *name, const TensorRef &logits, const TensorRef &labels) {
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  RETURN_IF_ERROR(expectShape(name, "labels", labels, logits.shape.first(logits.shape.size() - 1)));
  if (!isFloat(logits.dtype))
    return unsupportedDtype(name, logits.dtype);
  return Status::ok();
}

/// A statistics tensor of the rows of `labels`: f32 (f64 for f64 logits), labels' shape.
Status expectStats(const char *name, const char *what, const TensorRef &t, DType logits,
                   const TensorRef &labels) {
  RETURN_IF_ERROR(expectDtype(name, what, t, statsDtype(logits)));
  return expectShape(name, what, t, labels.shape);
}

} // namespace

Status reduce(const Context &ctx, ReduceKind kind, const TensorRef &x,
              std::span<const int64_t> axes, const TensorRef &out) {
  const char *name = "Reduce";
  ASSIGN_OR_RETURN(cpu::detail::ReduceGeometry g, cpu::detail::checkReduce(kind, x, axes, out));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank > kMaxRank)
    return fail(name, "rank " + std::to_string(rank) + " exceeds the CUDA kernels' " +
                          std::to_string(kMaxRank));
  Dims kept, red;
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= x.shape[d];
  }
  for (int64_t d = 0; d < rank; ++d) {
    Dims &box = g.reduced[size_t(d)] ? red : kept;
    box.size[box.rank] = x.shape[d];
    box.stride[box.rank] = strides[d];
    ++box.rank;
  }
  int64_t outputs = g.outputs, count = g.count;
  bool integral = x.dtype == DType::i64 || x.dtype == DType::i32;
  if (!isFloat(x.dtype) && !integral)
    return fail(name, std::string("dtype ") + dtypeName(x.dtype) + " is not supported");
  if (outputs == 0)
    return Status::ok();
  // Many outputs or short reductions: a thread per output; else a block per output.
  bool perThread = count <= 64 || outputs >= 8192;
  visitNumeric(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (perThread)
      reduceKernel<T, false><<<blocksFor(outputs), 256, 0, ctx.stream>>>(
          x.as<const T>(), out.as<T>(), kept, red, outputs, count, int(kind));
    else
      reduceKernel<T, true><<<rowBlocks(outputs), 256, 0, ctx.stream>>>(
          x.as<const T>(), out.as<T>(), kept, red, outputs, count, int(kind));
  });
  return launchStatus(name);
}

Status softmax(const Context &ctx, const TensorRef &x, int64_t axis, const TensorRef &out) {
  const char *name = "Softmax";
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  return alongAxis(name, x, axis, [&](auto tag, const SoftmaxSplit &sp) {
    using T = decltype(tag);
    rowsOrStrided(ctx, sp, softmaxRows<T>, softmaxStrided<T>, x.as<const T>(), out.as<T>());
  });
}

Status softmaxGrad(const Context &ctx, const TensorRef &dy, const TensorRef &y, int64_t axis,
                   const TensorRef &dx) {
  const char *name = "SoftmaxGrad";
  RETURN_IF_ERROR(expectLike(name, y, dy, "dy"));
  RETURN_IF_ERROR(expectLike(name, y, dx, "dx"));
  return alongAxis(name, y, axis, [&](auto tag, const SoftmaxSplit &sp) {
    using T = decltype(tag);
    rowsOrStrided(ctx, sp, softmaxGradRows<T>, softmaxGradStrided<T>, dy.as<const T>(),
                  y.as<const T>(), dx.as<T>());
  });
}

Status crossEntropy(const Context &ctx, const TensorRef &logits, const TensorRef &labels,
                    std::optional<int64_t> ignoreIndex, const TensorRef &out) {
  const char *name = "CrossEntropy";
  RETURN_IF_ERROR(expectDtype(name, "output", out, logits.dtype));
  RETURN_IF_ERROR(checkLogits(name, logits, labels));
  RETURN_IF_ERROR(expectShape(name, "output", out, labels.shape));
  int64_t vocab = logits.shape.back(), rows = labels.numElements();
  if (rows == 0)
    return Status::ok();
  visitFloat(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    crossEntropyRows<T><<<rowBlocks(rows), rowThreads(vocab), 0, ctx.stream>>>(
        logits.as<const T>(), labels.data, labels.dtype == DType::i64, ignoreIndex.has_value(),
        ignoreIndex.value_or(0), rows, vocab, out.as<T>(), nullptr, nullptr, ctx.errors);
  });
  return launchStatus(name);
}

Status crossEntropyGrad(const Context &ctx, const TensorRef &dloss, const TensorRef &logits,
                        const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                        const TensorRef &dlogits) {
  const char *name = "CrossEntropyGrad";
  RETURN_IF_ERROR(checkLogits(name, logits, labels));
  RETURN_IF_ERROR(expectDtype(name, "dloss", dloss, logits.dtype));
  RETURN_IF_ERROR(expectShape(name, "dloss", dloss, labels.shape));
  RETURN_IF_ERROR(expectLike(name, logits, dlogits, "dlogits"));
  int64_t vocab = logits.shape.back(), rows = labels.numElements();
  if (rows == 0 || vocab == 0)
    return Status::ok();
  visitFloat(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    crossEntropyRows<T><<<rowBlocks(rows), rowThreads(vocab), 0, ctx.stream>>>(
        logits.as<const T>(), labels.data, labels.dtype == DType::i64, ignoreIndex.has_value(),
        ignoreIndex.value_or(0), rows, vocab, nullptr, dloss.as<const T>(), dlogits.as<T>(),
        ctx.errors);
  });
  return launchStatus(name);
}

Status crossEntropyShardStats(const Context &ctx, const TensorRef &logits, const TensorRef &labels,
                              int64_t vocabStart, const TensorRef &rowMax,
                              const TensorRef &targetLogit) {
  const char *name = "CrossEntropyShardStats";
  RETURN_IF_ERROR(checkLogits(name, logits, labels));
  RETURN_IF_ERROR(expectStats(name, "rowMax", rowMax, logits.dtype, labels));
  RETURN_IF_ERROR(expectStats(name, "targetLogit", targetLogit, logits.dtype, labels));
  int64_t vocab = logits.shape.back(), rows = labels.numElements();
  if (rows == 0)
    return Status::ok();
  visitFloatStats(logits.dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = decltype(stag);
    shardStats<T, S><<<rowBlocks(rows), rowThreads(vocab), 0, ctx.stream>>>(
        logits.as<const T>(), labels.data, labels.dtype == DType::i64, rows, vocab, vocabStart,
        rowMax.as<S>(), targetLogit.as<S>());
  });
  return launchStatus(name);
}

Status crossEntropyShardSumExp(const Context &ctx, const TensorRef &logits,
                               const TensorRef &globalMax, const TensorRef &sumExp) {
  const char *name = "CrossEntropyShardSumExp";
  if (logits.shape.empty())
    return fail(name, "logits must have a class dim, not shape []");
  if (!isFloat(logits.dtype))
    return unsupportedDtype(name, logits.dtype);
  std::span<const int64_t> rowShape = logits.shape.first(logits.shape.size() - 1);
  RETURN_IF_ERROR(expectDtype(name, "globalMax", globalMax, statsDtype(logits.dtype)));
  RETURN_IF_ERROR(expectShape(name, "globalMax", globalMax, rowShape));
  RETURN_IF_ERROR(expectLike(name, globalMax, sumExp, "sumExp"));
  int64_t vocab = logits.shape.back(), rows = product(rowShape);
  if (rows == 0)
    return Status::ok();
  visitFloatStats(logits.dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = decltype(stag);
    shardSumExp<T, S><<<rowBlocks(rows), rowThreads(vocab), 0, ctx.stream>>>(
        logits.as<const T>(), globalMax.as<const S>(), sumExp.as<S>(), rows, vocab);
  });
  return launchStatus(name);
}

Status crossEntropyShardLoss(const Context &ctx, const TensorRef &globalMax,
                             const TensorRef &sumExp, const TensorRef &targetLogit,
                             const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                             const TensorRef &out) {
  const char *name = "CrossEntropyShardLoss";
  RETURN_IF_ERROR(expectIndexDtype(name, "labels", labels));
  if (!isFloat(out.dtype))
    return unsupportedDtype(name, out.dtype);
  RETURN_IF_ERROR(expectShape(name, "output", out, labels.shape));
  RETURN_IF_ERROR(expectStats(name, "globalMax", globalMax, out.dtype, labels));
  RETURN_IF_ERROR(expectStats(name, "sumExp", sumExp, out.dtype, labels));
  RETURN_IF_ERROR(expectStats(name, "targetLogit", targetLogit, out.dtype, labels));
  int64_t rows = labels.numElements();
  if (rows == 0)
    return Status::ok();
  visitFloatStats(out.dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = decltype(stag);
    shardLoss<T, S><<<blocksFor(rows), 256, 0, ctx.stream>>>(
        globalMax.as<const S>(), sumExp.as<const S>(), targetLogit.as<const S>(), labels.data,
        labels.dtype == DType::i64, ignoreIndex.has_value(), ignoreIndex.value_or(0), out.as<T>(),
        rows);
  });
  return launchStatus(name);
}

Status crossEntropyShardGrad(const Context &ctx, const TensorRef &dloss, const TensorRef &logits,
                             const TensorRef &labels, int64_t vocabStart,
                             const TensorRef &globalMax, const TensorRef &sumExp,
                             std::optional<int64_t> ignoreIndex, const TensorRef &dlogits) {
  const char *name = "CrossEntropyShardGrad";
  RETURN_IF_ERROR(checkLogits(name, logits, labels));
  RETURN_IF_ERROR(expectDtype(name, "dloss", dloss, logits.dtype));
  RETURN_IF_ERROR(expectShape(name, "dloss", dloss, labels.shape));
  RETURN_IF_ERROR(expectStats(name, "globalMax", globalMax, logits.dtype, labels));
  RETURN_IF_ERROR(expectStats(name, "sumExp", sumExp, logits.dtype, labels));
  RETURN_IF_ERROR(expectLike(name, logits, dlogits, "dlogits"));
  int64_t vocab = logits.shape.back(), rows = labels.numElements();
  if (rows == 0 || vocab == 0)
    return Status::ok();
  visitFloatStats(logits.dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = decltype(stag);
    shardGrad<T, S><<<rowBlocks(rows), rowThreads(vocab), 0, ctx.stream>>>(
        dloss.as<const T>(), logits.as<const T>(), labels.data, labels.dtype == DType::i64,
        vocabStart, globalMax.as<const S>(), sumExp.as<const S>(), ignoreIndex.has_value(),
        ignoreIndex.value_or(0), dlogits.as<T>(), rows, vocab);
  });
  return launchStatus(name);
}

} // namespace megac::runtime::cuda
