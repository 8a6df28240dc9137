// A property of the mixture-of-experts layer (docs/moe.md): with the top-k weights renormalised
// to sum 1 and nothing dropped, experts that are all the same matrix give exactly the dense MLP
// of that matrix, whatever the router decides: sum_e g[t,e] f(x[t]) = f(x[t]). Checked in f64 on
// random inputs and router logits (several ties of k among E), through the real ops and kernels.
#include "tests/unit/training/TrainingHarness.h"

#include <gtest/gtest.h>

#include <random>

namespace megac::training_test {
namespace {

// 6 tokens, hidden 4, ffn 5, 4 experts (top-2): the experts' stacked SwiGLU weights are the one
// dense MLP's broadcast over the expert dim. Output: the largest |moe - dense| entry.
const char *kModule = R"(
func.func @compare(%x: tensor<6x4xf64> {mega.param = "x"},
                   %logits: tensor<6x4xf64> {mega.param = "router_logits"},
                   %w1: tensor<5x4xf64> {mega.param = "w1"}, %w3: tensor<5x4xf64> {mega.param = "w3"},
                   %w2: tensor<4x5xf64> {mega.param = "w2"})
    -> (tensor<f64> {mega.output = "max_diff"}, tensor<f64> {mega.output = "scale"}) {
  %p = mega.softmax %logits axis -1 : tensor<6x4xf64>
  %m = mega.topk_mask %p k 2 : tensor<6x4xf64>
  %c = mega.mul %p, %m : tensor<6x4xf64>
  %s = mega.reduce sum %c over [1] keep_dims : tensor<6x4xf64> -> tensor<6x1xf64>
  %sb = mega.broadcast %s : tensor<6x1xf64> -> tensor<6x4xf64>
  %g = mega.div %c, %sb : tensor<6x4xf64>
  %e1 = mega.broadcast %w1 : tensor<5x4xf64> -> tensor<4x5x4xf64>
  %e3 = mega.broadcast %w3 : tensor<5x4xf64> -> tensor<4x5x4xf64>
  %e2 = mega.broadcast %w2 : tensor<4x5xf64> -> tensor<4x4x5xf64>
  %d = mega.moe_dispatch %x, %m : (tensor<6x4xf64>, tensor<6x4xf64>) -> tensor<4x6x4xf64>
  %a = mega.moe_matmul %d, %e1, %m topk 2 : (tensor<4x6x4xf64>, tensor<4x5x4xf64>, tensor<6x4xf64>) -> tensor<4x6x5xf64>
  %b = mega.moe_matmul %d, %e3, %m topk 2 : (tensor<4x6x4xf64>, tensor<4x5x4xf64>, tensor<6x4xf64>) -> tensor<4x6x5xf64>
  %sa = mega.silu %a : tensor<4x6x5xf64>
  %h = mega.mul %sa, %b : tensor<4x6x5xf64>
  %y = mega.moe_matmul %h, %e2, %m topk 2 : (tensor<4x6x5xf64>, tensor<4x4x5xf64>, tensor<6x4xf64>) -> tensor<4x6x4xf64>
  %moe = mega.moe_combine %y, %g : (tensor<4x6x4xf64>, tensor<6x4xf64>) -> tensor<6x4xf64>
  %da = mega.linear %x, %w1 : (tensor<6x4xf64>, tensor<5x4xf64>) -> tensor<6x5xf64>
  %db = mega.linear %x, %w3 : (tensor<6x4xf64>, tensor<5x4xf64>) -> tensor<6x5xf64>
  %dsa = mega.silu %da : tensor<6x5xf64>
  %dh = mega.mul %dsa, %db : tensor<6x5xf64>
  %dense = mega.linear %dh, %w2 : (tensor<6x5xf64>, tensor<4x5xf64>) -> tensor<6x4xf64>
  %diff = mega.sub %moe, %dense : tensor<6x4xf64>
  %abs = mega.abs %diff : tensor<6x4xf64>
  %max = mega.reduce max %abs over [0, 1] : tensor<6x4xf64> -> tensor<f64>
  %dabs = mega.abs %dense : tensor<6x4xf64>
  %scale = mega.reduce max %dabs over [0, 1] : tensor<6x4xf64> -> tensor<f64>
  return %max, %scale : tensor<f64>, tensor<f64>
}
)";

TEST(MoeProperty, IdenticalExpertsGiveTheDenseMlp) {
  Harness harness;
  auto module = harness.parse(kModule);
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<mlir::func::FuncOp>("compare");
  ASSERT_TRUE(f);
  for (unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    TensorMap weights = sampleParameters(f, [&] { return unit(rng); });
    Compiled compiled = harness.compile(*module, weights);
    ASSERT_TRUE(compiled.executor);
    double scale = runScalar(*compiled.executor, "compare", "scale");
    double diff = valuesOf(expectValue(compiled.executor->output("max_diff"), "max_diff"))[0];
    // The gates sum to 1 up to one rounding each: a few f64 ulps of the output.
    EXPECT_LE(diff, 1e-15 * std::max(scale, 1.0)) << "seed " << seed << ", max |dense| " << scale;
    EXPECT_GT(scale, 0.0);
  }
}

} // namespace
} // namespace megac::training_test
