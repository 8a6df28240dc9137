// Filling a program's parameter buffers: from weights passed in, the plan's weights file, or
// the layout-independent init (runtime/init).
#pragma once

#include "runtime/Status.h"
#include "runtime/io/HostTensor.h"
#include "runtime/plan/PlanLoader.h"

#include <cstdint>

namespace megac::runtime {

/// Writes every parameter of program `programIndex` into `arena` (the program's arena, laid
/// out by its buffers). A parameter's value comes from `weights` by name, else from the plan's
/// weights_file (read at most once, relative to the plan's directory), else from its init spec
/// with the plan's seed. A weight must have the parameter's dtype and global shape; the shard
/// at shard_offset with the buffer's shape is copied. Init values are drawn in float and
/// converted to the buffer's dtype, so f64 and f32 programs start from the same weights.
Status fillParameters(const LoadedPlan &plan, size_t programIndex, uint8_t *arena,
                      const TensorMap *weights);

/// The plan's weights_file as a path: absolute as is, else relative to the plan's directory
/// (to the working directory for a plan loaded from memory). Empty if the plan names none.
std::string weightsFilePath(const LoadedPlan &plan);

} // namespace megac::runtime
