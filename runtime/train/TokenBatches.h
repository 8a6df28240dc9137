// The batches of `megac train`: which token rows each step reads, split into micro-batches, with
// shifted labels (causal LMs) or seeded masked-LM labels (BERT).
//
// The rows come from a data::SampleSource (an indexed dataset's windows, a blend, or a .npy array
// [N, S+1] whose sample i is row i mod N). Step i (0-based) of a global batch B reads samples
// i*B + j for j = 0..B-1, in order; micro-batch k of size b takes positions k*b .. k*b+b-1 of
// that list, and a data-parallel rank builds only its RankRows of each micro-batch. Causal:
// input_ids = row[:S], labels = row[1:]. Masked LM: the sequence is row[:S]; a seeded choice of
// round(ratio * S) positions per row (at least 1) is replaced by the mask token and labelled with
// the original token, every other label is kIgnoreIndex. The choice depends on (seed, step, j)
// only, so it is the same however the global batch is split.
#pragma once

#include "runtime/data/Samples.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace megac::runtime::train {

/// Labels with this value get no loss and do not count as target tokens (PyTorch's default).
inline constexpr int64_t kIgnoreIndex = -100;

/// Token rows [rows, rowLength], row-major.
struct TokenData {
  int64_t rows = 0;
  int64_t rowLength = 0; // S + 1
  std::vector<int64_t> tokens;

  int64_t sequenceLength() const { return rowLength - 1; }
  int64_t at(int64_t row, int64_t col) const { return tokens[row * rowLength + col]; }
};

/// TokenData as samples: sample i is row i mod N, so step t's position j reads
/// dataRow(t, j, B, N).
class TokenArraySamples final : public data::SampleSource {
public:
  explicit TokenArraySamples(std::shared_ptr<const TokenData> data) : data_(std::move(data)) {}
  int64_t rowLength() const override { return data_->rowLength; }
  Status read(int64_t i, std::span<int64_t> out) override;
  std::string describe(int64_t i) override;
  const TokenData &data() const { return *data_; }

private:
  std::shared_ptr<const TokenData> data_;
};

/// An int32 or int64 tensor [N, S+1] with N >= 1 and S >= 1.
StatusOr<TokenData> tokenDataFromTensor(const HostTensor &tensor);
/// Reads a .npy file and checks it as above; errors name the file.
StatusOr<TokenData> readTokenData(const std::string &path);
/// Every token in [0, vocab); else an error naming the first bad token's row and column.
Status checkTokenRange(const TokenData &data, int64_t vocab);

/// Global batch B and micro-batch b: B >= 1, b >= 1, B divisible by b.
struct BatchSplit {
  int64_t globalBatch = 0;
  int64_t microBatch = 0;

  Status validate() const;
  int64_t microBatches() const { return globalBatch / microBatch; }
};

/// The data row of position j of step `step` (0-based): (step*B + j) mod N, without overflow.
int64_t dataRow(int64_t step, int64_t j, int64_t globalBatch, int64_t rows);

struct MlmOptions {
  uint64_t seed = 0;
  int64_t maskToken = 0; // megac uses vocab - 1
  double ratio = 0.15;
};

/// The positions (sorted) masked in position j of step `step`'s global batch.
std::vector<int64_t> mlmMaskedPositions(const MlmOptions &options, int64_t step, int64_t j,
                                        int64_t sequenceLength);

/// One micro-batch: i64 tensors [b, S] (seq2seq: input_ids [b, E], the decoder's [b, D]).
struct MicroBatch {
  HostTensor inputIds;
  HostTensor decoderInputIds; // seq2seq only
  HostTensor labels;
  HostTensor attentionMask; // causal with a pad token: i64 [b, S], 0 where the input is padding
  int64_t targetTokens = 0; // labels other than kIgnoreIndex
};

/// The positions of each micro-batch one data-parallel rank reads: first .. first + count - 1
/// (count -1: the whole micro-batch). Masks and labels depend on the global position j only, so
/// the ranks' parts together are exactly the whole batch.
struct RankRows {
  int64_t first = 0, count = -1;
};

/// The micro-batches of step `step` (0-based), in order: shifted labels. Only `rank`'s rows are
/// read from `rows`; errors are the source's (a token outside the vocabulary, ...). With
/// `padToken`, padded rows: the attention mask is 0 where the input token is padToken, and a
/// label whose input or target token is padToken is kIgnoreIndex.
StatusOr<std::vector<MicroBatch>> causalStep(data::SampleSource &rows, int64_t step,
                                             const BatchSplit &split, RankRows rank = {},
                                             std::optional<int64_t> padToken = std::nullopt);
/// The same for masked-LM training.
StatusOr<std::vector<MicroBatch>> mlmStep(data::SampleSource &rows, int64_t step,
                                          const BatchSplit &split, const MlmOptions &options,
                                          RankRows rank = {});
/// The same over every row of an in-memory array.
std::vector<MicroBatch> causalStep(const TokenData &data, int64_t step, const BatchSplit &split);
std::vector<MicroBatch> mlmStep(const TokenData &data, int64_t step, const BatchSplit &split,
                                const MlmOptions &options);

/// Encoder-decoder (T5) training on the same rows: with S = E + D, the encoder reads row[0:E],
/// the decoder reads row[E:E+D] and predicts row[E+1:E+D+1] (it continues the prefix the
/// encoder saw; its inputs are its targets shifted right by one). Errors if S != E + D.
StatusOr<std::vector<MicroBatch>> seq2seqStep(data::SampleSource &rows, int64_t step,
                                              const BatchSplit &split, int64_t encoderLength,
                                              int64_t decoderLength, RankRows rank = {});
StatusOr<std::vector<MicroBatch>> seq2seqStep(const TokenData &data, int64_t step,
                                              const BatchSplit &split, int64_t encoderLength,
                                              int64_t decoderLength);

/// Target tokens summed over the micro-batches (the loss normalizer is its inverse).
int64_t targetTokens(const std::vector<MicroBatch> &batches);

} // namespace megac::runtime::train
