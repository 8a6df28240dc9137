// What a checkpoint records of an ONNX-imported model so that `megac generate` and `megac export`
// can rebuild it: the file (absolute path, size and CRC32: a changed file is refused) and the
// token input's bound shape. A TrainSession's save() writes these entries into meta.json's
// config; exportCheckpoint writes a checkpoint's weights back into the ONNX model.
#pragma once

#include "driver/ModelSource.h"

#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megac::runtime {
class Executor;
} // namespace megac::runtime

namespace megac::driver {

/// meta.config entries for a model trained from `file` when it is an .onnx file (else none):
/// onnx (the absolute path), onnx_bytes, onnx_crc32 (8 hex digits), onnx_input_ids (the
/// training rank's bound shape of input_ids, "2x16") and onnx_logits (--logits, when given).
std::map<std::string, std::string> recordOnnxModel(const std::optional<std::string> &file,
                                                   const runtime::Executor &executor,
                                                   const std::string &logits);

struct OnnxModelRecord {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  std::vector<int64_t> inputIds; // empty: not recorded
  std::string logits;            // empty: not recorded
};

/// The record in a checkpoint's meta.config; nullopt when the checkpoint is not of an ONNX
/// model; an error when the entries are malformed.
StatusOr<std::optional<OnnxModelRecord>>
onnxRecordOf(const std::map<std::string, std::string> &config);

/// OK when `path` has the recorded size and CRC32; else a one-line error naming both files.
Status checkOnnxFile(const OnnxModelRecord &record, const std::string &path);

/// The shape to bind input_ids of the model at `path` to: the file's fixed dims, the recorded
/// dims where the file's are symbolic, except a symbolic dim 0 (the batch), which is `rows`.
StatusOr<InputShapes> bindTokenInput(const OnnxModelRecord &record, const std::string &path,
                                     int64_t rows);

/// "2x16".
std::string dimsString(const std::vector<int64_t> &dims);

/// The newest checkpoint under a directory, of an ONNX model, for exportCheckpoint.
struct ExportSource {
  std::string checkpointPath;
  int64_t step = 0;
  OnnxModelRecord model;
  TensorMap parameters;
};

/// The newest usable checkpoint under `loadDir` (its parameters only, picked as `megac train
/// --load` picks it); an error when it is not of an ONNX model trained by this megac. `warn` gets
/// a line for each checkpoint refused and for a garbled `latest`, naming the one used instead.
StatusOr<ExportSource> openExportSource(const std::string &loadDir,
                                        const std::function<void(const std::string &)> &warn);

struct ExportSummary {
  int64_t replaced = 0, kept = 0; // initializers trained and written / kept as they were
  uint64_t outputBytes = 0;
};

/// `megac export`: the checkpoint's parameters written into a copy of `onnx` at `output`;
/// `onnx` must be the file the checkpoint records (size and CRC32). Nothing is written on error.
StatusOr<ExportSummary> exportCheckpoint(const ExportSource &source, const std::string &onnx,
                                         const std::string &output);

} // namespace megac::driver
