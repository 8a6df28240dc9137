// The backend of a run (Backend.h).
#include "driver/Backend.h"

#include "runtime/cuda/Device.h"

namespace megac::driver {

StatusOr<runtime::Backend> resolveBackend(const std::optional<std::string> &name) {
  if (!name)
    return runtime::cuda::usableDevices().isOk() ? runtime::Backend::cuda : runtime::Backend::cpu;
  if (*name == "cpu")
    return runtime::Backend::cpu;
  if (*name != "cuda")
    return Status::error("--backend: '" + *name + "' is not cpu or cuda");
  StatusOr<int> devices = runtime::cuda::usableDevices();
  if (!devices.isOk())
    return Status::error("--backend cuda: no usable CUDA device: " + devices.status().message());
  return runtime::Backend::cuda;
}

} // namespace megac::driver
