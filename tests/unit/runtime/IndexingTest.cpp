// CPU element-indexing kernels (runtime/cpu/Indexing.cpp) against hand-computed ONNX examples:
// CumSum (exclusive, reverse, integers), GatherElements, ScatterElements and ScatterND
// (overwrite and add, negative indices) and their index and shape errors.
#include "runtime/cpu/Kernels.h"

#include "TestUtil.h"

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

TEST(Indexing, CumSumInEveryDirection) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6}), out = HostTensor::zeros(DType::f32, {2, 3});
  ASSERT_TRUE(cumsum(refOf(x), 1, false, false, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  ASSERT_TRUE(cumsum(refOf(x), 1, true, false, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{0, 1, 3, 0, 4, 9}));
  ASSERT_TRUE(cumsum(refOf(x), 1, false, true, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  ASSERT_TRUE(cumsum(refOf(x), 0, true, true, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{4, 5, 6, 0, 0, 0}));
  // RoBERTa's position ids: the running count of non-pad tokens, in int32; in place.
  HostTensor mask = i32({1, 5}, {1, 1, 0, 1, 1});
  ASSERT_TRUE(cumsum(refOf(mask), 1, false, false, refOf(mask)).isOk());
  EXPECT_EQ(valuesOf<int32_t>(mask), (std::vector<int32_t>{1, 2, 2, 3, 4}));
  EXPECT_FALSE(cumsum(refOf(x), 2, false, false, refOf(out)).isOk());
  HostTensor b = i1({2}, {1, 0}), bout = HostTensor::zeros(DType::i1, {2});
  EXPECT_FALSE(cumsum(refOf(b), 0, false, false, refOf(bout)).isOk());
}

TEST(Indexing, GatherElementsPicksOneElementPerIndex) {
  // The ONNX operator example (axis 1), then axis 0 with a negative index and smaller indices.
  HostTensor data = f32({2, 2}, {1, 2, 3, 4}), idx = i64({2, 2}, {0, 0, 1, 0});
  HostTensor out = HostTensor::zeros(DType::f32, {2, 2});
  ASSERT_TRUE(gatherElements(refOf(data), refOf(idx), 1, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 1, 4, 3}));
  HostTensor d3 = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), i3 = i32({2, 3}, {1, 2, 0, 2, 0, -3});
  HostTensor o3 = HostTensor::zeros(DType::f32, {2, 3});
  ASSERT_TRUE(gatherElements(refOf(d3), refOf(i3), 0, refOf(o3)).isOk());
  EXPECT_EQ(valuesOf<float>(o3), (std::vector<float>{4, 8, 3, 7, 2, 3}));
  HostTensor bad = i64({2, 2}, {0, 2, 1, 0});
  Status s = gatherElements(refOf(data), refOf(bad), 1, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("index 2 (element 1"), std::string::npos) << s.message();
  HostTensor wide = i64({3, 1}, {0, 0, 0}), owide = HostTensor::zeros(DType::f32, {3, 1});
  EXPECT_FALSE(gatherElements(refOf(data), refOf(wide), 1, refOf(owide)).isOk());
}

TEST(Indexing, ScatterElementsOverwritesOrAddsInOrder) {
  HostTensor data = f32({1, 5}, {1, 2, 3, 4, 5}), idx = i64({1, 2}, {1, 3});
  HostTensor upd = f32({1, 2}, {1.1f, 2.1f}), out = HostTensor::zeros(DType::f32, {1, 5});
  ASSERT_TRUE(scatterElements(refOf(data), refOf(idx), refOf(upd), 1, false, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  // Repeated indices: the later update wins when overwriting; both add up when accumulating.
  HostTensor dup = i64({1, 2}, {-1, 4});
  ASSERT_TRUE(scatterElements(refOf(data), refOf(dup), refOf(upd), 1, false, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 2, 3, 4, 2.1f}));
  ASSERT_TRUE(scatterElements(refOf(data), refOf(dup), refOf(upd), 1, true, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 2, 3, 4, 5 + 1.1f + 2.1f}));
  HostTensor bad = i64({1, 2}, {0, 5});
  EXPECT_FALSE(scatterElements(refOf(data), refOf(bad), refOf(upd), 1, false, refOf(out)).isOk());
}

TEST(Indexing, ScatterNdWritesSlicesAtIndexTuples) {
  // Rows 2 and 0 of a [4, 2] tensor (k = 1), then single elements (k = 2), then adding.
  HostTensor data = i64({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  HostTensor rows = i64({2, 1}, {2, -4}), upd = i64({2, 2}, {10, 11, 20, 21});
  HostTensor out = HostTensor::zeros(DType::i64, {4, 2});
  ASSERT_TRUE(scatterNd(refOf(data), refOf(rows), refOf(upd), false, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{20, 21, 2, 3, 10, 11, 6, 7}));
  HostTensor cells = i32({2, 2}, {3, 1, 3, 1}), two = i64({2}, {100, 200});
  ASSERT_TRUE(scatterNd(refOf(data), refOf(cells), refOf(two), true, refOf(out)).isOk());
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 307}));
  HostTensor bad = i64({1, 3}, {0, 0, 0}), one = i64({1}, {1});
  Status s = scatterNd(refOf(data), refOf(bad), refOf(one), false, refOf(out));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("tuple size"), std::string::npos) << s.message();
  HostTensor far = i64({1, 1}, {4}), row = i64({1, 2}, {0, 0});
  EXPECT_FALSE(scatterNd(refOf(data), refOf(far), refOf(row), false, refOf(out)).isOk());
}
