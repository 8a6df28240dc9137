// Byte-level BPE (GPT-2's algorithm) behind the Tokenizer interface, and the loaders of its two
// file formats: OpenAI's vocab.json + merges.txt, and Hugging Face's tokenizer.json.
#pragma once

#include "runtime/data/Tokenizer.h"

#include <string>
#include <utility>
#include <vector>

namespace megac::runtime::data {

/// What a byte-level BPE tokenizer is made of, read from either format. Token strings are as
/// the files write them: bytes mapped to printable characters by GPT-2's bytes_to_unicode.
struct BpeSpec {
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges; // in rank order
  /// Tokens matched in the text before pre-tokenization (Hugging Face's added_tokens).
  std::vector<std::pair<std::string, int64_t>> addedTokens;
  /// A Split pre-tokenizer before ByteLevel (Hugging Face's Sequence): its pattern.
  enum class Split { none, gpt2, llama3 } split = Split::none;
  bool addPrefixSpace = false; // ByteLevel: a space before each split not starting with one
  bool useRegex = true;        // ByteLevel: split with GPT-2's pattern (else one piece)
  bool ignoreMerges = false;   // BPE: a piece that is a whole vocab entry is that token
  std::vector<std::string> endOfDocumentNames = {"<|endoftext|>"};
  std::string source; // the file named in errors
  std::string spec;   // the --tokenizer value
};

/// Builds the tokenizer; errors (a merge of unknown tokens, a missing byte) name spec.source.
StatusOr<std::unique_ptr<Tokenizer>> makeBpeTokenizer(BpeSpec spec);

/// "gpt2:VOCAB.json,MERGES.txt": plain text (<|endoftext|> in the text is not special).
StatusOr<std::unique_ptr<Tokenizer>> loadGpt2Tokenizer(const std::string &vocabPath,
                                                       const std::string &mergesPath);

/// "hf:TOKENIZER.json": a BPE model with a ByteLevel pre-tokenizer and decoder (BpeHfJson.cpp).
StatusOr<std::unique_ptr<Tokenizer>> loadHfTokenizer(const std::string &path);

/// GPT-2's bytes_to_unicode: the printable character standing for each byte in token strings.
uint32_t byteToUnicode(uint8_t byte);

} // namespace megac::runtime::data
