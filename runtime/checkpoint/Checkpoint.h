// Training checkpoints on disk (`megac train --save/--load`): one directory per saved step whose
// tensors are stored as shards, each recording the logical tensor's name, global shape and its
// offset in it, so a checkpoint saved under one layout loads under any other.
//
// DIR/
//   latest                              "4\n": the step of the newest complete checkpoint
//   step-4/
//     model-rank-00003.safetensors      the parameter shards rank 3 wrote, by logical name, each
//                                       of its shard shape (a rank writes a box no lower rank
//                                       holds: replicas are stored once; no file when empty)
//     optimizer-rank-00003.safetensors  the same for the optimizer state (adam.m.<p>, adam.v.<p>);
//                                       gradient accumulators are not saved (zero at a step end)
//     meta.json                         format_version 2, step, data_position, seed, model,
//                                       layout, config, loss_scaler,
//                                       parameters / optimizer: {name: {dtype, shape,
//                                         shards: [{file, offset, shape}]}},
//                                       files: {name: {bytes, crc32}}
//
// Format version 1 (still read): model.safetensors and optimizer.safetensors with whole tensors.
//
// A save writes DIR/step-N.tmp-<host>-<pid>/ (rank 0's name; every rank its files, fsynced),
// then meta.json, fsyncs the directory, renames it to step-N and replaces `latest`; a crash at
// any point leaves the previous checkpoint intact (the next save removes the temporary folder). A
// load tries the step `latest` names, then every other complete step-N newest first, and refuses a
// checkpoint whose file sizes or CRC32s differ from its meta.json.
#pragma once

#include "runtime/checkpoint/Integrity.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::checkpoint {

/// meta.json's format_version written; versions 1 and 2 are read.
constexpr int64_t kFormatVersion = 2;

/// The dynamic loss scaler's state (fp16 runs).
struct LossScalerState {
  double scale = 0;
  int64_t growthTracker = 0;
  int64_t hysteresisTracker = 0;
};

/// Everything in meta.json except the tensor and file tables.
struct CheckpointMeta {
  int64_t step = 0;         // optimizer steps done (1-based count; the next step is step + 1)
  int64_t dataPosition = 0; // the next step's batch index (megac train reads batches by step)
  uint64_t seed = 0;
  std::optional<LossScalerState> lossScaler;
  std::string model;  // the model's description, for messages
  std::string layout; // the saving run's layout, for messages ("tp 2, pp 2, dp 1, zero 0")
  std::map<std::string, std::string> config;   // other settings, recorded as strings
  std::optional<ModelFingerprint> fingerprint; // absent in checkpoints of older megac
};

/// One stored shard of a logical tensor: the file holding it (under the tensor's name) and its
/// box in the global shape.
struct ShardRecord {
  std::string file;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};

/// A logical tensor of a checkpoint: dtype, global shape, and the shards that cover it.
struct TensorRecord {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<ShardRecord> shards;
};
using TensorTable = std::map<std::string, TensorRecord>;

/// A file of a checkpoint directory, as meta.json records it.
struct FileRecord {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
using FileTable = std::map<std::string, FileRecord>;

/// meta.json read back: what a load needs to find every shard (no tensor data).
struct CheckpointIndex {
  CheckpointMeta meta;
  int64_t formatVersion = kFormatVersion;
  TensorTable parameters;
  TensorTable optimizer;
  FileTable files;
  std::string path; // DIR/step-N
};

/// A checkpoint read back whole: its meta, whole tensors, and the directory it came from.
struct Checkpoint {
  CheckpointMeta meta;
  TensorMap model;
  TensorMap optimizer;
  std::string path; // DIR/step-N
};

/// The CRC32 (IEEE 802.3, as zlib's crc32) of `bytes`, continuing from `crc`.
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

/// "DIR/step-N".
std::string stepPath(const std::string &dir, int64_t step);

/// "model-rank-00003.safetensors" / "optimizer-rank-00003.safetensors".
std::string rankFileName(bool optimizer, int rank);

/// Creates `dir` if missing and an empty DIR/step-<step><tempSuffix()> (SaveFolder.h); returns
/// the temporary directory.
StatusOr<std::string> beginSave(const std::string &dir, int64_t step);

/// Completes a save whose shard files are in `tmp` (fsynced): writes meta.json, fsyncs, renames
/// `tmp` to DIR/step-<meta.step> (replacing an older save of that step) and replaces `latest`.
Status commitSave(const std::string &dir, const std::string &tmp, const CheckpointMeta &meta,
                  const TensorTable &parameters, const TensorTable &optimizer,
                  const FileTable &files);

/// Writes the checkpoint of `meta.step` with whole tensors, from one process, atomically (as one
/// rank holding every tensor whole) and then points `dir`/latest at it.
Status saveCheckpoint(const std::string &dir, const CheckpointMeta &meta, const TensorMap &model,
                      const TensorMap &optimizer);

/// Reads meta.json of a checkpoint directory (format version 1 or 2; for version 1 the tensor
/// tables come from the safetensors headers). An error names the file at fault.
StatusOr<CheckpointIndex> readCheckpointIndex(const std::string &stepDir);

/// What a whole-tensor read assembles: everything, or the parameters only (generate and export
/// need no optimizer state: its files are then neither read nor verified).
enum class CheckpointParts { all, parametersOnly };

/// Reads and verifies one checkpoint directory (DIR/step-N), assembling whole tensors from the
/// shards; an error names the file at fault.
StatusOr<Checkpoint> readCheckpoint(const std::string &stepDir,
                                    CheckpointParts parts = CheckpointParts::all);

/// The steps to try loading from `dir`, in order: the step `latest` names, then every other
/// complete step-N, newest first. A `latest` that is unreadable or names no step adds a line
/// to `problems`. Errors when `dir` is missing or holds no checkpoint.
StatusOr<std::vector<int64_t>> checkpointCandidates(const std::string &dir,
                                                    std::vector<std::string> &problems);

/// What pickCheckpoint's `attempt` made of one candidate: loaded (the pick), refused (a corrupt
/// or unusable checkpoint: try the next) or fatal (stop: no other candidate is tried).
struct CandidateOutcome {
  enum Kind { loaded, refused, fatal } kind = loaded;
  std::string why; // refused, fatal: the reason, naming the file at fault
};

/// The one loop that picks the checkpoint to load, for every reader (train on every rank through
/// loadShardedCheckpoint; generate and export through loadLatestCheckpoint): tries `candidates`
/// (checkpointCandidates' steps, in its order) with `attempt(DIR/step-N)` until one loads and
/// returns its step. No checkpoint is picked silently: each of `problems` (checkpointCandidates'
/// lines about `latest`) and each refused candidate with another after it add a line to
/// `refused`, when given, naming the checkpoint tried next. Errors when `attempt` does or says
/// fatal, and when no candidate loads (with `problems` and every candidate's reason).
StatusOr<int64_t> pickCheckpoint(
    const std::string &dir, const std::vector<int64_t> &candidates,
    const std::vector<std::string> &problems, std::vector<std::string> *refused,
    const std::function<StatusOr<CandidateOutcome>(const std::string &stepDir)> &attempt);

/// The newest usable checkpoint under `dir`, whole: the step `latest` names, else (latest
/// missing, unreadable or naming a refused checkpoint) every other complete step-N, newest
/// first (pickCheckpoint). A garbled `latest` and each refused candidate with another after it
/// add a line to `refused` ("<why>; trying DIR/step-M next"). Errors when no candidate is usable,
/// with every candidate's reason.
StatusOr<Checkpoint> loadLatestCheckpoint(const std::string &dir,
                                          std::vector<std::string> *refused = nullptr,
                                          CheckpointParts parts = CheckpointParts::all);

/// The steps of the complete checkpoints (step-N directories with a meta.json) under `dir`,
/// newest first.
std::vector<int64_t> listCheckpointSteps(const std::string &dir);

} // namespace megac::runtime::checkpoint
