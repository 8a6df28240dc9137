// The CUDA backend's entry points in a build without it (MEGAC_CUDA off: no nvcc at configure
// time): every answer says so.
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/cuda/Device.h"

namespace megac::runtime::cuda {

static const char *kNotBuilt =
    "this megac was built without the CUDA backend (nvcc was not found when it was configured; "
    "install the CUDA toolkit and rebuild, or use --backend cpu)";

bool backendBuilt() { return false; }
StatusOr<int> usableDevices() { return Status::error(kNotBuilt); }
StatusOr<std::string> describeDevice(int) { return Status::error(kNotBuilt); }
double peakBf16Flops(int) { return 0; }
StatusOr<int> defaultDeviceFor(int) { return Status::error(kNotBuilt); }
StatusOr<std::unique_ptr<Executor>> createCudaExecutor(const LoadedPlan &,
                                                       const ExecutorOptions &) {
  return Status::error(kNotBuilt);
}
Status resetCudaProfile(Executor &) { return Status::error(kNotBuilt); }

} // namespace megac::runtime::cuda
