// The Layout's names and parsers, its rank count and the schedule it runs, and the schedule
// names' one parser (parallel/Layout.h, parallel/PipelineSchedule.h).
#include "parallel/Layout.h"

#include <gtest/gtest.h>

namespace megac {
namespace {

using schedule::ScheduleKind;

TEST(LayoutTest, PrecisionAndRecomputeNamesRoundTrip) {
  for (Precision p : {Precision::fp32, Precision::fp64, Precision::bf16, Precision::fp16})
    EXPECT_EQ(parsePrecision(precisionName(p)), p);
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    EXPECT_EQ(parseRecompute(recomputeName(r)), r);
  EXPECT_EQ(parsePrecision("fp8"), std::nullopt);
  EXPECT_EQ(parsePrecision("FP32"), std::nullopt);
  EXPECT_EQ(parseRecompute("partial"), std::nullopt);
}

TEST(LayoutTest, ScheduleNamesHaveOneParser) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::oneFOneB, ScheduleKind::interleaved})
    EXPECT_EQ(schedule::parseScheduleKind(schedule::scheduleName(k)), k);
  EXPECT_EQ(schedule::parseScheduleKind("1f1b"), ScheduleKind::oneFOneB);
  EXPECT_EQ(schedule::parseScheduleKind("interleaved"), std::nullopt);
  EXPECT_EQ(schedule::parseScheduleKind("zb-h2"), ScheduleKind::zbH2);
  EXPECT_EQ(schedule::parseScheduleKind("zb_h2"), std::nullopt);
}

TEST(LayoutTest, RanksAndTheScheduleThatRuns) {
  Layout l;
  EXPECT_EQ(l.ranks(), 1);
  EXPECT_FALSE(l.partitioned());
  EXPECT_EQ(l.precision, Precision::fp32);
  l.tp = 2;
  l.pp = 3;
  l.dp = 4;
  EXPECT_EQ(l.ranks(), 24);
  EXPECT_TRUE(l.partitioned());
  EXPECT_EQ(l.pipelineSchedule(), ScheduleKind::oneFOneB);
  l.vpp = 2;
  EXPECT_EQ(l.pipelineSchedule(), ScheduleKind::interleaved);
  l.schedule = ScheduleKind::gpipe; // gpipe stays gpipe; the generator refuses vpp > 1 for it
  EXPECT_EQ(l.pipelineSchedule(), ScheduleKind::gpipe);
}

TEST(LayoutTest, DescribeIsWhatCheckpointsRecord) {
  Layout l{2, 1, 2, 1, 8, true, 1};
  EXPECT_EQ(l.describe(), "tp 2, pp 1, dp 2, vpp 1, zero 1, sequence parallel");
  EXPECT_EQ(Layout{}.describe(), "tp 1, pp 1, dp 1, vpp 1, zero 0");
}

TEST(LayoutTest, StepLabelsAndDescriptions) {
  schedule::ScheduleStep f{schedule::StepKind::forward, 1, 3};
  schedule::ScheduleStep b{schedule::StepKind::backward, 0, 2};
  EXPECT_EQ(schedule::stepLabel(f), "F3 c1");
  EXPECT_EQ(schedule::stepLabel(b), "B2 c0");
  EXPECT_EQ(schedule::describeStep(f), "forward of chunk 1, micro-batch 3");
}

} // namespace
} // namespace megac
