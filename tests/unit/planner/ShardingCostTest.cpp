// The planner's ZeRO-2/3 (issue 31) and context parallelism (issue 32): memory, cost per stack,
// validation and search, each claim against its closed form (docs/planner.md says what is charged).
#include "planner/BlockKernels.h"
#include "planner/CostModel.h"

#include "tests/unit/planner/PlannerTestShapes.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace megac::planner {
namespace {

using testing::gpt;
using testing::llama31_70b;
using testing::llama31_8b;

StackProfile stack(const char *name) { return *stackProfile(name, false); }
Cluster cluster(const char *spec) { return *parseCluster(spec, nullptr); }

Layout dataParallel(int64_t dp, int zero, int64_t cp = 1) {
  Layout l{1, 1, dp, 1, 1, false, zero, Recompute::none, Precision::bf16};
  l.cp = cp;
  return l;
}

// ---- ZeRO-2/3 ----------------------------------------------------------------------------

// 24 layers of hidden 2048 on 8 H100 at dp 8: zero 1 shards the optimizer state (12 bytes per
// parameter in bf16 training), zero 2 the fp32 gradients too (plus one block's bucket in
// flight), zero 3 the bf16 parameters too (plus the largest gathered unit in flight: here the
// 51200 x 2048 embedding table, once on megac's blocking runtime, twice with prefetch).
TEST(ZeroCostTest, EachLevelShardsWhatItSays) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  for (const char *name : {"megac", "megatron-core"}) {
    SCOPED_TRACE(name);
    StackProfile profile = stack(name);
    StepEstimator est(s, c, 64, profile);
    std::string why;
    std::optional<StepCost> z[4];
    for (int zero = 0; zero < 4; ++zero) {
      z[zero] = est.memory(dataParallel(8, zero), &why);
      ASSERT_TRUE(z[zero]) << why;
    }
    double params = z[0]->parameterBytes / 2; // bf16 parameters, 2 bytes each
    EXPECT_DOUBLE_EQ(z[0]->gradientBytes, params * 4);
    EXPECT_DOUBLE_EQ(z[0]->optimizerBytes, params * 12);
    EXPECT_DOUBLE_EQ(z[1]->optimizerBytes, params * 12 / 8);
    EXPECT_DOUBLE_EQ(z[1]->gradientBytes, params * 4);
    double bucket = layerParameters(s) * 4;
    EXPECT_DOUBLE_EQ(est.gradientBucketBytes(dataParallel(8, 2)), bucket);
    // megac keeps the bucket and the gathered unit in its arena (StackProfile.h,
    // shardedBuffersInArena): they count in the workspace, not the state.
    double inState = profile.shardedBuffersInArena ? 0 : 1;
    EXPECT_DOUBLE_EQ(z[2]->gradientBytes, params * 4 / 8 + inState * bucket);
    EXPECT_DOUBLE_EQ(z[2]->parameterBytes, params * 2);
    double table = 51200.0 * 2048 * 2 * (profile.overlaps(profile.prefetchShardedParams) ? 2 : 1);
    EXPECT_DOUBLE_EQ(est.gatheredParameterBytes(dataParallel(8, 3)), table);
    // megac stores no bf16 shard under zero 3: it gathers the f32 master and casts it
    // (gathersMasterWeights); Megatron-Core stores and gathers a bf16 shard.
    EXPECT_DOUBLE_EQ(z[3]->parameterBytes,
                     (profile.gathersMasterWeights ? 0 : params * 2 / 8) + inState * table);
    EXPECT_DOUBLE_EQ(z[3]->gradientBytes, z[2]->gradientBytes);
    EXPECT_DOUBLE_EQ(z[3]->optimizerBytes, z[1]->optimizerBytes);
    // megac prefetches as --overlap on compiles it (mega-training-zero-prefetch;
    // e2e_zero_prefetch_plan reads it from a compiled plan), Megatron-Core with its FSDP.
    EXPECT_TRUE(profile.prefetchShardedParams);
  }
  EXPECT_FALSE(stack("megatron-2021").prefetchShardedParams);
  EXPECT_TRUE(stack("megac").gathersMasterWeights);
  EXPECT_FALSE(stack("megatron-core").gathersMasterWeights);
}

// Issue 31's memory bar, in the model: at dp 4, a >= 16-layer model's persistent bytes
// (parameters + gradients + optimizer) under zero 3 are at most 0.27 of zero 0's (1/4 = 0.25,
// plus the gathered unit and the bucket).
TEST(ZeroCostTest, ZeroThreeKeepsAQuarterAtDpFour) {
  TransformerShape s = llama31_8b(4096);
  Cluster c = cluster("h100-sxm:1x8");
  Layout zero0{2, 1, 4, 1, 1, true, 0, Recompute::none, Precision::bf16};
  Layout zero3 = zero0;
  zero3.zero = 3;
  std::string why;
  StepEstimator est(s, c, 64, stack("megac"));
  auto a = est.memory(zero0, &why), b = est.memory(zero3, &why);
  ASSERT_TRUE(a && b) << why;
  double persistent0 = a->parameterBytes + a->gradientBytes + a->optimizerBytes;
  double persistent3 = b->parameterBytes + b->gradientBytes + b->optimizerBytes;
  EXPECT_LE(persistent3, 0.27 * persistent0);
  // megac stores no bf16 copy under zero 3 (gathersMasterWeights): 16 of zero 0's 18 bytes a
  // parameter are left to shard.
  EXPECT_GE(persistent3, 0.25 * persistent0 * 16.0 / 18.0);
}

TEST(ZeroCostTest, ZeroTwoAndThreeNeedDataParallelRanks) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  for (int zero : {2, 3}) {
    Layout l{8, 1, 1, 1, 1, true, zero, Recompute::none, Precision::bf16};
    std::string why;
    EXPECT_FALSE(estimate(s, c, 64, l, &why, stack("megac")));
    EXPECT_NE(why.find("zero " + std::to_string(zero)), std::string::npos) << why;
    EXPECT_NE(why.find("dp = 1"), std::string::npos) << why;
  }
  std::string why;
  EXPECT_FALSE(estimate(s, c, 64, dataParallel(8, 4), &why, stack("megac")));
  EXPECT_NE(why.find("0, 1, 2 or 3"), std::string::npos) << why;
}

// A blocking stack (Megatron 2021: no prefetch, no overlapped reduction) exposes every ZeRO
// collective: zero 2 reduce-scatters the whole stage's fp32 gradients each of the m micro-batches
// and all-gathers the bf16 parameters after the step; zero 3 all-gathers them before every
// forward and every backward instead, and never after the step.
TEST(ZeroCostTest, BlockingStackChargesEveryCollectivePerMicroBatch) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  StepEstimator est(s, c, 64, stack("megatron-2021"));
  std::string why;
  auto z0 = est.memory(dataParallel(8, 0), &why);
  auto z2 = est.estimate(dataParallel(8, 2), &why);
  auto z3 = est.estimate(dataParallel(8, 3), &why);
  ASSERT_TRUE(z0 && z2 && z3) << why;
  double params = z0->parameterBytes / 2;
  const int m = 64 / 8;
  double scatter = collectiveSeconds(c, Collective::reduceScatter, 8, 1, params * 4);
  double gather = collectiveSeconds(c, Collective::allGather, 8, 1, params * 2);
  EXPECT_NEAR(z2->zeroReduceScatterSeconds, m * scatter, 1e-12);
  EXPECT_EQ(z2->dpReduceSeconds, 0);
  EXPECT_NEAR(z2->dpGatherSeconds, gather, 1e-12);
  EXPECT_EQ(z2->zeroGatherSeconds, 0);
  EXPECT_NEAR(z3->zeroReduceScatterSeconds, m * scatter, 1e-12);
  EXPECT_NEAR(z3->zeroGatherSeconds, 2 * m * gather, 1e-12);
  EXPECT_EQ(z3->dpGatherSeconds, 0);
  EXPECT_GT(z3->stepSeconds, z2->stepSeconds);
  // Without reshard after forward the backward reads the forward's copies: one gather per
  // micro-batch, not two.
  Layout keep = dataParallel(8, 3);
  keep.reshardAfterForward = false;
  auto k3 = est.estimate(keep, &why);
  ASSERT_TRUE(k3) << why;
  EXPECT_NEAR(k3->zeroGatherSeconds, m * gather, 1e-12);
  EXPECT_NEAR(k3->zeroReduceScatterSeconds, z3->zeroReduceScatterSeconds, 1e-12);
  EXPECT_LT(k3->stepSeconds, z3->stepSeconds);
}

// Reshard after forward off (issue 31): every gathered parameter of the stage lives from its
// forward use to its backward one, so the rank holds the stage's whole parameters (bf16: 2 bytes
// each) beside the shards, in the workspace, instead of one gathered unit (two with prefetch)
// that is dead at the backward's peak; the state is the same. It needs zero 3 and one chunk.
TEST(ZeroCostTest, KeepingGatheredParametersCostsTheWholeStage) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  for (const char *name : {"megac", "megatron-core", "megatron-2021"}) {
    SCOPED_TRACE(name);
    StepEstimator est(s, c, 64, stack(name));
    std::string why;
    Layout keep = dataParallel(8, 3);
    keep.reshardAfterForward = false;
    auto on = est.memory(dataParallel(8, 3), &why), off = est.memory(keep, &why);
    auto z0 = est.memory(dataParallel(8, 0), &why);
    ASSERT_TRUE(on && off && z0) << why;
    double whole = z0->parameterBytes; // the stage's parameters, bf16
    EXPECT_DOUBLE_EQ(est.gatheredParameterBytes(keep), whole);
    EXPECT_DOUBLE_EQ(off->activationBytes, on->activationBytes);
    // The whole copy replaces the gathered units in flight (megac's arena: dead at the
    // backward's peak, so counted only above its transient).
    double grown = off->totalBytes - on->totalBytes;
    EXPECT_GE(grown, whole - est.gatheredParameterBytes(dataParallel(8, 3)));
    EXPECT_LE(grown, whole);
    // megac counts them in the workspace (StackProfile::shardedBuffersInArena), the state as is.
    if (stack(name).shardedBuffersInArena) {
      EXPECT_DOUBLE_EQ(off->parameterBytes + off->gradientBytes + off->optimizerBytes,
                       on->parameterBytes + on->gradientBytes + on->optimizerBytes);
    }
  }
  StepEstimator est(s, c, 64, stack("megac"));
  std::string why;
  for (auto [zero, pp] : {std::pair{2, 1}, {3, 2}}) {
    Layout l{1, pp, 8 / pp, 1, 1, false, zero, Recompute::none, Precision::bf16};
    l.reshardAfterForward = false;
    EXPECT_FALSE(est.memory(l, &why));
    EXPECT_NE(why.find("reshard-after-forward off"), std::string::npos) << why;
    EXPECT_NE(why.find("zero " + std::to_string(zero) + ", pp " + std::to_string(pp)),
              std::string::npos)
        << why;
  }
}

// The search tries both settings for zero 3 at pp 1. Keeping the forward's gathers costs memory
// only, so it is taken where it fits and saves at least 1% of the step: on a blocking stack
// (every backward gather exposed) it does; behind megac's prefetch the backward's gathers are
// mostly hidden and the tie goes to re-gathering (megac with --overlap on: its prefetch is in
// plans compiled with the latency-hiding schedule). Pinned, the pin.
TEST(ZeroCostTest, SearchChoosesReshardAfterForward) {
  StackProfile megac = stack("megac");
  megac.latencyHiding = true;
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  Pins pins;
  pins.zero = 3;
  pins.tp = 1;
  pins.pp = 1;
  pins.cp = 1;
  SearchResult blocking = search(s, c, 64, pins, 3, stack("megatron-2021"));
  ASSERT_FALSE(blocking.best.empty()) << blocking.why;
  EXPECT_FALSE(blocking.best.front().layout.reshardAfterForward);
  SearchResult r = search(s, c, 64, pins, 3, megac);
  ASSERT_FALSE(r.best.empty()) << r.why;
  const PlanCandidate &win = r.best.front();
  EXPECT_TRUE(win.layout.reshardAfterForward);
  Layout keep = win.layout;
  keep.reshardAfterForward = false;
  std::string why;
  std::optional<StepCost> kept = estimate(s, c, 64, keep, &why, megac);
  ASSERT_TRUE(kept) << why;
  EXPECT_TRUE(kept->fits);
  EXPECT_LE(kept->stepSeconds, win.cost.stepSeconds);
  EXPECT_GT(kept->stepSeconds, 0.99 * win.cost.stepSeconds);
  EXPECT_GT(kept->totalBytes, win.cost.totalBytes);
  pins.reshardAfterForward = false;
  SearchResult pinned = search(s, c, 64, pins, 3, megac);
  ASSERT_FALSE(pinned.best.empty()) << pinned.why;
  for (const PlanCandidate &p : pinned.best)
    EXPECT_FALSE(p.layout.reshardAfterForward);
}

// Prefetching stacks hide a layer's gather behind the neighbouring layer's compute: at most
// the whole collective, at least one layer's share of it, per pass.
TEST(ZeroCostTest, PrefetchHidesGathersBehindCompute) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  std::string why;
  StepEstimator core(s, c, 64, stack("megatron-core"));
  auto z0 = core.memory(dataParallel(8, 0), &why);
  auto z3 = core.estimate(dataParallel(8, 3), &why);
  ASSERT_TRUE(z0 && z3) << why;
  double gather = collectiveSeconds(c, Collective::allGather, 8, 1, z0->parameterBytes);
  const int m = 8;
  EXPECT_LT(z3->zeroGatherSeconds, 2 * m * gather);
  EXPECT_GE(z3->zeroGatherSeconds, 2 * m * gather / 24 - 1e-12);
}

// megac with --overlap on (overlapShardedGradReduce; e2e_zero_prefetch_plan reads it from
// compiled plans): each micro-batch's reduce-scatters run under the rest of the backward, and
// the function's last one, the embedding table's (its gradient is final last; larger than a
// block's here), is exposed: at least m of those, at most the whole m x scatter the blocking
// form charges. The flag changes nothing on a stack that hides them by overlapGradReduce.
TEST(ZeroCostTest, MegacHidesReduceScattersBehindTheBackward) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = cluster("h100-sxm:1x8");
  std::string why;
  StackProfile megac = stack("megac");
  megac.latencyHiding = true; // --overlap on: the plans e2e_zero_prefetch_plan reads
  StackProfile blocking = megac;
  ASSERT_TRUE(megac.overlapShardedGradReduce);
  blocking.overlapShardedGradReduce = false;
  const int m = 64 / 8;
  double table = collectiveSeconds(c, Collective::reduceScatter, 8, 1, 51200.0 * 2048 * 4);
  for (int zero : {2, 3}) {
    SCOPED_TRACE(zero);
    auto on = StepEstimator(s, c, 64, megac).estimate(dataParallel(8, zero), &why);
    auto off = StepEstimator(s, c, 64, blocking).estimate(dataParallel(8, zero), &why);
    auto z0 = StepEstimator(s, c, 64, megac).memory(dataParallel(8, 0), &why);
    ASSERT_TRUE(on && off && z0) << why;
    double scatter = collectiveSeconds(c, Collective::reduceScatter, 8, 1,
                                       z0->parameterBytes / 2 * 4); // fp32 gradients
    EXPECT_NEAR(off->zeroReduceScatterSeconds, m * scatter, 1e-12);
    EXPECT_LT(on->zeroReduceScatterSeconds, off->zeroReduceScatterSeconds);
    EXPECT_GE(on->zeroReduceScatterSeconds, m * table * (1 - 1e-12));
    EXPECT_LT(on->stepSeconds, off->stepSeconds);
  }
  // ZeRO-3's backward regathers share the link: without them (reshard after forward off) no
  // more of the reduce-scatters is exposed.
  Layout keep = dataParallel(8, 3);
  keep.reshardAfterForward = false;
  auto kept = StepEstimator(s, c, 64, megac).estimate(keep, &why);
  auto regathered = StepEstimator(s, c, 64, megac).estimate(dataParallel(8, 3), &why);
  ASSERT_TRUE(kept && regathered) << why;
  EXPECT_LE(kept->zeroReduceScatterSeconds, regathered->zeroReduceScatterSeconds);
  StackProfile core = stack("megatron-core"), coreWith = core;
  coreWith.overlapShardedGradReduce = true;
  auto a = StepEstimator(s, c, 64, core).estimate(dataParallel(8, 2), &why);
  auto b = StepEstimator(s, c, 64, coreWith).estimate(dataParallel(8, 2), &why);
  ASSERT_TRUE(a && b) << why;
  EXPECT_EQ(a->zeroReduceScatterSeconds, b->zeroReduceScatterSeconds);
}

// Issue 31: a 70B model on 64 H100 without tp or pp does not fit at zero 0 or 1 (6 bytes of
// parameters and gradients per parameter: ~420 GB), and fits at zero 3.
TEST(ZeroCostTest, Llama70BOn64H100WithoutTpPpNeedsZeroThree) {
  TransformerShape s = llama31_70b(8192);
  Cluster c = cluster("h100-sxm:8x8");
  for (int zero : {0, 1}) {
    Pins pins;
    pins.tp = 1;
    pins.pp = 1;
    pins.cp = 1;
    pins.zero = zero;
    SearchResult r = search(s, c, 128, pins, 3, stack("megac"));
    EXPECT_TRUE(r.best.empty()) << "zero " << zero;
    ASSERT_TRUE(r.smallestMemory);
    EXPECT_GT(r.smallestMemory->cost.parameterBytes + r.smallestMemory->cost.gradientBytes, 80e9);
  }
  Pins pins;
  pins.tp = 1;
  pins.pp = 1;
  pins.cp = 1;
  SearchResult r = search(s, c, 128, pins, 3, stack("megac"));
  ASSERT_FALSE(r.best.empty()) << r.why;
  EXPECT_EQ(r.best.front().layout.zero, 3);
  EXPECT_TRUE(r.best.front().cost.fits);
  // Keeping the forward's gathers would hold all 70B parameters whole (140 GB in bf16): the
  // search re-gathers for the backward.
  EXPECT_TRUE(r.best.front().layout.reshardAfterForward);
}

// `megac plan` for Llama-3.1-8B on 8 H100 (seq 8192, global batch 128) evaluates zero-3 layouts
// and keeps the best of them to compare with #1.
TEST(ZeroCostTest, SearchKeepsTheBestZeroThreeLayout) {
  TransformerShape s = llama31_8b(8192);
  Cluster c = cluster("h100-sxm:1x8");
  for (const char *name : {"megac", "megatron-core"}) {
    SCOPED_TRACE(name);
    SearchResult r = search(s, c, 128, Pins{}, 5, stack(name));
    ASSERT_FALSE(r.best.empty());
    ASSERT_TRUE(r.bestZero3);
    EXPECT_EQ(r.bestZero3->layout.zero, 3);
    EXPECT_TRUE(r.bestZero3->cost.fits);
    EXPECT_LE(r.best.front().cost.stepSeconds, r.bestZero3->cost.stepSeconds);
  }
}

// ---- context parallelism -----------------------------------------------------------------

// cp 2 halves every rank's tokens: megac keeps activations linear in the sequence (no s x s
// term, no statistics), so they halve exactly; the all-gather-kv variant adds the whole
// sequence's K/V pair of one layer ([b, S, kv heads, d] twice) to the workspace.
TEST(CpCostTest, ActivationsSplitAndGatheredKvInFlight) {
  TransformerShape s = llama31_8b(8192);
  Cluster c = cluster("h100-sxm:1x8");
  StackProfile megac = stack("megac");
  StepEstimator est(s, c, 128, megac);
  std::string why;
  // zero 0: megac's stack runs cp without ZeRO.
  auto one = est.memory(dataParallel(8, 0), &why), two = est.memory(dataParallel(4, 0, 2), &why);
  ASSERT_TRUE(one && two) << why;
  EXPECT_NEAR(two->activationBytes, one->activationBytes / 2, 1e-9 * one->activationBytes);
  double reserved = c.device.reservedBytes;
  double none = layerActivationBytes(s, 1, 1, false, Recompute::none, Precision::bf16, &megac);
  double logits2 = (one->workspaceBytes - reserved - none) / 2; // fp32 logits + gradient, halved
  double kv = two->workspaceBytes - reserved - none / 2 - logits2;
  EXPECT_NEAR(kv, 2.0 * 8192 * 8 * 128 * 2, 1.0);
}

// Each cp rank does 1/cp of the causal work (load-balanced chunks); the rest of the block runs on
// seq/cp tokens.
TEST(CpCostTest, AttentionIsOneCpthOfTheCausalWork) {
  TransformerShape s = llama31_8b(8192);
  Cluster c = cluster("h100-sxm:1x8");
  StepEstimator est(s, c, 128, stack("megac"));
  const LayerCost &one = est.layerCost(1, 1, false, Precision::bf16, 1, 1);
  const LayerCost &four = est.layerCost(1, 1, false, Precision::bf16, 1, 4);
  EXPECT_NEAR(four.forward.compute.attention, one.forward.compute.attention / 4, 1e-15);
  EXPECT_NEAR(four.backward.compute.attention, one.backward.compute.attention / 4, 1e-15);
  EXPECT_LT(four.forward.compute.gemm, 0.3 * one.forward.compute.gemm);
  EXPECT_EQ(one.forward.cp, 0);
}

// megac: K/V all-gathered over cp before the core, forward and backward, dK/dV reduce-scattered
// (blocking). Megatron-Core: a ring of cp - 1 K/V blocks forward, 2(cp - 1) backward, each
// exposed only by what it outlasts of one ring step's attention. cp ranks sit tp apart: inside a
// node while tp·cp <= 8.
TEST(CpCostTest, ExchangePerStackAndPlacement) {
  TransformerShape s = llama31_8b(8192);
  Cluster c = cluster("h100-sxm:2x8");
  double pair = 2.0 * 8192 * 8 * 128 * 2; // K and V of the whole sequence, bf16, 8 kv heads
  StepEstimator megac(s, c, 128, stack("megac"));
  const LayerCost &m = megac.layerCost(1, 1, false, Precision::bf16, 1, 2);
  double gather = collectiveSeconds(c, Collective::allGather, 2, 1, pair);
  EXPECT_NEAR(m.forward.cp, gather, 1e-15);
  EXPECT_NEAR(m.backward.cp, gather + collectiveSeconds(c, Collective::reduceScatter, 2, 1, pair),
              1e-15);
  // tp 8 x cp 2 puts the two cp ranks on different nodes: InfiniBand instead of NVLink.
  EXPECT_EQ(placeGroup(c, 2, 1).nodes, 1);
  EXPECT_EQ(placeGroup(c, 2, 8).nodes, 2);
  const LayerCost &across = megac.layerCost(8, 1, true, Precision::bf16, 1, 2);
  double kvAcross = 2.0 * 8192 * 1 * 128 * 2; // one kv head per tp rank
  EXPECT_NEAR(across.forward.cp, collectiveSeconds(c, Collective::allGather, 2, 8, kvAcross),
              1e-15);
  EXPECT_GT(across.forward.cp / kvAcross, m.forward.cp / pair);

  StepEstimator core(s, c, 128, stack("megatron-core"));
  for (int64_t cp : {2, 4}) {
    const LayerCost &r = core.layerCost(1, 1, false, Precision::bf16, 1, cp);
    double transfer = p2pSeconds(c, false, pair / double(cp));
    double hiddenF = r.forward.compute.attention / double(cp);
    double hiddenB = r.backward.compute.attention / double(cp);
    EXPECT_NEAR(r.forward.cp, double(cp - 1) * std::max(0.0, transfer - hiddenF), 1e-15);
    EXPECT_NEAR(r.backward.cp, 2.0 * double(cp - 1) * std::max(0.0, transfer - hiddenB), 1e-15);
    EXPECT_LE(r.forward.cp, double(cp - 1) * transfer);
  }
}

TEST(CpCostTest, InvalidCpSaysWhy) {
  Cluster c = cluster("h100-sxm:1x8");
  std::string why;
  TransformerShape odd = llama31_8b(8190);
  EXPECT_FALSE(estimate(odd, c, 128, dataParallel(4, 0, 2), &why, stack("megac")));
  EXPECT_NE(why.find("2*cp = 4"), std::string::npos) << why;
  TransformerShape s = llama31_8b(8192);
  EXPECT_FALSE(estimate(s, c, 128, dataParallel(4, 0, 2), &why, stack("megatron-2021")));
  EXPECT_NE(why.find("no context parallelism"), std::string::npos) << why;
  EXPECT_FALSE(estimate(s, c, 128, dataParallel(8, 0, 2), &why, stack("megac")));
  EXPECT_NE(why.find("tp*cp*pp*dp = 16"), std::string::npos) << why;
  // The search never offers cp on a stack without it.
  SearchResult r = search(s, c, 128, Pins{}, 50, stack("megatron-2021"));
  for (const PlanCandidate &p : r.best)
    EXPECT_EQ(p.layout.cp, 1);
}

// The published Megatron-Core/NeMo BF16 layouts of Llama 3.1 8B and 70B at sequence 8192 (both
// cp 2, distributed optimizer) are valid, pinned, on Megatron-Core's stack (megac's refuses cp
// with ZeRO or pp, as its compiler does, naming them); the 70B
// one fits. The 8B one (no tp or pp) is predicted at ~86 GB, over the 80 GB: the model charges
// an fp32 gradient buffer (32 GB: Megatron's default for bf16, --accumulate-allreduce-grads-in-
// fp32) and fp32 logits with their gradient (4.2 GB); the published run used NeMo's settings,
// which we could not check (docs/planner.md, Known gaps).
TEST(CpCostTest, PublishedLayoutsPlanPinned) {
  struct Run {
    TransformerShape shape;
    const char *cluster;
    Layout layout;
    bool fits;
  } runs[] = {
      {llama31_8b(8192), "h100-sxm:1x8",
       Layout{1, 1, 4, 1, 1, false, 1, Recompute::none, Precision::bf16}, false},
      {llama31_70b(8192), "h100-sxm:8x8",
       Layout{4, 4, 2, 5, 1, true, 1, Recompute::none, Precision::bf16}, true},
  };
  for (Run &run : runs) {
    run.layout.cp = 2;
    for (const char *name : {"megac", "megatron-core"}) {
      SCOPED_TRACE(std::string(run.cluster) + " " + name);
      std::string why;
      auto cost = estimate(run.shape, cluster(run.cluster), 128, run.layout, &why, stack(name));
      ASSERT_TRUE(cost) << why; // megac composes cp with pp and ZeRO as its compiler does
      if (std::string(name) == "megatron-core") // the published runs' own stack
        EXPECT_EQ(cost->fits, run.fits)
            << cost->totalBytes / 1e9 << " GB: parameters " << cost->parameterBytes / 1e9
            << ", gradients " << cost->gradientBytes / 1e9 << ", optimizer "
            << cost->optimizerBytes / 1e9 << ", activations " << cost->activationBytes / 1e9
            << ", workspace " << cost->workspaceBytes / 1e9;
      // megac's all-gather-kv blocks; Megatron-Core's ring may hide entirely behind attention.
      if (std::string(name) == "megac")
        EXPECT_GT(cost->cpCommSeconds, 0);
    }
  }
}

// Llama-3.1-8B at sequence 131072 on 4 nodes of 8 H100, global batch 32: the search keeps the
// best layout with cp and the best without, and #1 is the faster of the two.
TEST(CpCostTest, LongSequenceComparesCpWithout) {
  TransformerShape s = llama31_8b(131072);
  Cluster c = cluster("h100-sxm:4x8");
  for (const char *name : {"megac", "megatron-core"}) {
    SCOPED_TRACE(name);
    SearchResult r = search(s, c, 32, Pins{}, 5, stack(name));
    ASSERT_FALSE(r.best.empty());
    ASSERT_TRUE(r.bestWithCp);
    EXPECT_GT(r.bestWithCp->layout.cp, 1);
    double best = r.bestWithCp->cost.stepSeconds;
    if (r.bestWithoutCp) {
      EXPECT_EQ(r.bestWithoutCp->layout.cp, 1);
      best = std::min(best, r.bestWithoutCp->cost.stepSeconds);
    }
    EXPECT_DOUBLE_EQ(r.best.front().cost.stepSeconds, best);
  }
}

// The explain classes still sum to the step with cp and ZeRO-3's in-layer collectives.
TEST(CpCostTest, ExplainClassesSumToTheStepWithCpAndZero3) {
  TransformerShape s = llama31_8b(8192);
  Cluster c = cluster("h100-sxm:2x8");
  for (const char *name : {"megac", "megatron-core"}) {
    SCOPED_TRACE(name);
    bool megac = std::string(name) == "megac";
    // megac runs cp with tp and dp only: its cp and ZeRO-3 collectives in two layouts.
    Layout l{2, 2, megac ? 4 : 2, 2, 1, true, 3, Recompute::selective, Precision::bf16};
    l.cp = megac ? 1 : 2;
    Layout cpOnly{2, 1, 4, 1, 1, true, 0, Recompute::selective, Precision::bf16};
    cpOnly.cp = 2;
    for (const Layout &layout : {l, cpOnly}) {
      std::string why;
      auto cost = estimate(s, c, 64, layout, &why, stack(name));
      ASSERT_TRUE(cost) << why;
      double sum = cost->gemmSeconds + cost->attentionSeconds + cost->memoryBoundSeconds +
                   cost->overheadSeconds + cost->tpAllReduceSeconds + cost->tpAllGatherSeconds +
                   cost->tpReduceScatterSeconds + cost->epCommSeconds + cost->cpCommSeconds +
                   cost->zeroGatherSeconds + cost->zeroReduceScatterSeconds + cost->ppCommSeconds +
                   cost->dpReduceSeconds + cost->dpGatherSeconds + cost->bubbleSeconds;
      EXPECT_NEAR(sum, cost->stepSeconds, 1e-9 * cost->stepSeconds);
      if (layout.cp > 1 && megac)
        EXPECT_GT(cost->cpCommSeconds, 0);
      if (layout.zero == 3) {
        EXPECT_GT(cost->zeroGatherSeconds, 0);
        EXPECT_GT(cost->zeroReduceScatterSeconds, 0);
      }
    }
  }
}

} // namespace
} // namespace megac::planner
