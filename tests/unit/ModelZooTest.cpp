// The model zoo against closed-form parameter and FLOP counts, and model spec parsing.
#include "frontends/models/ModelZoo.h"
#include "planner/ModelStats.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <chrono>

using namespace megac;
using models::ModelConfig;

namespace {

planner::ModelStats statsOf(const std::string &spec) {
  models::ConfigResult config = models::parseModelSpec(spec);
  EXPECT_TRUE(config.config) << config.error;
  if (!config.config)
    return {};
  mlir::MLIRContext ctx;
  std::string error;
  auto module = models::buildModel(ctx, *config.config, error);
  EXPECT_TRUE(module) << error;
  if (!module)
    return {};
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*module)));
  planner::ModelStatsResult r = planner::computeModelStats(*module);
  EXPECT_TRUE(r.stats) << r.error;
  return r.stats.value_or(planner::ModelStats{});
}

std::string gptSpec(int64_t l, int64_t h, int64_t a, int64_t s, int64_t v, int64_t b = 1) {
  return "gpt:layers=" + std::to_string(l) + ",hidden=" + std::to_string(h) +
         ",heads=" + std::to_string(a) + ",seq=" + std::to_string(s) +
         ",vocab=" + std::to_string(v) + ",batch=" + std::to_string(b);
}

} // namespace

// 12 l h^2 + 13 l h + (V + s) h + 2 h: pre-LN with a final LayerNorm, biases, tied embedding.
TEST(ModelZoo, GptParameterCountMatchesTheFormula) {
  struct C {
    int64_t l, h, a, s, v;
  };
  for (C c : {C{2, 64, 4, 32, 128}, C{12, 768, 12, 1024, 50257}, C{24, 1024, 16, 2048, 50304},
              C{96, 12288, 96, 2048, 50257}}) {
    planner::ModelStats s = statsOf(gptSpec(c.l, c.h, c.a, c.s, c.v));
    int64_t expected = 12 * c.l * c.h * c.h + 13 * c.l * c.h + (c.v + c.s) * c.h + 2 * c.h;
    EXPECT_EQ(s.parameters, expected) << gptSpec(c.l, c.h, c.a, c.s, c.v);
  }
  // GPT-2 small: the well-known 124,439,808 (HF GPT2LMHeadModel, tied).
  EXPECT_EQ(statsOf(gptSpec(12, 768, 12, 1024, 50257)).parameters, 124439808);
}

TEST(ModelZoo, UntiedHeadAddsVocabTimesHidden) {
  int64_t tied = statsOf(gptSpec(2, 64, 4, 32, 128)).parameters;
  int64_t untied = statsOf(gptSpec(2, 64, 4, 32, 128) + ",tied=0").parameters;
  EXPECT_EQ(untied - tied, 128 * 64);
}

// 24 B s l h^2 + 4 B s^2 l h + 2 B s h V (full s^2 attention), from the cost interface.
TEST(ModelZoo, GptMatmulFlopsMatchTheFormula) {
  struct C {
    int64_t l, h, a, s, v, b;
  };
  for (C c : {C{2, 64, 4, 32, 128, 1}, C{3, 96, 6, 48, 200, 4}, C{12, 768, 12, 1024, 50257, 8}}) {
    planner::ModelStats s = statsOf(gptSpec(c.l, c.h, c.a, c.s, c.v, c.b));
    int64_t B = c.b, S = c.s, L = c.l, H = c.h, V = c.v;
    int64_t expected = 24 * B * S * L * H * H + 4 * B * S * S * L * H + 2 * B * S * H * V;
    EXPECT_EQ(s.forwardMatmulFlops, expected);
    EXPECT_EQ(s.tokens, B * S);
    EXPECT_GT(s.forwardFlops, s.forwardMatmulFlops);
  }
}

TEST(ModelZoo, BertAndT5ParameterCounts) {
  int64_t l = 2, h = 64, s = 32, V = 128, heads = 4, f = 256;
  // BERT: embeddings + LN, 12h^2 + 13h per layer, MLM transform + LN + decoder bias (tied).
  int64_t bert = V * h + s * h + 2 * h + l * (12 * h * h + 13 * h) + (h * h + h) + 2 * h + V;
  EXPECT_EQ(statsOf("bert:layers=2,hidden=64,heads=4,seq=32,vocab=128").parameters, bert);
  // T5: shared embedding, a relative bias table per stack (32 buckets x heads), no biases.
  int64_t enc = l * (h + 4 * h * h + h + 2 * h * f) + h;
  int64_t dec = l * (h + 4 * h * h + h + 4 * h * h + h + 2 * h * f) + h;
  int64_t t5 = V * h + 2 * 32 * heads + enc + dec;
  EXPECT_EQ(statsOf("t5:enc_layers=2,dec_layers=2,hidden=64,heads=4,seq=32,vocab=128").parameters,
            t5);
}

TEST(ModelZoo, LargeModelsBuildQuickly) {
  auto start = std::chrono::steady_clock::now();
  // GPT-3 175B and a 1T-parameter GPT (Narayanan et al.: 128 layers, hidden 25600).
  planner::ModelStats gpt3 = statsOf(gptSpec(96, 12288, 96, 2048, 50257));
  planner::ModelStats gpt1t = statsOf(gptSpec(128, 25600, 160, 2048, 51200));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(gpt3.parameters, 174604259328);
  EXPECT_GT(gpt1t.parameters, 1'000'000'000'000);
  // Not a timing test: a generous bound that only catches accidental weight materialization.
  EXPECT_LT(seconds, 30.0);
}

TEST(ModelSpec, ErrorsNameTheKey) {
  auto error = [](const char *spec) { return models::parseModelSpec(spec).error; };
  EXPECT_EQ(error("gpt:layers=2,hidden=65,heads=4,seq=32,vocab=128"),
            "key 'hidden' (65) is not divisible by key 'heads' (4)");
  EXPECT_NE(error("gpt:layer=2").find("unknown key 'layer' for gpt"), std::string::npos);
  EXPECT_EQ(error("gpt:layers=two"), "key 'layers' needs a positive integer, got 'two'");
  EXPECT_EQ(error("gpt:layers=0"), "key 'layers' needs a positive integer, got '0'");
  EXPECT_EQ(error("gpt:hidden=64,heads=4,seq=32,vocab=128"), "missing key 'layers' for gpt");
  EXPECT_EQ(error("gpt:layers=2,layers=3"), "key 'layers' is given twice");
  EXPECT_EQ(error("gpt:layers=2,tied=yes"), "key 'tied' needs 0 or 1, got 'yes'");
  EXPECT_NE(error("mamba:layers=2").find("unknown model 'mamba'"), std::string::npos);
  EXPECT_NE(error("t5:hidden=64").find("t5 needs enc_layers and dec_layers"), std::string::npos);
  EXPECT_NE(error("bert:layers=2,hidden=64,heads=4,seq=32,vocab=128,gelu=fast").find("gelu"),
            std::string::npos);
}

// Issue 19, finding 9: a model spec had no upper bound, so `megac describe --model
// gpt:layers=99999999999,...` built for minutes (and generate did the same from a checkpoint).
TEST(ModelSpec, Issue19HugeLayerCountIsRefusedAtOnce) {
  auto start = std::chrono::steady_clock::now();
  models::ConfigResult r =
      models::parseModelSpec("gpt:layers=99999999999,hidden=64,heads=4,seq=32,vocab=128");
  EXPECT_FALSE(r.config);
  EXPECT_EQ(r.error, "key 'layers' is 99999999999, above megac's bound of 4096 for it");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_NE(models::parseModelSpec("t5:enc_layers=5000,dec_layers=2,hidden=64,heads=4,seq=32,"
                                   "vocab=128")
                .error.find("'enc_layers' is 5000"),
            std::string::npos);
}

// Issue 19, finding 6: hidden = 2^32 printed 408,021,893,120 parameters (int64 wrapped) and
// vocab = 2^63 - 1 printed 25,952; both are refused by name now, and a model within every
// per-key bound whose forward pass would overflow the 64-bit FLOP counts is refused as a whole.
TEST(ModelSpec, Issue19SizesThatWouldOverflowCountsAreRefused) {
  auto error = [](const char *spec) { return models::parseModelSpec(spec).error; };
  EXPECT_EQ(error("gpt:layers=2,hidden=4294967296,heads=4,seq=32,vocab=128"),
            "key 'hidden' is 4294967296, above megac's bound of 262144 for it");
  EXPECT_EQ(error("gpt:layers=2,hidden=64,heads=4,seq=32,vocab=9223372036854775807"),
            "key 'vocab' is 9223372036854775807, above megac's bound of 2147483647 for it");
  std::string tooBig = error("gpt:layers=4096,hidden=262144,heads=64,seq=2048,vocab=51200");
  EXPECT_NE(tooBig.find("is too large"), std::string::npos) << tooBig;
  EXPECT_NE(tooBig.find("64-bit"), std::string::npos) << tooBig;
  // The largest published shapes still parse (a 1T GPT; Llama-3-405B's).
  EXPECT_TRUE(
      models::parseModelSpec("gpt:layers=128,hidden=25600,heads=160,seq=2048,vocab=51200").config);
  EXPECT_TRUE(models::parseModelSpec("llama:layers=126,hidden=16384,heads=128,kv_heads=8,"
                                     "ffn=53248,seq=8192,vocab=128256")
                  .config);
}

TEST(ModelSpec, SpecRoundTrips) {
  auto c =
      models::parseModelSpec("t5:layers=3,hidden=64,heads=4,seq=32,dec_seq=16,vocab=128,tied=0");
  ASSERT_TRUE(c.config) << c.error;
  EXPECT_EQ(c.config->encLayers, 3);
  EXPECT_EQ(c.config->decLayers, 3);
  EXPECT_EQ(c.config->ffn, 256);
  auto again = models::parseModelSpec(c.config->spec());
  ASSERT_TRUE(again.config) << again.error;
  EXPECT_EQ(again.config->spec(), c.config->spec());
}
