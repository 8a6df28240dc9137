// The CUDA probe (CudaProbe.h): device properties and the launch cost of an empty kernel.
#include "runtime/calibrate/CudaProbe.h"

#include <cuda_runtime.h>

#include <chrono>

namespace megac::runtime::calibrate {
namespace {

__global__ void emptyKernel() {}

Status failure(const char *what, cudaError_t error, int device) {
  cudaGetLastError(); // clear a sticky launch error for the caller
  return Status::error(std::string("CUDA device ") + std::to_string(device) + ": " + what + ": " +
                       cudaGetErrorString(error));
}

} // namespace

StatusOr<GpuInfo> gpuInfo(int device) {
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess)
    return failure("cudaGetDeviceProperties", e, device);
  return GpuInfo{prop.name, double(prop.totalGlobalMem), int64_t(prop.multiProcessorCount)};
}

StatusOr<double> emptyKernelLaunchSeconds(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return failure("cudaSetDevice", e, device);
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return failure("cudaStreamCreate", e, device);
  constexpr int kLaunches = 2000;
  double best = 0;
  // The best of five rounds after a warm-up round (module loading, the first launch).
  for (int round = 0; round < 6; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i)
      emptyKernel<<<1, 1, 0, stream>>>();
    cudaError_t e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess)
      e = cudaGetLastError();
    if (e != cudaSuccess) {
      cudaStreamDestroy(stream);
      return failure("launching an empty kernel", e, device);
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kLaunches;
    if (round > 0 && (best == 0 || seconds < best))
      best = seconds;
  }
  cudaStreamDestroy(stream);
  return best;
}

} // namespace megac::runtime::calibrate
