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

/// The part of the global tensor a rank's buffer holds: where it starts and its extent.
struct ShardBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};
/// Rank `rank`'s valid box of a tensor split by `dims` (shardOffset's offset): the local shape,
/// clamped on each split dim to what the global dim has left from the offset. An even split's
/// box is the whole buffer. Under a padded split (ZeRO-3, DimSharding.padded_size) it is the
/// buffer's leading rows, none for a late rank (its offset clamped to the dim's end), and the
/// buffer's rows past it are zero padding. Every reader of shards (init, weights files,
/// checkpoints, gathers of whole tensors) reads and writes this box, not the buffer's shape.
ShardBox shardBox(const comm::Mesh &mesh, int64_t rank, std::span<const int64_t> localShape,
                  std::span<const int64_t> base, std::span<const int64_t> globalShape,
                  const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> &dims);
/// Rank `rank`'s box of `param` (a parameter of the rank's program).
ShardBox parameterShardBox(const LoadedPlan &plan, const megac::plan::Parameter &param,
                           int64_t rank);

/// The box's elements of a buffer's value: its leading `box` extent on every dim (the value
/// itself, moved, when the box is the whole buffer).
HostTensor boxOfBuffer(HostTensor buffer, std::span<const int64_t> box);
/// A box's value as its buffer holds it: zero-padded past the box to `bufferShape` on every
/// dim (the value itself, moved, when the shapes are equal).
HostTensor bufferOfBox(HostTensor box, std::span<const int64_t> bufferShape);

/// Writes every parameter of program `programIndex` into `arena` (the program's arena, laid
/// out by its buffers). A parameter's value comes from `weights` by name, else from the plan's
/// weights_file (read at most once, relative to the plan's directory), else from its init spec
/// with the plan's seed. A weight must have the parameter's dtype and global shape; the rank's
/// box (parameterShardBox) is copied and the buffer's padding past it zeroed. Init values
/// are drawn in float and converted to the buffer's dtype, so f64 and f32 programs start from
/// the same weights.
Status fillParameters(const LoadedPlan &plan, size_t programIndex, int64_t rank, uint8_t *arena,
                      const TensorMap *weights);

/// The plan's weights_file as a path: absolute as is, else relative to the plan's directory
/// (to the working directory for a plan loaded from memory). Empty if the plan names none.
std::string weightsFilePath(const LoadedPlan &plan);

} // namespace megac::runtime
