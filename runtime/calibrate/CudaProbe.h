// What `megac calibrate --backend cuda` asks the CUDA runtime directly: the device's name, memory
// and SM count, and the cost of launching an empty kernel (CudaProbe.cu; without the CUDA
// backend, CudaProbeStub.cpp says it is not built).
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <string>

namespace megac::runtime::calibrate {

struct GpuInfo {
  std::string name; // "NVIDIA H200"
  double memoryBytes = 0;
  int64_t multiprocessors = 0;
};

StatusOr<GpuInfo> gpuInfo(int device);

/// Seconds per launch of an empty kernel on `device`, launched back to back on one stream
/// (the host's enqueue rate, which bounds a stream of short dependent kernels).
StatusOr<double> emptyKernelLaunchSeconds(int device);

} // namespace megac::runtime::calibrate
