// Shape rules of the mega ops, checked against hand-computed shapes and messages.
#include "ir/ShapeRules.h"

#include <gtest/gtest.h>

using namespace mega::shape;

namespace {
Dims d(const Shape &s) { return {s.data(), s.size()}; }
} // namespace

TEST(ShapeRules, BroadcastAlignsFromTheRight) {
  Shape a{2, 1, 64}, b{8, 1};
  Result r = broadcast(d(a), d(b));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.shape, (Shape{2, 8, 64}));
  Shape c{3}, e{4};
  EXPECT_FALSE(broadcast(d(c), d(e)).ok());
  EXPECT_EQ(checkBroadcastsTo(d(Shape{64}), d(Shape{2, 8, 64})), "");
  EXPECT_NE(checkBroadcastsTo(d(Shape{2, 64}), d(Shape{64})), "");
}

TEST(ShapeRules, MatmulBroadcastsBatchDims) {
  Shape a{2, 1, 16, 8}, b{4, 8, 32};
  Result r = matmul(d(a), d(b));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.shape, (Shape{2, 4, 16, 32}));
  Shape bad{4, 7, 32};
  Result e = matmul(d(a), d(bad));
  EXPECT_EQ(e.error,
            "matmul contraction dims differ: [2, 1, 16, 8] has k = 8, [4, 7, 32] has k = 7");
}

TEST(ShapeRules, GatherReduceTransposeSliceConcat) {
  EXPECT_EQ(gather(d(Shape{128, 64}), d(Shape{2, 8}), 0).shape, (Shape{2, 8, 64}));
  EXPECT_EQ(gather(d(Shape{4, 5, 6}), d(Shape{3}), -1).shape, (Shape{4, 5, 3}));
  EXPECT_EQ(reduce(d(Shape{2, 8, 64}), d(Shape{-1}), true).shape, (Shape{2, 8, 1}));
  EXPECT_EQ(reduce(d(Shape{2, 8, 64}), d(Shape{0, 2}), false).shape, (Shape{8}));
  EXPECT_FALSE(reduce(d(Shape{2, 8}), d(Shape{1, -1}), false).ok()); // same axis twice
  EXPECT_EQ(transpose(d(Shape{2, 8, 4, 16}), d(Shape{0, 2, 1, 3})).shape, (Shape{2, 4, 8, 16}));
  EXPECT_FALSE(transpose(d(Shape{2, 8}), d(Shape{0, 0})).ok());
  EXPECT_EQ(slice(d(Shape{10, 8}), d(Shape{1, 0}), d(Shape{10, 8}), d(Shape{3, 2})).shape,
            (Shape{3, 4}));
  EXPECT_FALSE(slice(d(Shape{10}), d(Shape{5}), d(Shape{11}), d(Shape{1})).ok());
  EXPECT_EQ(concat({{2, 3}, {2, 5}}, 1).shape, (Shape{2, 8}));
  EXPECT_FALSE(concat({{2, 3}, {3, 5}}, 1).ok());
}

TEST(ShapeRules, CoarseOps) {
  EXPECT_EQ(linear(d(Shape{2, 8, 64}), d(Shape{256, 64}), Shape{256}).shape, (Shape{2, 8, 256}));
  EXPECT_FALSE(linear(d(Shape{2, 8, 64}), d(Shape{256, 64}), Shape{64}).ok());
  EXPECT_EQ(embedding(d(Shape{128, 64}), d(Shape{2, 8})).shape, (Shape{2, 8, 64}));
  EXPECT_EQ(checkNormParams("layer_norm", d(Shape{2, 64}), d(Shape{64}), Shape{64}), "");
  EXPECT_NE(checkNormParams("layer_norm", d(Shape{2, 64}), d(Shape{32}), std::nullopt), "");
  // Rope: tables [s, d], [b, 1, s, d] or x's own shape; d even; one table shape.
  EXPECT_EQ(checkRope(d(Shape{2, 4, 16, 8}), d(Shape{16, 8}), d(Shape{16, 8})), "");
  EXPECT_EQ(checkRope(d(Shape{2, 4, 16, 8}), d(Shape{2, 1, 16, 8}), d(Shape{2, 1, 16, 8})), "");
  EXPECT_NE(checkRope(d(Shape{2, 4, 16, 7}), d(Shape{16, 7}), d(Shape{16, 7})), "");
  EXPECT_NE(checkRope(d(Shape{2, 4, 16, 8}), d(Shape{16, 8}), d(Shape{1, 16, 8})), "");
  EXPECT_NE(checkRope(d(Shape{2, 4, 16, 8}), d(Shape{16, 4}), d(Shape{16, 4})), "");
  EXPECT_NE(checkRope(d(Shape{2, 4, 16, 8}), d(Shape{3, 16, 8}), d(Shape{3, 16, 8})), "");
  EXPECT_NE(checkRope(d(Shape{4, 8}), d(Shape{2, 4, 8}), d(Shape{2, 4, 8})), "");
  // Grouped-query attention: 8 query heads over 2 key/value heads, value head dim 32.
  Result gqa = attention(d(Shape{2, 16, 8, 64}), d(Shape{2, 20, 2, 64}), d(Shape{2, 20, 2, 32}),
                         Shape{2, 1, 1, 20});
  ASSERT_TRUE(gqa.ok()) << gqa.error;
  EXPECT_EQ(gqa.shape, (Shape{2, 16, 8, 32}));
  EXPECT_FALSE(
      attention(d(Shape{2, 16, 8, 64}), d(Shape{2, 16, 3, 64}), d(Shape{2, 16, 3, 64}), {}).ok());
  EXPECT_FALSE(attention(d(Shape{2, 16, 8, 64}), d(Shape{2, 16, 8, 64}), d(Shape{2, 16, 8, 64}),
                         Shape{2, 8, 16, 15})
                   .ok());
  EXPECT_EQ(crossEntropy(d(Shape{2, 8, 128}), d(Shape{2, 8})).shape, (Shape{2, 8}));
  EXPECT_FALSE(crossEntropy(d(Shape{2, 8, 128}), d(Shape{2, 7})).ok());
}
