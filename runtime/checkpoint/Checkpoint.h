// Training checkpoints on disk (`megac train --save/--load`): one directory per saved step with
// whole (layout-independent) tensors, written atomically and verified by checksum when read.
//
// DIR/
//   latest                 "4\n": the step of the newest complete checkpoint (replaced atomically)
//   step-4/
//     model.safetensors      every parameter, whole, by name (the layout of a one-rank run)
//     optimizer.safetensors  every optimizer state buffer, whole, by name (adam.m.<p>, adam.v.<p>);
//                            gradient accumulators are not saved (zero at a step boundary)
//     meta.json              format_version, step, data_position, seed, model, layout, config,
//                            loss_scaler, files: {name: {bytes, crc32}}
//
// A save writes DIR/step-N.tmp/, fsyncs every file and the directory, renames it to step-N and
// then replaces `latest`; a crash at any point leaves the previous checkpoint intact. A load
// tries the step `latest` names, then every other complete step-N newest first, and refuses a
// checkpoint whose file sizes or CRC32s differ from its meta.json.
#pragma once

#include "runtime/Status.h"
#include "runtime/io/HostTensor.h"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::checkpoint {

/// meta.json's format_version; a checkpoint of another version is refused.
constexpr int64_t kFormatVersion = 1;

/// The dynamic loss scaler's state (fp16 runs).
struct LossScalerState {
  double scale = 0;
  int64_t growthTracker = 0;
  int64_t hysteresisTracker = 0;
};

/// Everything in meta.json except the file table.
struct CheckpointMeta {
  int64_t step = 0;         // optimizer steps done (1-based count; the next step is step + 1)
  int64_t dataPosition = 0; // the next step's batch index (megac train reads batches by step)
  uint64_t seed = 0;
  std::optional<LossScalerState> lossScaler;
  std::string model;  // the model's description, for messages
  std::string layout; // the saving run's layout, for messages ("tp 2, pp 2, dp 1, zero 0")
  std::map<std::string, std::string> config; // other settings, recorded as strings
};

/// A checkpoint read back: its meta, whole tensors, and the directory it came from.
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

/// Writes the checkpoint of `meta.step` under `dir` (created if missing) atomically and then
/// points `dir`/latest at it. An existing step-N of the same step is replaced.
Status saveCheckpoint(const std::string &dir, const CheckpointMeta &meta, const TensorMap &model,
                      const TensorMap &optimizer);

/// Reads and verifies one checkpoint directory (DIR/step-N); an error names the file at fault.
StatusOr<Checkpoint> readCheckpoint(const std::string &stepDir);

/// The newest usable checkpoint under `dir`: the step `latest` names, else (latest missing,
/// unreadable or naming a refused checkpoint) every other complete step-N, newest first. Each
/// refused candidate with another after it adds a line to `refused` ("<why>; trying
/// DIR/step-M next"). Errors when no candidate is usable, with every candidate's reason.
StatusOr<Checkpoint> loadLatestCheckpoint(const std::string &dir,
                                          std::vector<std::string> *refused = nullptr);

/// The steps of the complete checkpoints (step-N directories with a meta.json) under `dir`,
/// newest first.
std::vector<int64_t> listCheckpointSteps(const std::string &dir);

} // namespace megac::runtime::checkpoint
