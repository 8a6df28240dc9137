// The CPU kernels' argument checks (runtime/cpu/KernelUtil.h) under the short
// names the CUDA kernel files use, beside KernelCommon.cuh's helpers (`using
// namespace detail`). Only .cu files include it.
#pragma once

#include "runtime/cpu/KernelUtil.h"
#include "runtime/cuda/kernels/KernelCommon.cuh"

namespace megac::runtime::cuda {

using namespace detail;
using cpu::detail::broadcastShapes;
using cpu::detail::broadcastStrides;
using cpu::detail::expectDtype;
using cpu::detail::expectShape;
using cpu::detail::fail;
using cpu::detail::sameShape;

} // namespace megac::runtime::cuda
