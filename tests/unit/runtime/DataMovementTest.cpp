// CPU data-movement kernels against naive index arithmetic: Copy, Transpose, Slice, Concat,
// Broadcast, Gather and Embedding, on several dtypes.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

#include <numeric>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

} // namespace

TEST(DataMovement, CopyReshapes) {
  HostTensor x = f32({2, 3}, iota(6)), out = HostTensor::zeros(DType::f32, {3, 2});
  ASSERT_TRUE(copy(refOf(x), refOf(out)).isOk());
  EXPECT_EQ(out.bytes, x.bytes);
  HostTensor wrong = HostTensor::zeros(DType::f32, {5});
  Status s = copy(refOf(x), refOf(wrong));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("Copy:"), std::string::npos);
}

TEST(DataMovement, TransposeMatchesIndexArithmetic) {
  const int64_t A = 2, B = 3, C = 4;
  HostTensor x = f32({A, B, C}, iota(A * B * C));
  HostTensor out = HostTensor::zeros(DType::f32, {C, A, B}); // perm (2, 0, 1)
  std::vector<int64_t> perm{2, 0, 1};
  ASSERT_TRUE(transpose(refOf(x), perm, refOf(out)).isOk());
  std::vector<float> y = valuesOf<float>(out);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b)
        ASSERT_EQ(y[(c * A + a) * B + b], float((a * B + b) * C + c));
  // Same on 2-byte and 8-byte dtypes.
  std::vector<uint16_t> h(24);
  std::iota(h.begin(), h.end(), uint16_t(100));
  HostTensor xh = makeTensor(DType::bf16, {A, B, C}, h),
             oh = HostTensor::zeros(DType::bf16, {C, A, B});
  ASSERT_TRUE(transpose(refOf(xh), perm, refOf(oh)).isOk());
  EXPECT_EQ(valuesOf<uint16_t>(oh)[(1 * A + 1) * B + 2], uint16_t(100 + (1 * B + 2) * C + 1));
  HostTensor xi = i64({2, 2}, {1, 2, 3, 4}), oi = HostTensor::zeros(DType::i64, {2, 2});
  ASSERT_TRUE(transpose(refOf(xi), std::vector<int64_t>{1, 0}, refOf(oi)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(oi), (std::vector<int64_t>{1, 3, 2, 4}));
  // Errors: not a permutation, wrong output shape.
  EXPECT_FALSE(transpose(refOf(x), std::vector<int64_t>{0, 0, 1}, refOf(out)).isOk());
  HostTensor bad = HostTensor::zeros(DType::f32, {A, B, C});
  Status s = transpose(refOf(x), perm, refOf(bad));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("expected [4, 2, 3]"), std::string::npos) << s.message();
}

TEST(DataMovement, SliceWithStridesIncludingNegative) {
  HostTensor x = f32({4, 6}, iota(24));
  HostTensor out = HostTensor::zeros(DType::f32, {2, 3});
  std::vector<int64_t> starts{1, 0}, strides{2, 2};
  ASSERT_TRUE(slice(refOf(x), starts, strides, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{6, 8, 10, 18, 20, 22}));
  // Reverse the columns of row 3.
  HostTensor rev = HostTensor::zeros(DType::f32, {1, 6});
  ASSERT_TRUE(
      slice(refOf(x), std::vector<int64_t>{3, 5}, std::vector<int64_t>{1, -1}, refOf(rev)).isOk());
  EXPECT_EQ(valuesOf<float>(rev), (std::vector<float>{23, 22, 21, 20, 19, 18}));
  // Out of bounds and zero strides are errors.
  HostTensor three = HostTensor::zeros(DType::f32, {3, 3});
  Status s = slice(refOf(x), starts, strides, refOf(three));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("dim 0"), std::string::npos) << s.message();
  EXPECT_FALSE(
      slice(refOf(x), std::vector<int64_t>{0, 0}, std::vector<int64_t>{1, 0}, refOf(out)).isOk());
  EXPECT_FALSE(
      slice(refOf(x), std::vector<int64_t>{-1, 0}, std::vector<int64_t>{1, 1}, refOf(out)).isOk());
  // An empty slice reads nothing, so any start is fine.
  HostTensor empty = HostTensor::zeros(DType::f32, {0, 2});
  EXPECT_TRUE(
      slice(refOf(x), std::vector<int64_t>{9, 0}, std::vector<int64_t>{1, 1}, refOf(empty)).isOk());
}

TEST(DataMovement, ConcatAlongAMiddleAxis) {
  HostTensor a = f32({2, 1, 2}, {0, 1, 2, 3});
  HostTensor b = f32({2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17});
  HostTensor c = f32({2, 0, 2}, {});
  HostTensor out = HostTensor::zeros(DType::f32, {2, 3, 2});
  std::vector<TensorRef> ins{refOf(a), refOf(c), refOf(b)};
  ASSERT_TRUE(concat(ins, 1, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{0, 1, 10, 11, 12, 13, 2, 3, 14, 15, 16, 17}));
  HostTensor wrong = HostTensor::zeros(DType::f32, {2, 4, 2});
  Status s = concat(ins, 1, refOf(wrong));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("add up to 3"), std::string::npos);
  HostTensor d = f32({3, 1, 2}, {0, 0, 0, 0, 0, 0});
  std::vector<TensorRef> mismatched{refOf(a), refOf(d)};
  EXPECT_FALSE(concat(mismatched, 1, refOf(out)).isOk());
  EXPECT_FALSE(concat(ins, 3, refOf(out)).isOk());
}

TEST(DataMovement, BroadcastRightAligned) {
  HostTensor x = f32({3, 1}, {1, 2, 3});
  HostTensor out = HostTensor::zeros(DType::f32, {2, 3, 4});
  ASSERT_TRUE(broadcast(refOf(x), refOf(out)).isOk());
  std::vector<float> y = valuesOf<float>(out);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(y[(i * 3 + j) * 4 + k], float(j + 1));
  HostTensor scalar = i32({}, {7}), many = HostTensor::zeros(DType::i32, {2, 2});
  ASSERT_TRUE(broadcast(refOf(scalar), refOf(many)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(many), (std::vector<int32_t>{7, 7, 7, 7}));
  HostTensor bad = HostTensor::zeros(DType::f32, {2, 2, 4});
  EXPECT_FALSE(broadcast(refOf(x), refOf(bad)).isOk());
  HostTensor lower = HostTensor::zeros(DType::f32, {3});
  EXPECT_FALSE(broadcast(refOf(x), refOf(lower)).isOk());
}

TEST(DataMovement, GatherAlongAnAxisWithNegativeIndices) {
  HostTensor data = f32({2, 4, 3}, iota(24));
  HostTensor idx = i64({2, 2}, {3, -4, -1, 1}); // -4 -> 0, -1 -> 3
  HostTensor out = HostTensor::zeros(DType::f32, {2, 2, 2, 3});
  ASSERT_TRUE(gather(refOf(data), refOf(idx), 1, refOf(out)).isOk());
  std::vector<float> y = valuesOf<float>(out);
  int64_t resolved[4] = {3, 0, 3, 1};
  for (int a = 0; a < 2; ++a)
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(y[(a * 4 + j) * 3 + c], float((a * 4 + resolved[j]) * 3 + c));
  HostTensor idx32 = i32({1}, {-2}), out32 = HostTensor::zeros(DType::f32, {1, 4, 3});
  ASSERT_TRUE(gather(refOf(data), refOf(idx32), 0, refOf(out32)).isOk());
  EXPECT_EQ(valuesOf<float>(out32)[0], 0.0f);
  HostTensor bad = i64({2, 2}, {0, 4, 1, 1});
  Status s = gather(refOf(data), refOf(bad), 1, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("index 4 (element 1"), std::string::npos) << s.message();
  HostTensor neg = i64({2, 2}, {0, -5, 1, 1});
  EXPECT_FALSE(gather(refOf(data), refOf(neg), 1, refOf(out)).isOk());
  HostTensor fidx = f32({2, 2}, {0, 0, 0, 0});
  EXPECT_FALSE(gather(refOf(data), refOf(fidx), 1, refOf(out)).isOk());
}

TEST(DataMovement, EmbeddingLooksUpRows) {
  HostTensor table = f32({5, 3}, iota(15));
  HostTensor ids = i64({2, 2}, {4, 0, 2, 2});
  HostTensor out = HostTensor::zeros(DType::f32, {2, 2, 3});
  ASSERT_TRUE(embedding(refOf(table), refOf(ids), refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{12, 13, 14, 0, 1, 2, 6, 7, 8, 6, 7, 8}));
  HostTensor bf = makeTensor(DType::bf16, {2, 2}, std::vector<uint16_t>{1, 2, 3, 4});
  HostTensor ids32 = i32({1}, {1}), obf = HostTensor::zeros(DType::bf16, {1, 2});
  ASSERT_TRUE(embedding(refOf(bf), refOf(ids32), refOf(obf)).isOk());
  EXPECT_EQ(valuesOf<uint16_t>(obf), (std::vector<uint16_t>{3, 4}));
  for (int64_t badId : {int64_t(5), int64_t(-1)}) {
    HostTensor bad = i64({2, 2}, {0, 1, badId, 2});
    Status s = embedding(refOf(table), refOf(bad), refOf(out));
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("id " + std::to_string(badId) + " (element 2"), std::string::npos)
        << s.message();
  }
}
