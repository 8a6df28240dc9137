// Batches of `megac train`: row order with wrap-around, micro-batch split, labels, MLM masks.
#include "runtime/train/TokenBatches.h"

#include "runtime/io/Npy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::train;

namespace {

/// Rows r = [100r, 100r+1, ..., 100r+S]: every token says where it came from.
TokenData labelledRows(int64_t rows, int64_t s) {
  HostTensor t = HostTensor::zeros(DType::i32, {rows, s + 1});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c <= s; ++c)
      t.data<int32_t>()[r * (s + 1) + c] = static_cast<int32_t>(100 * r + c);
  auto data = tokenDataFromTensor(t);
  EXPECT_TRUE(data.isOk()) << data.status().message();
  return std::move(data).value();
}

std::vector<int64_t> values(const HostTensor &t) {
  return {t.data<int64_t>(), t.data<int64_t>() + t.numElements()};
}

} // namespace

TEST(TokenBatches, RowsWrapAround) {
  // N = 5, B = 3: step 0 reads 0 1 2, step 1 reads 3 4 0, step 2 reads 1 2 3.
  std::vector<int64_t> got;
  for (int64_t step = 0; step < 3; ++step)
    for (int64_t j = 0; j < 3; ++j)
      got.push_back(dataRow(step, j, 3, 5));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3}));
  // B larger than N reads rows more than once within a step.
  EXPECT_EQ(dataRow(0, 4, 6, 4), 0);
  EXPECT_EQ(dataRow(1, 0, 6, 4), 2);
  // No overflow for huge step counts: (2^40 * 3 + 2) mod 7.
  int64_t step = int64_t(1) << 40;
  EXPECT_EQ(dataRow(step, 2, 3, 7), static_cast<int64_t>(((step % 7) * 3 + 2) % 7));
}

TEST(TokenBatches, CausalMicroBatchesTakeConsecutiveRowsWithShiftedLabels) {
  TokenData data = labelledRows(5, 4);
  // Step 1, B = 4, b = 2: rows 4 0 | 1 2.
  std::vector<MicroBatch> mbs = causalStep(data, 1, {4, 2});
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(mbs[0].inputIds.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(mbs[0].inputIds.dtype, DType::i64);
  EXPECT_EQ(values(mbs[0].inputIds), (std::vector<int64_t>{400, 401, 402, 403, 0, 1, 2, 3}));
  EXPECT_EQ(values(mbs[0].labels), (std::vector<int64_t>{401, 402, 403, 404, 1, 2, 3, 4}));
  EXPECT_EQ(values(mbs[1].inputIds),
            (std::vector<int64_t>{100, 101, 102, 103, 200, 201, 202, 203}));
  EXPECT_EQ(values(mbs[1].labels), (std::vector<int64_t>{101, 102, 103, 104, 201, 202, 203, 204}));
  EXPECT_EQ(mbs[0].targetTokens, 8);
  EXPECT_EQ(targetTokens(mbs), 16);
}

TEST(TokenBatches, SplitDoesNotChangeTheRows) {
  TokenData data = labelledRows(7, 3);
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<MicroBatch> whole = causalStep(data, step, {4, 4});
    std::vector<MicroBatch> split = causalStep(data, step, {4, 1});
    ASSERT_EQ(whole.size(), 1u);
    ASSERT_EQ(split.size(), 4u);
    std::vector<int64_t> joined;
    for (const MicroBatch &mb : split)
      for (int64_t v : values(mb.inputIds))
        joined.push_back(v);
    EXPECT_EQ(joined, values(whole[0].inputIds)) << "step " << step;
  }
}

TEST(TokenBatches, BatchSplitValidation) {
  EXPECT_TRUE(BatchSplit({8, 2}).validate().isOk());
  EXPECT_EQ(BatchSplit({8, 2}).microBatches(), 4);
  Status s = BatchSplit({6, 4}).validate();
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("not divisible"), std::string::npos) << s.message();
  EXPECT_FALSE(BatchSplit({0, 1}).validate().isOk());
}

TEST(TokenBatches, RejectsBadData) {
  EXPECT_FALSE(tokenDataFromTensor(HostTensor::zeros(DType::f32, {2, 3})).isOk());
  EXPECT_FALSE(tokenDataFromTensor(HostTensor::zeros(DType::i64, {6})).isOk());
  EXPECT_FALSE(tokenDataFromTensor(HostTensor::zeros(DType::i64, {3, 1})).isOk());
  EXPECT_FALSE(tokenDataFromTensor(HostTensor::zeros(DType::i64, {0, 5})).isOk());
  TokenData data = labelledRows(2, 3);
  EXPECT_TRUE(checkTokenRange(data, 104).isOk());
  Status s = checkTokenRange(data, 103);
  EXPECT_NE(s.message().find("token 103 at row 1, column 3"), std::string::npos) << s.message();
}

TEST(TokenBatches, ReadsInt64Npy) {
  HostTensor t = HostTensor::zeros(DType::i64, {2, 3});
  for (int i = 0; i < 6; ++i)
    t.data<int64_t>()[i] = 10 + i;
  std::string path = (std::filesystem::temp_directory_path() /
                      ("megac_token_batches_test_" + std::to_string(::getpid()) + ".npy"))
                         .string();
  ASSERT_TRUE(writeNpy(path, t).isOk());
  auto data = readTokenData(path);
  ASSERT_TRUE(data.isOk()) << data.status().message();
  EXPECT_EQ(data->rows, 2);
  EXPECT_EQ(data->sequenceLength(), 2);
  EXPECT_EQ(data->at(1, 2), 15);
  std::filesystem::remove(path);
  auto missing = readTokenData(path);
  EXPECT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("megac_token_batches_test_" +
                                            std::to_string(::getpid()) + ".npy"),
            std::string::npos);
}

TEST(TokenBatches, MlmMasksAreSeededAndCountFifteenPercent) {
  MlmOptions options{42, 127, 0.15};
  std::vector<int64_t> a = mlmMaskedPositions(options, 3, 1, 20);
  EXPECT_EQ(a.size(), 3u); // round(0.15 * 20)
  EXPECT_EQ(a, mlmMaskedPositions(options, 3, 1, 20));
  for (size_t i = 1; i < a.size(); ++i)
    EXPECT_LT(a[i - 1], a[i]);
  for (int64_t p : a)
    EXPECT_TRUE(p >= 0 && p < 20);
  // Different seeds, steps and rows give different masks (over several draws).
  int differ = 0;
  for (int64_t j = 0; j < 8; ++j) {
    differ += mlmMaskedPositions(options, 3, j, 20) != mlmMaskedPositions({43, 127}, 3, j, 20);
    differ += mlmMaskedPositions(options, 3, j, 20) != mlmMaskedPositions(options, 4, j, 20);
  }
  EXPECT_GE(differ, 12);
  // Short rows still mask one position.
  EXPECT_EQ(mlmMaskedPositions(options, 0, 0, 3).size(), 1u);
  EXPECT_EQ(mlmMaskedPositions(options, 0, 0, 1), (std::vector<int64_t>{0}));
}

TEST(TokenBatches, MlmPositionsAreRoughlyUniform) {
  MlmOptions options{7, 0, 0.15};
  std::vector<int> hits(16, 0);
  for (int64_t step = 0; step < 400; ++step)
    for (int64_t p : mlmMaskedPositions(options, step, 0, 16))
      ++hits[p];
  // 400 draws of 2 positions out of 16: 50 expected per position.
  for (int h : hits) {
    EXPECT_GT(h, 20);
    EXPECT_LT(h, 90);
  }
}

TEST(TokenBatches, MlmBatchesMaskAndLabel) {
  TokenData data = labelledRows(3, 20);
  MlmOptions options{5, 9999, 0.15};
  std::vector<MicroBatch> whole = mlmStep(data, 2, {4, 4}, options);
  std::vector<MicroBatch> split = mlmStep(data, 2, {4, 2}, options);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].targetTokens, 4 * 3);
  EXPECT_EQ(targetTokens(split), 12);
  std::vector<int64_t> ids = values(whole[0].inputIds), labels = values(whole[0].labels);
  for (int64_t j = 0; j < 4; ++j) {
    int64_t row = dataRow(2, j, 4, 3);
    std::vector<int64_t> masked = mlmMaskedPositions(options, 2, j, 20);
    for (int64_t t = 0; t < 20; ++t) {
      bool isMasked = std::find(masked.begin(), masked.end(), t) != masked.end();
      EXPECT_EQ(ids[j * 20 + t], isMasked ? 9999 : data.at(row, t));
      EXPECT_EQ(labels[j * 20 + t], isMasked ? data.at(row, t) : kIgnoreIndex);
    }
  }
  // The split gives the same rows and masks.
  std::vector<int64_t> joined = values(split[0].inputIds);
  for (int64_t v : values(split[1].inputIds))
    joined.push_back(v);
  EXPECT_EQ(joined, ids);
}

TEST(TokenBatches, Seq2SeqSplitsEachRowIntoEncoderPrefixAndDecoderContinuation) {
  // Rows of E + D + 1 = 3 + 2 + 1 tokens: row r holds 100 r + t.
  TokenData data = labelledRows(4, 5);
  auto mbs = seq2seqStep(data, 0, {2, 1}, 3, 2);
  ASSERT_TRUE(mbs.isOk()) << mbs.status().message();
  ASSERT_EQ(mbs->size(), 2u);
  const MicroBatch &second = (*mbs)[1]; // row 1
  EXPECT_EQ(values(second.inputIds), (std::vector<int64_t>{100, 101, 102}));
  EXPECT_EQ(values(second.decoderInputIds), (std::vector<int64_t>{103, 104}));
  EXPECT_EQ(values(second.labels), (std::vector<int64_t>{104, 105}));
  EXPECT_EQ(targetTokens(*mbs), 4);
  // E + D must be S.
  auto bad = seq2seqStep(data, 0, {2, 1}, 3, 3);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("rows of E + D + 1 tokens"), std::string::npos);
}
