// Between a job's sharded training state and a checkpoint's whole tensors: gathering every
// rank's shards of the parameters and optimizer state on one rank (to save), and setting each
// rank's shards from whole tensors (to load, under any layout). What a rank holds is read from
// its executor (parameterShard / stateShard: global shape and offset), so a checkpoint saved
// under one layout (tp, pp, dp, ZeRO) loads under another.
#pragma once

#include "runtime/Status.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/io/HostTensor.h"

#include <cstdint>
#include <span>

namespace megac::runtime::checkpoint {

/// Whole parameters and optimizer state, on the root rank.
struct WholeState {
  TensorMap parameters;
  TensorMap optimizer; // every state buffer but the gradient accumulators ("grad.*")
};

/// Whether a state buffer belongs in a checkpoint: gradient accumulators are zero at a step
/// boundary and are not saved.
bool isCheckpointedState(std::string_view name);

/// Every rank calls this; `root` gets every parameter and checkpointed state buffer whole (a
/// replicated shard is taken from any rank holding it: replicas are equal), the other ranks an
/// empty result. Each non-root rank sends its shards to the root in one message.
StatusOr<WholeState> gatherWholeState(const Executor &executor, comm::Communicator &comm,
                                      int root = 0);

/// Sets this rank's shard of every parameter and checkpointed state buffer from the whole
/// tensors. An error names a tensor that is missing or whose dtype or global shape differs.
Status setStateFromWhole(Executor &executor, const WholeState &whole);

/// The box of `whole` (row-major, `global` shape) at `offset` with `shape`, as a tensor.
HostTensor extractBox(const HostTensor &whole, std::span<const int64_t> offset,
                      std::span<const int64_t> shape);
/// Copies `shard` into the box of `whole` at `offset` (the inverse of extractBox).
void insertBox(HostTensor &whole, const HostTensor &shard, std::span<const int64_t> offset);

} // namespace megac::runtime::checkpoint
