// TensorBoard event files (`megac train --tensorboard-dir`): TFRecord-framed Event protos, one
// scalar each, with the values the JSON log (TrainLog.h) holds, under tags named after its keys.
#pragma once

#include "runtime/train/TrainLog.h"
#include "support/Status.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime::train {

/// CRC-32C (Castagnoli, reflected, as TFRecord files use): crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view bytes);
/// TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8, rotated and offset
/// because a CRC over bytes that hold CRCs is weak.
uint32_t maskedCrc32c(std::string_view bytes);
/// One TFRecord: the data's length as a little-endian uint64, the masked CRC-32C of those 8
/// bytes (little-endian uint32), the data, the masked CRC-32C of the data.
std::string tfRecord(std::string_view data);

struct Scalar {
  std::string tag;
  double value = 0; // written as a float32 (TensorBoard's simple_value)
};

/// A step record's scalars, tagged train/<its --log-json key>: loss, lr, grad_norm, loss_scale,
/// skipped (0 or 1), tokens, tokens_per_s, step_time_s; model_tflops_per_rank, mfu,
/// mem_plan_bytes and mem_rss_peak_bytes when the record knows them; with MoE layers moe_aux_loss,
/// moe_dropped and train/moe_load/layer<L>/expert<E> for each entry of moe_load.
std::vector<Scalar> stepScalars(const StepRecord &record);
/// An evaluation's (part "val" or "test"): <part>/loss and <part>/perplexity = exp(loss), the
/// log's <part>_loss and <part>_ppl.
std::vector<Scalar> evalScalars(const std::string &part, double loss);

/// The serialized Event protos a file holds: its first, file_version "brain.Event:2", and one
/// per scalar (Summary{value{tag, simple_value}}).
std::string fileVersionEvent(double wallTime);
std::string scalarEvent(double wallTime, int64_t step, const Scalar &scalar);

/// Rank 0's event file in a directory, flushed after every write() so a killed run loses at most
/// the step being written.
class TensorBoardWriter {
public:
  TensorBoardWriter() = default;
  TensorBoardWriter(const TensorBoardWriter &) = delete;
  TensorBoardWriter &operator=(const TensorBoardWriter &) = delete;
  ~TensorBoardWriter();

  /// Creates `dir` if missing and in it a new events.out.tfevents.<unix seconds>.<hostname>
  /// (with .1, .2, ... appended when that exists: a second run in the same second), starting
  /// with the file_version event.
  Status open(const std::string &dir);
  /// One event per scalar at `step`, then a flush.
  Status write(int64_t step, const std::vector<Scalar> &scalars);
  Status close();
  /// The event file's path once open.
  const std::string &path() const { return path_; }

private:
  Status append(const std::string &events);

  std::FILE *file_ = nullptr;
  std::string path_;
};

} // namespace megac::runtime::train
