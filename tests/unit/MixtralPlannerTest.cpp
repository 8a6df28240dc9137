// The zoo's Mixtral as `megac describe` and the planner read it: exact total and active
// parameter counts against the closed form (frontends/models/Mixtral.cpp), per-expert
// parameters concatenated as the raised ONNX pattern has them, and the TransformerShape
// (experts, topk, the experts' ffn, SwiGLU) read off the IR.
#include "frontends/dsl/GraphBuilder.h"
#include "frontends/models/ModelZoo.h"
#include "planner/CostModel.h"
#include "planner/ModelShape.h"
#include "planner/ModelStats.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace megac;

namespace {

struct Mixtral {
  int64_t l, h, a, g, E, k, f, s, v; // layers, hidden, heads, kv heads, experts, topk, ffn, ...
  std::string spec() const {
    return "mixtral:layers=" + std::to_string(l) + ",hidden=" + std::to_string(h) +
           ",heads=" + std::to_string(a) + ",kv_heads=" + std::to_string(g) +
           ",experts=" + std::to_string(E) + ",topk=" + std::to_string(k) +
           ",ffn=" + std::to_string(f) + ",seq=" + std::to_string(s) +
           ",vocab=" + std::to_string(v);
  }
  /// l (2 h^2 + 2 h g d + E h + 3 E h ffn + 2 h) + V h + h + V h (untied head).
  int64_t total() const {
    int64_t d = h / a;
    return l * (2 * h * h + 2 * h * g * d + E * h + 3 * E * h * f + 2 * h) + 2 * v * h + h;
  }
  /// What one token uses: the same with k of the E experts (the router counts).
  int64_t active() const {
    int64_t d = h / a;
    return l * (2 * h * h + 2 * h * g * d + E * h + 3 * k * h * f + 2 * h) + 2 * v * h + h;
  }
};

constexpr Mixtral kTiny{2, 64, 4, 2, 8, 2, 128, 32, 128};
constexpr Mixtral k8x7B{32, 4096, 32, 8, 8, 2, 14336, 4096, 32000};

struct Built {
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

std::unique_ptr<Built> build(const std::string &spec) {
  auto built = std::make_unique<Built>();
  models::ConfigResult config = models::parseModelSpec(spec);
  EXPECT_TRUE(config.config) << config.error;
  if (!config.config)
    return built;
  std::string error;
  built->module = models::buildModel(built->ctx, *config.config, error);
  EXPECT_TRUE(built->module) << error;
  return built;
}

} // namespace

TEST(MixtralDescribe, TotalAndActiveParametersMatchTheClosedForm) {
  EXPECT_EQ(kTiny.total(), 435520);
  EXPECT_EQ(kTiny.active(), 140608);
  EXPECT_EQ(k8x7B.total(), 46702792704);  // Mixtral-8x7B: 46.7B
  EXPECT_EQ(k8x7B.active(), 12879925248); // 12.9B active
  for (const Mixtral &m : {kTiny, k8x7B}) {
    auto built = build(m.spec());
    ASSERT_TRUE(built->module);
    planner::ModelStatsResult r = planner::computeModelStats(*built->module);
    ASSERT_TRUE(r.stats) << r.error;
    EXPECT_EQ(r.stats->parameters, m.total()) << m.spec();
    EXPECT_EQ(r.stats->activeParameters, m.active()) << m.spec();
    EXPECT_EQ(r.stats->expertParameters, m.l * 3 * m.E * m.h * m.f) << m.spec();
    EXPECT_EQ(r.stats->experts, m.E);
    EXPECT_EQ(r.stats->topk, m.k);
    EXPECT_EQ(r.stats->moeLayers, m.l);
  }
}

TEST(MixtralDescribe, DenseModelsAreAllActive) {
  auto built = build("llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,seq=32,vocab=128");
  ASSERT_TRUE(built->module);
  planner::ModelStatsResult r = planner::computeModelStats(*built->module);
  ASSERT_TRUE(r.stats) << r.error;
  EXPECT_EQ(r.stats->activeParameters, r.stats->parameters);
  EXPECT_EQ(r.stats->experts, 0);
  EXPECT_EQ(r.stats->moeLayers, 0);
}

// The planner's shape: the router is not the MLP; the experts' ffn and SwiGLU come from the
// moe_matmul weights; the cost model's counts then agree with the IR's.
TEST(MixtralPlanner, ShapeFromTheIr) {
  for (const Mixtral &m : {kTiny, k8x7B}) {
    auto built = build(m.spec());
    ASSERT_TRUE(built->module);
    planner::ModelShapeResult r = planner::computeModelShape(*built->module, m.spec());
    ASSERT_TRUE(r.shape) << r.error;
    const planner::TransformerShape &s = *r.shape;
    EXPECT_EQ(s.layers, m.l);
    EXPECT_EQ(s.hidden, m.h);
    EXPECT_EQ(s.kvHeads, m.g);
    EXPECT_EQ(s.ffn, m.f);
    EXPECT_EQ(s.experts, m.E);
    EXPECT_EQ(s.topk, m.k);
    EXPECT_TRUE(s.gatedMlp);
    EXPECT_FALSE(s.biases);
    EXPECT_FALSE(s.tiedEmbedding);
    EXPECT_EQ(s.parameters, m.total());
    EXPECT_DOUBLE_EQ(double(m.l) * planner::layerParameters(s) + planner::nonLayerParameters(s),
                     double(m.total()));
    EXPECT_DOUBLE_EQ(double(m.l) * planner::activeLayerParameters(s) +
                         planner::nonLayerParameters(s),
                     double(m.active()));
    // The IR's forward GEMM FLOPs (moe_matmul counts T·k active rows) are the planner's.
    double perSample = planner::modelFlopsPerStep(s, 1) / 3.0;
    EXPECT_NEAR(s.forwardGemmFlopsPerSample, perSample, 1e-12 * perSample) << m.spec();
  }
}

// The raised ONNX pattern keeps each expert's matrix its own parameter and concatenates them
// into the [E, out, in] stack moe_matmul reads: the active count sees through the concat.
TEST(MixtralDescribe, PerExpertParametersConcatenatedCountAsExperts) {
  mlir::MLIRContext ctx;
  dsl::GraphBuilder b(ctx, "moe");
  const int64_t T = 6, h = 8, f = 16, E = 4, k = 2;
  dsl::Tensor x = b.input("x", {T, h}, dsl::DType::f32);
  dsl::Tensor gate = b.parameter("gate", {E, h}, dsl::DType::f32, dsl::Init::normal(0.02));
  dsl::Tensor mask = b.topkMask(b.softmax(b.linear(x, gate, std::nullopt), -1), k);
  std::vector<dsl::Tensor> parts;
  for (int64_t e = 0; e < E; ++e)
    parts.push_back(b.reshape(
        b.parameter("w" + std::to_string(e), {f, h}, dsl::DType::f32, dsl::Init::normal(0.02)),
        {1, f, h}));
  dsl::Tensor routed = b.moeDispatch(x, mask);
  b.output("y", b.moeCombine(b.moeMatmul(routed, b.concat(parts, 0), mask, k), mask));
  mlir::OwningOpRef<mlir::ModuleOp> module(mlir::cast<mlir::ModuleOp>(b.finish()));
  ASSERT_TRUE(module) << b.error();
  planner::ModelStatsResult r = planner::computeModelStats(*module);
  ASSERT_TRUE(r.stats) << r.error;
  EXPECT_EQ(r.stats->parameters, E * h + E * f * h);
  EXPECT_EQ(r.stats->expertParameters, E * f * h);
  EXPECT_EQ(r.stats->activeParameters, E * h + k * f * h); // the router, and k of the experts
  EXPECT_EQ(r.stats->experts, E);
  EXPECT_EQ(r.stats->moeLayers, 1);
}
