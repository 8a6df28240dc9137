// Hugging Face weights in and out (docs/huggingface.md): an hf: model folder's model.safetensors
// or sharded model.safetensors.index.json read lazily into each rank's parameter shards (pread of
// the shard's byte ranges: no rank reads or holds the whole model), and a trained model written
// back as a folder transformers loads with from_pretrained (--save-hf).
#pragma once

#include "driver/ModelSource.h"
#include "driver/SourceShapes.h"

#include "runtime/exec/Executor.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace megac::driver {

/// A megac parameter's name in transformers' state_dict: "model." + name, except the head
/// (lm_head.*), which transformers keeps outside the decoder.
std::string hfTensorName(const std::string &megacName);

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
};

/// Writes `weights` (whole, megac's names, the model's own shapes; f64 and f32 tensors are
/// written as F32) as a transformers folder `dir`: model.safetensors, or shards of at most
/// shardBytes (a larger tensor alone in its shard) named model-0000i-of-0000n.safetensors with
/// model.safetensors.index.json, config.json and the tokenizer files the input folder has. The
/// folder is written as DIR.tmp-XXXXXX beside DIR and renamed to DIR at the end: a crash leaves
/// no half folder (a DIR.tmp-* that a later save does not touch). An existing DIR is refused.
Status saveHfFolder(const std::string &dir, const TensorMap &weights, const HfSaveOptions &options);

/// Refuses a --save-hf DIR that exists or whose parent is not a directory (checked before the
/// run, so a long run does not end in an error).
Status checkHfSaveDir(const std::string &dir);

/// "5GB", "500MB", "2GiB", "100000" (bytes) -> bytes; false for anything else.
bool parseByteSize(const std::string &text, uint64_t &bytes);

} // namespace megac::driver
