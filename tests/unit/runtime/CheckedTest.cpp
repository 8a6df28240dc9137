// Checked element counts and byte sizes (support/Checked.h): overflow and oversize are errors
// that name the shape, zero-sized shapes are fine even where a partial product would overflow.
#include "support/Checked.h"

#include <gtest/gtest.h>

#include <vector>

using namespace megac;

namespace {

constexpr int64_t k2to32 = int64_t(1) << 32;

TEST(Checked, MulAndAddReportOverflow) {
  EXPECT_EQ(checkedMul(3, 4), 12);
  EXPECT_EQ(checkedMul(k2to32, k2to32 / 2 - 1), k2to32 * (k2to32 / 2 - 1));
  EXPECT_FALSE(checkedMul(k2to32, k2to32).has_value());
  EXPECT_FALSE(checkedMul(INT64_MIN, -1).has_value());
  EXPECT_EQ(checkedAdd(INT64_MAX - 1, 1), INT64_MAX);
  EXPECT_FALSE(checkedAdd(INT64_MAX, 1).has_value());
}

TEST(Checked, ElementCounts) {
  EXPECT_EQ(checkedNumElements(std::vector<int64_t>{}).value(), 1);
  EXPECT_EQ(checkedNumElements(std::vector<int64_t>{2, 3, 4}).value(), 24);
  EXPECT_EQ(checkedNumElements(std::vector<int64_t>{k2to32, k2to32, 0}).value(), 0);
  StatusOr<int64_t> wrapped = checkedNumElements(std::vector<int64_t>{k2to32, k2to32});
  ASSERT_FALSE(wrapped.isOk());
  EXPECT_EQ(wrapped.status().message(),
            "shape [4294967296, 4294967296] has more elements than a 64-bit count holds");
  EXPECT_FALSE(checkedNumElements(std::vector<int64_t>{2, -3}).isOk());
}

TEST(Checked, ByteSizesAreBoundedByTheTensorLimit) {
  EXPECT_EQ(checkedByteSize(std::vector<int64_t>{2, 3}, 8).value(), 48u);
  StatusOr<uint64_t> big = checkedByteSize(std::vector<int64_t>{int64_t(1) << 40}, 4);
  ASSERT_FALSE(big.isOk());
  EXPECT_EQ(big.status().message(), "shape [1099511627776] of 4-byte elements needs 4.0 TiB, "
                                    "more than the 1.0 TiB one tensor may hold");
  StatusOr<uint64_t> wraps = checkedByteSize(std::vector<int64_t>{int64_t(1) << 61}, 8);
  ASSERT_FALSE(wraps.isOk());
  EXPECT_NE(wraps.status().message().find("more bytes than a 64-bit size holds"),
            std::string::npos);
  EXPECT_TRUE(checkedByteSize(std::vector<int64_t>{int64_t(1) << 40}, 1).isOk());
  EXPECT_FALSE(checkedByteSize(std::vector<int64_t>{100}, 8, 799).isOk());
}

TEST(Checked, ZerosRefusesWhatItCannotHold) {
  StatusOr<HostTensor> t = checkedZeros(DType::f32, std::vector<int64_t>{2, 3});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->bytes.size(), 24u);
  EXPECT_FALSE(checkedZeros(DType::f32, std::vector<int64_t>{k2to32, k2to32}).isOk());
  EXPECT_FALSE(checkedZeros(DType::f64, std::vector<int64_t>{int64_t(1) << 40}).isOk());
}

} // namespace
