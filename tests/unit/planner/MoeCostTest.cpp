// The planner's mixture-of-experts pieces (docs/moe.md, "Planner") against hand calculations:
// total and active counts, active FLOPs for MFU, the all-to-all, expert memory split over ep,
// the routed activations, the expert GEMMs and token exchange of a block, validation and ep in
// the search.
#include "planner/CostModel.h"

#include <gtest/gtest.h>

#include <cmath>

namespace megac::planner {
namespace {

Cluster cluster(const std::string &text) {
  std::string error;
  std::optional<Cluster> c = parseCluster(text, &error);
  EXPECT_TRUE(c) << error;
  return c.value_or(Cluster{});
}

/// Mixtral-8x7B: 32 layers, h 4096, 32 heads, 8 kv heads, ffn 14336, 8 experts, top-2, V 32000.
TransformerShape mixtral8x7b() {
  TransformerShape s;
  s.name = "mixtral-8x7b";
  s.layers = 32;
  s.hidden = 4096;
  s.heads = 32;
  s.kvHeads = 8;
  s.ffn = 14336;
  s.vocab = 32000;
  s.seq = 4096;
  s.gatedMlp = true;
  s.rope = true;
  s.biases = false;
  s.tiedEmbedding = false;
  s.experts = 8;
  s.topk = 2;
  s.parameters = 46702792704; // l(2h² + 2hgd + Eh + 3Ehf + 2h) + 2Vh + h
  return s;
}

StackProfile stack(const std::string &name) { return *stackProfile(name, false); }

double gemmFlops(const std::vector<KernelOp> &ops) {
  double flops = 0;
  for (const KernelOp &op : ops)
    if (op.kind == KernelClass::gemm)
      flops += 2.0 * double(op.m) * double(op.n) * double(op.k) * double(op.batch) * op.count;
  return flops;
}

TEST(MoeCostTest, TotalAndActiveCountsMatchTheClosedForm) {
  TransformerShape s = mixtral8x7b();
  double h = 4096, d = 128, g = 8, f = 14336, E = 8, k = 2;
  EXPECT_DOUBLE_EQ(expertParameters(s), E * 3 * h * f); // 1,409,286,144
  EXPECT_DOUBLE_EQ(layerParameters(s), 2 * h * h + 2 * h * g * d + E * h + 3 * E * h * f + 2 * h);
  EXPECT_DOUBLE_EQ(activeLayerParameters(s),
                   2 * h * h + 2 * h * g * d + E * h + 3 * k * h * f + 2 * h);
  EXPECT_DOUBLE_EQ(32 * layerParameters(s) + nonLayerParameters(s), 46702792704.0);
  // 12.9B active: 32 · 394,305,536 + 2 · 32000 · 4096 + 4096.
  EXPECT_DOUBLE_EQ(32 * activeLayerParameters(s) + nonLayerParameters(s), 12879925248.0);
  // A dense model has no experts, and all its parameters are active.
  TransformerShape dense = s;
  dense.experts = dense.topk = 0;
  EXPECT_EQ(expertParameters(dense), 0);
  EXPECT_DOUBLE_EQ(activeLayerParameters(dense), layerParameters(dense));
}

TEST(MoeCostTest, ModelFlopsCountTheActiveExpertsOnly) {
  TransformerShape s = mixtral8x7b();
  double l = 32, h = 4096, d = 128, g = 8, f = 14336, E = 8, k = 2, sq = 4096, V = 32000;
  // Per sample: attention projections 2·s·(2h² + 2hgd), router 2·s·h·E, k experts
  // 2·s·k·3hf, attention core 4·s²·h; the logits 2·s·h·V. Training: 3x.
  double forward = l * (2 * sq * (2 * h * h + 2 * h * g * d) + 2 * sq * h * E +
                        2 * sq * k * 3 * h * f + 4 * sq * sq * h) +
                   2 * sq * h * V;
  EXPECT_DOUBLE_EQ(modelFlopsPerStep(s, 1), 3 * forward);
  // = 6 · (active parameters without the embedding and norms) · tokens + attention.
  double activeMatrices = l * (2 * h * h + 2 * h * g * d + E * h + 3 * k * h * f) + V * h;
  EXPECT_DOUBLE_EQ(modelFlopsPerStep(s, 1), 6 * activeMatrices * sq + 12 * l * sq * sq * h);
}

TEST(MoeCostTest, AllToAllCostsWhatTheLinksCarry) {
  Cluster c = cluster("h100-sxm:4x8");
  const DeviceSpec &d = c.device;
  double nvlink = d.intraNodeBandwidth * d.linkEfficiency;
  double ib = d.interNodeBandwidth * d.linkEfficiency;
  double bytes = 64e6;
  // ep 8 inside a node (stride 1): each rank sends 7/8 of its bytes on NVLink.
  EXPECT_DOUBLE_EQ(collectiveSeconds(c, Collective::allToAll, 8, 1, bytes),
                   7.0 / 8 * bytes / nvlink + 7 * d.intraNodeLatency);
  // ep 4 one rank per node (stride 8): 3/4 of the bytes over InfiniBand.
  EXPECT_DOUBLE_EQ(collectiveSeconds(c, Collective::allToAll, 4, 8, bytes),
                   3.0 / 4 * bytes / ib + 3 * d.interNodeLatency);
  // ep 16 over two nodes of 8: half the bytes leave the node (each GPU on its own NIC) while
  // 7/16 go over NVLink; the slower side.
  double inter = 8.0 / 16 * bytes / ib + 8 * d.interNodeLatency;
  double intra = 7.0 / 16 * bytes / nvlink + 7 * d.intraNodeLatency;
  EXPECT_DOUBLE_EQ(collectiveSeconds(c, Collective::allToAll, 16, 1, bytes),
                   std::max(inter, intra));
  EXPECT_EQ(collectiveSeconds(c, Collective::allToAll, 1, 1, bytes), 0);
}

TEST(MoeCostTest, ExpertMemoryIsSplitOverEp) {
  // 8 H100s, tp 1, pp 1, dp 8, ZeRO-1, bf16 (2 + 4 bytes, 12 of optimizer state per parameter).
  TransformerShape s = mixtral8x7b();
  Cluster c = cluster("h100-sxm:1x8");
  double experts = 32 * expertParameters(s), total = 46702792704.0, dense = total - experts;
  for (int64_t ep : {1, 2, 8}) {
    Layout l{1, 1, 8, 1, 1, false, 1, Recompute::full, Precision::bf16};
    l.ep = ep;
    StepEstimator estimator(s, c, 64, stack("megatron-core"));
    std::string why;
    std::optional<StepCost> m = estimator.memory(l, &why);
    ASSERT_TRUE(m) << why;
    // Each rank holds the dense parameters and E/ep of every layer's experts; the experts'
    // optimizer state is sharded over the dp/ep ranks that hold the same experts.
    double local = dense + experts / double(ep);
    EXPECT_DOUBLE_EQ(m->parameterBytes, 2 * local) << "ep " << ep;
    EXPECT_DOUBLE_EQ(m->gradientBytes, 4 * local) << "ep " << ep;
    EXPECT_DOUBLE_EQ(m->optimizerBytes,
                     12 * dense / 8 + 12 * (experts / double(ep)) / double(8 / ep))
        << "ep " << ep;
  }
}

// megac shards every parameter's optimizer state over the mesh's dp axis (dp/ep ranks): the
// dense parameters' state is then split dp/ep ways, not dp ways; ZeRO-1 with ep = dp is refused.
TEST(MoeCostTest, MegacShardsZeroOverTheDpAxisOfTheMesh) {
  TransformerShape s = mixtral8x7b();
  Cluster c = cluster("h100-sxm:1x8");
  double experts = 32 * expertParameters(s), dense = 46702792704.0 - experts;
  StepEstimator estimator(s, c, 64, *stackProfile("megac", true));
  Layout l{1, 1, 8, 1, 1, false, 1, Recompute::full, Precision::bf16};
  l.ep = 4;
  std::string why;
  std::optional<StepCost> m = estimator.memory(l, &why);
  ASSERT_TRUE(m) << why;
  EXPECT_DOUBLE_EQ(m->optimizerBytes, 12 * dense / 2 + 12 * (experts / 4) / 2);
  l.ep = 8;
  EXPECT_FALSE(estimator.memory(l, &why));
  EXPECT_EQ(why, "zero 1 with ep = dp = 8 shards nothing on megac (its optimizer state is "
                 "sharded over dp/ep ranks); use zero 0");
}

TEST(MoeCostTest, RoutedActivationsByHand) {
  TransformerShape s = mixtral8x7b();
  double sbh = 4096.0 * 4096; // s·b·h at micro-batch 1
  double h = 4096, fh = 14336.0 / 4096, E = 8, k = 2, g = 8.0 / 32, t = 2;
  // Dense part of Korthikanti's count without the MLP's fc tensors, generalised (CostModel.cpp):
  // attention 7 + 4g, norms 4, MLP input and mask 3. Both stacks' attention keeps no scores;
  // Megatron-Core's flash kernel keeps each row's fp32 logsumexp, [b, a/t, s].
  double attention = (7 + 4 * g) + 4 + 3, lse = 4.0 * 32 / t * 4096;
  double router = 12 * E / h;
  // Megatron-Core (packed rows, experts split over tp), tp 2 with SP, no recompute: the router
  // and the experts' ffn tensors split over tp, X and Y (4 per routed row) whole.
  double megatron = attention / t + router / t + k * 6 * fh / t + k * 4;
  StackProfile core = stack("megatron-core");
  EXPECT_DOUBLE_EQ(layerActivationBytes(s, 1, 2, true, Recompute::none, Precision::bf16, &core),
                   sbh * megatron + lse);
  // megac: [E, T, h] routed buffers (E rows a token), whole experts on each rank's sequence
  // shard: everything split over tp under SP.
  double megac = attention / t + (router + E * 6 * fh + E * 4) / t;
  StackProfile own = stack("megac");
  EXPECT_DOUBLE_EQ(layerActivationBytes(s, 1, 2, true, Recompute::none, Precision::bf16, &own),
                   sbh * megac);
  EXPECT_DOUBLE_EQ(layerActivationBytes(s, 1, 2, true, Recompute::none, Precision::bf16),
                   sbh * megac); // nullptr: megac's layout
}

TEST(MoeCostTest, BlockKernelsRouteTopkRowsAndExchangeTokens) {
  TransformerShape s = mixtral8x7b();
  double T = 4096, h = 4096, f = 14336, E = 8, k = 2, gd = 8 * 128;
  double attentionGemms = 2 * T * (2 * h * h + 2 * h * gd);
  double router = 2 * T * h * E, experts = 2 * T * k * 3 * h * f;
  // Megatron-Core, tp 1, ep 8: the experts compute T·k rows whatever ep is (balanced routing),
  // in grouped GEMMs over the rank's E/ep experts; dispatch and combine are all-to-alls of the
  // rank's T·k rows of h, forward and backward.
  for (int64_t ep : {1, 8}) {
    LayerGeometry g{1, 1, false, Precision::bf16, ep};
    BlockKernels b = blockKernels(s, g, stack("megatron-core"));
    EXPECT_DOUBLE_EQ(gemmFlops(b.forward.kernels), attentionGemms + router + experts)
        << "ep " << ep;
    EXPECT_DOUBLE_EQ(gemmFlops(b.backward.kernels), 2 * (attentionGemms + router + experts))
        << "ep " << ep;
    // The weight-gradient GEMMs (a zero-bubble schedule's W, issue 35): one dW per forward GEMM,
    // the experts' grouped ones and the router's included.
    std::vector<KernelOp> weight;
    for (const KernelOp &op : b.backward.kernels)
      if (op.weightGradient && op.kind == KernelClass::gemm)
        weight.push_back(op);
    EXPECT_DOUBLE_EQ(gemmFlops(weight), attentionGemms + router + experts) << "ep " << ep;
    ASSERT_EQ(b.forward.ep.size(), ep > 1 ? 2u : 0u);
    ASSERT_EQ(b.backward.ep.size(), ep > 1 ? 2u : 0u);
    for (const CommOp &op : b.forward.ep) {
      EXPECT_EQ(op.kind, Collective::allToAll);
      EXPECT_DOUBLE_EQ(op.bytes, T * k * h * 2);
    }
    EXPECT_TRUE(b.forward.tp.empty());
  }
  // megac (its CPU runtime has expert parallelism), ep 4: the same expert rows; the group's
  // [T, E] routing all-gathered first (model element type), then the routed rows exchanged
  // both ways by all-to-all (moe_exchange), forward and backward.
  {
    LayerGeometry g{1, 1, false, Precision::bf16, 4};
    StackProfile cpu = *stackProfile("megac", true);
    BlockKernels b = blockKernels(s, g, cpu);
    EXPECT_DOUBLE_EQ(gemmFlops(b.forward.kernels), attentionGemms + router + experts);
    ASSERT_EQ(b.forward.ep.size(), 3u);
    EXPECT_EQ(b.forward.ep[0].kind, Collective::allGather);
    EXPECT_DOUBLE_EQ(b.forward.ep[0].bytes, 4 * T * E * 2);
    for (int i : {1, 2}) {
      EXPECT_EQ(b.forward.ep[i].kind, Collective::allToAll);
      EXPECT_DOUBLE_EQ(b.forward.ep[i].bytes, T * k * h * 2);
    }
    ASSERT_EQ(b.backward.ep.size(), 2u);
    EXPECT_EQ(b.backward.ep[0].kind, Collective::allToAll);
    // The all-gather dispatcher (the partitioner's fallback): the ep group's 4·T tokens (and
    // fp32 routing weights) gathered before the dispatch, the combine's partial sums
    // reduce-scattered after, adjoints in the backward.
    cpu.allToAllDispatch = false;
    b = blockKernels(s, g, cpu);
    ASSERT_EQ(b.forward.ep.size(), 3u);
    EXPECT_EQ(b.forward.ep[0].kind, Collective::allGather);
    EXPECT_DOUBLE_EQ(b.forward.ep[0].bytes, 4 * T * h * 2);
    EXPECT_EQ(b.forward.ep[1].kind, Collective::allGather);
    EXPECT_DOUBLE_EQ(b.forward.ep[1].bytes, 4 * T * E * 4);
    EXPECT_EQ(b.forward.ep[2].kind, Collective::reduceScatter);
    EXPECT_DOUBLE_EQ(b.forward.ep[2].bytes, 4 * T * h * 2);
    ASSERT_EQ(b.backward.ep.size(), 2u);
    EXPECT_EQ(b.backward.ep[0].kind, Collective::allGather);
    EXPECT_EQ(b.backward.ep[1].kind, Collective::reduceScatter);
  }
  // megac, tp 2 with SP: whole experts on each rank's T/2 tokens; the router column-parallel
  // over the experts on the gathered tokens (as megac compiles it: the norm's output and the
  // logits all-gathered over tp), besides the attention's all-gather and reduce-scatter.
  LayerGeometry g{2, 1, true, Precision::bf16};
  BlockKernels b = blockKernels(s, g, stack("megac"));
  EXPECT_DOUBLE_EQ(gemmFlops(b.forward.kernels), (attentionGemms + router + experts) / 2);
  ASSERT_EQ(b.forward.tp.size(), 4u);
  EXPECT_EQ(b.forward.tp[2].kind, Collective::allGather);
  EXPECT_DOUBLE_EQ(b.forward.tp[2].bytes, T * h * 2);
  EXPECT_EQ(b.forward.tp[3].kind, Collective::allGather);
  EXPECT_DOUBLE_EQ(b.forward.tp[3].bytes, T * E * 2);
  // Megatron-Core, tp 2 with SP: the ffn split over tp, the routed rows gathered (T·k rows of
  // h, all-gathered before and reduce-scattered after the experts).
  BlockKernels core = blockKernels(s, g, stack("megatron-core"));
  EXPECT_DOUBLE_EQ(gemmFlops(core.forward.kernels), (attentionGemms + router + experts) / 2);
  ASSERT_EQ(core.forward.tp.size(), 4u);
  EXPECT_EQ(core.forward.tp[2].kind, Collective::allGather);
  EXPECT_DOUBLE_EQ(core.forward.tp[2].bytes, T * k * h * 2);
  EXPECT_EQ(core.forward.tp[3].kind, Collective::reduceScatter);
}

// A measured routing (`megac plan --moe-load`): the busiest of the ep ranks, each holding a
// contiguous block of E/ep experts, per block; summed over blocks as they run one after another.
TEST(MoeCostTest, MeasuredLoadChargesTheBusiestExpertParallelRank) {
  TransformerShape s = mixtral8x7b();
  s.layers = 2;
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 2), 1.0); // no load: balanced
  // 8 experts, 1000 rows per block. Block 0: ranks of ep 2 get 600 / 400; block 1 450 / 550.
  s.moeLoad = {{150, 150, 150, 150, 100, 100, 100, 100}, {100, 100, 100, 150, 150, 150, 125, 125}};
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 1), 1.0);
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 2), (600.0 + 550.0) / (500.0 + 500.0));
  // ep 4: pairs 300 300 200 200 (busiest 300) and 200 250 300 250 (300), mean 250 each.
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 4), (300.0 + 300.0) / (250.0 + 250.0));
  // ep 8: the busiest expert, 150 in both blocks, over 125.
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 8), 300.0 / 250.0);
  // A perfectly balanced load, and a grouping that does not divide the experts: 1.
  s.moeLoad = {{125, 125, 125, 125, 125, 125, 125, 125}, {125, 125, 125, 125, 125, 125, 125, 125}};
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 4), 1.0);
  EXPECT_DOUBLE_EQ(busiestExpertRankShare(s, 3), 1.0);
  // The block's expert GEMMs grow by that share on every rank of the layout (the busiest sets
  // the step); the rest of the block does not.
  TransformerShape balanced = mixtral8x7b();
  TransformerShape measured = balanced;
  measured.moeLoad.assign(size_t(measured.layers), {150, 150, 150, 150, 100, 100, 100, 100});
  LayerGeometry g{1, 1, false, Precision::bf16, 2};
  double T = 4096, h = 4096, f = 14336, E = 8, k = 2, gd = 8 * 128;
  double attentionGemms = 2 * T * (2 * h * h + 2 * h * gd), router = 2 * T * h * E;
  double experts = 2 * T * k * 3 * h * f;
  BlockKernels b = blockKernels(measured, g, stack("megatron-core"));
  // (to whole rows per local expert: 9830.4 rows -> 4 x 2458)
  EXPECT_NEAR(gemmFlops(b.forward.kernels), attentionGemms + router + 1.2 * experts,
              1e-3 * experts);
  EXPECT_DOUBLE_EQ(gemmFlops(blockKernels(balanced, g, stack("megatron-core")).forward.kernels),
                   attentionGemms + router + experts);
}

TEST(MoeCostTest, InvalidExpertParallelLayoutsSayWhy) {
  TransformerShape s = mixtral8x7b();
  Cluster c = cluster("h100-sxm:8x8");
  auto why = [&](int64_t dp, int64_t ep, const std::string &stackName, TransformerShape shape) {
    Layout l{1, 64 / dp, dp, 1, 1, false, 1, Recompute::full, Precision::bf16};
    l.ep = ep;
    std::string message;
    EXPECT_FALSE(estimate(shape, c, 256, l, &message, stack(stackName)));
    return message;
  };
  EXPECT_EQ(why(16, 3, "megatron-core", s),
            "ep 3 does not divide dp 16 (expert parallelism is carved out of data parallelism)");
  EXPECT_EQ(why(16, 16, "megatron-core", s), "ep 16 does not divide the 8 experts");
  EXPECT_EQ(why(16, 8, "megatron-2021", s),
            "the megatron-2021 stack has no expert parallelism; use ep 1");
  // megac's CUDA runtime has no all-to-all-v yet (its CPU runtime has).
  EXPECT_EQ(why(16, 8, "megac", s), "the megac stack has no expert parallelism; use ep 1");
  TransformerShape dense = s;
  dense.experts = dense.topk = 0;
  EXPECT_EQ(why(16, 2, "megatron-core", dense),
            "ep 2 needs a mixture-of-experts model; mixtral-8x7b is dense");
}

TEST(MoeCostTest, SearchChoosesEpWhereTheStackHasIt) {
  TransformerShape s = mixtral8x7b();
  Cluster c = cluster("h100-sxm:8x8");
  Pins pins;
  SearchResult core = search(s, c, 256, pins, 5, stack("megatron-core"));
  ASSERT_FALSE(core.best.empty()) << core.why;
  const PlanCandidate &win = core.best.front();
  EXPECT_GT(win.layout.ep, 1) << "the experts' memory and GEMMs favour expert parallelism";
  EXPECT_EQ(win.layout.dp % win.layout.ep, 0);
  EXPECT_GT(win.cost.epCommSeconds, 0);
  // MFU from active FLOPs: the model FLOPs of a step over the step time and the peak.
  double mfu = modelFlopsPerStep(s, 256) / win.cost.stepSeconds / (64 * 989e12);
  EXPECT_LE(std::abs(win.cost.mfu - mfu), 1e-12 * mfu);
  EXPECT_NEAR(win.cost.stepSeconds,
              win.cost.computeSeconds + win.cost.tpCommSeconds + win.cost.ppCommSeconds +
                  win.cost.epCommSeconds + win.cost.bubbleSeconds + win.cost.dpCommSeconds +
                  win.cost.optimizerSeconds,
              1e-9 * win.cost.stepSeconds);
  // Without expert parallelism in the stack, every candidate has ep 1.
  SearchResult old = search(s, c, 256, pins, 5, stack("megatron-2021"));
  for (const PlanCandidate &p : old.best)
    EXPECT_EQ(p.layout.ep, 1);
  // A pinned ep is kept.
  pins.ep = 2;
  SearchResult pinned = search(s, c, 256, pins, 3, stack("megatron-core"));
  ASSERT_FALSE(pinned.best.empty()) << pinned.why;
  for (const PlanCandidate &p : pinned.best)
    EXPECT_EQ(p.layout.ep, 2);
}

} // namespace
} // namespace megac::planner
