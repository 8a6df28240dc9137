// `megac data prep`: text or JSON lines to Megatron's indexed dataset (PREFIX.bin/.idx),
// tokenized by worker threads; the output does not depend on their number.
#pragma once

#include "runtime/data/Tokenizer.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace megac::driver {

struct PrepOptions {
  std::string input;  // .jsonl: one JSON object per line; anything else: paragraphs
  std::string output; // PREFIX
  const runtime::data::Tokenizer *tokenizer = nullptr; // runtime/data makeTokenizer
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

} // namespace megac::driver
