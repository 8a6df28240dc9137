// The graph DSL: errors point at the offending call, and later calls do nothing.
#include "frontends/dsl/GraphBuilder.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <gtest/gtest.h>

using namespace megac::dsl;

TEST(GraphBuilder, ShapeErrorNamesTheCallSiteAndScope) {
  mlir::MLIRContext ctx;
  GraphBuilder b(ctx, "f");
  Tensor x = b.input("x", {2, 8, 64}, DType::f32);
  Tensor y;
  int line = 0;
  {
    auto s = b.scope("h3");
    Tensor w = b.parameter("w", {32, 48}, DType::f32, Init::normal(0.02));
    line = __LINE__ + 1;
    y = b.linear(x, w, std::nullopt);
  }
  EXPECT_FALSE(y.valid());
  ASSERT_TRUE(b.failed());
  EXPECT_NE(b.error().find("GraphBuilderTest.cpp:" + std::to_string(line) + ": in h3: "),
            std::string::npos)
      << b.error();
  EXPECT_NE(b.error().find("linear weight [32, 48] expects in = 48 but the input [2, 8, 64]"),
            std::string::npos)
      << b.error();
  // Later calls are no-ops and finish() reports the first error.
  std::string first = b.error();
  EXPECT_FALSE(b.gelu(x).valid());
  b.output("y", x);
  EXPECT_EQ(b.finish(), nullptr);
  EXPECT_EQ(b.error(), first);
}

TEST(GraphBuilder, OperatorsBroadcastExplicitly) {
  mlir::MLIRContext ctx;
  GraphBuilder b(ctx, "f");
  Tensor x = b.input("x", {2, 8, 64}, DType::f32);
  Tensor bias = b.parameter("bias", {64}, DType::f32, Init::zeros());
  Tensor y = x + bias;
  ASSERT_TRUE(y.valid()) << b.error();
  EXPECT_EQ(y.shape(), (Shape{2, 8, 64}));
  Tensor z = 1.0 - y * 0.5;
  EXPECT_EQ(z.shape(), (Shape{2, 8, 64}));
  b.output("z", z);
  mlir::OwningOpRef<mlir::ModuleOp> module(mlir::cast<mlir::ModuleOp>(b.finish()));
  ASSERT_TRUE(module) << b.error();
  int broadcasts = 0;
  module->walk(
      [&](mlir::Operation *op) { broadcasts += op->getName().getStringRef() == "mega.broadcast"; });
  EXPECT_EQ(broadcasts, 3); // bias, 0.5 and 1.0
}

TEST(GraphBuilder, RejectsDuplicateParametersAndMismatchedTypes) {
  mlir::MLIRContext ctx;
  {
    GraphBuilder b(ctx, "f");
    b.parameter("w", {4}, DType::f32, Init::zeros());
    b.parameter("w", {4}, DType::f32, Init::zeros());
    EXPECT_NE(b.error().find("parameter w is declared twice"), std::string::npos) << b.error();
  }
  {
    GraphBuilder b(ctx, "f");
    Tensor a = b.input("a", {4}, DType::f32);
    Tensor c = b.input("c", {4}, DType::bf16);
    EXPECT_FALSE((a + c).valid());
    EXPECT_NE(b.error().find("element types differ (f32 vs bf16)"), std::string::npos) << b.error();
  }
  {
    GraphBuilder b(ctx, "f");
    b.input("a", {4}, DType::f32);
    EXPECT_EQ(b.finish(), nullptr);
    EXPECT_NE(b.error().find("no outputs"), std::string::npos) << b.error();
  }
}
