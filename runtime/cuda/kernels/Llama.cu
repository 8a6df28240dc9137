// Llama-family kernels: Silu (elementwise x * sigmoid(x)) and Rope (rotary embedding,
// rotate_half convention), both one thread per element in the compute type (f32 for bf16/f16,
// as the CPU reference computes them through f32), checked against runtime/cpu.
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <string>
#include <vector>

namespace megac::runtime::cuda {

using namespace detail;
using namespace cpu::detail;

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float expOf(float v) { return expf(v); }
__device__ __forceinline__ double expOf(double v) { return exp(v); }

template <typename T> __global__ void siluKernel(const T *x, T *y, int64_t n) {
  using C = Compute<T>;
  GRID_STRIDE(i, n) {
    C v = load(x, i);
    store(y, i, v / (C(1) + expOf(-v)));
  }
}

/// x [rows, d] row-major; row r's table row starts at sum(idx_k * lead.stride[k]) where idx is
/// r's multi-index over lead.size (x's leading dims).
template <typename T>
__global__ void ropeKernel(const T *x, const T *cos, const T *sin, T *y, int64_t n, int64_t d,
                           Dims lead) {
  using C = Compute<T>;
  int64_t half = d / 2;
  GRID_STRIDE(i, n) {
    int64_t r = i / d, j = i % d, t = 0;
    for (int k = lead.rank - 1; k >= 0; --k) {
      t += (r % lead.size[k]) * lead.stride[k];
      r /= lead.size[k];
    }
    C c = load(cos, t + j), s = load(sin, t + j), v = load(x, i);
    C rotated = j < half ? -load(x, i + half) : load(x, i - half);
    store(y, i, v * c + rotated * s);
  }
}

} // namespace

Status silu(const Context &ctx, const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectLike("Silu", x, out, "output"));
  int64_t n = x.numElements();
  return launchFloat("Silu", x.dtype, n, [&](auto tag) {
    using T = decltype(tag);
    siluKernel<T><<<blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(x.as<const T>(),
                                                                        out.as<T>(), n);
  });
}

Status rope(const Context &ctx, const TensorRef &x, const TensorRef &cos, const TensorRef &sin,
            const TensorRef &out) {
  const char *name = "Rope";
  RETURN_IF_ERROR(cpu::detail::checkRope(x, cos, sin, out));
  if (!isFloat(x.dtype))
    return unsupportedDtype(name, x.dtype);
  if (x.shape.size() - 1 > size_t(kMaxRank))
    return fail(name, "x has rank " + std::to_string(x.shape.size()) + "; at most " +
                          std::to_string(kMaxRank + 1) + " is supported");
  int64_t n = x.numElements();
  if (n == 0)
    return Status::ok();
  std::vector<int64_t> strides = broadcastStrides(cos.shape, x.shape, 1);
  Dims lead;
  lead.rank = static_cast<int>(x.shape.size()) - 1;
  for (int k = 0; k < lead.rank; ++k) {
    lead.size[k] = x.shape[size_t(k)];
    lead.stride[k] = strides[size_t(k)];
  }
  int64_t d = x.shape.back();
  visitFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    ropeKernel<T><<<blocksFor(n, kThreads), kThreads, 0, ctx.stream>>>(
        x.as<const T>(), cos.as<const T>(), sin.as<const T>(), out.as<T>(), n, d, lead);
  });
  return launchStatus(name);
}

} // namespace megac::runtime::cuda
