// Per-op costing (issue 15): kernel times from calibration tables and from the datasheet, the
// stack profiles' effect on a block's kernel inventory, and the step's split by op class.
#include "planner/KernelModel.h"
#include "planner/BlockKernels.h"
#include "planner/CostModel.h"
#include "planner/OptimizerKernels.h"
#include "planner/Planner.h"

#include "tests/unit/planner/PlannerTestShapes.h"

#include <gtest/gtest.h>

#include <cmath>

namespace megac::planner {
namespace {

using testing::gpt;

StackProfile stack(const char *name, bool cpu = false) { return *stackProfile(name, cpu); }

DeviceSpec calibratedCpu() {
  DeviceSpec d = *preset("cpu");
  d.calibration.threads = 1;
  d.calibration.instructionSeconds = 1e-6;
  d.calibration.gemm = {{64, 64, 64, 4, 50e9}, {1024, 1024, 1024, 4, 100e9}};
  d.calibration.kernels = {{"gelu", 1e4, 11e-6}, {"gelu", 1e6, 501e-6}, {"copy", 1e6, 101e-6}};
  d.calibration.attention = {{8, 128, 32, true, 1e-3 + 1e-6, 2e-3 + 1e-6}};
  d.calibration.comm = {{"all_reduce", 2, 1e3, 2e-6}, {"all_reduce", 2, 1e6, 1e-3}};
  return d;
}

/// calibratedCpu() as a one-spec-per-machine calibration of 2 cores (its tables every core busy),
/// for a layout of `ranks` ranks per node with `threads` threads each.
DeviceSpec twoCoreMachine(int64_t ranks, int64_t threads) {
  DeviceSpec d = calibratedCpu();
  d.devicesPerNode = ranks;
  d.threadsPerRank = threads;
  d.calibration.ranks = 2;
  d.calibration.cores = 2;
  return d;
}

TEST(KernelModelTest, CalibratedGemmTakesTheMeasuredRateOfTheNearestShape) {
  KernelModel k(calibratedCpu(), stack("megac", true), Precision::fp32);
  // Exactly a measured shape: its rate.
  EXPECT_NEAR(k.gemmSeconds(1024, 1024, 1024, 1), 2.0 * 1024 * 1024 * 1024 / 100e9, 1e-12);
  // Between the two: a rate between them, closer to the nearer shape's.
  double rate = 2.0 * 512 * 512 * 512 / k.gemmSeconds(512, 512, 512, 1);
  EXPECT_GT(rate, 50e9);
  EXPECT_LT(rate, 100e9);
  EXPECT_GT(rate, 2.0 * 128 * 128 * 128 / k.gemmSeconds(128, 128, 128, 1));
  // Batched: batch times one.
  EXPECT_NEAR(k.gemmSeconds(64, 64, 64, 3), 3 * k.gemmSeconds(64, 64, 64, 1), 1e-15);
}

TEST(KernelModelTest, CalibratedMemoryKernelsInterpolateCallsAndSplitOffTheOverhead) {
  KernelModel k(calibratedCpu(), stack("megac", true), Precision::fp32);
  // At a measured call: its time less the instruction overhead.
  EXPECT_NEAR(k.memorySeconds(KernelClass::gelu, 1e6), 500e-6, 1e-12);
  // Halfway between the calls, linearly.
  EXPECT_NEAR(k.memorySeconds(KernelClass::gelu, 5.05e5), 255e-6, 1e-9);
  // Past the largest call: the last segment's rate (490 us per 0.99 MB).
  EXPECT_NEAR(k.memorySeconds(KernelClass::gelu, 2e6), 500e-6 + 490e-6 / 0.99, 1e-9);
  // A class without calls of its own streams like a copy.
  EXPECT_NEAR(k.memorySeconds(KernelClass::layerNorm, 1e6), 100e-6, 1e-12);
  KernelOp op;
  op.kind = KernelClass::gelu;
  op.bytes = 1e6;
  op.count = 2;
  KernelTime t = k.time(op);
  EXPECT_NEAR(t.memory, 1000e-6, 1e-12);
  EXPECT_NEAR(t.overhead, 2e-6, 1e-15);
  EXPECT_EQ(t.launches[size_t(KernelClass::gelu)], 2);
}

// megac's CPU runtime computes a half arithmetic kernel in f32 on widened copies
// (StackProfile::halfMathInF32): the f32 kernel (twice the bytes) plus one conversion of each half
// operand at the cast rate; data movement stays at half bytes, f32-operand accumulations convert
// nothing, and fp32 steps are untouched.
TEST(KernelModelTest, HalfArithmeticOnTheCpuCostsTheF32KernelAndItsConversions) {
  DeviceSpec d = calibratedCpu();
  d.calibration.kernels.push_back({"cast", 1e4, 5e-6 + 1e-6});
  d.calibration.kernels.push_back({"cast", 1e6, 400e-6 + 1e-6});
  KernelModel half(d, stack("megac", true), Precision::bf16);
  KernelModel full(d, stack("megac", true), Precision::fp32);
  KernelOp gelu;
  gelu.kind = KernelClass::gelu;
  gelu.bytes = 1e5; // half bytes: 2 per element
  double f32Kernel = 2 * full.memorySeconds(KernelClass::gelu, 1e5);
  double conversions = half.memorySeconds(KernelClass::cast, 3e5); // 2 read + 4 written, or back
  EXPECT_NEAR(half.time(gelu).memory, f32Kernel + conversions, 1e-12);
  EXPECT_NEAR(full.time(gelu).memory, full.memorySeconds(KernelClass::gelu, 1e5), 1e-15);
  KernelOp copy;
  copy.kind = KernelClass::copy;
  copy.bytes = 1e5;
  EXPECT_NEAR(half.time(copy).memory, half.memorySeconds(KernelClass::copy, 1e5), 1e-15);
  KernelOp accumulate;
  accumulate.kind = KernelClass::elementwise;
  accumulate.bytes = 1e5;
  accumulate.f32Operands = true;
  EXPECT_NEAR(half.time(accumulate).memory,
              half.memorySeconds(KernelClass::elementwise, 1e5), 1e-15);
  // A GPU stack computes half natively.
  KernelModel megatron(d, stack("megatron-core"), Precision::bf16);
  EXPECT_NEAR(megatron.time(gelu).memory, megatron.memorySeconds(KernelClass::gelu, 1e5), 1e-15);
}

// Expert products side by side (StackProfile::expertsOnKernelThreads): with at least as many
// local experts as threads, ceil(E / T) rounds of one expert's product at the single-thread
// rate of T ranks sharing the node; with fewer, the T-thread table's batched product.
TEST(KernelModelTest, ExpertProductsRunSideBySideOnTheKernelThreads) {
  DeviceSpec d = twoCoreMachine(1, 2);
  d.calibration.threads = 1; // the busy top level: 2 ranks x 1 thread
  d.calibration.gemm = {{256, 256, 256, 4, 90e9}};
  OccupancyTables alone;
  alone.name = "alone-2t";
  alone.ranks = 1;
  alone.threads = 2;
  alone.gemm = {{256, 256, 256, 4, 170e9}};
  d.calibration.occupancies = {alone};
  KernelModel k(d, stack("megac", true), Precision::fp32);
  KernelOp experts;
  experts.kind = KernelClass::gemm;
  experts.m = experts.n = experts.k = 256;
  experts.routed = true;
  double one = 2.0 * 256 * 256 * 256;
  for (int64_t e : {int64_t(2), int64_t(3), int64_t(4)}) {
    experts.batch = e;
    EXPECT_NEAR(k.time(experts).gemm, std::ceil(double(e) / 2) * one / 90e9, 1e-12) << e;
  }
  experts.batch = 1; // fewer experts than threads: BLAS's two threads in the one product
  EXPECT_NEAR(k.time(experts).gemm, one / 170e9, 1e-12);
  KernelOp dense = experts;
  dense.routed = false;
  dense.batch = 4;
  EXPECT_NEAR(k.time(dense).gemm, 4 * one / 170e9, 1e-12);
}

TEST(KernelModelTest, ColdWeightsStreamAtTheCalibratedDramRateOnlyWhereTheStateOutgrowsTheCache) {
  DeviceSpec d = twoCoreMachine(2, 1);
  d.cacheBytes = 32e6;
  // A copy's rate by working set: the cache, then main memory past 2 x 32 MB.
  d.calibration.bandwidth = {{1e6, 100e9}, {16e6, 80e9}, {256e6, 20e9}};
  KernelOp linear;
  linear.kind = KernelClass::gemm;
  linear.m = linear.n = linear.k = 1024;
  linear.coldBytes = 4e6; // a 1024 x 1024 f32 weight
  KernelModel k(d, stack("megac", true), Precision::fp32);
  const double warm = k.time(linear).gemm;
  EXPECT_NEAR(warm, 2.0 * 1024 * 1024 * 1024 / 100e9, 1e-12); // not in memory: the table alone
  k.setWeightsInMemory(true);
  EXPECT_NEAR(k.time(linear).gemm, warm + 4e6 / 20e9, 1e-12);
  // A memory-bound kernel reading a cold weight: its cold half moves at the main-memory rate
  // instead of the table's, the other half stays at the table's (charged as memory).
  KernelOp transpose;
  transpose.kind = KernelClass::transpose;
  transpose.bytes = 8e6;
  transpose.coldBytes = 4e6;
  KernelTime t = k.time(transpose);
  KernelModel warmModel(d, stack("megac", true), Precision::fp32);
  const double tableSeconds = warmModel.time(transpose).memory;
  EXPECT_NEAR(t.memory, tableSeconds / 2 + 4e6 / 20e9, 1e-12);
  EXPECT_NEAR(t.seconds[size_t(KernelClass::transpose)], t.memory, 1e-12);
  EXPECT_EQ(t.gemm, 0);
  // All of a copy's bytes cold: the main-memory rate alone, however small the copy.
  KernelOp copy;
  copy.kind = KernelClass::copy;
  copy.bytes = copy.coldBytes = 1e6;
  copy.count = 3;
  EXPECT_NEAR(k.time(copy).memory, 3 * 1e6 / 20e9, 1e-12);
  // No main-memory point (the largest working set within 2x the cache), an unknown cache, or a
  // GPU (a calibration without cores): nothing charged.
  for (int variant = 0; variant < 3; ++variant) {
    DeviceSpec other = d;
    if (variant == 0)
      other.calibration.bandwidth.pop_back();
    else if (variant == 1)
      other.cacheBytes = 0;
    else
      other.calibration.cores = 0;
    KernelModel o(other, stack("megac", true), Precision::fp32);
    o.setWeightsInMemory(true);
    EXPECT_NEAR(o.time(linear).gemm, warm, 1e-12) << variant;
  }
  // Both ranks' state shares the node's cache.
  EXPECT_FALSE(stateOutgrowsCache(d, 16e6));
  EXPECT_TRUE(stateOutgrowsCache(d, 16.5e6));
  d.cacheBytes = 0;
  EXPECT_FALSE(stateOutgrowsCache(d, 1e12));
}

TEST(KernelModelTest, MfuOfACpuLayoutIsAgainstItsOccupancysPeak) {
  // A calibrated CPU spec's peak is a 1-thread rank's (every core busy); one rank of 2 threads
  // runs both cores, so its MFU is against the alone-2t table's best GEMM, not above 100%.
  DeviceSpec d = twoCoreMachine(1, 2);
  d.peakFlopsFp32 = 100e9; // the busy table's best
  OccupancyTables alone;
  alone.name = "alone-2t";
  alone.ranks = 1;
  alone.threads = 2;
  alone.instructionSeconds = 1e-6;
  alone.gemm = {{64, 64, 64, 4, 95e9}, {1024, 1024, 1024, 4, 190e9}};
  alone.kernels = d.calibration.kernels;
  alone.attention = d.calibration.attention;
  d.calibration.occupancies = {alone};
  Cluster c{d, 1};
  TransformerShape s = gpt(2, 512, 8, 128, 2048);
  Layout l;
  l.precision = Precision::fp32;
  std::string why;
  std::optional<StepCost> cost = estimate(s, c, 4, l, &why, stack("megac", true));
  ASSERT_TRUE(cost) << why;
  EXPECT_NEAR(cost->mfu, modelFlopsPerStep(s, 4) / cost->stepSeconds / 190e9, 1e-9);
  EXPECT_LT(cost->mfu, 1.0);
  // The plan reports the cold-weights decision: 16 bytes a parameter against the cache.
  EXPECT_NEAR(cost->trainingStateBytes, 16.0 * (2 * layerParameters(s) + nonLayerParameters(s)), 1.0);
  EXPECT_FALSE(cost->weightsInMemory); // no cache size known
  c.device.cacheBytes = 16.0 * (2 * layerParameters(s) + nonLayerParameters(s)) - 1;
  c.device.calibration.occupancies[0].bandwidth = {{1e6, 100e9}, {1e9, 20e9}}; // the layout's
  std::optional<StepCost> cold = estimate(s, c, 4, l, &why, stack("megac", true));
  ASSERT_TRUE(cold) << why;
  EXPECT_TRUE(cold->weightsInMemory);
  EXPECT_GT(cold->stepSeconds, cost->stepSeconds);
}

TEST(KernelModelTest, InventoryMarksEveryWeightAndWeightGradientCold) {
  // Every linear's weight is read cold once in the forward and once in the backward (megac's
  // transpose of W, or the stack's dx GEMM) and its gradient written once: 3 x the layer's
  // weight bytes, the logit layer's likewise.
  TransformerShape s = gpt(2, 512, 8, 128, 2048);
  for (const char *name : {"megac", "megatron-core"}) {
    LayerGeometry g{1, 2, false, Precision::fp32};
    BlockKernels b = blockKernels(s, g, stack(name, std::string(name) == "megac"));
    auto cold = [](const PassKernels &p) {
      double bytes = 0;
      for (const KernelOp &op : p.kernels)
        bytes += op.coldBytes * op.count;
      return bytes;
    };
    double weights = 12.0 * 512 * 512 * 4; // qkv, proj, fc1, fc2 (biases not counted)
    EXPECT_NEAR(cold(b.forward), weights, 1) << name;
    EXPECT_NEAR(cold(b.backward), 2 * weights, 1) << name;
    EdgeKernels e = edgeKernels(s, g, stack(name, std::string(name) == "megac"));
    EXPECT_NEAR(cold(e.headForward) + cold(e.headBackward), 3.0 * 2048 * 512 * 4, 1) << name;
  }
}

TEST(KernelModelTest, GradientConcatenationsAndSlicesStreamTheWholeStateCold) {
  // Every copy that packs gradients for their reduction, slices them back, takes ZeRO shards and
  // unpacks the gathered parameters moves state bytes only: all of them cold.
  const double parameters = 1e6, tensors = 10;
  for (int zero : {0, 1}) {
    std::vector<KernelOp> ops = optimizerKernels(parameters, tensors, zero ? parameters / 2 : parameters,
                                                 Precision::fp32, stack("megac", true),
                                                 /*partitioned=*/true, /*dataParallel=*/true, zero);
    double copies = 0, cold = 0;
    for (const KernelOp &op : ops) {
      if (op.kind == KernelClass::copy) {
        copies += op.bytes * op.count;
        EXPECT_EQ(op.coldBytes, op.bytes) << zero;
      } else {
        EXPECT_EQ(op.coldBytes, 0) << zero; // AdamW and the norm: their tables' working sets
      }
      cold += op.coldBytes * op.count;
    }
    // Concatenate and slice back (8 bytes a parameter each); ZeRO-1 also takes the shards, packs
    // the updated shards and unpacks and copies the gathered parameters.
    EXPECT_NEAR(copies, zero ? 2 * 8 * parameters + 2 * 4 * parameters + 2 * 8 * parameters
                             : 2 * 8 * parameters, 1)
        << zero;
    EXPECT_NEAR(cold, copies, 1) << zero;
  }
}

TEST(KernelModelTest, AttentionScalesTheNearestMeasuredCallByFlops) {
  KernelModel k(calibratedCpu(), stack("megac", true), Precision::fp32);
  EXPECT_NEAR(k.attentionSeconds(8, 128, 32, false), 1e-3, 1e-12);
  EXPECT_NEAR(k.attentionSeconds(16, 256, 32, false), 8e-3, 1e-12); // 2x heads, 4x s²
  EXPECT_NEAR(k.attentionSeconds(8, 128, 32, true), 2e-3, 1e-12);
  // Uncalibrated: a causal flash kernel at the spec's efficiency of peak.
  DeviceSpec a100 = *preset("a100-80g");
  KernelModel g(a100, stack("megac"), Precision::bf16);
  double flops = 4.0 * 32 * 2048 * 2048 * 128;
  EXPECT_NEAR(g.attentionSeconds(32, 2048, 128, false),
              0.5 * flops / (312e12 * a100.attentionForwardEfficiency), 1e-12);
}

TEST(KernelModelTest, AttentionSeparatesProductsFromScoresWhenHeadSizesDiffer) {
  // Calls made by t = a·(b·h·s²·d) + c·(b·h·s²) with a = 1e-11, c = 2e-10 at head sizes 32 and
  // 64: the fit recovers both terms, so a third head size is predicted exactly.
  DeviceSpec d = calibratedCpu();
  auto call = [](int64_t bh, int64_t s, int64_t dh) {
    double scores = double(bh) * double(s) * double(s);
    double t = 1e-11 * scores * double(dh) + 2e-10 * scores + 1e-6; // + the instruction
    return AttentionPoint{bh, s, dh, true, t, 2 * t};
  };
  d.calibration.attention = {call(8, 128, 32), call(8, 256, 64), call(16, 128, 64)};
  KernelModel k(d, stack("megac", true), Precision::fp32);
  double scores = 4.0 * 512 * 512;
  EXPECT_NEAR(k.attentionSeconds(4, 512, 128, false), 1e-11 * scores * 128 + 2e-10 * scores, 1e-9);
}

TEST(KernelModelTest, AttentionFitsAPerRowCostForShortSequences) {
  // Calls made by t = a·(b·h·s²·d) + c·(b·h·s²) + r·(b·h·s) (a = 1e-11, c = 2e-10, r = 1e-7: the
  // per-row part is 60% of a 128-long call and 16% of a 1024-long one) at the shapes
  // `megac calibrate --backend cpu` measures: the fit recovers all three, so a short sequence of
  // many heads (a small model's attention) is predicted exactly. The two-term fit the planner had
  // before left it 20-30% short, weighted towards the long calls.
  DeviceSpec d = calibratedCpu();
  auto call = [](int64_t bh, int64_t s, int64_t dh) {
    double rows = double(bh) * double(s);
    double t = 1e-11 * rows * double(s) * double(dh) + 2e-10 * rows * double(s) + 1e-7 * rows;
    return AttentionPoint{bh, s, dh, true, t + 1e-6, 2 * t + 1e-6}; // + the instruction
  };
  d.calibration.attention = {call(8, 128, 64),  call(8, 256, 64), call(16, 512, 64),
                             call(4, 1024, 64), call(16, 128, 32), call(8, 512, 32),
                             call(8, 256, 128)};
  KernelModel k(d, stack("megac", true), Precision::fp32);
  double rows = 32.0 * 128;
  double want = 1e-11 * rows * 128 * 64 + 2e-10 * rows * 128 + 1e-7 * rows;
  EXPECT_NEAR(k.attentionSeconds(32, 128, 64, false), want, 1e-9 * want);
  EXPECT_NEAR(k.attentionSeconds(32, 128, 64, true), 2 * want, 2e-9 * want);
}

TEST(KernelModelTest, CalibratedCollectivesInterpolateLogLog) {
  Cluster c{calibratedCpu(), 1};
  c.device.devicesPerNode = 2;
  EXPECT_NEAR(collectiveSeconds(c, Collective::allReduce, 2, 1, 1e3), 2e-6, 1e-15);
  // Geometric midpoint in bytes: geometric midpoint in time.
  EXPECT_NEAR(collectiveSeconds(c, Collective::allReduce, 2, 1, std::sqrt(1e9)),
              std::sqrt(2e-6 * 1e-3), 1e-12);
  // Beyond the largest message: its bandwidth.
  EXPECT_NEAR(collectiveSeconds(c, Collective::allReduce, 2, 1, 4e6), 4e-3, 1e-12);
  // Not measured (all-gather): the alpha-beta ring.
  EXPECT_GT(collectiveSeconds(c, Collective::allGather, 2, 1, 1e6), 0);
}

double gemmFlops(const std::vector<KernelOp> &ops) {
  double f = 0;
  for (const KernelOp &op : ops)
    if (op.kind == KernelClass::gemm)
      f += 2.0 * double(op.m) * double(op.n) * double(op.k) * double(op.batch) * op.count;
  return f;
}

TEST(KernelModelTest, EveryStackComputesTheSameBlockGemmFlops) {
  // The linear layers' GEMMs are the model's, whatever the stack fuses: forward 2·T·(12h²)/tp
  // for a GPT block (qkv, projection, fc1, fc2), backward twice that.
  TransformerShape s = gpt(4, 1024, 16, 512, 1000);
  LayerGeometry g{2, 2, true, Precision::bf16};
  double T = 2.0 * 512, h = 1024;
  for (const char *name : {"megac", "megatron-2021", "megatron-core"}) {
    SCOPED_TRACE(name);
    BlockKernels b = blockKernels(s, g, stack(name));
    double linear = 2 * T * 12 * h * h / 2;
    // Megatron 2021 also runs the attention core as GEMMs: 4·b·s²·h / tp forward.
    double core = std::string(name) == "megatron-2021" ? 4 * 2.0 * 512 * 512 * h / 2 : 0;
    EXPECT_NEAR(gemmFlops(b.forward.kernels), linear + core, 1e-6 * linear);
    EXPECT_NEAR(gemmFlops(b.backward.kernels), 2 * (linear + core), 1e-6 * linear);
    // SP: per block two all-gathers and two reduce-scatters of the activation, each way.
    EXPECT_EQ(b.forward.tp.size(), 4u);
    EXPECT_EQ(b.backward.tp.size(), 4u);
  }
}

TEST(KernelModelTest, StacksDifferWhereTheirProfilesSay) {
  TransformerShape s = gpt(4, 1024, 16, 512, 1000);
  s.dropout = 0.1;
  LayerGeometry g{1, 1, false, Precision::bf16};
  auto count = [](const std::vector<KernelOp> &ops, KernelClass kind) {
    double n = 0;
    for (const KernelOp &op : ops)
      if (op.kind == kind)
        n += op.count;
    return n;
  };
  BlockKernels megac = blockKernels(s, g, stack("megac"));
  BlockKernels megatron = blockKernels(s, g, stack("megatron-2021"));
  // Both pass Wᵀ and dyᵀ to the GEMMs as flags (megac since mega-training-gemm-fusion).
  EXPECT_EQ(count(megac.backward.kernels, KernelClass::transpose), 0);
  EXPECT_EQ(count(megatron.backward.kernels, KernelClass::transpose), 1); // the context copy
  // Flash attention vs materialised scores: Megatron's softmax is a kernel of its own.
  EXPECT_EQ(count(megac.forward.kernels, KernelClass::attention), 1);
  EXPECT_EQ(count(megatron.forward.kernels, KernelClass::softmax), 1);
  EXPECT_EQ(megatron.attentionCore.size(), 4u); // q·kᵀ, softmax, dropout, p·v
  // Megatron fuses bias, dropout and the residual add: one kernel per residual.
  EXPECT_EQ(count(megatron.forward.kernels, KernelClass::dropout), 3); // 2 residual + scores
  EXPECT_EQ(count(megatron.forward.kernels, KernelClass::elementwise), 0);
}

TEST(KernelModelTest, ExplainClassesSumToTheStep) {
  TransformerShape s = gpt(96, 12288, 96, 2048, 51200);
  for (const char *name : {"megac", "megatron-2021", "megatron-core"}) {
    SCOPED_TRACE(name);
    std::string why;
    Layout l{8, 8, 16, 2, 1, true, 1, Recompute::selective, Precision::bf16};
    std::optional<StepCost> c =
        estimate(s, *parseCluster("a100-80g:128x8", nullptr), 1536, l, &why, stack(name));
    ASSERT_TRUE(c) << why;
    double sum = c->gemmSeconds + c->attentionSeconds + c->memoryBoundSeconds + c->overheadSeconds +
                 c->tpAllReduceSeconds + c->tpAllGatherSeconds + c->tpReduceScatterSeconds +
                 c->ppCommSeconds + c->dpReduceSeconds + c->dpGatherSeconds + c->bubbleSeconds;
    EXPECT_NEAR(sum, c->stepSeconds, 1e-9 * c->stepSeconds);
    EXPECT_GT(c->gemmSeconds, 0.5 * c->stepSeconds); // a 175B step is GEMM-bound
    // The kernel classes' seconds (`--json` kernel_seconds) are the kernels' work: GEMM (with
    // its packing bytes), attention and memory-bound time, the per-kernel overhead apart.
    double byClass = 0;
    for (const auto &[kind, seconds] : c->kernelSeconds)
      byClass += seconds;
    EXPECT_NEAR(byClass, c->gemmSeconds + c->attentionSeconds + c->memoryBoundSeconds,
                1e-9 * c->stepSeconds);
    EXPECT_EQ(c->kernelSeconds.size(), c->kernelLaunches.size());
  }
}

TEST(KernelModelTest, OverlapOnlyWhereTheProfileHasIt) {
  // 8 data-parallel ranks across nodes, no pipeline: the gradient all-reduce is large.
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = *parseCluster("a100-80g:8x8", nullptr);
  // One micro-batch of 8 per dp rank: its backward is longer than the reduction, so with
  // overlap only the last bucket (1/24 of the reduction) is exposed.
  Layout l{8, 1, 8, 1, 8, true, 0, Recompute::selective, Precision::bf16};
  std::string why;
  auto core = estimate(s, c, 64, l, &why, stack("megatron-core"));
  auto old = estimate(s, c, 64, l, &why, stack("megatron-2021"));
  ASSERT_TRUE(core && old) << why;
  EXPECT_NEAR(core->dpReduceSeconds, old->dpReduceSeconds / 24, 1e-12);
}

// Issue 29: megac overlaps the dp reduction and ZeRO-1's parameter gather only as its compiled
// plan does: with --overlap on (latencyHiding) at pp 1, ZeRO 0/1, more than one bucket. Each
// bucket's reduction then hides behind the last backward (its backward here is longer than the
// reduction, so only the last of the 8 buckets is exposed, less the optimizer's work on the
// other buckets' results) and each gather behind the remaining
// buckets' updates; everywhere else both are exposed whole, as with the option off.
TEST(KernelModelTest, MegacOverlapFollowsTheCompiledPlan) {
  TransformerShape s = gpt(24, 2048, 16, 2048, 51200);
  Cluster c = *parseCluster("a100-80g:8x8", nullptr);
  std::string why;
  auto run = [&](Layout l, bool on, int64_t bucketSize) {
    StackProfile p = stack("megac");
    p.latencyHiding = on;
    p.bucketSize = bucketSize;
    std::optional<StepCost> cost = estimate(s, c, 64 * l.pp, l, &why, p);
    EXPECT_TRUE(cost) << why;
    return cost.value_or(StepCost{});
  };
  Layout dp{8, 1, 8, 1, 8, true, 0, Recompute::selective, Precision::bf16};
  double params = 0;
  {
    StepCost off = run(dp, false, 0);
    ASSERT_GT(off.dpReduceSeconds, 0);
    // About 8 buckets: the stage's parameters (blocks and embedding split over tp 8, the
    // position table whole) are counted here only roughly (norms and biases left out), so the
    // plan has 8 or 9 buckets of this size and the last one's share of the reduction is exposed.
    params = double(s.layers) * 12 * s.hidden * s.hidden / 8 + double(s.vocab) * s.hidden / 8 +
             double(s.seq) * s.hidden;
    StepCost on = run(dp, true, int64_t(params / 8) + 1);
    // At most the last bucket's share (the optimizer step's norm and unpacking, which the
    // tail's order puts ahead of its done, hide part of it), never negative.
    EXPECT_GE(on.dpReduceSeconds, 0);
    EXPECT_LE(on.dpReduceSeconds, off.dpReduceSeconds / 8 * (1 + 1e-12));
    // One bucket (Megatron's default is 40M elements; this stage has ~160M): nothing to overlap
    // with one huge bucket.
    EXPECT_EQ(run(dp, true, int64_t(1e12)).dpReduceSeconds, off.dpReduceSeconds);
    EXPECT_LT(run(dp, true, 0).dpReduceSeconds, off.dpReduceSeconds);
    // Buckets finer than the 24 blocks (about 48): each weight-gradient GEMM runs next to its
    // layer (mega-training-gemm-fusion), so a block's gradients become final one GEMM after
    // another and the tail is one bucket's share, not one block's (docs/training-step.md, "A
    // shared emulated link").
    EXPECT_LE(run(dp, true, int64_t(params / 48) + 1).dpReduceSeconds,
              off.dpReduceSeconds / 48 * (1 + 1e-12));
  }
  {
    // ZeRO-1: the reduce-scatter as above, and the gather deferred into the next step's
    // forward (mega-training-defer-parameter-gather), which is longer than it here: only the
    // first of the 8 or 9 buckets' gathers is exposed.
    Layout z1 = dp;
    z1.zero = 1;
    StepCost off = run(z1, false, 0), on = run(z1, true, int64_t(params / 8) + 1);
    EXPECT_LT(on.dpReduceSeconds, off.dpReduceSeconds / 4);
    EXPECT_GE(on.dpGatherSeconds, off.dpGatherSeconds / 9 * (1 - 1e-12));
    EXPECT_LE(on.dpGatherSeconds, off.dpGatherSeconds / 8 * (1 + 1e-12));
  }
  // pp 2 and ZeRO-2: the plan reduces after the schedule or per micro-batch; no change. At pp 2
  // the simulation places each transfer between its sending and receiving step (its waits count
  // as bubble, the sends leave the busy time), starting when the receive is posted: with
  // --overlap on kReceiveLookahead steps ahead, without it at the step, which then waits for the
  // whole transfer: a longer step and bubble.
  Layout pp = dp;
  pp.pp = 2;
  pp.tp = 4;
  StepCost ppOn = run(pp, true, 1000000), ppOff = run(pp, false, 1000000);
  EXPECT_EQ(ppOn.dpReduceSeconds, ppOff.dpReduceSeconds);
  EXPECT_EQ(ppOff.ppCommSeconds, 0);
  EXPECT_EQ(ppOn.ppCommSeconds, 0);
  EXPECT_LT(ppOn.stepSeconds, ppOff.stepSeconds);
  EXPECT_LT(ppOn.bubbleSeconds, ppOff.bubbleSeconds);
  // ZeRO-2: the reduce-scatters per micro-batch in the chunks, overlapped only as --overlap on
  // compiles them (overlapShardedGradReduce: StackProfile::overlaps); the parameter all-gathers
  // after the step, per bucket, hide behind the remaining buckets' updates only with --overlap
  // on, as ZeRO-1's.
  Layout z2 = dp;
  z2.zero = 2;
  StepCost z2on = run(z2, true, 1000000), z2off = run(z2, false, 1000000);
  EXPECT_LT(z2on.zeroReduceScatterSeconds, z2off.zeroReduceScatterSeconds);
  EXPECT_EQ(z2on.dpReduceSeconds, 0);
  ASSERT_GT(z2off.dpGatherSeconds, 0);
  EXPECT_LT(z2on.dpGatherSeconds, z2off.dpGatherSeconds);
  EXPECT_GT(z2on.dpGatherSeconds, 0);
}

// Issue 34: a PyTorch eager stack issues every kernel from the host; a pass of short kernels
// waits for the host (launches x hostSecondsPerKernel), a pass of long ones does not notice it.
TEST(KernelModelTest, HostDispatchBoundsOnlyPassesOfShortKernels) {
  StackProfile core = stack("megatron-core");
  ASSERT_GT(core.hostSecondsPerKernel, 0);
  EXPECT_EQ(stack("megac").hostSecondsPerKernel, 0); // C++ executors, no Python per kernel
  DeviceSpec h100 = *preset("h100-sxm");
  KernelModel k(h100, core, Precision::bf16);
  // 100 elementwise kernels of 4 KiB: each ~2 ns of HBM traffic plus the 2 us launch gap, far
  // below the host's time to issue it.
  KernelOp tiny;
  tiny.kind = KernelClass::elementwise;
  tiny.bytes = 4096;
  tiny.count = 100;
  KernelTime t = k.time(std::vector<KernelOp>{tiny});
  EXPECT_NEAR(t.total(), 100 * core.hostSecondsPerKernel, 1e-12);
  EXPECT_NEAR(t.overhead, 100 * core.hostSecondsPerKernel - t.memory, 1e-12);
  // One 8192^3 GEMM (~1.4 ms on an H100) and a few short kernels: the host is far ahead.
  KernelOp gemm;
  gemm.kind = KernelClass::gemm;
  gemm.m = gemm.n = gemm.k = 8192;
  tiny.count = 10;
  KernelTime both = k.time(std::vector<KernelOp>{gemm, tiny});
  KernelTime alone = k.time(gemm);
  alone += k.time(tiny);
  EXPECT_DOUBLE_EQ(both.total(), alone.total());
}

TEST(KernelModelTest, UnknownStackIsRefused) {
  EXPECT_FALSE(stackProfile("deepspeed", false));
  EXPECT_EQ(stackNames().size(), 4u);
}

// megac's CPU runtime runs its instructions in order with blocking collectives: the profile says
// so by overlapping nothing (the cost model treats tp and pipeline transfers as exposed on every
// stack), not by a flag of its own.
TEST(KernelModelTest, MegacCpuOverlapsNothing) {
  StackProfile cpu = *stackProfile("megac", true);
  EXPECT_FALSE(cpu.overlapGradReduce);
  EXPECT_FALSE(cpu.overlapParamGather);
  EXPECT_FALSE(cpu.flashAttention);
  EXPECT_TRUE(cpu.attentionKernel);
}

} // namespace
} // namespace megac::planner
