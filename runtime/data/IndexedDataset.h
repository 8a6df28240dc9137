// Megatron's indexed dataset (MMapIndexedDataset): a memory-mapped reader, an atomic writer, and
// the training windows cut from it.
//
// PREFIX.idx (little-endian): the 9-byte magic "MMIDIDX\0\0"; u64 version = 1; u8 dtype code
// (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16); u64 sequence count n; u64 document
// index count d (documents + 1); i32 sizes[n] (tokens per sequence); i64 pointers[n] (byte
// offsets of the sequences in .bin); i64 documentIndex[d] (sequence index where each document
// starts, from 0 up to n). PREFIX.bin: the sequences' tokens back to back in that dtype.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::data {

/// The .idx dtype codes (Megatron-Core's DType enum).
enum class TokenType : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8
};

/// Bytes per element of a dtype code; 0 for an unknown code.
size_t tokenTypeSize(uint8_t code);

/// A read-only, memory-mapped PREFIX.idx / PREFIX.bin pair. Move-only.
class IndexedDataset {
public:
  /// Maps and validates PREFIX.idx and PREFIX.bin; errors are one line naming the file.
  static StatusOr<IndexedDataset> open(const std::string &prefix);

  IndexedDataset(IndexedDataset &&other) noexcept;
  IndexedDataset &operator=(IndexedDataset &&other) noexcept;
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;
  ~IndexedDataset();

  TokenType tokenType() const { return type_; }
  int64_t sequenceCount() const { return count_; }
  int64_t documentCount() const { return static_cast<int64_t>(documentIndex_.size()) - 1; }
  int64_t sequenceLength(int64_t i) const;
  int64_t pointer(int64_t i) const;
  const std::vector<int64_t> &documentIndex() const { return documentIndex_; }
  /// The sum of all sequence lengths.
  int64_t totalTokens() const { return totalTokens_; }
  /// Tokens [offset, offset + out.size()) of sequence i, converted to int64 (floats truncate).
  void read(int64_t i, int64_t offset, std::span<int64_t> out) const;
  std::vector<int64_t> sequence(int64_t i) const;

private:
  IndexedDataset() = default;
  void release();

  struct Mapping {
    const uint8_t *data = nullptr;
    size_t size = 0;
  };
  Mapping idx_, bin_;
  TokenType type_ = TokenType::u16;
  int64_t count_ = 0;
  int64_t totalTokens_ = 0;
  const uint8_t *sizes_ = nullptr;    // i32[count], unaligned in the mapping
  const uint8_t *pointers_ = nullptr; // i64[count]
  std::vector<int64_t> documentIndex_;
};

/// Writes PREFIX.bin and PREFIX.idx: both go to .tmp names and are renamed by finish(), so a
/// failed or interrupted build never leaves a half-written dataset under PREFIX.
class IndexedDatasetBuilder {
public:
  /// Integer token types only; tokens are checked to fit in the type.
  static StatusOr<IndexedDatasetBuilder> create(const std::string &prefix, TokenType type);

  IndexedDatasetBuilder(IndexedDatasetBuilder &&other) noexcept;
  IndexedDatasetBuilder &operator=(IndexedDatasetBuilder &&other) = delete;
  IndexedDatasetBuilder(const IndexedDatasetBuilder &) = delete;
  ~IndexedDatasetBuilder();

  /// Appends one sequence; endDocument() closes the document the sequences since the last
  /// call belong to (Megatron's add_item / end_document).
  Status addSequence(std::span<const int64_t> tokens);
  void endDocument();
  /// addSequence + endDocument.
  Status addDocument(std::span<const int64_t> tokens);
  /// Flushes, fsyncs and renames both files into place (an open document is closed first).
  Status finish();

  int64_t sequenceCount() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t documentCount() const { return static_cast<int64_t>(documentIndex_.size()) - 1; }
  int64_t tokenCount() const { return tokens_; }

private:
  IndexedDatasetBuilder() = default;
  Status flush();
  Status writeAndRename();

  std::string prefix_;
  TokenType type_ = TokenType::u16;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> documentIndex_{0};
  int64_t offset_ = 0, tokens_ = 0;
};

/// Training windows: the sequences concatenated in order into one stream of T tokens, cut into
/// N = (T - 1) / S windows of S + 1 tokens with stride S (window w is tokens [w*S, w*S + S]; the
/// last token of one window is the first of the next, as Megatron's GPT samples). With a
/// shuffle seed the window order is a seeded permutation (the same on every platform). Returns
/// rows [min(N, maxRows), S+1] (row r = window order[r]) row-major, or an error when N == 0.
struct Windows {
  int64_t rows = 0, total = 0; // rows materialized, windows in the dataset
  std::vector<int64_t> tokens;
};
/// Documents [first, last) of a dataset (a part of a --split).
struct DocumentRange {
  int64_t first = 0, last = -1; // last -1: through the last document
};
/// Windows as above over the token stream of the documents in `documents` only: epoch 0 of
/// WindowSamples (Samples.h), materialized (tests and tools; training reads WindowSamples).
StatusOr<Windows> trainingWindows(const IndexedDataset &dataset, int64_t sequenceLength,
                                  int64_t maxRows, std::optional<uint64_t> shuffleSeed,
                                  DocumentRange documents = {});

/// Megatron's --split: `weights` (e.g. 949, 50, 1; >= 0, not all 0) normalized to fractions of
/// `documents`; part i is documents [round(F_i * n), round(F_{i+1} * n)) with F_i the sum of
/// the first i fractions, so the parts are contiguous, cover every document, and are in order.
std::vector<DocumentRange> splitDocuments(int64_t documents, const std::vector<double> &weights);

} // namespace megac::runtime::data
