// Shared by the kernel files: dtype dispatch, f32/f64 load and store of every float type,
// launch sizes and shape arithmetic. Only .cu files include it.
#pragma once

#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/LaunchConfig.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <string>

/// A grid-stride loop: `i` runs over [0, n), each thread from its global index in steps of the
/// grid's thread count (so any grid size covers n).
#define GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);                        \
       i += int64_t(gridDim.x) * blockDim.x)

namespace megac::runtime::cuda::detail {

/// The compute type of a storage type: double for double, float for everything else.
template <typename T> struct ComputeOf { using type = float; };
template <> struct ComputeOf<double> { using type = double; };
template <typename T> using Compute = typename ComputeOf<T>::type;

template <typename T> __device__ __forceinline__ Compute<T> load(const T *p, int64_t i) {
  return static_cast<Compute<T>>(p[i]);
}
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <> __device__ __forceinline__ float load<__half>(const __half *p, int64_t i) {
  return __half2float(p[i]);
}

template <typename T, typename C> __device__ __forceinline__ void store(T *p, int64_t i, C v) {
  p[i] = static_cast<T>(v);
}
template <>
__device__ __forceinline__ void store<__nv_bfloat16, float>(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ void store<__half, float>(__half *p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}

/// Calls f(T{}) with T the storage type of a float dtype (f64, f32, bf16, f16); false for others.
template <typename F> bool visitFloat(DType dtype, F &&f) {
  switch (dtype) {
  case DType::f64:
    f(double{});
    return true;
  case DType::f32:
    f(float{});
    return true;
  case DType::bf16:
    f(__nv_bfloat16{});
    return true;
  case DType::f16:
    f(__half{});
    return true;
  default:
    return false;
  }
}

/// Calls f(T{}) with T the storage type of a numeric dtype (the floats, i64, i32); false for i1.
template <typename F> bool visitNumeric(DType dtype, F &&f) {
  if (visitFloat(dtype, f))
    return true;
  if (dtype == DType::i64)
    f(int64_t{});
  else if (dtype == DType::i32)
    f(int32_t{});
  else
    return false;
  return true;
}

inline bool isFloat(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

/// "Op: dtype bf16 is not supported (f64, f32, bf16, f16)", the CPU kernels' wording style.
inline Status unsupportedDtype(const char *op, DType dtype) {
  return Status::error(std::string(op) + ": dtype " + dtypeName(dtype) +
                       " is not supported (f64, f32, bf16, f16)");
}

/// One kernel over the n elements of a float tensor: another dtype is unsupportedDtype(op, ..),
/// no elements launch nothing, else launch(T{}) launches it with T the storage type and the
/// launch's status is returned.
template <typename F> Status launchFloat(const char *op, DType dtype, int64_t n, F &&launch) {
  if (!isFloat(dtype))
    return unsupportedDtype(op, dtype);
  if (n == 0)
    return Status::ok();
  visitFloat(dtype, launch);
  return launchStatus(op);
}

inline int64_t elementsOf(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Up to 8 dims of sizes and strides, passed by value to kernels.
constexpr int kMaxRank = 8;
struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

/// sum(index_d * stride_d) for the row-major index of flat element i over dims.size.
__device__ __forceinline__ int64_t offsetOf(const Dims &dims, int64_t i) {
  int64_t at = 0;
  for (int d = dims.rank - 1; d >= 0; --d) {
    int64_t size = dims.size[d];
    at += (i % size) * dims.stride[d];
    i /= size;
  }
  return at;
}

/// Records `error` in *errors unless an earlier error is there.
__device__ __forceinline__ void raise(int *errors, DeviceError error) {
  if (errors)
    atomicCAS(errors, 0, static_cast<int>(error));
}

} // namespace megac::runtime::cuda::detail
