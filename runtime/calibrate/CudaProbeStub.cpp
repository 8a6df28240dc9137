// The CUDA probe in a build without the CUDA backend (MEGAC_CUDA off): every answer says so.
#include "runtime/calibrate/CudaProbe.h"

#include "runtime/cuda/Device.h"

namespace megac::runtime::calibrate {

StatusOr<GpuInfo> gpuInfo(int) { return cuda::usableDevices().status(); }
StatusOr<double> emptyKernelLaunchSeconds(int) { return cuda::usableDevices().status(); }

} // namespace megac::runtime::calibrate
