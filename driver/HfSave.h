// Hugging Face folders written (docs/huggingface.md): a trained model saved as a folder
// transformers loads with from_pretrained (--save-hf), and `megac export --hf` of a checkpoint,
// one output shard at a time, so that no rank holds the whole model.
#pragma once

#include "driver/HfWeights.h"
#include "driver/SourceShapes.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megac::driver {

/// What --save-hf writes beside the tensors.
struct HfSaveOptions {
  std::string inputFolder;                     // config.json and tokenizer files are copied from it
  uint64_t shardBytes = 5'000'000'000;         // --hf-shard-size
  std::map<std::string, std::string> metadata; // each shard's __metadata__ (format pt is added)
  std::string what = "--save-hf";              // the command's flag, for errors
};

/// The tensors of one output shard, whole, under megac's names in the model's own shapes (a
/// stacked parameter split into its members: toSourceShapes), asked for by megac parameter
/// name. Called on every rank alike, shard after shard; only the writing rank's result is used
/// (the others may return an empty map): a gather of just those parameters.
using HfShardFetch = std::function<StatusOr<TensorMap>(const std::vector<std::string> &params)>;

/// The dtype a folder's tensors are saved in: its config.json's torch_dtype (bfloat16 -> BF16,
/// float16 -> F16), F32 for float32, for any other value and when the field is absent; an
/// error when config.json is missing or not JSON.
StatusOr<DType> hfSaveDtype(const std::string &inputFolder);

/// Writes a model as a transformers folder `dir`, one output shard at a time so that the
/// writing rank never holds more than one shard of the model: `params` (megac parameter name ->
/// whole shape as the plan holds it) are grouped in name order into shards of at most
/// shardBytes in the saved dtype (hfSaveDtype; a larger parameter alone in its shard), and each
/// shard's parameters are fetched (`fetch`, on every rank alike), converted (fp32 -> bf16/f16
/// rounds to nearest even) and written: model.safetensors, or model-0000i-of-0000n.safetensors
/// with model.safetensors.index.json, then config.json and the tokenizer files the input folder
/// has. Only the `writer` rank writes; the folder is written as DIR.tmp-XXXXXX beside DIR and
/// renamed to DIR at the end: a crash leaves no half folder (a DIR.tmp-* that a later save does
/// not touch). An existing DIR is refused. A write error on the writer still calls `fetch` for
/// the remaining shards (the other ranks are in those gathers) before it is returned.
Status saveHfFolder(const std::string &dir,
                    const std::map<std::string, std::vector<int64_t>> &params,
                    const SourceShapes &source, const HfShardFetch &fetch,
                    const HfSaveOptions &options, bool writer = true);

/// Refuses a --save-hf DIR that exists or whose parent is not a directory (checked before the
/// run, so a long run does not end in an error); `what` names the flag in the error.
Status checkHfSaveDir(const std::string &dir, const std::string &what = "--save-hf");

/// The parameters of the newest usable checkpoint under `loadDir`, picked as `megac train
/// --load` picks it (runtime::checkpoint::loadLatestCheckpoint, parameters only); `warn` gets a
/// line for each checkpoint refused. What `megac export --hf` and `megac generate --load` read.
StatusOr<runtime::checkpoint::Checkpoint>
loadNewestParameters(const std::string &loadDir,
                     const std::function<void(const std::string &)> &warn);

/// What `megac export --hf` wrote.
struct HfExportSummary {
  std::string checkpointPath; // DIR/step-N
  int64_t step = 0;
  size_t parameters = 0;
  DType dtype = DType::f32; // the tensors' dtype in the folder (hfSaveDtype)
};

/// `megac export --load DIR --hf OUT`: the newest usable checkpoint under `loadDir` (its
/// parameters, picked as `megac train --load` picks it) of an hf: model — `spec` (hf:FOLDER),
/// else the model the checkpoint records — written as the folder --save-hf writes (saveHfFolder:
/// config.json and tokenizer files from the model's folder, shards of `shardBytes`). The model
/// is built from its config to learn the parameters' shapes; a checkpoint tensor it does not
/// have, or of another shape, is refused by name before anything is written. `warn` gets a line
/// for each checkpoint refused.
StatusOr<HfExportSummary> exportHfCheckpoint(const std::string &loadDir,
                                             const std::optional<std::string> &spec,
                                             const std::string &dir, uint64_t shardBytes,
                                             const std::function<void(const std::string &)> &warn);

/// "5GB", "500MB", "2GiB", "100000" (bytes) -> bytes; false for anything else.
bool parseByteSize(const std::string &text, uint64_t &bytes);

} // namespace megac::driver
