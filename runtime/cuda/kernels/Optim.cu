// CUDA optimizer kernels: AdamW (one tensor, or many in one launch per dtype and chunk of
// tensors, apex multi_tensor_apply style), GlobalNorm (deterministic two-pass sum of squares in
// double) and ClipByNorm. Host checks follow runtime/cpu/Optim.cpp; lr, step and norm are read
// on the device.
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <cmath>
#include <vector>

namespace megac::runtime::cuda {

namespace {

using namespace cpu::detail;
using detail::Compute;

constexpr int kThreads = 256;

// ---- AdamW ----------------------------------------------------------------------------------

/// lr (f32/f64) and step (i64/i32) as the device reads them, and the config.
struct AdamWScalars {
  const void *lr;
  bool lrF64;
  const void *step;
  bool stepI64;
  double beta1, beta2, eps, weightDecay;
  const void *norm; // the clip's global norm (0-d, the gradients' dtype), or null: no clip
  double maxNorm;
};

/// Per-block constants: rate and the bias corrections 1 - beta^t in double (as the CPU), and the
/// clip coefficient (a value of the compute type; 1 without a clip).
struct AdamWConstants {
  double rate, bias1, bias2, clip;
};

/// ClipByNorm's coefficient (clipKernel below, the CPU's): in the compute type, NaN staying NaN.
template <typename T> __device__ __forceinline__ double clipCoefficient(const AdamWScalars &s) {
  using C = Compute<T>;
  if (!s.norm)
    return 1.0;
  C coef = static_cast<C>(s.maxNorm) /
           (detail::load(static_cast<const T *>(s.norm), 0) + static_cast<C>(1e-6));
  return static_cast<double>(C(1) < coef ? C(1) : coef);
}

/// a * b rounded once to the compute type (no contraction into a neighbouring add).
__device__ __forceinline__ float mulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mulRn(double a, double b) { return __dmul_rn(a, b); }

__device__ __forceinline__ void adamwConstants(const AdamWScalars &s, AdamWConstants &c) {
  c.rate = s.lrF64 ? *static_cast<const double *>(s.lr)
                   : static_cast<double>(*static_cast<const float *>(s.lr));
  int64_t t = s.stepI64 ? *static_cast<const int64_t *>(s.step)
                        : static_cast<int64_t>(*static_cast<const int32_t *>(s.step));
  c.bias1 = 1.0 - pow(s.beta1, static_cast<double>(t));
  c.bias2 = 1.0 - pow(s.beta2, static_cast<double>(t));
}

/// One element, exactly cpu::adamw's arithmetic: double math from the stored values, m and v
/// rounded to the compute type (T itself for f32/f64; f32 for the half types, which then round
/// once more on store, as computeInF32 does) before the parameter update reads them.
template <typename T>
__device__ __forceinline__ void adamwElement(const T *p, const T *g, const T *m, const T *v,
                                             T *pOut, T *mOut, T *vOut, int64_t i,
                                             const AdamWScalars &s, const AdamWConstants &c) {
  using C = Compute<T>;
  // Everything at i is read before anything is written: the outputs may be the inputs. The
  // gradient is clipped as ClipByNorm's product (a coefficient of 1 leaves it as it is).
  double pi = static_cast<double>(detail::load(p, i));
  double gi = static_cast<double>(mulRn(detail::load(g, i), static_cast<C>(c.clip)));
  double mi = static_cast<double>(detail::load(m, i));
  double vi = static_cast<double>(detail::load(v, i));
  // Explicit roundings (no fused multiply-adds), so the arithmetic is the CPU's step for step.
  pi = __dsub_rn(pi, __dmul_rn(__dmul_rn(c.rate, s.weightDecay), pi));
  C mNew = static_cast<C>(__dadd_rn(__dmul_rn(s.beta1, mi), __dmul_rn(1.0 - s.beta1, gi)));
  C vNew = static_cast<C>(
      __dadd_rn(__dmul_rn(s.beta2, vi), __dmul_rn(__dmul_rn(1.0 - s.beta2, gi), gi)));
  double mHat = __ddiv_rn(static_cast<double>(mNew), c.bias1);
  double vHat = __ddiv_rn(static_cast<double>(vNew), c.bias2);
  pi = __dsub_rn(pi, __ddiv_rn(__dmul_rn(c.rate, mHat), __dadd_rn(sqrt(vHat), s.eps)));
  detail::store(mOut, i, mNew);
  detail::store(vOut, i, vNew);
  detail::store(pOut, i, static_cast<C>(pi));
}

template <typename T>
__global__ void adamwKernel(const T *p, const T *g, const T *m, const T *v, T *pOut, T *mOut,
                            T *vOut, int64_t n, AdamWScalars s) {
  __shared__ AdamWConstants c;
  if (threadIdx.x == 0) {
    adamwConstants(s, c);
    c.clip = clipCoefficient<T>(s);
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    adamwElement(p, g, m, v, pOut, mOut, vOut, i, s, c);
}

/// Tensors per launch of the multi-tensor kernel: the argument struct stays under 4 KiB.
constexpr int kMultiTensors = 48;
/// Elements per block of the multi-tensor kernel.
constexpr int64_t kMultiChunk = 4096;

template <typename T> struct MultiArgs {
  int count;                            // tensors in this launch
  T *p[kMultiTensors], *m[kMultiTensors], *v[kMultiTensors];
  const T *g[kMultiTensors];
  int64_t n[kMultiTensors];
  int64_t firstBlock[kMultiTensors + 1]; // tensor k owns blocks [firstBlock[k], firstBlock[k+1])
};

template <typename T> __global__ void adamwMultiKernel(MultiArgs<T> args, AdamWScalars s) {
  __shared__ AdamWConstants c;
  if (threadIdx.x == 0) {
    adamwConstants(s, c);
    c.clip = clipCoefficient<T>(s);
  }
  __syncthreads();
  // The tensor of this block: the last k with firstBlock[k] <= blockIdx.x (binary search).
  int64_t block = blockIdx.x;
  int lo = 0, hi = args.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (args.firstBlock[mid] <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  int k = lo;
  int64_t begin = (block - args.firstBlock[k]) * kMultiChunk;
  int64_t end = begin + kMultiChunk < args.n[k] ? begin + kMultiChunk : args.n[k];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    adamwElement<T>(args.p[k], args.g[k], args.m[k], args.v[k], args.p[k], args.m[k], args.v[k], i,
                    s, c);
}

/// The CPU's checks that need no device values; fills the scalars.
Status checkAdamWScalars(const char *name, const TensorRef &lr, const TensorRef &step,
                         const AdamWConfig &config, AdamWScalars &s) {
  if (!lr.shape.empty())
    return fail(name, "lr must be a 0-d tensor, not shape " + shapeString(lr.shape));
  if (lr.dtype != DType::f32 && lr.dtype != DType::f64)
    return fail(name, std::string("lr must be f32 or f64, not ") + dtypeName(lr.dtype));
  RETURN_IF_ERROR(checkAdamWStep(step, config));
  const AdamWConfig &c = config;
  s = {lr.data, lr.dtype == DType::f64, step.data, step.dtype == DType::i64, c.beta1, c.beta2,
       c.eps,   c.weightDecay, nullptr, 0.0};
  return Status::ok();
}

struct Operand {
  const TensorRef &ref;
  const char *what;
};

// ---- GlobalNorm -----------------------------------------------------------------------------

constexpr int kNormThreads = 256;
constexpr int64_t kNormMaxBlocks = 256;

/// Blocks for one tensor's partial sums: a function of n alone, so the order is fixed.
int64_t normBlocks(int64_t n) {
  int64_t blocks = (n + kNormThreads * 8 - 1) / (kNormThreads * 8);
  return blocks < 1 ? 1 : (blocks > kNormMaxBlocks ? kNormMaxBlocks : blocks);
}

/// Tree sum of one double per thread in shared memory (blockDim.x a power of 2); thread 0 gets
/// the total.
__device__ __forceinline__ double blockSum(double value, double *shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  return shared[0];
}

/// partials[b] = sum of x[i]^2 over i = b*blockDim + t + k*gridDim*blockDim, in double.
template <typename T> __global__ void sumSquaresKernel(const T *x, int64_t n, double *partials) {
  __shared__ double shared[kNormThreads];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    double v = static_cast<double>(detail::load(x, i));
    sum += v * v;
  }
  double total = blockSum(sum, shared);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = total;
}

/// out = sqrt(sum of partials[0..count)) by one block in a fixed order.
template <typename T>
__global__ void finishNormKernel(const double *partials, int64_t count, T *out) {
  __shared__ double shared[kNormThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    sum += partials[i];
  double total = blockSum(sum, shared);
  if (threadIdx.x == 0)
    detail::store(out, 0, static_cast<Compute<T>>(sqrt(total)));
}

// ---- ClipByNorm -----------------------------------------------------------------------------

template <typename T>
__global__ void clipKernel(const T *x, const T *norm, double maxNorm, T *y, int64_t n) {
  using C = Compute<T>;
  // The coefficient in the compute type, as torch (and the CPU) compute it in x's dtype.
  C coef = static_cast<C>(maxNorm) / (detail::load(norm, 0) + static_cast<C>(1e-6));
  coef = C(1) < coef ? C(1) : coef; // std::min(coef, 1): NaN stays NaN
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    detail::store(y, i, detail::load(x, i) * coef);
}

/// The clip's norm and max_norm into `s` (checked as ClipByNorm checks them against `g`).
Status setClip(const TensorRef &g, const TensorRef *norm, double maxNorm, AdamWScalars &s) {
  if (!norm)
    return Status::ok();
  RETURN_IF_ERROR(checkClipByNorm(g, *norm, maxNorm, g)) << " (AdamW's clip)";
  s.norm = norm->data;
  s.maxNorm = maxNorm;
  return Status::ok();
}

} // namespace

Status adamw(const Context &ctx, const TensorRef &p, const TensorRef &g, const TensorRef &m,
             const TensorRef &v, const TensorRef &lr, const TensorRef &step,
             const AdamWConfig &config, const TensorRef &pOut, const TensorRef &mOut,
             const TensorRef &vOut, const TensorRef *norm, double maxNorm) {
  const char *name = "AdamW";
  for (Operand o : {Operand{g, "grad"}, Operand{m, "exp_avg"}, Operand{v, "exp_avg_sq"},
                    Operand{pOut, "new param"}, Operand{mOut, "new exp_avg"},
                    Operand{vOut, "new exp_avg_sq"}}) {
    RETURN_IF_ERROR(expectDtype(name, o.what, o.ref, p.dtype));
    RETURN_IF_ERROR(expectShape(name, o.what, o.ref, p.shape));
  }
  AdamWScalars s;
  RETURN_IF_ERROR(checkAdamWScalars(name, lr, step, config, s));
  RETURN_IF_ERROR(setClip(g, norm, maxNorm, s));
  int64_t n = p.numElements();
  return detail::launchFloat(name, p.dtype, n, [&](auto tag) {
    using T = decltype(tag);
    adamwKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        p.as<const T>(), g.as<const T>(), m.as<const T>(), v.as<const T>(), pOut.as<T>(),
        mOut.as<T>(), vOut.as<T>(), n, s);
  });
}

Status adamwMulti(const Context &ctx, std::span<const AdamWTensors> tensors, const TensorRef &lr,
                  const TensorRef &step, const AdamWConfig &config, const TensorRef *norm,
                  double maxNorm) {
  const char *name = "AdamW";
  for (const AdamWTensors &t : tensors) {
    for (Operand o : {Operand{t.g, "grad"}, Operand{t.m, "exp_avg"}, Operand{t.v, "exp_avg_sq"}}) {
      RETURN_IF_ERROR(expectDtype(name, o.what, o.ref, t.p.dtype));
      RETURN_IF_ERROR(expectShape(name, o.what, o.ref, t.p.shape));
    }
    if (!detail::isFloat(t.p.dtype))
      return detail::unsupportedDtype(name, t.p.dtype);
  }
  AdamWScalars s;
  RETURN_IF_ERROR(checkAdamWScalars(name, lr, step, config, s));
  for (const AdamWTensors &t : tensors)
    RETURN_IF_ERROR(setClip(t.g, norm, maxNorm, s));
  // One launch per dtype and per kMultiTensors non-empty tensors of it.
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    detail::visitFloat(dtype, [&](auto tag) {
      using T = decltype(tag);
      MultiArgs<T> args{};
      auto flush = [&]() {
        if (args.count > 0) {
          int64_t blocks = args.firstBlock[args.count];
          adamwMultiKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.stream>>>(args, s);
        }
        args = MultiArgs<T>{};
      };
      for (const AdamWTensors &t : tensors) {
        int64_t n = t.p.numElements();
        if (t.p.dtype != dtype || n == 0)
          continue;
        int k = args.count;
        int64_t chunks = (n + kMultiChunk - 1) / kMultiChunk;
        // Keep each launch's grid within 2^31 - 1 blocks.
        if (k > 0 && args.firstBlock[k] + chunks > int64_t(INT32_MAX)) {
          flush();
          k = 0;
        }
        args.p[k] = t.p.as<T>();
        args.g[k] = t.g.as<const T>();
        args.m[k] = t.m.as<T>();
        args.v[k] = t.v.as<T>();
        args.n[k] = n;
        args.firstBlock[k + 1] = args.firstBlock[k] + chunks;
        args.count = k + 1;
        if (args.count == kMultiTensors)
          flush();
      }
      flush();
    });
    RETURN_IF_ERROR(launchStatus(name));
  }
  return Status::ok();
}

Status globalNorm(const Context &ctx, std::span<const TensorRef> inputs, const TensorRef &out) {
  const char *name = "GlobalNorm";
  if (!out.shape.empty())
    return fail(name, "the output must be a 0-d tensor, not shape " + shapeString(out.shape));
  int64_t partialCount = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!detail::isFloat(inputs[k].dtype))
      return detail::unsupportedDtype(name, inputs[k].dtype) << " (input " << k << ")";
    partialCount += normBlocks(inputs[k].numElements());
  }
  if (!detail::isFloat(out.dtype))
    return detail::unsupportedDtype(name, out.dtype);
  if (!ctx.scratch)
    return fail(name, "needs scratch memory, and the context has no allocator");
  size_t bytes = static_cast<size_t>(partialCount > 0 ? partialCount : 1) * sizeof(double);
  ASSIGN_OR_RETURN(void *memory, ctx.scratch(bytes));
  double *partials = static_cast<double *>(memory);
  // Every input writes its blocks' partials (an empty one writes a single 0), in input order.
  int64_t at = 0;
  for (const TensorRef &x : inputs) {
    int64_t n = x.numElements(), blocks = normBlocks(n);
    detail::visitFloat(x.dtype, [&](auto tag) {
      using T = decltype(tag);
      sumSquaresKernel<T><<<static_cast<unsigned>(blocks), kNormThreads, 0, ctx.stream>>>(
          x.as<const T>(), n, partials + at);
    });
    RETURN_IF_ERROR(launchStatus(name));
    at += blocks;
  }
  detail::visitFloat(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    finishNormKernel<T><<<1, kNormThreads, 0, ctx.stream>>>(partials, partialCount, out.as<T>());
  });
  return launchStatus(name);
}

Status clipByNorm(const Context &ctx, const TensorRef &x, const TensorRef &norm, double maxNorm,
                  const TensorRef &out) {
  const char *name = "ClipByNorm";
  RETURN_IF_ERROR(cpu::detail::checkClipByNorm(x, norm, maxNorm, out));
  int64_t n = x.numElements();
  return detail::launchFloat(name, x.dtype, n, [&](auto tag) {
    using T = decltype(tag);
    clipKernel<T><<<detail::blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), norm.as<const T>(), maxNorm, out.as<T>(), n);
  });
}

} // namespace megac::runtime::cuda
