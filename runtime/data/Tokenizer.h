// Tokenizers shared by `megac data prep` (text to token ids) and `megac generate` (ids back to
// text): bytes, GPT-2's byte-level BPE (vocab.json + merges.txt, as OpenAI released them) and a
// Hugging Face tokenizer.json whose model is a byte-level BPE (GPT-2, RoBERTa, Llama-3 style).
// No MLIR; a tokenizer is immutable once made, so one object serves many threads.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime::data {

class Tokenizer {
public:
  virtual ~Tokenizer() = default;
  /// The token ids of `text` (UTF-8; the byte tokenizer takes any bytes). Thread-safe.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  /// The bytes `ids` stand for (a byte-level tokenizer round-trips encode exactly). An id
  /// outside the vocabulary is an error naming it.
  virtual StatusOr<std::string> decode(std::span<const int64_t> ids) const = 0;
  /// The number of ids (largest id + 1): the smallest vocab a model trained on it may have.
  virtual int64_t vocabSize() const = 0;
  /// The end-of-document id appended by `data prep --append-eod` (GPT-2's <|endoftext|>; 256
  /// for the byte tokenizer).
  virtual std::optional<int64_t> endOfDocument() const = 0;
  /// The --tokenizer value this was made from ("byte", "gpt2:V,M", "hf:F").
  virtual std::string spec() const = 0;
};

/// Makes a tokenizer from a --tokenizer value: "byte", "gpt2:VOCAB.json,MERGES.txt" or
/// "hf:TOKENIZER.json". Errors are one line naming the file and what is wrong in it.
/// gpt2: encodes text as plain text (a literal <|endoftext|> is characters, as in Megatron's
/// GPT2BPETokenizer); hf: matches added tokens first and encodes as Hugging Face's
/// encode(text, add_special_tokens=False) does (no post-processor). See BpeTokenizer.h.
StatusOr<std::unique_ptr<Tokenizer>> makeTokenizer(const std::string &spec);

/// Each byte is one token (0..255), 256 ends a document; vocabSize() is 257.
std::unique_ptr<Tokenizer> makeByteTokenizer();

} // namespace megac::runtime::data
