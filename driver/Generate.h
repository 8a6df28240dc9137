// Text from a checkpoint (`megac generate`): a zoo GPT, or an ONNX-imported causal LM rebuilt from
// the .onnx file the checkpoint records, or a transformers folder (--model hf:FOLDER), run as a
// one-rank forward plan over the window of the last seq tokens (batch 1, or the model's fixed batch
// with the window in row 0), for an hf: folder with a KV cache (a decode-step plan, one token per
// run); the logits of the last real position pick the next token: greedy
// (temperature 0, the forward pass's argmax) or sampled with top-k / top-p from a seeded generator.
#pragma once

#include "driver/ModelSource.h"
#include "runtime/data/Tokenizer.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace megac::driver {

// The runtime's tokenizers, re-exported (as DataPrep.h does).
using runtime::data::makeTokenizer;
using runtime::data::Tokenizer;

struct Sampling {
  int64_t maxTokens = 64;
  double temperature = 0, topP = 1;
  int64_t topK = 0;
  uint64_t seed = 0;
};

class Generator {
public:
  /// The newest usable checkpoint under `loadDir` (picked as `megac train --load` picks it:
  /// runtime::checkpoint::pickCheckpoint) with its model: the zoo GPT of `spec` (default: the
  /// checkpoint's), or the ONNX model it records (`onnx` gives a moved file, which must have the
  /// recorded size and CRC32). `warn` gets a line for each checkpoint refused and for a garbled
  /// `latest`, naming the checkpoint used instead.
  static StatusOr<std::unique_ptr<Generator>>
  open(const std::string &loadDir, const std::optional<std::string> &spec,
       const std::optional<std::string> &onnx,
       const std::function<void(const std::string &)> &warn);
  /// The model of an hf: folder with its weights (model.safetensors[.index.json]; a bare
  /// config.json is refused), its window the source's seq=S, else `window`. With `kvCache`
  /// (every hf: family: ModelConfig::buildsKvCache) a second plan, one decode step over the
  /// cached keys and values of the text so far, makes each new token after the forward over the
  /// prompt: O(window) per token instead of the forward's O(window^2) attention and window rows
  /// of every layer (docs/huggingface.md "Generate").
  static StatusOr<std::unique_ptr<Generator>> openHf(const ModelSource &source, int64_t window,
                                                     bool kvCache = true);
  ~Generator();

  /// Continues `prompt`: `emit` gets the prompt, then each new token's text as it is chosen,
  /// then "\n". Returns the tokens generated (an end-of-document one included).
  StatusOr<int64_t> continuePrompt(const runtime::data::Tokenizer &tokenizer,
                                   const std::string &prompt, const Sampling &sampling,
                                   const std::function<void(std::string_view)> &emit);
  /// The window (the model's sequence length) and the time the plan took to compile.
  int64_t window() const;
  double compileSeconds() const;
  /// Whether tokens are made by the KV cache's decode step (openHf).
  bool kvCache() const;

private:
  struct Session;
  explicit Generator(std::unique_ptr<Session> session);
  std::unique_ptr<Session> session_;
};

} // namespace megac::driver
