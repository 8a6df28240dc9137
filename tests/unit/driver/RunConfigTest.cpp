// driver::finishRunConfig: what a configuration implies (dp from the ranks, the model's
// micro-batch, the micro-batches per step, a plan's global batch, the trace window) and the
// combinations it refuses, each with the flag-named message `megac train` prints; and the one
// place the loss comes from (lossKindOf).
#include "driver/RunConfig.h"

#include <gtest/gtest.h>

namespace megac::driver {
namespace {

RunConfig config(int64_t ranks, int64_t tp, int64_t pp, int64_t globalBatch, int64_t b) {
  RunConfig c;
  c.lr.totalSteps = 4;
  c.lr.lr = 1e-3;
  c.exec.ranks = ranks;
  c.training.layout.tp = tp;
  c.training.layout.pp = pp;
  c.training.layout.dp = 0; // derived
  c.training.layout.microBatch = b;
  c.data.batch.globalBatch = globalBatch;
  return c;
}

std::string error(RunConfig c) {
  Status s = finishRunConfig(c);
  return s.isOk() ? "" : s.message();
}

TEST(RunConfigTest, DerivesDataParallelismAndMicroBatches) {
  RunConfig c = config(8, 2, 2, 16, 2);
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.layout().dp, 2);
  EXPECT_EQ(c.data.batch.microBatch, 4); // b * dp rows per model micro-batch
  EXPECT_EQ(c.layout().microBatches, 4); // 16 / (2 * 2)
  EXPECT_EQ(c.data.batch.microBatches(), 4);
}

TEST(RunConfigTest, OneRankByDefault) {
  RunConfig c = config(0, 1, 1, 4, 2);
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.exec.ranks, 1);
  EXPECT_EQ(c.layout().dp, 1);
  EXPECT_EQ(c.layout().microBatches, 2);
}

TEST(RunConfigTest, APlanFillsThePipelineAndTakesOneStep) {
  RunConfig c = config(4, 1, 2, 0, 1);
  c.planOnly = true;
  c.lr.totalSteps = 0;
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.data.batch.globalBatch, 4); // b * dp * pp
  EXPECT_EQ(c.layout().microBatches, 2);
  EXPECT_EQ(c.lr.totalSteps, 1);
}

TEST(RunConfigTest, RefusesInconsistentLayouts) {
  RunConfig c = config(4, 3, 1, 8, 2);
  c.training.layout.dp = 1;
  EXPECT_EQ(error(c), "--ranks 4 is not tp 3 x pp 1 x dp 1 = 3");
  EXPECT_EQ(error(config(4, 1, 1, 8, 4)),
            "--global-batch 8 is not a multiple of --micro-batch 4 x dp 4 = 16");
  c = config(2, 1, 1, 8, 2);
  c.training.layout.zero = 1;
  c.training.layout.dp = 1;
  c.training.layout.tp = 2;
  EXPECT_EQ(error(c),
            "--zero 1 shards the optimizer state over data-parallel ranks; it needs dp > 1");
  c = config(2, 1, 1, 8, 2);
  c.training.layout.sequenceParallel = true;
  EXPECT_EQ(error(c), "--sequence-parallel needs tensor parallelism (--tp > 1)");
  c = config(2, 1, 1, 8, 2);
  c.training.layout.vpp = 2;
  EXPECT_EQ(error(c), "--vpp 2 needs pipeline stages (--pp > 1)");
  EXPECT_EQ(error(config(1, 1, 1, 6, 4)),
            "the global batch 6 is not divisible by the micro-batch 4");
}

TEST(RunConfigTest, ChecksTheScheduleAndTheFiles) {
  RunConfig c = config(1, 1, 1, 4, 2);
  c.lr.warmupSteps = 5;
  EXPECT_EQ(error(c), "the warmup steps must be between 0 and the number of steps (4), not 5");
  c = config(1, 1, 1, 4, 2);
  c.checkpoint.loadDir = "/nonexistent/megac-checkpoints";
  EXPECT_EQ(error(c), "--load: no checkpoint directory /nonexistent/megac-checkpoints");
  c = config(1, 1, 1, 4, 2);
  c.checkpoint.saveWeights = "/nonexistent/dir/w.safetensors";
  EXPECT_EQ(error(c), "--save-weights: no directory /nonexistent/dir");
}

// The zero-bubble schedules run (issue 35): zb-h1 and zb-h2 with one chunk per stage, zbv with
// two (its V), set here when --vpp is not given; the schedule library refuses m < p and other
// vpp values when the plan is written.
TEST(RunConfigTest, AcceptsTheZeroBubbleSchedules) {
  for (auto kind :
       {schedule::ScheduleKind::zbH1, schedule::ScheduleKind::zbH2, schedule::ScheduleKind::zbv}) {
    RunConfig c = config(2, 1, 2, 8, 1);
    c.training.layout.schedule = kind;
    ASSERT_TRUE(finishRunConfig(c).isOk()) << schedule::scheduleName(kind);
    EXPECT_EQ(c.layout().vpp, kind == schedule::ScheduleKind::zbv ? 2 : 1);
    EXPECT_EQ(c.layout().pipelineSchedule(), kind);
  }
  RunConfig c = config(1, 1, 1, 8, 1); // one stage: nothing to place in V
  c.training.layout.schedule = schedule::ScheduleKind::zbv;
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.layout().vpp, 1);
}

TEST(RunConfigTest, TheTraceWindowStartsAfterTheFirstStep) {
  RunConfig c = config(1, 1, 1, 4, 2);
  c.log.tracePath = "trace.json";
  c.log.traceSteps = 2;
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.log.traceFirst, 2);
  EXPECT_EQ(c.log.traceLast, 3);
  c = config(1, 1, 1, 4, 2);
  c.lr.totalSteps = 1;
  c.log.tracePath = "trace.json";
  ASSERT_TRUE(finishRunConfig(c).isOk());
  EXPECT_EQ(c.log.traceFirst, 1);
  EXPECT_EQ(c.log.traceLast, 1);
}

TEST(RunConfigTest, TheLossComesFromTheModel) {
  auto zoo = [](const char *spec) { return ModelSource::fromSpec(spec).value(); };
  EXPECT_EQ(lossKindOf(zoo("bert:layers=1,hidden=8,heads=2,seq=4,vocab=16")),
            passes::LossKind::mlm);
  EXPECT_EQ(lossKindOf(zoo("t5:layers=1,hidden=8,heads=2,seq=4,vocab=16")),
            passes::LossKind::seq2seq);
  EXPECT_EQ(lossKindOf(zoo("gpt:layers=1,hidden=8,heads=2,seq=4,vocab=16")),
            passes::LossKind::causal);
  EXPECT_EQ(lossKindOf(ModelSource::fromFile("model.onnx")), passes::LossKind::causal);
}

} // namespace
} // namespace megac::driver
