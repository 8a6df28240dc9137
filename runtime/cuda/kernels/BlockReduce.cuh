// Warp and block reductions shared by Norm.cu, Reduction.cu and Attention.cu. Every one combines
// values in a fixed order for a given block size (shuffle tree, then the warps' partials), so a
// kernel built on them gives the same bits on every run.
#pragma once

#include "runtime/cuda/kernels/KernelCommon.cuh"

namespace megac::runtime::cuda::detail {

/// max that propagates NaN from either side.
template <typename A> __device__ __forceinline__ A maxNaN(A a, A b) {
  return (a != a || a > b) ? a : b;
}
template <typename A> __device__ __forceinline__ A minNaN(A a, A b) {
  return (a != a || a < b) ? a : b;
}

template <typename A> __device__ __forceinline__ A warpSum(A v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename A> __device__ __forceinline__ A warpMax(A v) {
  for (int o = 16; o > 0; o >>= 1)
    v = maxNaN(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Reduces v over the block with `op` (blockDim.x a multiple of 32, <= 1024): a shuffle tree
/// in each warp, then the warps' results; every thread gets the result. Every thread of the
/// block must call it.
template <typename A, typename Op> __device__ A blockReduce(A v, Op op) {
  __shared__ A partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads(); // an earlier call's readers are done with `partial`
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  int warps = blockDim.x >> 5;
  A r = partial[reducePartialSlot(lane, warps)];
  for (int o = 16; o > 0; o >>= 1) {
    A other = __shfl_xor_sync(0xffffffffu, r, o);
    if (reduceTakesPartner(lane, o, warps))
      r = op(r, other);
  }
  return __shfl_sync(0xffffffffu, r, 0);
}

struct SumOp {
  template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};
struct MaxOp {
  template <typename A> __device__ A operator()(A a, A b) const { return maxNaN(a, b); }
};
struct MinOp {
  template <typename A> __device__ A operator()(A a, A b) const { return minNaN(a, b); }
};

template <typename A> __device__ A blockSum(A v) { return blockReduce(v, SumOp{}); }
template <typename A> __device__ A blockMax(A v) { return blockReduce(v, MaxOp{}); }

} // namespace megac::runtime::cuda::detail
