// Where megac's predicted step differs from Megatron-Core's on the same layout (issue 30): the
// cost model's terms for both stacks, then, per profile field in which the two differ, the step
// time, its terms and the memory when megac's profile takes Megatron-Core's value of that field
// alone (the rest left as megac's). Prints numbers; never fails on them.
//
// First each stack's best layout (megac, Megatron-Core now and as at c127b5e, the profile the
// issue's target names), then the same-layout breakdowns.
//
// usage: bench-stack-gap   (GPT-3 175B on a100-80g:128x8 and Llama-3-70B on h100-sxm:8x8, each
//                           on the layout `megac plan --stack megatron-core` picks)
#include "planner/CostModel.h"
#include "planner/Hardware.h"
#include "planner/Planner.h"
#include "planner/StackProfile.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace megac;
using namespace megac::planner;

namespace {

/// The fields of StackProfile a cost term reads, by name (the ones committed with this bench;
/// fields added since are not compared until listed here).
struct Field {
  const char *name;
  bool StackProfile::*flag = nullptr;
  int StackProfile::*count = nullptr;
  double StackProfile::*seconds = nullptr;
};

#define FLAG(f)                                                                                    \
  Field { #f, &StackProfile::f, nullptr, nullptr }
const std::vector<Field> &fields() {
  static const std::vector<Field> all = {
      FLAG(flashAttention),
      FLAG(attentionKernel),
      FLAG(keepsAttentionScores),
      FLAG(keepsAttentionLse),
      FLAG(selectiveDropsAttentionOutput),
      FLAG(fusedSoftmax),
      FLAG(fusedBiasActivation),
      FLAG(fusedBiasDropoutAdd),
      FLAG(elementwiseFusion),
      FLAG(transposeInstructions),
      Field{"headCopies", nullptr, &StackProfile::headCopies, nullptr},
      FLAG(separateGradAccumulation),
      FLAG(gemmAccumulatesWeightGrads),
      FLAG(gemmAccumulatesHalfWeightGrads),
      FLAG(overlapGradReduce),
      FLAG(overlapParamGather),
      FLAG(prefetchShardedParams),
      FLAG(overlapShardedGradReduce),
      FLAG(supportsContextParallel),
      FLAG(contextParallelAllGatherKv),
      FLAG(contextParallelRing),
      FLAG(ringBackwardRecomputesStatistics),
      FLAG(ringGradientsBlock),
      FLAG(overlapContextParallelRing),
      FLAG(contextParallelComposes),
      FLAG(p2pScatterGather),
      FLAG(zeroBubbleSchedules),
      Field{"pipelineStepOverheadSeconds", nullptr, nullptr,
            &StackProfile::pipelineStepOverheadSeconds},
      Field{"hostSecondsPerKernel", nullptr, nullptr, &StackProfile::hostSecondsPerKernel},
      FLAG(recomputePerLayer),
      FLAG(deferredWeightGradients),
      FLAG(backwardPeaksAtItsStart),
      FLAG(concatenatedGradientReduction),
      FLAG(gathersMasterWeights),
      FLAG(fp32ResidualStream),
      FLAG(keepsGatheredLinearInputs),
      FLAG(stashCopiedIntoArena),
      FLAG(shardedBuffersInArena),
      FLAG(p2pThroughHost),
      FLAG(multiTensorOptimizer),
      FLAG(clipPass),
      FLAG(replicatesKvHeads),
      FLAG(separateProjections),
      FLAG(ropePerTensor),
      FLAG(rowParallelBiasKernel),
      FLAG(positionBroadcastKernel),
      FLAG(embeddingGradKernels),
      FLAG(fusedCrossEntropy),
      FLAG(lossKernels),
      FLAG(accumulatesEdgeGradients),
      FLAG(groupedGlobalNorm),
      FLAG(concatenatesGradients),
      FLAG(supportsExpertParallel),
      FLAG(expertTensorParallel),
      FLAG(packedRouting),
      FLAG(allToAllDispatch),
      FLAG(dispatchScalesTokens),
      FLAG(gathersRouting),
      FLAG(zeroOverExpertDataParallel),
  };
  return all;
}
#undef FLAG

bool differs(const Field &f, const StackProfile &a, const StackProfile &b) {
  if (f.flag)
    return a.*f.flag != b.*f.flag;
  if (f.count)
    return a.*f.count != b.*f.count;
  return a.*f.seconds != b.*f.seconds;
}

void copyField(const Field &f, const StackProfile &from, StackProfile &to) {
  if (f.flag)
    to.*f.flag = from.*f.flag;
  else if (f.count)
    to.*f.count = from.*f.count;
  else
    to.*f.seconds = from.*f.seconds;
}

std::string valueOf(const Field &f, const StackProfile &p) {
  if (f.flag)
    return p.*f.flag ? "true" : "false";
  if (f.count)
    return std::to_string(p.*f.count);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p.*f.seconds);
  return buf;
}

/// The terms `megac plan --explain` prints, in its order.
struct Terms {
  double v[11];
  static constexpr const char *names[11] = {
      "GEMM",     "attention",      "memory-bound", "launch/overhead", "tp comm", "cp/ep comm",
      "zero-2/3", "pipeline sends", "dp reduction", "dp gather",       "bubble"};
  explicit Terms(const StepCost &c)
      : v{c.gemmSeconds,
          c.attentionSeconds,
          c.memoryBoundSeconds,
          c.overheadSeconds,
          c.tpAllReduceSeconds + c.tpAllGatherSeconds + c.tpReduceScatterSeconds,
          c.cpCommSeconds + c.epCommSeconds,
          c.zeroGatherSeconds + c.zeroReduceScatterSeconds,
          c.ppCommSeconds,
          c.dpReduceSeconds,
          c.dpGatherSeconds,
          c.bubbleSeconds} {}
};

std::string termDeltas(const StepCost &base, const StepCost &c) {
  Terms a(base), b(c);
  std::string out;
  for (int i = 0; i < 11; ++i) {
    double d = b.v[i] - a.v[i];
    if (std::fabs(d) < 5e-4)
      continue;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%s %+.3f", out.empty() ? "" : ", ", Terms::names[i], d);
    out += buf;
  }
  return out.empty() ? "-" : out;
}

StackProfile megatronCoreAtC127b5e();

/// megac's profile for plans compiled with `--overlap on` (the latency-hiding schedule: what
/// e2e_overlap, e2e_zero_prefetch_plan and KernelModelTest assert of compiled plans), as
/// Megatron-Core's profile has its overlap flags on.
StackProfile megacOverlapOn() {
  StackProfile p = *stackProfile("megac", false);
  p.latencyHiding = true;
  return p;
}

void compare(const char *what, const TransformerShape &shape, const char *clusterSpec,
             int64_t globalBatch, const Layout &layout, bool atC127b5e = false) {
  std::string error;
  std::optional<Cluster> cluster = parseCluster(clusterSpec, &error);
  if (!cluster) {
    std::fprintf(stderr, "bench-stack-gap: %s\n", error.c_str());
    return;
  }
  StackProfile megac = megacOverlapOn();
  StackProfile core = atC127b5e ? megatronCoreAtC127b5e() : *stackProfile("megatron-core", false);
  auto run = [&](const StackProfile &p) {
    std::string why;
    std::optional<StepCost> c = estimate(shape, *cluster, globalBatch, layout, &why, p);
    if (!c)
      std::fprintf(stderr, "bench-stack-gap: %s: %s\n", what, why.c_str());
    return c;
  };
  std::optional<StepCost> m = run(megac), k = run(core);
  if (!m || !k)
    return;
  std::printf("%s on %s, global batch %lld, against %s\n", what, clusterSpec,
              (long long)globalBatch, core.name.c_str());
  std::printf("  %-18s %10s %10s %9s\n", "term (s)", "megac", "mcore", "megac-mc");
  Terms tm(*m), tk(*k);
  for (int i = 0; i < 11; ++i)
    std::printf("  %-18s %10.3f %10.3f %+9.3f\n", Terms::names[i], tm.v[i], tk.v[i],
                tm.v[i] - tk.v[i]);
  std::printf("  %-18s %10.3f %10.3f %+9.3f   (%+.1f%%)\n", "step", m->stepSeconds, k->stepSeconds,
              m->stepSeconds - k->stepSeconds, 100.0 * (m->stepSeconds / k->stepSeconds - 1.0));
  std::printf("  %-18s %10.2f %10.2f   GiB/GPU (fits: %s / %s)\n", "memory",
              m->totalBytes / double(1ull << 30), k->totalBytes / double(1ull << 30),
              m->fits ? "yes" : "no", k->fits ? "yes" : "no");
  std::printf("  megac's profile with one field set to megatron-core's value:\n");
  std::printf("  %-34s %-12s %9s %8s  %s\n", "field (megac -> mcore)", "", "step", "GiB",
              "terms moved (s)");
  for (const Field &f : fields()) {
    if (!differs(f, megac, core))
      continue;
    StackProfile p = megac;
    copyField(f, core, p);
    std::optional<StepCost> c = run(p);
    if (!c)
      continue;
    std::string change = valueOf(f, megac) + " -> " + valueOf(f, core);
    std::printf("  %-34s %-12s %+9.3f %+8.2f  %s\n", f.name, change.c_str(),
                c->stepSeconds - m->stepSeconds,
                (c->totalBytes - m->totalBytes) / double(1ull << 30), termDeltas(*m, *c).c_str());
  }
  std::printf("\n");
}

/// Megatron-Core's profile as it stood at c127b5e (the commit issue 30's target names): no
/// context parallelism and no ZeRO-3 prefetch yet (issues 31/32 added them since), no
/// logsumexp-only attention memory.
StackProfile megatronCoreAtC127b5e() {
  StackProfile p = *stackProfile("megatron-core", false);
  p.name = "megatron-core@c127b5e";
  p.keepsAttentionLse = false;
  p.prefetchShardedParams = false;
  p.supportsContextParallel = false;
  p.contextParallelRing = false;
  p.overlapContextParallelRing = false;
  p.contextParallelComposes = false;
  return p;
}

/// Each stack's best layout (the search `megac plan --top 1` runs) and its step.
void searchEach(const char *what, const TransformerShape &shape, const char *clusterSpec,
                int64_t globalBatch) {
  std::string error;
  std::optional<Cluster> cluster = parseCluster(clusterSpec, &error);
  if (!cluster)
    return;
  std::printf("%s on %s, global batch %lld: each stack's best layout\n", what, clusterSpec,
              (long long)globalBatch);
  double megacStep = 0;
  for (const StackProfile &p : {megacOverlapOn(), megatronCoreAtC127b5e(),
                                *stackProfile("megatron-core", false)}) {
    SearchResult r = search(shape, *cluster, globalBatch, Pins{}, 1, p);
    if (r.best.empty()) {
      std::printf("  %-22s no layout fits\n", p.name.c_str());
      continue;
    }
    const PlanCandidate &b = r.best.front();
    if (p.name == "megac")
      megacStep = b.cost.stepSeconds;
    std::printf("  %-22s %8.3f s  megac %+6.1f%%  %s, %.1f GiB\n", p.name.c_str(),
                b.cost.stepSeconds, 100.0 * (megacStep / b.cost.stepSeconds - 1.0),
                b.layout.describe().c_str(), b.cost.totalBytes / double(1ull << 30));
  }
  std::printf("\n");
}

TransformerShape gpt3() {
  TransformerShape s;
  s.name = "gpt";
  s.layers = 96;
  s.hidden = 12288;
  s.heads = s.kvHeads = 96;
  s.ffn = 4 * 12288;
  s.vocab = 50257;
  s.seq = 2048;
  return s;
}

TransformerShape llama3_70b() {
  TransformerShape s;
  s.name = "llama";
  s.layers = 80;
  s.hidden = 8192;
  s.heads = 64;
  s.kvHeads = 8;
  s.ffn = 28672;
  s.vocab = 128256;
  s.seq = 8192;
  s.gatedMlp = true;
  s.rope = true;
  s.biases = false;
  s.tiedEmbedding = false;
  s.parameters = int64_t(double(s.layers) * layerParameters(s)) + 2 * s.vocab * s.hidden + s.hidden;
  return s;
}

} // namespace

int main() {
  searchEach("GPT-3 175B", gpt3(), "a100-80g:128x8", 1536);
  searchEach("Llama-3-70B", llama3_70b(), "h100-sxm:8x8", 128);
  // Megatron-Core's picks (`megac plan ... --stack megatron-core --no-compile --top 1`).
  Layout g{4, 8, 32, 4, 1, true, 1, Recompute::selective, Precision::bf16};
  compare("GPT-3 175B, tp 4 pp 8 dp 32 vpp 4, SP, selective, ZeRO-1", gpt3(), "a100-80g:128x8",
          1536, g);
  Layout l{2, 2, 8, 4, 1, true, 3, Recompute::none, Precision::bf16};
  l.cp = 2;
  l.cpRing = true;
  compare("Llama-3-70B, tp 2 cp 2 (ring) pp 2 dp 8 vpp 4, SP, ZeRO-3", llama3_70b(), "h100-sxm:8x8",
          128, l);
  l.recompute = Recompute::full;
  compare("Llama-3-70B, the same with full recompute (megac's memory needs it)", llama3_70b(),
          "h100-sxm:8x8", 128, l);
  // Megatron-Core's pick as at c127b5e (no cp, no ZeRO-3 prefetch in its profile then).
  Layout z{4, 4, 4, 1, 1, true, 2, Recompute::none, Precision::bf16};
  compare("Llama-3-70B, tp 4 pp 4 dp 4, SP, ZeRO-2", llama3_70b(), "h100-sxm:8x8", 128, z, true);
  return 0;
}
