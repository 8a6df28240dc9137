// NumPy .npy files (format versions 1.0-3.0): little-endian, C order; dtypes <f8 <f4 <f2 <i8
// <i4 |b1 (and bfloat16 stored as <u2 is not read: numpy has no bfloat16).
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <string>

namespace megac::runtime {

StatusOr<HostTensor> readNpy(const std::string &path);
/// bf16 tensors are written as float32 (numpy has no bfloat16).
Status writeNpy(const std::string &path, const HostTensor &tensor);

} // namespace megac::runtime
