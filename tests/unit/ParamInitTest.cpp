// Layout-independent init: known Philox answers, shards equal slices, and the right moments.
#include "runtime/init/ParamInit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace megac::init;

TEST(ParamInit, PhiloxKnownAnswers) {
  // Known-answer vectors of Random123's philox4x32_10.
  uint32_t out[4];
  uint32_t zeroCtr[4] = {0, 0, 0, 0}, zeroKey[2] = {0, 0};
  philox4x32(zeroCtr, zeroKey, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  uint32_t onesCtr[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
  uint32_t onesKey[2] = {0xffffffff, 0xffffffff};
  philox4x32(onesCtr, onesKey, out);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(ParamInit, ShardIsTheSliceOfTheWhole) {
  InitSpec spec{InitKind::normal, 0.02};
  std::vector<int64_t> global{12, 10};
  std::vector<float> whole(120);
  ASSERT_TRUE(
      fillShard(spec, 1234, "h0.attn.q.weight", global, std::vector<int64_t>{0, 0}, global, whole));
  // A column-parallel shard (rows 4..8) and a row-parallel one (columns 5..10).
  std::vector<float> rows(4 * 10), cols(12 * 5);
  ASSERT_TRUE(fillShard(spec, 1234, "h0.attn.q.weight", global, std::vector<int64_t>{4, 0},
                        std::vector<int64_t>{4, 10}, rows));
  ASSERT_TRUE(fillShard(spec, 1234, "h0.attn.q.weight", global, std::vector<int64_t>{0, 5},
                        std::vector<int64_t>{12, 5}, cols));
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(rows[r * 10 + c], whole[(r + 4) * 10 + c]);
  for (int r = 0; r < 12; ++r)
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(cols[r * 5 + c], whole[r * 10 + c + 5]);
  // Element-wise access agrees too.
  EXPECT_EQ(static_cast<float>(initialValue(spec, 1234, "h0.attn.q.weight", 37)), whole[37]);
}

TEST(ParamInit, DependsOnSeedAndName) {
  InitSpec spec{InitKind::normal, 1.0};
  double a = initialValue(spec, 1, "wte", 0);
  EXPECT_EQ(a, initialValue(spec, 1, "wte", 0));
  EXPECT_NE(a, initialValue(spec, 2, "wte", 0));
  EXPECT_NE(a, initialValue(spec, 1, "wpe", 0));
  EXPECT_NE(a, initialValue(spec, 1, "wte", 1));
}

TEST(ParamInit, NormalMomentsAndConstants) {
  InitSpec spec{InitKind::normal, 0.02};
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    double v = initialValue(spec, 7, "w", i);
    sum += v;
    sq += v * v;
  }
  double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  // Standard error of the mean is 0.02/sqrt(n) = 4.5e-5; of the std about 3.2e-5.
  EXPECT_NEAR(mean, 0.0, 2.5e-4);
  EXPECT_NEAR(stddev, 0.02, 2.5e-4);
  EXPECT_EQ(initialValue({InitKind::ones, 0}, 7, "ln.weight", 5), 1.0);
  EXPECT_EQ(initialValue({InitKind::zeros, 0}, 7, "ln.bias", 5), 0.0);
}

TEST(ParamInit, RejectsABoxOutsideTheTensor) {
  std::vector<float> out(4);
  std::vector<int64_t> global{4, 4};
  EXPECT_FALSE(fillShard({InitKind::zeros, 0}, 0, "w", global, std::vector<int64_t>{3, 0},
                         std::vector<int64_t>{2, 2}, out));
  EXPECT_FALSE(fillShard({InitKind::zeros, 0}, 0, "w", global, std::vector<int64_t>{0, 0},
                         std::vector<int64_t>{2, 3}, out)); // 6 elements into 4
}
