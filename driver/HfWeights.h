// Hugging Face weights read (docs/huggingface.md): an hf: model folder's model.safetensors or
// sharded model.safetensors.index.json read lazily into each rank's parameter shards (pread of
// the shard's byte ranges: no rank reads or holds the whole model). Writing a folder
// transformers loads (--save-hf, megac export --hf) is driver/HfSave.h.
#pragma once

#include "driver/ModelSource.h"
#include "driver/SourceShapes.h"

#include "runtime/exec/Executor.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Json.h"
#include "support/Status.h"

#include <cstdint>
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

/// The files a folder's weights are in: the index of sharded files, or the one file.
inline constexpr const char *kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char *kHfSingleFile = "model.safetensors";

/// The JSON of a folder's file (config.json, the index); an error names `path` (`what` says
/// what it is when it cannot be read).
StatusOr<json::Value> readHfJson(const std::string &path, const char *what);

/// The float dtypes safetensors weights are read in and saved as (F32, BF16, F16, F64).
bool isHfFloat(DType d);
/// One element of float dtype `d` at `p`, widened to double (exact).
double loadHfElement(const uint8_t *p, DType d);
/// `value` stored at `p` in float dtype `d` (fp32 -> bf16/f16 rounds to nearest even).
void storeHfElement(uint8_t *p, DType d, double value);
/// `n` elements of dtype `from` at `src` written as `to` at `dst` (exact for widening; fp32 ->
/// bf16/f16 rounds to nearest even).
void convertHfElements(const uint8_t *src, DType from, uint8_t *dst, DType to, size_t n);

} // namespace megac::driver
