// A Hugging Face transformers `config.json` of a causal LM read into the zoo config that builds
// the same model (`--model hf:PATH`): llama (with Llama 3.1's rope_scaling), mistral, qwen2,
// mixtral, qwen2_moe, nemotron and gpt2. Every field is either honoured, known to change no math
// (architectures, torch_dtype, token ids, ...), or refused in one line naming the file, the field
// and its value.
#pragma once

#include "frontends/models/ModelConfig.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megac::models {

/// A config.json read: the zoo config it describes, its sequence length still to be bound.
struct HfModel {
  std::string file;      // the config.json read, for errors
  std::string modelType; // its model_type
  ModelConfig config;    // seq 0: the config says nothing of the training sequence length
  /// The sliding window the family applies to attention (mistral's sliding_window; qwen2's when
  /// use_sliding_window); 0 when none. megac's attention does not window, so a sequence longer
  /// than it is refused.
  int64_t slidingWindow = 0;
  std::string slidingWindowField; // the field that set it, for the error

  /// The config built for rows of `seq` tokens, checked as a zoo spec is; the error names the
  /// file.
  ConfigResult at(int64_t seq) const;
};

struct HfResult {
  std::optional<HfModel> model;
  std::string error; // one line: "FILE: field 'x' ..."
};

/// The model_types megac builds, in the order docs list them.
const std::vector<std::string> &hfModelTypes();

/// Parses the text of a config.json; `file` names it in errors.
HfResult parseHfConfig(std::string_view text, const std::string &file);

/// Reads `path`: a model folder (its config.json) or the config.json itself.
HfResult readHfConfig(const std::string &path);

} // namespace megac::models
