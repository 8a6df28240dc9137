// Hugging Face weights in and out (docs/huggingface.md): an hf: model folder's model.safetensors
// or sharded model.safetensors.index.json read lazily into each rank's parameter shards (pread of
// the shard's byte ranges: no rank reads or holds the whole model), and a trained model written
// back as a folder transformers loads with from_pretrained (--save-hf).
#pragma once

#include "driver/ModelSource.h"
#include "driver/SourceShapes.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace megac::driver {

/// Where a megac parameter lies in transformers' files.
struct HfPlace {
  std::string tensor; // the tensor's name in transformers' state_dict
  /// GPT-2's Conv1D: the file holds the weight as [in, out], megac as nn.Linear's [out, in].
  bool conv1d = false;
  /// GPT-2's fused c_attn: megac's q, k and v are blocks 0, 1, 2 of `parts` along the out dim.
  int64_t part = 0, parts = 1;
};

/// A megac parameter's place in transformers' state_dict: "model." + name, except the head
/// (lm_head.*), which transformers keeps outside the decoder, and GPT-2's parameters, which
/// megac already names as transformers does (transformer.*), q/k/v split out of c_attn.
HfPlace hfPlace(const std::string &megacName);
/// hfPlace(megacName).tensor.
std::string hfTensorName(const std::string &megacName);
/// The shape transformers' tensor has for a megac parameter of `shape` at `place` (the fused
/// tensor's whole shape for a part of it).
std::vector<int64_t> hfFileShape(const HfPlace &place, std::vector<int64_t> shape);

/// The weights file of an hf: model source: the folder's model.safetensors.index.json, else its
/// model.safetensors; empty when the source is not hf: or its folder has neither (the zoo's
/// random initialisation, as a bare config.json always had).
std::string hfWeightsFile(const ModelSource &source);
/// The folder an hf: source's config.json lies in; empty for other sources.
std::string hfFolder(const ModelSource &source);

/// One tensor of a (possibly sharded) Hugging Face checkpoint, its bytes located.
struct HfTensor {
  std::string file; // the safetensors file holding it
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0; // byte offset of its first element in `file`
};

/// The headers of a checkpoint's files (no tensor data), every tensor's bytes checked to lie in
/// its file: a truncated shard, an index naming a file that is not there or a tensor its file
/// does not hold, and a dtype other than F32/BF16/F16/F64 are refused naming file and tensor.
struct HfCheckpoint {
  std::string path; // the index or the single file, for errors
  std::map<std::string, HfTensor> tensors;

  static StatusOr<HfCheckpoint> open(const std::string &weightsFile);
};

/// Fills every parameter of `executor` (this rank's shards) from `checkpoint`. First, on every
/// rank alike, the checkpoint is checked against every parameter of `plan` (all programs): a
/// parameter without a tensor (unless `allowMissing` names it, in transformers' or megac's
/// spelling: it keeps its initialisation), a tensor no parameter takes, and a tensor of another
/// shape are refused naming them. A tied model's lm_head.weight and rotary inv_freq buffers are
/// accepted and not read, as transformers does. Then each shard is read with pread from the
/// byte ranges that hold it and converted to the parameter's dtype; a parameter that stacks the
/// model's per-expert tensors (`source.stacks`) reads its experts' slices.
Status loadHfWeights(const HfCheckpoint &checkpoint, const runtime::LoadedPlan &plan,
                     runtime::Executor &executor, const SourceShapes &source,
                     const std::vector<std::string> &allowMissing);

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
