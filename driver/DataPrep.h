// `megac data prep`: text or JSON lines to Megatron's indexed dataset (PREFIX.bin/.idx),
// tokenized by worker threads; the output does not depend on their number. `megac data info`:
// a dataset's summary.
#pragma once

#include "runtime/data/Tokenizer.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace megac::driver {

// The runtime's tokenizers, re-exported (as Backend.h does): a command makes one from its
// --tokenizer spec (byte, gpt2:VOCAB.json,MERGES.txt, hf:TOKENIZER.json).
using runtime::data::makeTokenizer;
using runtime::data::Tokenizer;

struct PrepOptions {
  std::string input;  // .jsonl: one JSON object per line; anything else: paragraphs
  std::string output; // PREFIX
  const Tokenizer *tokenizer = nullptr; // makeTokenizer
  std::string jsonKey = "text";
  bool appendEod = false; // end every document with the tokenizer's end-of-document token
  int workers = 1;
};

struct PrepSummary {
  int64_t documents = 0, tokens = 0, vocab = 0;
  bool narrow = false; // uint16 tokens (vocab < 65500), else int32
  std::optional<int64_t> eod;
  double megabytes = 0, seconds = 0;
  int workers = 1;
};

/// Writes the dataset. `progress(megabytes done, megabytes in all)` is called as slices are
/// written. Errors name the input (and line, for JSON lines) or the tokenizer.
StatusOr<PrepSummary> prepareDataset(const PrepOptions &options,
                                     const std::function<void(double, double)> &progress = {});

/// What `megac data info` prints about a dataset.
struct DatasetInfo {
  std::string tokenType; // uint16, int32, ... ("?" for a code it does not know)
  int64_t sequences = 0, documents = 0, tokens = 0;
};

/// The indexed dataset PREFIX (PREFIX.bin, PREFIX.idx) summarized.
StatusOr<DatasetInfo> datasetInfo(const std::string &prefix);

} // namespace megac::driver
