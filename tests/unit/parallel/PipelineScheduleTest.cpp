// The pipeline schedule generator against Megatron-LM's schedules and the closed-form bubble
// formulas of REFERENCE.md (Narayanan et al. 2021) and of the zero-bubble schedules (Qi et al.
// 2024, issue 35), and the simulator's deadlock detection.
#include "parallel/PipelineSchedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

namespace megac::schedule {
namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::gpipe,       ScheduleKind::oneFOneB,
                                      ScheduleKind::interleaved, ScheduleKind::zbH1,
                                      ScheduleKind::zbH2,        ScheduleKind::zbv};
constexpr ScheduleKind kZeroBubble[] = {ScheduleKind::zbH1, ScheduleKind::zbH2, ScheduleKind::zbv};

ScheduleStep F(int64_t chunk, int64_t mb) { return {StepKind::forward, chunk, mb}; }
ScheduleStep B(int64_t chunk, int64_t mb) { return {StepKind::backward, chunk, mb}; }
ScheduleStep Bi(int64_t chunk, int64_t mb) { return {StepKind::backwardInput, chunk, mb}; }
ScheduleStep W(int64_t chunk, int64_t mb) { return {StepKind::backwardWeight, chunk, mb}; }

std::string show(const std::vector<ScheduleStep> &steps) {
  std::string out;
  for (const ScheduleStep &s : steps)
    out += " " + stepLabel(s).substr(0, 1) + std::to_string(s.chunk) + "." +
           std::to_string(s.microBatch);
  return out;
}

// The shape `kind` runs p stages and m micro-batches in (zbv: two chunks per stage, V order).
PipelineShape shapeFor(ScheduleKind kind, int64_t p, int64_t m) {
  return {p, kind == ScheduleKind::zbv ? 2 : 1, m, placementOf(kind)};
}

// Every shape of the sweep the kind accepts: p in 1..4, v in 1..3, m in 1..8.
std::vector<PipelineShape> validShapes(ScheduleKind kind) {
  std::vector<PipelineShape> shapes;
  for (int64_t p = 1; p <= 4; ++p)
    for (int64_t v = 1; v <= 3; ++v)
      for (int64_t m = 1; m <= 8; ++m) {
        if (kind == ScheduleKind::zbv ? v != 2 : kind != ScheduleKind::interleaved && v != 1)
          continue;
        if (kind == ScheduleKind::interleaved && m % p != 0)
          continue;
        if (splitsBackward(kind) && m < p)
          continue;
        shapes.push_back({p, v, m, placementOf(kind)});
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
  EXPECT_EQ(parseScheduleKind("zb-h2"), ScheduleKind::zbH2);
  EXPECT_EQ(parseScheduleKind("zb-h3"), std::nullopt);
  EXPECT_EQ(describeStep(B(3, 5)), "backward of chunk 3, micro-batch 5");
  EXPECT_EQ(describeStep(Bi(3, 5)), "input-gradient backward of chunk 3, micro-batch 5");
  EXPECT_EQ(describeStep(W(3, 5)), "weight-gradient backward of chunk 3, micro-batch 5");
  EXPECT_EQ(stepLabel(F(1, 3)), "F3 c1");
  EXPECT_EQ(stepLabel(B(1, 3)), "B3 c1");
  EXPECT_EQ(stepLabel(Bi(1, 3)), "B3 c1");
  EXPECT_EQ(stepLabel(W(1, 3)), "W3 c1");
}

TEST(PipelineScheduleTest, StepFunctionNamesTheChunkFunction) {
  EXPECT_EQ(stepFunction({StepKind::forward, 3, 1}), "forward.c3");
  EXPECT_EQ(stepFunction({StepKind::backward, 0, 1}), "backward.c0");
  EXPECT_EQ(stepFunction({StepKind::backwardInput, 2, 0}), "backward_input.c2");
  EXPECT_EQ(stepFunction({StepKind::backwardWeight, 12, 5}), "backward_weight.c12");
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
        EXPECT_EQ(static_cast<int64_t>(steps.size()),
                  (splitsBackward(kind) ? 3 : 2) * shape.virtualStages * shape.microBatches);
        for (size_t i = 0; i < steps.size(); ++i) {
          const ScheduleStep &st = steps[i];
          EXPECT_EQ(stageOfChunk(shape, st.chunk), s) << describeStep(st);
          EXPECT_EQ(st.kind == StepKind::forward || st.kind == StepKind::backward,
                    !splitsBackward(kind) || st.kind == StepKind::forward)
              << describeStep(st);
          bool fresh =
              where.emplace(std::tuple(int(st.kind), st.chunk, st.microBatch), std::pair(s, i))
                  .second;
          EXPECT_TRUE(fresh) << describeStep(st) << " twice";
        }
        EXPECT_TRUE(checkStageSchedule(shape, s, steps, &error)) << error;
      }
      EXPECT_EQ(static_cast<int64_t>(where.size()),
                (splitsBackward(kind) ? 3 : 2) * chunks * shape.microBatches);
      StepKind backward = splitsBackward(kind) ? StepKind::backwardInput : StepKind::backward;
      for (int64_t c = 0; c < chunks; ++c)
        for (int64_t m = 0; m < shape.microBatches; ++m) {
          auto f = where.find({int(StepKind::forward), c, m});
          auto b = where.find({int(backward), c, m});
          ASSERT_TRUE(f != where.end() && b != where.end()) << "chunk " << c << " mb " << m;
          EXPECT_LT(f->second.second, b->second.second) << "chunk " << c << " mb " << m;
          if (!splitsBackward(kind))
            continue;
          auto w = where.find({int(StepKind::backwardWeight), c, m});
          ASSERT_TRUE(w != where.end()) << "chunk " << c << " mb " << m;
          EXPECT_LT(b->second.second, w->second.second) << "chunk " << c << " mb " << m;
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
      {ScheduleKind::zbH1,
       {4, 1, 3},
       "pipeline schedule 'zb-h1' needs at least as many micro-batches as stages (m >= p): 3 "
       "micro-batches, 4 stages"},
      {ScheduleKind::zbH2,
       {2, 2, 4},
       "pipeline schedule 'zb-h2' runs one chunk per stage: virtual stages must be 1, got 2 (use "
       "interleaved-1f1b)"},
      {ScheduleKind::zbv,
       {2, 3, 4, ChunkPlacement::vee},
       "pipeline schedule 'zbv' runs two chunks per stage in V order: virtual stages must be 2, "
       "got 3"},
      {ScheduleKind::zbv,
       {2, 2, 4},
       "pipeline schedule 'zbv' places chunks in V order: the shape's placement must be vee"},
      {ScheduleKind::interleaved,
       {2, 2, 4, ChunkPlacement::vee},
       "pipeline schedule 'interleaved-1f1b' places chunk c on stage c % stages: the shape's "
       "placement must be loop"},
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

TEST(PipelineScheduleTest, CheckStageScheduleNamesTheBadSplitStep) {
  PipelineShape shape{1, 1, 2};
  std::string error;
  EXPECT_TRUE(
      checkStageSchedule(shape, 0, {{F(0, 0), Bi(0, 0), F(0, 1), B(0, 1), W(0, 0)}}, &error))
      << error;
  std::vector<ScheduleStep> early = {F(0, 0), W(0, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, early, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 1 (weight-gradient backward of chunk 0, micro-batch "
                   "0): runs before its input-gradient backward");
  std::vector<ScheduleStep> noForward = {Bi(0, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, noForward, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 0 (input-gradient backward of chunk 0, micro-batch "
                   "0): runs before its forward");
  std::vector<ScheduleStep> mixed = {F(0, 0), Bi(0, 0), B(0, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, mixed, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 2 (backward of chunk 0, micro-batch 0): mixes the "
                   "whole backward with the split one (input- and weight-gradient steps)");
  std::vector<ScheduleStep> twice = {F(0, 0), Bi(0, 0), W(0, 0), W(0, 0)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, twice, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 3 (weight-gradient backward of chunk 0, micro-batch "
                   "0): runs twice");
  std::vector<ScheduleStep> noWeight = {F(0, 0), Bi(0, 0), W(0, 0), F(0, 1), Bi(0, 1)};
  EXPECT_FALSE(checkStageSchedule(shape, 0, noWeight, &error));
  EXPECT_EQ(error, "stage 0 schedule, never runs weight-gradient backward of chunk 0, micro-batch "
                   "1");
  // V order: stage 0 of 2 holds chunks 0 and 3, stage 1 chunks 1 and 2.
  PipelineShape vee{2, 2, 1, ChunkPlacement::vee};
  EXPECT_EQ(stageOfChunk(vee, 3), 0);
  EXPECT_EQ(stageOfChunk(vee, 2), 1);
  std::vector<ScheduleStep> wrongStage = {F(2, 0)};
  EXPECT_FALSE(checkStageSchedule(vee, 0, wrongStage, &error));
  EXPECT_EQ(error, "stage 0 schedule, step 0 (forward of chunk 2, micro-batch 0): chunk 2 runs "
                   "on stage 1");
}

// Per-step costs (a trace replayed): equal to the per-chunk form when every step of a chunk and
// kind has the chunk's time, and one slower step moves exactly what waits on it. zbv at p = 2,
// m = 3 (V placement, split backward): the last stage-1 B (chunk 1, micro-batch 2) 5 units
// slower delays stage 0's B of chunk 0, micro-batch 2, which waits for its gradient.
TEST(PipelineScheduleTest, PerStepCostsReplayATrace) {
  PipelineShape shape{2, 2, 3, ChunkPlacement::vee};
  auto steps = buildSchedule(ScheduleKind::zbv, shape, nullptr);
  ASSERT_TRUE(steps);
  PipelineCosts chunked{{{1, 2, 1}, {2, 1, 0.5}, {1, 1, 1}, {3, 2, 1}}, 0.25};
  PipelineCosts perStep{{StepCosts{}}, 0.25};
  perStep.steps.assign(3 * 4 * 3, -1);
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t m = 0; m < 3; ++m) {
      const StepCosts &k = chunked.chunks[size_t(c)];
      perStep.steps[size_t(stepCostIndex({StepKind::forward, c, m}, 4, 3))] = k.forward;
      perStep.steps[size_t(stepCostIndex({StepKind::backwardInput, c, m}, 4, 3))] = k.backwardInput;
      perStep.steps[size_t(stepCostIndex({StepKind::backwardWeight, c, m}, 4, 3))] =
          k.backwardWeight;
    }
  ScheduleSimulation a = simulateSchedule(shape, *steps, chunked, true);
  ScheduleSimulation b = simulateSchedule(shape, *steps, perStep, true);
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.bubble, b.bubble);
  auto endOf = [](const ScheduleSimulation &sim, StepKind kind, int64_t c, int64_t m) {
    for (const SimulatedStep &t : sim.timed)
      if (t.step == ScheduleStep{kind, c, m})
        return t.end;
    return -1.0;
  };
  perStep.steps[size_t(stepCostIndex({StepKind::backwardInput, 1, 2}, 4, 3))] += 5;
  ScheduleSimulation slow = simulateSchedule(shape, *steps, perStep, true);
  ASSERT_EQ(slow.error, "");
  EXPECT_EQ(endOf(slow, StepKind::backwardInput, 1, 2),
            endOf(b, StepKind::backwardInput, 1, 2) + 5);
  EXPECT_GT(endOf(slow, StepKind::backwardInput, 0, 2), endOf(b, StepKind::backwardInput, 0, 2));
  perStep.steps.pop_back();
  EXPECT_EQ(simulateSchedule(shape, *steps, perStep).error,
            "pipeline step costs: need 3 * chunks * micro-batches = 36 (stepCostIndex), got 35");
}

// A transfer is a rendezvous: it starts at the later of its send and its receive's posting
// (PipelineCosts::receiveLookahead). 1F1B at p = 2, m = 2, F = 1, B = 2, transfer 0.5, by hand:
// stage 0 runs F0 [0,1] F1 [1,2], stage 1 F0 [1.5,2.5] B0 [2.5,4.5]. Posted from the send (-1)
// or two steps ahead, stage 1's F1 (its step 2) has its input at 2.5 and runs [4.5,5.5], B1
// [5.5,7.5]; stage 0's B0 [5,7], B1 [8,10]. Posted at the step (0), stage 1 posts F1's receive
// at B0's end 4.5: F1 [5,6], B1 [6,8]; stage 0 posts B1's at B0's end 7: B1 [8.5,10.5].
TEST(PipelineScheduleTest, TransfersStartWhenTheirReceiveIsPosted) {
  PipelineShape shape{2, 1, 2};
  auto steps = buildSchedule(ScheduleKind::oneFOneB, shape, nullptr);
  ASSERT_TRUE(steps);
  auto makespan = [&](int64_t lookahead) {
    PipelineCosts costs{{StepCosts{1, 2, 0}}, 0.5, lookahead};
    ScheduleSimulation sim = simulateSchedule(shape, *steps, costs);
    EXPECT_EQ(sim.error, "");
    return sim.makespan;
  };
  EXPECT_DOUBLE_EQ(makespan(-1), 10.0);
  EXPECT_DOUBLE_EQ(makespan(kReceiveLookahead), 10.0);
  EXPECT_DOUBLE_EQ(makespan(0), 10.5);
  PipelineCosts bad{{StepCosts{1, 2, 0}}, 0.5, -2};
  EXPECT_EQ(simulateSchedule(shape, *steps, bad).error,
            "pipeline receive lookahead must be -1 (none) or >= 0 steps, got -2");
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

// Kahn's algorithm over every step of the schedule, independent of simulateSchedule: edges from
// each step to the next on its stage, from the forward of (c-1, m) to that of (c, m), from the
// (input-gradient) backward of (c+1, m) to that of (c, m), and from a forward to its backward and
// a backwardInput to its W. Every step ordered means the stages can run the schedule: no step
// waits on a step that waits on it.
bool dependencyOrderExists(const PipelineShape &shape,
                           const std::vector<std::vector<ScheduleStep>> &steps) {
  std::map<std::tuple<int, int64_t, int64_t>, std::pair<size_t, size_t>> where;
  for (size_t s = 0; s < steps.size(); ++s)
    for (size_t i = 0; i < steps[s].size(); ++i)
      where[{int(steps[s][i].kind), steps[s][i].chunk, steps[s][i].microBatch}] = {s, i};
  const int64_t chunks = shape.stages * shape.virtualStages;
  auto producers = [&](const ScheduleStep &st) {
    std::vector<std::tuple<int, int64_t, int64_t>> in;
    int64_t c = st.chunk, m = st.microBatch;
    switch (st.kind) {
    case StepKind::forward:
      if (c > 0)
        in.push_back({int(StepKind::forward), c - 1, m});
      break;
    case StepKind::backward:
    case StepKind::backwardInput:
      in.push_back({int(StepKind::forward), c, m});
      if (c + 1 < chunks)
        in.push_back({int(st.kind), c + 1, m});
      break;
    case StepKind::backwardWeight:
      in.push_back({int(StepKind::backwardInput), c, m});
      break;
    }
    return in;
  };
  // waiting[s][i]: producers (and the stage predecessor) not yet ordered.
  std::vector<std::vector<int>> waiting(steps.size());
  std::map<std::pair<size_t, size_t>, std::vector<std::pair<size_t, size_t>>> consumers;
  std::queue<std::pair<size_t, size_t>> ready;
  size_t total = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    waiting[s].assign(steps[s].size(), 0);
    for (size_t i = 0; i < steps[s].size(); ++i, ++total) {
      std::vector<std::pair<size_t, size_t>> before;
      if (i > 0)
        before.push_back({s, i - 1});
      for (auto key : producers(steps[s][i])) {
        auto it = where.find(key);
        if (it == where.end())
          return false; // a producer that never runs
        before.push_back(it->second);
      }
      waiting[s][i] = int(before.size());
      for (auto b : before)
        consumers[b].push_back({s, i});
      if (before.empty())
        ready.push({s, i});
    }
  }
  size_t ordered = 0;
  for (; !ready.empty(); ready.pop(), ++ordered)
    for (auto [s, i] : consumers[ready.front()])
      if (--waiting[s][i] == 0)
        ready.push({s, i});
  return ordered == total;
}

// Every (p, m) the zero-bubble kinds accept, p in 1..8 and m in p..3p: each stage's steps pass
// the checker, the whole schedule has a dependency order (so no deadlock), and the simulator
// finishes it. Shapes outside the rule (m < p) are refused.
TEST(PipelineScheduleTest, ZeroBubbleSchedulesAreDeadlockFreeAndComplete) {
  for (ScheduleKind kind : kZeroBubble)
    for (int64_t p = 1; p <= 8; ++p) {
      for (int64_t m = p; m <= 3 * p; ++m) {
        PipelineShape shape = shapeFor(kind, p, m);
        SCOPED_TRACE(shapeName(kind, shape));
        std::string error;
        auto schedule = buildSchedule(kind, shape, &error);
        ASSERT_TRUE(schedule) << error;
        ASSERT_EQ(static_cast<int64_t>(schedule->size()), p);
        for (int64_t s = 0; s < p; ++s)
          EXPECT_TRUE(checkStageSchedule(shape, s, (*schedule)[s], &error)) << error;
        EXPECT_TRUE(dependencyOrderExists(shape, *schedule));
        EXPECT_EQ(simulateSchedule(shape, *schedule, StepCosts{1, 1, 1}).error, "");
      }
      EXPECT_FALSE(buildSchedule(kind, shapeFor(kind, p, p - 1), nullptr));
    }
}

// The dependency-order check itself finds a cycle (the deadlock simulateSchedule reports below).
TEST(PipelineScheduleTest, DependencyOrderFindsACycle) {
  PipelineShape shape{2, 1, 2};
  EXPECT_TRUE(dependencyOrderExists(
      shape, {{F(0, 0), F(0, 1), B(0, 0), B(0, 1)}, {F(1, 0), B(1, 0), F(1, 1), B(1, 1)}}));
  EXPECT_FALSE(dependencyOrderExists(
      shape, {{F(0, 0), B(0, 0), F(0, 1), B(0, 1)}, {F(1, 1), F(1, 0), B(1, 0), B(1, 1)}}));
}

// Qi et al.'s closed forms for the bubble per step (F, B, W per micro-batch and stage,
// communication free), in the simulator's steadyBubble (stages start their next step when their
// own last step ends) and, for 1F1B and ZB-H1, also in `bubble` (every stage starts together),
// and exactly when they hold, over F, B, W in {0.5, 1, 1.5, 2, 3}: 1F1B (p-1)(F + B + W) always
// (its backward costs B + W); ZB-H1 (p-1)(F + B - W) for every m >= p iff W <= F and W <= B;
// ZB-H2 (p-1)(F + B - 2W) for every m >= 2p - 1 iff W <= F and 2W <= F + B. The costs are dyadic
// rationals, so every sum the simulator forms is exact and the comparisons are exact.
TEST(PipelineScheduleTest, ZeroBubbleMatchesTheClosedForms) {
  const double values[] = {0.5, 1, 1.5, 2, 3};
  for (double F : values)
    for (double B : values)
      for (double W : values) {
        SCOPED_TRACE("F=" + std::to_string(F) + " B=" + std::to_string(B) +
                     " W=" + std::to_string(W));
        const StepCosts c{F, B, W};
        bool h1Holds = true, h2Holds = true;
        for (int64_t p = 2; p <= 5; ++p)
          for (int64_t m = p; m <= 3 * p; ++m) {
            const double q = p - 1;
            PipelineShape shape{p, 1, m};
            auto sim = [&](ScheduleKind kind) {
              return simulateSchedule(shape, *buildSchedule(kind, shape, nullptr), c);
            };
            ScheduleSimulation oneF = sim(ScheduleKind::oneFOneB), h1 = sim(ScheduleKind::zbH1),
                               h2 = sim(ScheduleKind::zbH2);
            ASSERT_EQ(oneF.error + h1.error + h2.error, "");
            EXPECT_EQ(oneF.bubble, q * (F + B + W));
            EXPECT_EQ(oneF.steadyBubble, q * (F + B + W));
            h1Holds &= h1.bubble == q * (F + B - W) && h1.steadyBubble == q * (F + B - W);
            if (m >= 2 * p - 1)
              h2Holds &= h2.steadyBubble == q * (F + B - 2 * W);
            EXPECT_LE(h1.steadyBubble, oneF.steadyBubble);
            if (W <= F && W <= B && m >= 2 * p - 1) { // ZB-H2 no worse than ZB-H1
              EXPECT_LE(h2.steadyBubble, h1.steadyBubble);
            }
            // Busy time per stage m(F + B + W) in every schedule: the makespan is busy + bubble.
            EXPECT_EQ(h2.makespan, m * (F + B + W) + h2.bubble);
          }
        EXPECT_EQ(h1Holds, W <= F && W <= B);
        EXPECT_EQ(h2Holds, W <= F && 2 * W <= F + B);
      }
}

// F = B = W: ZB-H2 and ZBV (each of its two chunks costing half a stage's F, B, W) have no bubble
// between a stage's first and last step once m >= 2p - 1; with a synchronous optimizer step (all
// stages start together) ZB-H2 keeps (p-1)F, the last stage's wait for its first input, and ZBV,
// whose chunks are half a stage, (p-1)F/2.
TEST(PipelineScheduleTest, ZeroBubbleAtEqualCosts) {
  for (int64_t p = 1; p <= 8; ++p)
    for (int64_t m = 2 * p - 1; m <= 3 * p; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      PipelineShape flat{p, 1, m};
      ScheduleSimulation h2 =
          simulateSchedule(flat, *buildSchedule(ScheduleKind::zbH2, flat, nullptr), {2, 2, 2});
      ASSERT_EQ(h2.error, "");
      EXPECT_DOUBLE_EQ(h2.steadyBubble, 0);
      EXPECT_DOUBLE_EQ(h2.bubble, (p - 1) * 2.0);
      PipelineShape vee = shapeFor(ScheduleKind::zbv, p, m);
      ScheduleSimulation v =
          simulateSchedule(vee, *buildSchedule(ScheduleKind::zbv, vee, nullptr), {1, 1, 1});
      ASSERT_EQ(v.error, "");
      EXPECT_DOUBLE_EQ(v.steadyBubble, 0);
      EXPECT_DOUBLE_EQ(v.bubble, (p - 1) * 1.0); // (p-1)F/2 with a stage's F = 2
      EXPECT_DOUBLE_EQ(v.makespan, m * 6.0 + v.bubble);
    }
}

// The table's memory column as (chunk, micro-batch) pairs between a forward and its W: ZB-H1 p on
// every stage (1F1B's stage 0), ZB-H2 2p - 1 on stage 0 and never more, ZBV at most 2p pairs of
// half-stage chunks: p micro-batches' activations, 1F1B's.
TEST(PipelineScheduleTest, ZeroBubblePeakInFlight) {
  for (int64_t p = 1; p <= 8; ++p)
    for (int64_t m = p; m <= 3 * p; ++m) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      auto sim = [&](ScheduleKind kind) {
        PipelineShape shape = shapeFor(kind, p, m);
        return simulateSchedule(shape, *buildSchedule(kind, shape, nullptr), {1, 1, 1});
      };
      ScheduleSimulation h1 = sim(ScheduleKind::zbH1), h2 = sim(ScheduleKind::zbH2),
                         v = sim(ScheduleKind::zbv);
      for (int64_t s = 0; s < p; ++s)
        EXPECT_EQ(h1.stagePeakInFlight[s], p) << "stage " << s;
      EXPECT_EQ(h2.peakInFlight, std::min(m, 2 * p - 1));
      EXPECT_LE(v.peakInFlight, 2 * p);
      if (m >= 2 * p - 1) {
        EXPECT_EQ(v.peakInFlight, 2 * p);
      }
    }
}

// ZB-H1, p = 4, m = 6 (Qi et al.'s figure 3): stage s warms up like 1F1B, delays s W's, and runs
// them last; stage 0 runs every W right after its B.
TEST(PipelineScheduleTest, ZbH1Order) {
  auto schedule = buildSchedule(ScheduleKind::zbH1, {4, 1, 6}, nullptr);
  ASSERT_TRUE(schedule);
  EXPECT_EQ(show((*schedule)[0]), " F0.0 F0.1 F0.2 F0.3 B0.0 W0.0 F0.4 B0.1 W0.1 F0.5 B0.2 W0.2"
                                  " B0.3 W0.3 B0.4 W0.4 B0.5 W0.5");
  EXPECT_EQ(show((*schedule)[3]), " F3.0 B3.0 F3.1 B3.1 F3.2 B3.2 F3.3 B3.3 W3.0 F3.4 B3.4 W3.1"
                                  " F3.5 B3.5 W3.2 W3.3 W3.4 W3.5");
}

// ZB-H2, p = 2, m = 4: stage 0 warms up with 2p - 1 = 3 forwards and never holds more than 3
// micro-batches before their W; stage 1 warms up with one and keeps its last 2s + 1 = 3 W's for
// after its last B.
TEST(PipelineScheduleTest, ZbH2Order) {
  auto schedule = buildSchedule(ScheduleKind::zbH2, {2, 1, 4}, nullptr);
  ASSERT_TRUE(schedule);
  EXPECT_EQ(show((*schedule)[0]), " F0.0 F0.1 F0.2 B0.0 W0.0 B0.1 F0.3 B0.2 W0.1 W0.2 B0.3 W0.3");
  EXPECT_EQ(show((*schedule)[1]), " F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 W1.0 F1.3 B1.3 W1.1 W1.2 W1.3");
}

// ZBV, p = 2, m = 3 (built for 2p - 1 = 3): stage 0 holds chunks 0 and 3 (the loss), stage 1
// chunks 1 and 2, the turn of the V.
TEST(PipelineScheduleTest, ZbvOrder) {
  auto schedule = buildSchedule(ScheduleKind::zbv, {2, 2, 3, ChunkPlacement::vee}, nullptr);
  ASSERT_TRUE(schedule);
  EXPECT_EQ(show((*schedule)[0]), " F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 B3.1 W3.1 B0.0 W0.0 F3.2"
                                  " B3.2 W3.2 B0.1 W0.1 B0.2 W0.2");
  EXPECT_EQ(show((*schedule)[1]), " F1.0 F2.0 F1.1 F2.1 B2.0 W2.0 F1.2 B1.0 W1.0 F2.2 B2.1 W2.1"
                                  " B1.1 B2.2 B1.2 W1.1 W2.2 W1.2");
}

// Per-chunk costs (issue 35 step 1): equal per-chunk costs are the uniform simulation; a
// flow shop's closed form holds with different stages; the communication term costs two hops
// per stage at m = p; V placement's stage-local hand-over is free.
TEST(PipelineScheduleTest, PerChunkCostsEqualToUniformAreTheUniformSimulation) {
  for (ScheduleKind kind : kAllKinds)
    for (int64_t p = 1; p <= 4; ++p) {
      int64_t v = kind == ScheduleKind::zbv || kind == ScheduleKind::interleaved ? 2 : 1;
      PipelineShape shape{p, v, 2 * p, placementOf(kind)};
      auto steps = buildSchedule(kind, shape, nullptr);
      ASSERT_TRUE(steps) << scheduleName(kind);
      StepCosts each{1.5, 2, 0.5};
      ScheduleSimulation uniform = simulateSchedule(shape, *steps, each);
      ScheduleSimulation perChunk =
          simulateSchedule(shape, *steps, PipelineCosts{std::vector<StepCosts>(p * v, each), 0});
      ASSERT_EQ(perChunk.error, "");
      EXPECT_EQ(perChunk.makespan, uniform.makespan) << scheduleName(kind) << " p " << p;
      EXPECT_EQ(perChunk.bubble, uniform.bubble) << scheduleName(kind) << " p " << p;
      EXPECT_EQ(perChunk.steadyBubble, uniform.steadyBubble) << scheduleName(kind) << " p " << p;
    }
}

TEST(PipelineScheduleTest, PerChunkCostsFlowShopClosedForm) {
  // GPipe's forwards with nothing after them are a flow shop of m identical jobs: makespan =
  // sum_s F_s + (m - 1) max_s F_s; stage s is busy m F_s. Costs are small integers: exact.
  for (int64_t m = 1; m <= 6; ++m) {
    PipelineShape shape{3, 1, m};
    auto steps = buildSchedule(ScheduleKind::gpipe, shape, nullptr);
    ASSERT_TRUE(steps);
    PipelineCosts costs{{{1, 0, 0}, {3, 0, 0}, {2, 0, 0}}, 0};
    ScheduleSimulation sim = simulateSchedule(shape, *steps, costs);
    ASSERT_EQ(sim.error, "");
    EXPECT_EQ(sim.makespan, 6.0 + double(m - 1) * 3) << "m " << m;
    EXPECT_EQ(sim.stageBusy, (std::vector<double>{double(m), 3.0 * m, 2.0 * m})) << "m " << m;
  }
}

TEST(PipelineScheduleTest, TransferCostsTwoHopsPerStage) {
  // GPipe: the last micro-batch's forward crosses p - 1 links and the first backward p - 1 back,
  // so the bubble is (p - 1)(F + B + 2T) for every m (dyadic costs: exact). 1F1B pays more once
  // m > p: each steady-state F-B pair waits for a round trip (p = 2, m = 4: 5, not 4).
  const double F = 1, Bc = 2, T = 0.5;
  for (int64_t p = 2; p <= 6; ++p)
    for (int64_t m = p; m <= 2 * p; ++m) {
      PipelineShape shape{p, 1, m};
      auto steps = buildSchedule(ScheduleKind::gpipe, shape, nullptr);
      ASSERT_TRUE(steps);
      ScheduleSimulation sim = simulateSchedule(shape, *steps, PipelineCosts{{{F, Bc, 0}}, T});
      ASSERT_EQ(sim.error, "");
      EXPECT_EQ(sim.bubble, double(p - 1) * (F + Bc + 2 * T)) << "p " << p << " m " << m;
    }
  PipelineShape shape{2, 1, 4};
  auto steps = buildSchedule(ScheduleKind::oneFOneB, shape, nullptr);
  ASSERT_TRUE(steps);
  EXPECT_EQ(simulateSchedule(shape, *steps, PipelineCosts{{{F, Bc, 0}}, T}).bubble, 5.0);
}

TEST(PipelineScheduleTest, TimedStepsAndVeeHandOverIsFree) {
  // zbv, p = 2: chunk 1 -> chunk 2 stays on stage 1 (V placement), so its forward of
  // micro-batch 0 starts when chunk 1's ends, while chunk 0 -> 1 crosses and waits T.
  const double T = 0.25;
  PipelineShape shape{2, 2, 4, ChunkPlacement::vee};
  auto steps = buildSchedule(ScheduleKind::zbv, shape, nullptr);
  ASSERT_TRUE(steps);
  ScheduleSimulation sim = simulateSchedule(shape, *steps, PipelineCosts{{{1, 1, 1}}, T}, true);
  ASSERT_EQ(sim.error, "");
  ASSERT_EQ(sim.timed.size(), size_t(2 * 4 * 3 * 2));
  auto find = [&](StepKind kind, int64_t chunk, int64_t mb) {
    for (const SimulatedStep &t : sim.timed)
      if (t.step == ScheduleStep{kind, chunk, mb})
        return t;
    ADD_FAILURE() << "no step";
    return SimulatedStep{};
  };
  SimulatedStep f0 = find(StepKind::forward, 0, 0), f1 = find(StepKind::forward, 1, 0);
  SimulatedStep f2 = find(StepKind::forward, 2, 0);
  EXPECT_EQ(f1.stage, 1);
  EXPECT_EQ(f1.producerStage, 0);
  EXPECT_EQ(f1.inputReady, f0.end + T);
  EXPECT_EQ(f2.stage, 1);
  EXPECT_EQ(f2.producerStage, -1);
  EXPECT_GE(f2.start, f1.end);
  EXPECT_EQ(f2.inputReady, f1.end);
  for (const SimulatedStep &t : sim.timed)
    EXPECT_EQ(t.end - t.start, 1.0) << describeStep(t.step);
}

TEST(PipelineScheduleTest, PipelineCostsErrorsNameTheProblem) {
  PipelineShape shape{2, 1, 2};
  auto steps = buildSchedule(ScheduleKind::oneFOneB, shape, nullptr);
  ASSERT_TRUE(steps);
  EXPECT_NE(simulateSchedule(shape, *steps, PipelineCosts{{{1, 1, 0}, {1, 1, 0}, {1, 1, 0}}, 0})
                .error.find("need 1 or 2 (one per chunk), got 3"),
            std::string::npos);
  EXPECT_NE(simulateSchedule(shape, *steps, PipelineCosts{{{1, -1, 0}}, 0}).error.find("chunk 0"),
            std::string::npos);
  EXPECT_NE(simulateSchedule(shape, *steps, PipelineCosts{{{1, 1, 0}}, -1})
                .error.find("transfer time must be finite and >= 0"),
            std::string::npos);
}

} // namespace
} // namespace megac::schedule
