// The batches of `megac train`: row selection, micro-batch split, causal and masked-LM labels.
#include "runtime/train/TokenBatches.h"

#include "runtime/io/Npy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace megac::runtime::train {

namespace {

/// SplitMix64 (Steele et al. 2014): a counter-based generator, so masks depend on their
/// coordinates only and are the same on every platform.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string cell(int64_t row, int64_t col) {
  return "row " + std::to_string(row) + ", column " + std::to_string(col);
}

} // namespace

StatusOr<TokenData> tokenDataFromTensor(const HostTensor &tensor) {
  if (tensor.dtype != DType::i32 && tensor.dtype != DType::i64)
    return Status::error(std::string("token data must be int32 or int64, not ") +
                         dtypeName(tensor.dtype));
  if (tensor.shape.size() != 2)
    return Status::error("token data must be a 2-d array [N, S+1], not " +
                         shapeString(tensor.shape));
  if (tensor.shape[0] < 1 || tensor.shape[1] < 2)
    return Status::error("token data " + shapeString(tensor.shape) +
                         " needs at least one row of at least 2 tokens ([N, S+1])");
  TokenData data;
  data.rows = tensor.shape[0];
  data.rowLength = tensor.shape[1];
  data.tokens.resize(static_cast<size_t>(tensor.numElements()));
  if (tensor.dtype == DType::i64)
    std::copy_n(tensor.data<int64_t>(), data.tokens.size(), data.tokens.begin());
  else
    std::copy_n(tensor.data<int32_t>(), data.tokens.size(), data.tokens.begin());
  return data;
}

StatusOr<TokenData> readTokenData(const std::string &path) {
  StatusOr<HostTensor> tensor = readNpy(path);
  if (!tensor.isOk())
    return Status::error(tensor.status().message());
  StatusOr<TokenData> data = tokenDataFromTensor(*tensor);
  if (!data.isOk())
    return Status::error(path + ": " + data.status().message());
  return data;
}

Status checkTokenRange(const TokenData &data, int64_t vocab) {
  for (size_t i = 0; i < data.tokens.size(); ++i)
    if (data.tokens[i] < 0 || data.tokens[i] >= vocab)
      return Status::error(
          "token " + std::to_string(data.tokens[i]) + " at " +
          cell(static_cast<int64_t>(i) / data.rowLength, static_cast<int64_t>(i) % data.rowLength) +
          " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
  return Status::ok();
}

Status BatchSplit::validate() const {
  if (globalBatch < 1 || microBatch < 1)
    return Status::error("the global batch (" + std::to_string(globalBatch) +
                         ") and the micro-batch (" + std::to_string(microBatch) + ") must be >= 1");
  if (globalBatch % microBatch)
    return Status::error("the global batch " + std::to_string(globalBatch) +
                         " is not divisible by the micro-batch " + std::to_string(microBatch));
  return Status::ok();
}

int64_t dataRow(int64_t step, int64_t j, int64_t globalBatch, int64_t rows) {
  unsigned __int128 start = static_cast<unsigned __int128>(step % rows) *
                            static_cast<unsigned __int128>(globalBatch % rows);
  return static_cast<int64_t>((start + static_cast<unsigned __int128>(j % rows)) %
                              static_cast<unsigned __int128>(rows));
}

std::vector<int64_t> mlmMaskedPositions(const MlmOptions &options, int64_t step, int64_t j,
                                        int64_t sequenceLength) {
  int64_t count = std::llround(options.ratio * static_cast<double>(sequenceLength));
  count = std::clamp<int64_t>(count, 1, sequenceLength);
  uint64_t state = splitmix64(splitmix64(splitmix64(options.seed) ^ static_cast<uint64_t>(step)) ^
                              static_cast<uint64_t>(j));
  // A partial Fisher-Yates shuffle: the first `count` entries are a uniform sample.
  std::vector<int64_t> positions(static_cast<size_t>(sequenceLength));
  std::iota(positions.begin(), positions.end(), 0);
  for (int64_t i = 0; i < count; ++i) {
    state = splitmix64(state);
    uint64_t span = static_cast<uint64_t>(sequenceLength - i);
    int64_t pick = i + static_cast<int64_t>(state % span);
    std::swap(positions[i], positions[pick]);
  }
  positions.resize(static_cast<size_t>(count));
  std::sort(positions.begin(), positions.end());
  return positions;
}

Status TokenArraySamples::read(int64_t i, std::span<int64_t> out) {
  if (i < 0 || static_cast<int64_t>(out.size()) != data_->rowLength)
    return Status::error("sample " + std::to_string(i) + " read into " +
                         std::to_string(out.size()) + " tokens, not " +
                         std::to_string(data_->rowLength));
  std::copy_n(data_->tokens.begin() + (i % data_->rows) * data_->rowLength, out.size(),
              out.begin());
  return Status::ok();
}

std::string TokenArraySamples::describe(int64_t i) {
  return "row " + std::to_string(i % data_->rows);
}

namespace {

/// The micro-batches of one step (`rank`'s rows of each), with inputs and labels filled by
/// `fill(row, j, mb, r)` from row (S+1 tokens) at global position j into the micro-batch's row r.
template <typename FillFn>
StatusOr<std::vector<MicroBatch>>
buildStep(data::SampleSource &rows, int64_t step, const BatchSplit &split, RankRows rank,
          std::vector<int64_t> inputShape, std::vector<int64_t> decoderShape, FillFn fill) {
  int64_t count = rank.count < 0 ? split.microBatch : rank.count;
  if (rank.first < 0 || rank.first + count > split.microBatch)
    return Status::error("rows [" + std::to_string(rank.first) + ", " +
                         std::to_string(rank.first + count) + ") are not within a micro-batch of " +
                         std::to_string(split.microBatch));
  std::vector<int64_t> row(static_cast<size_t>(rows.rowLength()));
  std::vector<MicroBatch> batches;
  for (int64_t k = 0; k < split.microBatches(); ++k) {
    MicroBatch mb;
    inputShape[0] = decoderShape[0] = count;
    mb.inputIds = HostTensor::zeros(DType::i64, inputShape);
    mb.labels = HostTensor::zeros(DType::i64, decoderShape);
    for (int64_t r = 0; r < count; ++r) {
      int64_t j = k * split.microBatch + rank.first + r;
      RETURN_IF_ERROR(rows.read(step * split.globalBatch + j, row));
      fill(row.data(), j, mb, r);
    }
    for (int64_t t = 0; t < mb.labels.numElements(); ++t)
      mb.targetTokens += mb.labels.data<int64_t>()[t] != kIgnoreIndex;
    batches.push_back(std::move(mb));
  }
  return batches;
}

} // namespace

StatusOr<std::vector<MicroBatch>> causalStep(data::SampleSource &rows, int64_t step,
                                             const BatchSplit &split, RankRows rank,
                                             std::optional<int64_t> padToken) {
  int64_t s = rows.rowLength() - 1;
  return buildStep(rows, step, split, rank, {0, s}, {0, s},
                   [&](const int64_t *row, int64_t, MicroBatch &mb, int64_t r) {
                     int64_t *ids = mb.inputIds.data<int64_t>() + r * s;
                     int64_t *labels = mb.labels.data<int64_t>() + r * s;
                     for (int64_t t = 0; t < s; ++t) {
                       ids[t] = row[t];
                       labels[t] = row[t + 1];
                     }
                     if (!padToken)
                       return;
                     if (mb.attentionMask.shape.empty())
                       mb.attentionMask = HostTensor::zeros(DType::i64, mb.inputIds.shape);
                     int64_t *keep = mb.attentionMask.data<int64_t>() + r * s;
                     for (int64_t t = 0; t < s; ++t) {
                       keep[t] = row[t] != *padToken;
                       if (row[t] == *padToken || row[t + 1] == *padToken)
                         labels[t] = kIgnoreIndex;
                     }
                   });
}

StatusOr<std::vector<MicroBatch>> mlmStep(data::SampleSource &rows, int64_t step,
                                          const BatchSplit &split, const MlmOptions &options,
                                          RankRows rank) {
  int64_t s = rows.rowLength() - 1;
  return buildStep(rows, step, split, rank, {0, s}, {0, s},
                   [&](const int64_t *row, int64_t j, MicroBatch &mb, int64_t r) {
                     int64_t *ids = mb.inputIds.data<int64_t>() + r * s;
                     int64_t *labels = mb.labels.data<int64_t>() + r * s;
                     for (int64_t t = 0; t < s; ++t) {
                       ids[t] = row[t];
                       labels[t] = kIgnoreIndex;
                     }
                     for (int64_t t : mlmMaskedPositions(options, step, j, s)) {
                       labels[t] = ids[t];
                       ids[t] = options.maskToken;
                     }
                   });
}

StatusOr<std::vector<MicroBatch>> seq2seqStep(data::SampleSource &rows, int64_t step,
                                              const BatchSplit &split, int64_t encoderLength,
                                              int64_t decoderLength, RankRows rank) {
  if (encoderLength < 1 || decoderLength < 1 ||
      encoderLength + decoderLength != rows.rowLength() - 1)
    return Status::error(
        "encoder-decoder training reads rows of E + D + 1 tokens (E = " +
        std::to_string(encoderLength) + " encoder, D = " + std::to_string(decoderLength) +
        " decoder positions), but the rows have " + std::to_string(rows.rowLength()));
  int64_t e = encoderLength, d = decoderLength;
  return buildStep(rows, step, split, rank, {0, e}, {0, d},
                   [&](const int64_t *row, int64_t, MicroBatch &mb, int64_t r) {
                     if (mb.decoderInputIds.shape.empty())
                       mb.decoderInputIds = HostTensor::zeros(DType::i64, mb.labels.shape);
                     for (int64_t t = 0; t < e; ++t)
                       mb.inputIds.data<int64_t>()[r * e + t] = row[t];
                     for (int64_t t = 0; t < d; ++t) {
                       mb.decoderInputIds.data<int64_t>()[r * d + t] = row[e + t];
                       mb.labels.data<int64_t>()[r * d + t] = row[e + t + 1];
                     }
                   });
}

namespace {

/// A non-owning sample view of `data` for the array overloads.
TokenArraySamples arrayView(const TokenData &data) {
  return TokenArraySamples(std::shared_ptr<const TokenData>(std::shared_ptr<void>(), &data));
}

} // namespace

std::vector<MicroBatch> causalStep(const TokenData &data, int64_t step, const BatchSplit &split) {
  TokenArraySamples rows = arrayView(data);
  return std::move(causalStep(rows, step, split)).value(); // an array's reads cannot fail
}

std::vector<MicroBatch> mlmStep(const TokenData &data, int64_t step, const BatchSplit &split,
                                const MlmOptions &options) {
  TokenArraySamples rows = arrayView(data);
  return std::move(mlmStep(rows, step, split, options)).value();
}

StatusOr<std::vector<MicroBatch>> seq2seqStep(const TokenData &data, int64_t step,
                                              const BatchSplit &split, int64_t encoderLength,
                                              int64_t decoderLength) {
  TokenArraySamples rows = arrayView(data);
  return seq2seqStep(rows, step, split, encoderLength, decoderLength);
}

int64_t targetTokens(const std::vector<MicroBatch> &batches) {
  int64_t n = 0;
  for (const MicroBatch &mb : batches)
    n += mb.targetTokens;
  return n;
}

} // namespace megac::runtime::train
