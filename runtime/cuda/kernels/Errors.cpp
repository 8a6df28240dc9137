// Device error codes and launch errors of the CUDA kernels.
#include "runtime/cuda/Kernels.h"

#include <string>

namespace megac::runtime::cuda {

const char *deviceErrorMessage(DeviceError error) {
  switch (error) {
  case DeviceError::none:
    return "no error";
  case DeviceError::indexOutOfRange:
    return "a gather index outside [-n, n)";
  case DeviceError::idOutOfRange:
    return "an embedding id outside [0, V)";
  case DeviceError::labelOutOfRange:
    return "a label outside [0, V) that is not the ignore index";
  case DeviceError::divideByZero:
    return "an integer division by zero";
  }
  return "an unknown device error";
}

Status launchStatus(const char *op) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess)
    return Status::ok();
  return Status::error(std::string(op) + ": " + cudaGetErrorName(error) + ": " +
                       cudaGetErrorString(error));
}

} // namespace megac::runtime::cuda
