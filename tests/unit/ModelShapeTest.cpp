// The planner's TransformerShape read off zoo models (planner/ModelShape.h).
#include "frontends/models/ModelZoo.h"
#include "planner/ModelShape.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace megac;

namespace {

planner::TransformerShape shapeOf(const std::string &spec) {
  models::ConfigResult config = models::parseModelSpec(spec);
  EXPECT_TRUE(config.config) << config.error;
  mlir::MLIRContext ctx;
  std::string error;
  auto module = models::buildModel(ctx, *config.config, error);
  EXPECT_TRUE(module) << error;
  planner::ModelShapeResult r = planner::computeModelShape(*module, spec);
  EXPECT_TRUE(r.shape) << r.error;
  return r.shape.value_or(planner::TransformerShape{});
}

} // namespace

TEST(ModelShape, GptDimsAndCounts) {
  planner::TransformerShape s = shapeOf("gpt:layers=3,hidden=64,heads=4,seq=32,vocab=100,batch=2");
  EXPECT_EQ(s.layers, 3);
  EXPECT_EQ(s.hidden, 64);
  EXPECT_EQ(s.heads, 4);
  EXPECT_EQ(s.kvHeads, 4);
  EXPECT_EQ(s.ffn, 256);
  EXPECT_EQ(s.vocab, 100);
  EXPECT_EQ(s.seq, 32);
  EXPECT_FALSE(s.gatedMlp);
  EXPECT_TRUE(s.tiedEmbedding);
  // 12lh^2 + 13lh + (V+s)h + 2h.
  EXPECT_EQ(s.parameters, 12 * 3 * 64 * 64 + 13 * 3 * 64 + (100 + 32) * 64 + 2 * 64);
  // Per sample: GEMM FLOPs 24 s l h^2 + 4 s^2 l h + 2 s h V (batch 2 divided out).
  double gemm = 24.0 * 32 * 3 * 64 * 64 + 4.0 * 32 * 32 * 3 * 64 + 2.0 * 32 * 64 * 100;
  EXPECT_DOUBLE_EQ(s.forwardGemmFlopsPerSample, gemm);
  EXPECT_GT(s.forwardFlopsPerSample, gemm);
}

TEST(ModelShape, UntiedHeadAndCustomFfn) {
  planner::TransformerShape s =
      shapeOf("gpt:layers=2,hidden=32,heads=2,ffn=48,seq=16,vocab=50,tied=0");
  EXPECT_EQ(s.ffn, 48);
  EXPECT_FALSE(s.tiedEmbedding);
}

TEST(ModelShape, T5CountsEveryBlockAndBothSequences) {
  planner::TransformerShape s =
      shapeOf("t5:enc_layers=2,dec_layers=3,hidden=32,heads=4,seq=16,dec_seq=8,vocab=64");
  EXPECT_EQ(s.layers, 5);
  EXPECT_EQ(s.seq, 24);
  EXPECT_EQ(s.hidden, 32);
  EXPECT_EQ(s.vocab, 64);
}

TEST(ModelShape, Bert) {
  planner::TransformerShape s = shapeOf("bert:layers=2,hidden=32,heads=4,seq=16,vocab=64");
  EXPECT_EQ(s.layers, 2);
  EXPECT_EQ(s.heads, 4);
  EXPECT_EQ(s.ffn, 128);
}
