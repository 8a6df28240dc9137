// LayerNorm and RmsNorm, forward and backward. One block per row of x [rows, n] (the last dim
// normalized). Statistics are accumulated in double for every dtype (more than the contract's
// f32 for f32/half, and what the CPU reference does), two-pass (mean, then squared deviations),
// so the f32 results match the CPU to f32 rounding. The weight/bias gradients are deterministic:
// per-block partial sums over chunks of rows into scratch, then a second kernel sums each
// column's partials in chunk order (no atomics).
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/BlockReduce.cuh"

#include <cmath>
#include <string>
#include <vector>

namespace megac::runtime::cuda {

using namespace detail;
using namespace cpu::detail;

namespace {

/// Mean (0 for RmsNorm) and 1/sqrt(var + eps) (var: mean of squares about the mean) of row xr.
template <typename T, bool kLayer>
__device__ void rowStats(const T *xr, int64_t n, double eps, double &mean, double &rstd) {
  mean = 0.0;
  if (kLayer) {
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += static_cast<double>(load(xr, j));
    mean = blockSum(s) / static_cast<double>(n);
  }
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    double d = static_cast<double>(load(xr, j)) - mean;
    ss += d * d;
  }
  ss = blockSum(ss);
  rstd = 1.0 / sqrt(ss / static_cast<double>(n) + eps);
}

/// y [rows, n] = (x - mean) * rstd * w (+ b).
template <typename T, bool kLayer>
__global__ void normForward(const T *x, const T *w, const T *b, T *y, int64_t rows, int64_t n,
                            double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n;
    double mean, rstd;
    rowStats<T, kLayer>(xr, n, eps, mean, rstd);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double v = (static_cast<double>(load(xr, j)) - mean) * rstd * static_cast<double>(load(w, j));
      if (b)
        v += static_cast<double>(load(b, j));
      store(y + r * n, j, static_cast<Compute<T>>(v));
    }
  }
}

/// dx per row, and the row's mean and rstd into stats [rows, 2] for the parameter gradients.
/// LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
/// RmsNorm:   dx = rstd * g - x * rstd^3 * mean(g * x).
template <typename T, bool kLayer>
__global__ void normGradRows(const T *dy, const T *x, const T *w, T *dx, double *stats,
                             int64_t rows, int64_t n, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * n, *dyr = dy + r * n;
    double mean, rstd;
    rowStats<T, kLayer>(xr, n, eps, mean, rstd);
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double g = static_cast<double>(load(dyr, j)) * static_cast<double>(load(w, j));
      double xv = static_cast<double>(load(xr, j));
      sg += g;
      sgx += kLayer ? g * (xv - mean) * rstd : g * xv;
    }
    double meanG = blockSum(sg) / static_cast<double>(n);
    double meanGX = blockSum(sgx) / static_cast<double>(n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double g = static_cast<double>(load(dyr, j)) * static_cast<double>(load(w, j));
      double xv = static_cast<double>(load(xr, j));
      double v = kLayer ? rstd * (g - meanG - (xv - mean) * rstd * meanGX)
                        : rstd * g - xv * rstd * rstd * rstd * meanGX;
      store(dx + r * n, j, static_cast<Compute<T>>(v));
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

/// Partial sums over rows [chunk * rowsPerChunk, ...) of dy * xhat (into pw) and dy (into pb,
/// LayerNorm only), one thread per column: pw/pb [chunks, n].
template <typename T>
__global__ void normParamPartials(const T *dy, const T *x, const double *stats, double *pw,
                                  double *pb, int64_t rows, int64_t n, int64_t rowsPerChunk) {
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= n)
    return;
  int64_t chunk = blockIdx.y;
  int64_t begin = chunk * rowsPerChunk,
          end = begin + rowsPerChunk < rows ? begin + rowsPerChunk : rows;
  double gw = 0.0, gb = 0.0;
  for (int64_t r = begin; r < end; ++r) {
    double d = static_cast<double>(load(dy, r * n + j));
    gw += d * (static_cast<double>(load(x, r * n + j)) - stats[2 * r]) * stats[2 * r + 1];
    gb += d;
  }
  pw[chunk * n + j] = gw;
  if (pb)
    pb[chunk * n + j] = gb;
}

/// out[j] = sum over chunks (in order) of partial[chunk, j].
template <typename T>
__global__ void sumPartials(const double *partial, T *out, int64_t chunks, int64_t n) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c)
      s += partial[c * n + j];
    store(out, j, static_cast<Compute<T>>(s));
  }
}

/// cpu's checks, then the CUDA kernels' float dtypes.
Status checkNorm(const char *name, const TensorRef &x, const TensorRef &weight,
                 const TensorRef *bias, double epsilon, const TensorRef &out) {
  RETURN_IF_ERROR(cpu::detail::checkNorm(name, x, weight, bias, epsilon, out));
  if (!isFloat(x.dtype))
    return unsupportedDtype(name, x.dtype);
  return Status::ok();
}

/// cpu's checks, then the CUDA kernels' float dtypes.
Status checkNormGrad(const char *op, const TensorRef &dy, const TensorRef &x,
                     const TensorRef &weight, double epsilon, const TensorRef &dx) {
  RETURN_IF_ERROR(cpu::detail::checkNormGrad(op, dy, x, weight, epsilon, dx));
  if (!isFloat(x.dtype))
    return unsupportedDtype(op, x.dtype);
  return Status::ok();
}

template <bool kLayer>
Status launchForward(const char *name, const Context &ctx, const TensorRef &x,
                     const TensorRef &weight, const TensorRef *bias, double epsilon,
                     const TensorRef &out) {
  int64_t n = x.shape.back(), rows = product(x.shape.first(x.shape.size() - 1));
  if (n == 0 || rows == 0)
    return Status::ok();
  visitFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    normForward<T, kLayer><<<rowBlocks(rows), rowThreads(n), 0, ctx.stream>>>(
        x.as<const T>(), weight.as<const T>(), bias ? bias->as<const T>() : nullptr, out.as<T>(),
        rows, n, epsilon);
  });
  return launchStatus(name);
}

template <bool kLayer>
Status launchGrad(const char *name, const Context &ctx, const TensorRef &dy, const TensorRef &x,
                  const TensorRef &weight, double epsilon, const TensorRef &dx,
                  const TensorRef &dweight, const TensorRef *dbias) {
  int64_t n = x.shape.back(), rows = product(x.shape.first(x.shape.size() - 1));
  if (n == 0)
    return Status::ok();
  // Rows per chunk: at least 32, and at most 1024 chunks (LaunchConfig.h).
  NormChunks split = normGradChunks(rows);
  int64_t rowsPerChunk = split.rowsPerChunk, chunks = split.chunks;
  ASSIGN_OR_RETURN(void *statsMem, ctx.scratch(sizeof(double) * 2 * std::max<int64_t>(rows, 1)));
  ASSIGN_OR_RETURN(void *pwMem, ctx.scratch(sizeof(double) * chunks * n));
  double *pb = nullptr;
  if (dbias) {
    ASSIGN_OR_RETURN(void *pbMem, ctx.scratch(sizeof(double) * chunks * n));
    pb = static_cast<double *>(pbMem);
  }
  double *stats = static_cast<double *>(statsMem), *pw = static_cast<double *>(pwMem);
  visitFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0)
      normGradRows<T, kLayer><<<rowBlocks(rows), rowThreads(n), 0, ctx.stream>>>(
          dy.as<const T>(), x.as<const T>(), weight.as<const T>(), dx.as<T>(), stats, rows, n,
          epsilon);
    LaunchConfig c = normParamPartialsLaunch(rows, n);
    dim3 grid(static_cast<unsigned>(c.grid[0]), static_cast<unsigned>(c.grid[1]));
    normParamPartials<T><<<grid, 256, 0, ctx.stream>>>(dy.as<const T>(), x.as<const T>(), stats, pw,
                                                       pb, rows, n, rowsPerChunk);
    sumPartials<T><<<blocksFor(n), 256, 0, ctx.stream>>>(pw, dweight.as<T>(), chunks, n);
    if (dbias)
      sumPartials<T><<<blocksFor(n), 256, 0, ctx.stream>>>(pb, dbias->as<T>(), chunks, n);
  });
  return launchStatus(name);
}

} // namespace

Status layerNorm(const Context &ctx, const TensorRef &x, const TensorRef &weight,
                 const TensorRef *bias, double epsilon, const TensorRef &out) {
  RETURN_IF_ERROR(checkNorm("LayerNorm", x, weight, bias, epsilon, out));
  return launchForward<true>("LayerNorm", ctx, x, weight, bias, epsilon, out);
}

Status rmsNorm(const Context &ctx, const TensorRef &x, const TensorRef &weight, double epsilon,
               const TensorRef &out) {
  RETURN_IF_ERROR(checkNorm("RmsNorm", x, weight, nullptr, epsilon, out));
  return launchForward<false>("RmsNorm", ctx, x, weight, nullptr, epsilon, out);
}

Status layerNormGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x,
                     const TensorRef &weight, double epsilon, const TensorRef &dx,
                     const TensorRef &dweight, const TensorRef &dbias) {
  const char *name = "LayerNormGrad";
  RETURN_IF_ERROR(checkNormGrad(name, dy, x, weight, epsilon, dx));
  RETURN_IF_ERROR(expectLike(name, weight, dweight, "dweight"));
  RETURN_IF_ERROR(expectLike(name, weight, dbias, "dbias"));
  return launchGrad<true>(name, ctx, dy, x, weight, epsilon, dx, dweight, &dbias);
}

Status rmsNormGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x,
                   const TensorRef &weight, double epsilon, const TensorRef &dx,
                   const TensorRef &dweight) {
  const char *name = "RmsNormGrad";
  RETURN_IF_ERROR(checkNormGrad(name, dy, x, weight, epsilon, dx));
  RETURN_IF_ERROR(expectLike(name, weight, dweight, "dweight"));
  return launchGrad<false>(name, ctx, dy, x, weight, epsilon, dx, dweight, nullptr);
}

} // namespace megac::runtime::cuda
