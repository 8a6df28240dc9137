// The mesh and sharding attributes' arithmetic, and the cost interface on parsed ops.
#include "ir/MegaOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {
struct DialectTest : ::testing::Test {
  DialectTest() { ctx.loadDialect<mega::MegaDialect, func::FuncDialect>(); }
  MLIRContext ctx;
};
} // namespace

TEST_F(DialectTest, MeshAndShardingArithmetic) {
  auto sharding = dyn_cast_or_null<mega::ShardingAttr>(
      parseAttribute("#mega.sharding<#mega.mesh<pp = 2, dp = 2, tp = 4>, [[dp], [], [tp]]>", &ctx));
  ASSERT_TRUE(sharding);
  mega::MeshAttr mesh = sharding.getMesh();
  EXPECT_EQ(mesh.getNumDevices(), 16);
  EXPECT_EQ(mesh.findAxis("tp"), 2u);
  EXPECT_FALSE(mesh.findAxis("sp"));
  EXPECT_EQ(sharding.getLocalShape({8, 16, 64}), (SmallVector<int64_t>{4, 16, 16}));
  SmallVector<StringAttr> dpTp = {StringAttr::get(&ctx, "dp"), StringAttr::get(&ctx, "tp")};
  EXPECT_EQ(mesh.getGroupSize(dpTp), 8);
}

TEST_F(DialectTest, CostInterfaceCountsGemmFlops) {
  const char *ir = R"mlir(
    func.func @f(%x: tensor<2x8x64xf32>, %w: tensor<256x64xf32>, %b: tensor<256xf32>,
                 %q: tensor<2x8x4x16xf32>) -> (tensor<2x8x256xf32>, tensor<2x8x4x16xf32>) {
      %y = mega.linear %x, %w, %b : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
      %o = mega.attention %q, %q, %q causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
      return %y, %o : tensor<2x8x256xf32>, tensor<2x8x4x16xf32>
    })mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, &ctx);
  ASSERT_TRUE(module);
  int64_t linearFlops = -1, attentionFlops = -1, linearBytes = -1;
  module->walk([&](mega::LinearOp op) {
    linearFlops = op.getMatmulFlops();
    linearBytes = op.getBytesRead();
  });
  module->walk([&](mega::AttentionOp op) { attentionFlops = op.getMatmulFlops(); });
  EXPECT_EQ(linearFlops, 2 * 2 * 8 * 64 * 256);
  EXPECT_EQ(linearBytes, 4 * (2 * 8 * 64 + 256 * 64 + 256));
  // QK^T and PV: 2 * (b h s t d) each.
  EXPECT_EQ(attentionFlops, 2 * (2 * 2 * 4 * 8 * 8 * 16));
}
