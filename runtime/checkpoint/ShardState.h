// Between a job's sharded training state and a checkpoint's shard files: every rank writes the
// shards it holds (a box several ranks hold, by the lowest of them) and reads back only the
// boxes of the stored shards that intersect its own, under any layout. What a rank holds is read
// from its executor (parameterShard / stateShard: global shape and offset), so a checkpoint saved
// under one layout (tp, pp, dp, ZeRO) loads under another. No rank ever holds a whole tensor
// (unless its shard is one).
#pragma once

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "support/Status.h"

#include <string>
#include <vector>

namespace megac::runtime::checkpoint {

/// Whether a state buffer belongs in a checkpoint: gradient accumulators are zero at a step
/// boundary and are not saved.
bool isCheckpointedState(std::string_view name);

/// Every rank calls this at a step boundary. Rank 0 gathers every rank's list of boxes (names,
/// offsets, shapes: no data), picks each distinct box's writer (the lowest rank holding it) and
/// creates DIR/step-<meta.step>.tmp-<host>-<pid>; each rank writes and fsyncs its files there
/// (model-rank-R / optimizer-rank-R.safetensors) and sends their sizes and CRC32s to rank 0,
/// which writes meta.json and completes the save (commitSave). Every rank returns rank 0's
/// verdict, so a failure anywhere fails the save everywhere.
Status saveShardedCheckpoint(const Executor &executor, comm::Communicator &comm,
                             const std::string &dir, const CheckpointMeta &meta);

/// A checkpoint loaded into an executor: its meta and directory.
struct LoadedCheckpoint {
  CheckpointMeta meta;
  std::string path; // DIR/step-N
};

/// Every rank calls this: sets its shard of every parameter and checkpointed state buffer from
/// the newest usable checkpoint under `dir`, reading only the stored boxes that intersect it. The
/// ranks agree on the checkpoint: when any rank refuses one (a missing, truncated or corrupt
/// file, named), all try the next (pickCheckpoint: rank 0 adds a line to `refused` for each, and
/// for a garbled `latest`). A tensor that is
/// missing or whose dtype or global shape differs from this run's is an error, without fallback.
/// With `parts` parametersOnly the optimizer state is left as it is (--finetune, --no-load-optim).
StatusOr<LoadedCheckpoint> loadShardedCheckpoint(Executor &executor, comm::Communicator &comm,
                                                 const std::string &dir,
                                                 std::vector<std::string> *refused = nullptr,
                                                 CheckpointParts parts = CheckpointParts::all);

} // namespace megac::runtime::checkpoint
