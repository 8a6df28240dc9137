// Filling a program's parameter buffers: from weights passed in, the plan's weights file, or
// the layout-independent init (runtime/init).
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/plan_generated.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <vector>

namespace megac::runtime {

/// The plan's mesh (axis names and sizes; no axes: one rank).
comm::Mesh meshOf(const LoadedPlan &plan);

/// Where rank `rank`'s shard of a tensor split by `sharding` starts: per listed dim, the rank's
/// index in its group over the dim's axes times the local size; other dims start at `base`
/// (shard_offset of single-rank plans, or zeros).
std::vector<int64_t>
shardOffset(const comm::Mesh &mesh, int64_t rank, std::span<const int64_t> localShape,
            std::span<const int64_t> base,
            const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> &dims);
/// A parameter's sharding as (dim, mesh axes) pairs.
std::vector<std::pair<uint32_t, std::vector<uint32_t>>>
shardingOf(const flatbuffers::Vector<flatbuffers::Offset<megac::plan::DimSharding>> *sharding);
/// Rank `rank`'s offset of `param` (a parameter of the rank's program).
std::vector<int64_t> parameterShardOffset(const LoadedPlan &plan,
                                          const megac::plan::Parameter &param, int64_t rank);

/// Writes every parameter of program `programIndex` into `arena` (the program's arena, laid
/// out by its buffers). A parameter's value comes from `weights` by name, else from the plan's
/// weights_file (read at most once, relative to the plan's directory), else from its init spec
/// with the plan's seed. A weight must have the parameter's dtype and global shape; the shard
/// at the rank's offset (parameterShardOffset) with the buffer's shape is copied. Init values
/// are drawn in float and converted to the buffer's dtype, so f64 and f32 programs start from
/// the same weights.
Status fillParameters(const LoadedPlan &plan, size_t programIndex, int64_t rank, uint8_t *arena,
                      const TensorMap *weights);

/// The plan's weights_file as a path: absolute as is, else relative to the plan's directory
/// (to the working directory for a plan loaded from memory). Empty if the plan names none.
std::string weightsFilePath(const LoadedPlan &plan);

} // namespace megac::runtime
