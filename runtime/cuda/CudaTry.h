// The CUDA runtime's errors as a Status, for the executor and its dispatch: cudaFailure names
// the call, the device and CUDA's error; CUDA_TRY returns it from a member function of a class
// with a `device_`.
#pragma once

#include "support/Status.h"

#include <cuda_runtime.h>

#include <string>

namespace megac::runtime::cuda {

inline Status cudaFailure(const std::string &what, cudaError_t error, int device) {
  return Status::error(what + " on CUDA device " + std::to_string(device) + ": " +
                       cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

} // namespace megac::runtime::cuda

#define CUDA_TRY(call, what)                                                                       \
  do {                                                                                             \
    cudaError_t cuda_error_ = (call);                                                              \
    if (cuda_error_ != cudaSuccess)                                                                \
      return ::megac::runtime::cuda::cudaFailure(what, cuda_error_, device_);                      \
  } while (0)
