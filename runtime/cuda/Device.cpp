// Whether a CUDA device is usable, and what it is (Device.h), from the CUDA runtime.
#include "runtime/cuda/Device.h"

#include <cuda_runtime_api.h>

#include <cstdio>

namespace megac::runtime::cuda {

namespace {

std::string cudaMessage(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

} // namespace

bool backendBuilt() { return true; }

StatusOr<int> usableDevices() {
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver (not cudaErrorNoDevice) and leaves
  // the count alone: any error means no usable device.
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError(); // clear it, so later CUDA calls do not report it again
    return Status::error("CUDA runtime: " + cudaMessage(error));
  }
  if (count < 1)
    return Status::error("CUDA runtime: no CUDA device is visible (CUDA_VISIBLE_DEVICES?)");
  return count;
}

StatusOr<std::string> describeDevice(int index) {
  cudaDeviceProp prop{};
  cudaError_t error = cudaGetDeviceProperties(&prop, index);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return Status::error("CUDA device " + std::to_string(index) + ": " + cudaMessage(error));
  }
  char text[512];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %.1f GiB, %d SMs)", prop.name, prop.major,
                prop.minor, static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                prop.multiProcessorCount);
  return std::string(text);
}

double peakBf16Flops(int index) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // Dense tensor-core peaks of the SXM parts: H100/H200 (sm_90) and A100 (sm_80). Other parts
  // (PCIe variants clock lower, other architectures) are not guessed: 0 means unknown.
  if (major == 9 && minor == 0)
    return 989e12;
  if (major == 8 && minor == 0)
    return 312e12;
  return 0;
}

} // namespace megac::runtime::cuda
