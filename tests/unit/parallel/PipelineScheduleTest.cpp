// The pipeline schedule generator against Megatron-LM's schedules and the closed-form bubble
// formulas of REFERENCE.md (Narayanan et al. 2021), and the simulator's deadlock detection.
#include "parallel/PipelineSchedule.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

namespace megac::schedule {
namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::gpipe, ScheduleKind::oneFOneB,
                                      ScheduleKind::interleaved};

ScheduleStep F(int64_t chunk, int64_t mb) { return {StepKind::forward, chunk, mb}; }
ScheduleStep B(int64_t chunk, int64_t mb) { return {StepKind::backward, chunk, mb}; }

std::string show(const std::vector<ScheduleStep> &steps) {
  std::string out;
  for (const ScheduleStep &s : steps)
    out += (s.kind == StepKind::forward ? " F" : " B") + std::to_string(s.chunk) + "." +
           std::to_string(s.microBatch);
  return out;
}

// Every shape of the sweep the kind accepts: p in 1..4, v in 1..3, m in 1..8.
std::vector<PipelineShape> validShapes(ScheduleKind kind) {
  std::vector<PipelineShape> shapes;
  for (int64_t p = 1; p <= 4; ++p)
    for (int64_t v = 1; v <= 3; ++v)
      for (int64_t m = 1; m <= 8; ++m) {
        if (kind != ScheduleKind::interleaved && v != 1)
          continue;
        if (kind == ScheduleKind::interleaved && m % p != 0)
          continue;
        shapes.push_back({p, v, m});
      }
  return shapes;
}

std::string shapeName(ScheduleKind kind, const PipelineShape &s) {
  return std::string(scheduleName(kind)) + " p=" + std::to_string(s.stages) +
         " v=" + std::to_string(s.virtualStages) + " m=" + std::to_string(s.microBatches);
}

TEST(PipelineScheduleTest, NamesRoundTrip) {
  for (ScheduleKind kind : kAllKinds)
    EXPECT_EQ(parseScheduleKind(scheduleName(kind)), kind);
  EXPECT_EQ(parseScheduleKind("zb-h2"), std::nullopt);
  EXPECT_EQ(describeStep(B(3, 5)), "backward of chunk 3, micro-batch 5");
}

TEST(PipelineScheduleTest, EveryStepOnceOnItsStageForwardFirst) {
  for (ScheduleKind kind : kAllKinds)
    for (const PipelineShape &shape : validShapes(kind)) {
      SCOPED_TRACE(shapeName(kind, shape));
      std::string error;
      auto schedule = buildSchedule(kind, shape, &error);
      ASSERT_TRUE(schedule) << error;
      ASSERT_EQ(static_cast<int64_t>(schedule->size()), shape.stages);
      const int64_t chunks = shape.stages * shape.virtualStages;
      // (kind, chunk, mb) -> (stage, position): checked independently of checkStageSchedule.
      std::map<std::tuple<int, int64_t, int64_t>, std::pair<int64_t, size_t>> where;
      for (int64_t s = 0; s < shape.stages; ++s) {
        const auto &steps = (*schedule)[s];
        EXPECT_EQ(static_cast<int64_t>(steps.size()), 2 * shape.virtualStages * shape.microBatches);
        for (size_t i = 0; i < steps.size(); ++i) {
          const ScheduleStep &st = steps[i];
          EXPECT_EQ(st.chunk % shape.stages, s) << describeStep(st);
          bool fresh =
              where.emplace(std::tuple(int(st.kind), st.chunk, st.microBatch), std::pair(s, i))
                  .second;
          EXPECT_TRUE(fresh) << describeStep(st) << " twice";
        }
        EXPECT_TRUE(checkStageSchedule(shape, s, steps, &error)) << error;
      }
      EXPECT_EQ(static_cast<int64_t>(where.size()), 2 * chunks * shape.microBatches);
      for (int64_t c = 0; c < chunks; ++c)
        for (int64_t m = 0; m < shape.microBatches; ++m) {
          auto f = where.find({int(StepKind::forward), c, m});
          auto b = where.find({int(StepKind::backward), c, m});
          ASSERT_TRUE(f != where.end() && b != where.end()) << "chunk " << c << " mb " << m;
          EXPECT_LT(f->second.second, b->second.second) << "chunk " << c << " mb " << m;
        }
    }
}

// Makespan (m + p - 1)(f + b) (every stage idles (p - 1)(f + b)), for forward and backward of
// different costs too, so the bubble is (p-1)/m of the busy time and (p-1)/(m+p-1) of the span.
TEST(PipelineScheduleTest, GpipeAndOneFOneBMatchTheBubbleFormula) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::oneFOneB})
    for (const PipelineShape &shape : validShapes(kind))
      for (auto [f, b] : {std::pair(1.0, 1.0), std::pair(1.0, 2.0), std::pair(3.0, 5.0)}) {
        SCOPED_TRACE(shapeName(kind, shape) + " f=" + std::to_string(f) +
                     " b=" + std::to_string(b));
        const double p = shape.stages, m = shape.microBatches;
        auto schedule = buildSchedule(kind, shape, nullptr);
        ASSERT_TRUE(schedule);
        ScheduleSimulation sim = simulateSchedule(shape, *schedule, f, b);
        ASSERT_EQ(sim.error, "");
        EXPECT_DOUBLE_EQ(sim.makespan, (m + p - 1) * (f + b));
        EXPECT_DOUBLE_EQ(sim.bubbleRatio, (p - 1) / m);
        EXPECT_DOUBLE_EQ(sim.bubbleFraction, (p - 1) / (m + p - 1));
      }
}

// 1F1B keeps at most p micro-batches in flight; stage s exactly min(p - s, m). GPipe keeps m.
TEST(PipelineScheduleTest, InFlightMicroBatches) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::oneFOneB})
    for (const PipelineShape &shape : validShapes(kind)) {
      SCOPED_TRACE(shapeName(kind, shape));
      auto schedule = buildSchedule(kind, shape, nullptr);
      ASSERT_TRUE(schedule);
      ScheduleSimulation sim = simulateSchedule(shape, *schedule, 1, 2);
      ASSERT_EQ(sim.error, "");
      ASSERT_EQ(static_cast<int64_t>(sim.stagePeakInFlight.size()), shape.stages);
      for (int64_t s = 0; s < shape.stages; ++s)
        EXPECT_EQ(sim.stagePeakInFlight[s], kind == ScheduleKind::gpipe
                                                ? shape.microBatches
                                                : std::min(shape.stages - s, shape.microBatches))
            << "stage " << s;
      EXPECT_EQ(sim.peakInFlight, kind == ScheduleKind::gpipe
                                      ? shape.microBatches
                                      : std::min(shape.stages, shape.microBatches));
    }
}

// With v chunks of cost f/v and b/v per stage, interleaving cuts the bubble to
// (p-1)/(v m) of the busy time: makespan = (m + (p-1)/v)(f + b), below 1F1B's (m + p - 1)(f + b).
TEST(PipelineScheduleTest, InterleavedShrinksTheBubble) {
  for (const PipelineShape &shape : validShapes(ScheduleKind::interleaved))
    for (auto [f, b] : {std::pair(1.0, 1.0), std::pair(1.0, 2.0)}) {
      SCOPED_TRACE(shapeName(ScheduleKind::interleaved, shape) + " b=" + std::to_string(b));
      const double p = shape.stages, v = shape.virtualStages, m = shape.microBatches;
      auto schedule = buildSchedule(ScheduleKind::interleaved, shape, nullptr);
      ASSERT_TRUE(schedule);
      ScheduleSimulation sim = simulateSchedule(shape, *schedule, f / v, b / v);
      ASSERT_EQ(sim.error, "");
      EXPECT_NEAR(sim.makespan, (m + (p - 1) / v) * (f + b), 1e-9);
      EXPECT_NEAR(sim.bubbleRatio, (p - 1) / (v * m), 1e-12);
      PipelineShape flat{shape.stages, 1, shape.microBatches};
      ScheduleSimulation oneF =
          simulateSchedule(flat, *buildSchedule(ScheduleKind::oneFOneB, flat, nullptr), f, b);
      if (p > 1 && v > 1)
        EXPECT_LT(sim.makespan, oneF.makespan);
      else
        EXPECT_NEAR(sim.makespan, oneF.makespan, 1e-9);
    }
}

// Megatron's non-interleaved 1F1B, p = 4, m = 6: warm-up of p - s - 1 forwards.
TEST(PipelineScheduleTest, OneFOneBOrderIsMegatrons) {
  auto schedule = buildSchedule(ScheduleKind::oneFOneB, {4, 1, 6}, nullptr);
  ASSERT_TRUE(schedule);
  EXPECT_EQ(show((*schedule)[0]), " F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5");
  EXPECT_EQ(show((*schedule)[2]), " F2.0 F2.1 B2.0 F2.2 B2.1 F2.3 B2.2 F2.4 B2.3 F2.5 B2.4 B2.5");
  EXPECT_EQ(show((*schedule)[3]), " F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 F3.4 B3.4 F3.5 B3.5");
}

// Megatron's interleaved 1F1B, p = 2, v = 2, m = 4: micro-batches in groups of p per model
// chunk, backwards from the last chunk; stage 0 warms up with (p-1)*2 + (v-1)*p = 4 forwards,
// stage 1 with 2.
TEST(PipelineScheduleTest, InterleavedOrderIsMegatrons) {
  auto schedule = buildSchedule(ScheduleKind::interleaved, {2, 2, 4}, nullptr);
  ASSERT_TRUE(schedule);
  EXPECT_EQ(show((*schedule)[0]), " F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1"
                                  " B2.2 B2.3 B0.2 B0.3");
  EXPECT_EQ(show((*schedule)[1]), " F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2"
                                  " F3.3 B3.3 B1.2 B1.3");
}

TEST(PipelineScheduleTest, InvalidShapesAreNamed) {
  struct Case {
    ScheduleKind kind;
    PipelineShape shape;
    const char *error;
  } cases[] = {
      {ScheduleKind::oneFOneB,
       {0, 1, 4},
       "pipeline schedule '1f1b': stages must be positive, got 0"},
      {ScheduleKind::gpipe,
       {2, 1, 0},
       "pipeline schedule 'gpipe': micro-batches must be positive, got 0"},
      {ScheduleKind::interleaved,
       {2, 0, 4},
       "pipeline schedule 'interleaved-1f1b': virtual stages must be positive, got 0"},
      {ScheduleKind::oneFOneB,
       {2, 2, 4},
       "pipeline schedule '1f1b' runs one chunk per stage: virtual stages must be 1, got 2 (use "
       "interleaved-1f1b)"},
      {ScheduleKind::interleaved,
       {4, 2, 6},
       "pipeline schedule 'interleaved-1f1b' needs micro-batches divisible by stages: 6 "
       "micro-batches, 4 stages"},
  };
  for (const Case &c : cases) {
    std::string error;
    EXPECT_FALSE(buildSchedule(c.kind, c.shape, &error));
    EXPECT_EQ(error, c.error);
    EXPECT_FALSE(buildSchedule(c.kind, c.shape, nullptr));
  }
}

TEST(PipelineScheduleTest, CheckStageScheduleNamesTheBadStep) {
  PipelineShape shape{2, 1, 2};
  std::string error;
  std::vector<ScheduleStep> twice = {F(0, 0), F(0, 1), B(0, 0), F(0, 1), B(0, 1)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, twice, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 3 (forward of chunk 0, micro-batch 1): runs twice");
  std::vector<ScheduleStep> early = {F(1, 0), B(1, 1)};
  EXPECT_FALSE(checkStageSchedule(shape, 1, early, &error));
  EXPECT_EQ(error, "stage 1 schedule, step 1 (backward of chunk 1, micro-batch 1): runs before "
                   "its forward");
  std::vector<ScheduleStep> wrongStage = {F(1, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, wrongStage, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 0 (forward of chunk 1, micro-batch 0): chunk 1 runs "
                   "on stage 1");
  std::vector<ScheduleStep> outside = {F(0, 2)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, outside, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 0 (forward of chunk 0, micro-batch 2): micro-batch "
                   "must be in 0..1");
  std::vector<ScheduleStep> missing = {F(0, 0), F(0, 1), B(0, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, missing, &error));
  EXPECT_EQ(error, "stage 0 schedule, never runs backward of chunk 0, micro-batch 1");
  EXPECT_FALSE(checkStageSchedule(shape, 2, {}, &error));
  EXPECT_EQ(error, "stage 2 is outside 0..1");
}

TEST(PipelineScheduleTest, SimulationReportsDeadlocksAndMalformedSchedules) {
  PipelineShape shape{2, 1, 2};
  // Stage 0 waits for backward 0 of stage 1, which runs after its forward of micro-batch 1,
  // which needs stage 0's forward 1: a cycle.
  std::vector<std::vector<ScheduleStep>> cycle = {{F(0, 0), B(0, 0), F(0, 1), B(0, 1)},
                                                  {F(1, 1), F(1, 0), B(1, 0), B(1, 1)}};
  ScheduleSimulation sim = simulateSchedule(shape, cycle, 1, 1);
  EXPECT_EQ(sim.error, "the schedule deadlocks: stage 0 waits at step 1 (backward of chunk 0, "
                       "micro-batch 0); stage 1 waits at step 0 (forward of chunk 1, "
                       "micro-batch 1)");
  std::vector<std::vector<ScheduleStep>> oneStage = {cycle[0]};
  EXPECT_EQ(simulateSchedule(shape, oneStage, 1, 1).error,
            "the schedule has 1 stages, the shape 2");
  std::vector<std::vector<ScheduleStep>> missing = {cycle[0], {F(1, 0), B(1, 0)}};
  EXPECT_EQ(simulateSchedule(shape, missing, 1, 1).error,
            "stage 1 schedule, never runs forward of chunk 1, micro-batch 1");
}

} // namespace
} // namespace megac::schedule
