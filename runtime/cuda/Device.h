// Whether the CUDA backend is built and a device is usable; no CUDA headers, so the CLI and the
// tests can ask without depending on the toolkit.
#pragma once

#include "support/Status.h"

#include <string>

namespace megac::runtime::cuda {

/// True when this build has the CUDA backend (CMake MEGAC_CUDA).
bool backendBuilt();

/// Ok with the number of usable devices (>= 1), else one line saying why there is none: the
/// backend is not built, or the CUDA runtime's error (cudaGetDeviceCount returns an error, not
/// 0, on a machine without a driver), or no device.
StatusOr<int> usableDevices();

/// "NVIDIA H200 (sm_90, 139.8 GiB, 132 SMs)" for device `index`, or the error.
StatusOr<std::string> describeDevice(int index);

/// The device's dense bf16 tensor-core peak in FLOP/s from its compute capability and clock
/// (H100/H200 SXM 989e12, A100 312e12), for MFU; 0 when unknown.
double peakBf16Flops(int index);

} // namespace megac::runtime::cuda
