// Element moves by bits, shared by DataMovement.cu and Indexing.cu. Only .cu files include it.
#pragma once

#include "runtime/cuda/kernels/KernelCommon.cuh"

#include <cstdint>

namespace megac::runtime::cuda {

/// Calls f(U{}) with an unsigned type U of the dtype's size (element moves by bits).
template <typename F> void bySize(DType dtype, F &&f) {
  switch (dtypeSize(dtype)) {
  case 1:
    return f(uint8_t{});
  case 2:
    return f(uint16_t{});
  case 4:
    return f(uint32_t{});
  default:
    return f(uint64_t{});
  }
}

} // namespace megac::runtime::cuda
