// `--backend cpu|cuda` and `--allow-tf32` (BackendOption.h).
#include "tools/megac/BackendOption.h"

#include "runtime/cuda/Device.h"

namespace megac::cli {

std::string parseBackendOption(const Args &args, runtime::Backend &backend, bool &allowTf32) {
  allowTf32 = args.has("allow-tf32");
  std::optional<std::string> name = args.get("backend");
  if (!name) {
    backend =
        runtime::cuda::usableDevices().isOk() ? runtime::Backend::cuda : runtime::Backend::cpu;
    return {};
  }
  if (*name == "cpu") {
    backend = runtime::Backend::cpu;
    return {};
  }
  if (*name != "cuda")
    return "--backend: '" + *name + "' is not cpu or cuda";
  StatusOr<int> devices = runtime::cuda::usableDevices();
  if (!devices.isOk())
    return "--backend cuda: no usable CUDA device: " + devices.status().message();
  backend = runtime::Backend::cuda;
  return {};
}

} // namespace megac::cli
