// The pipeline runner against a sequential evaluation: ranks as threads (ThreadCommunicator)
// running toy chunk functions (FakeChunkExecutor) under every schedule, on meshes with the pp
// axis first or last and a data-parallel axis beside it.
#include "runtime/train/PipelineRunner.h"

#include "runtime/plan/plan_generated.h"
#include "tests/unit/train/PipelineRunnerFakes.h"

#include <gtest/gtest.h>

#include <thread>

namespace megac::runtime::train {
namespace {

using schedule::PipelineShape;
using schedule::ScheduleKind;
using schedule::ScheduleStep;
using schedule::StepKind;
using testing::f64;
using testing::FakeChunkExecutor;
using testing::kWidth;
using testing::labels;
using testing::Sequential;
using testing::sequential;
using testing::ThreadCommunicator;
using testing::ThreadWorld;

struct Case {
  ScheduleKind kind;
  PipelineShape shape;
  int pieces;          // tensors crossing each cut
  int dp;              // data-parallel replicas
  bool ppLast = false; // mesh [dp, pp] instead of [pp, dp]
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const Case &c = info.param;
  std::string kind = c.kind == ScheduleKind::gpipe      ? "gpipe"
                     : c.kind == ScheduleKind::oneFOneB ? "oneFOneB"
                     : c.kind == ScheduleKind::zbH1     ? "zbH1"
                     : c.kind == ScheduleKind::zbH2     ? "zbH2"
                     : c.kind == ScheduleKind::zbv      ? "zbv"
                                                        : "interleaved";
  return kind + "_p" + std::to_string(c.shape.stages) + "v" +
         std::to_string(c.shape.virtualStages) + "m" + std::to_string(c.shape.microBatches) +
         "_pieces" + std::to_string(c.pieces) + "_dp" + std::to_string(c.dp) +
         (c.ppLast ? "_ppLast" : "");
}

class PipelineRunnerTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineRunnerTest, MatchesSequentialEvaluation) {
  const Case &tc = GetParam();
  const int64_t p = tc.shape.stages, chunks = p * tc.shape.virtualStages,
                mbs = tc.shape.microBatches;
  const bool split = schedule::splitsBackward(tc.kind);
  auto stageOfChunk = [&](int64_t c) { return schedule::stageOfChunk(tc.shape, c); };
  std::string error;
  auto schedule = schedule::buildSchedule(tc.kind, tc.shape, &error);
  ASSERT_TRUE(schedule) << error;

  comm::Mesh mesh;
  if (tc.ppLast)
    mesh = {{"dp", "pp"}, {tc.dp, p}};
  else
    mesh = {{"pp", "dp"}, {p, tc.dp}};
  const uint32_t ppAxis = tc.ppLast ? 1 : 0;
  ThreadWorld world(mesh);
  world.setTimeout(std::chrono::milliseconds(5000)); // a wrong tag or peer fails, not hangs
  const int size = world.size();
  auto stageOf = [&](int r) { return tc.ppLast ? r % p : r / tc.dp; };
  auto dpOf = [&](int r) { return tc.ppLast ? r / p : r % tc.dp; };

  std::vector<std::unique_ptr<FakeChunkExecutor>> executors;
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  std::vector<std::optional<StatusOr<double>>> results(size);
  for (int r = 0; r < size; ++r) {
    executors.push_back(std::make_unique<FakeChunkExecutor>(stageOf(r), p, chunks, tc.pieces,
                                                            kWidth, split, tc.shape.placement));
    comms.push_back(std::make_unique<ThreadCommunicator>(world, r));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      FakeChunkExecutor &ex = *executors[r];
      PipelineRun run;
      run.postReceivesEarly = r % 2 == 1; // both protocols, the posted-ahead one on odd ranks
      run.steps = (*schedule)[stageOf(r)];
      run.stages = p;
      run.chunks = chunks;
      run.microBatches = mbs;
      run.ppAxis = ppAxis;
      run.placement = tc.shape.placement;
      run.setDataInputs = testing::dataSetter(ex, dpOf(r), mbs);
      results[r] = runPipelinedMicroBatches(ex, *comms[r], run);
    });
  for (std::thread &t : threads)
    t.join();

  for (int r = 0; r < size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(results[r]->isOk()) << results[r]->status().message();
    int64_t stage = stageOf(r);
    Sequential want = sequential(chunks, tc.pieces, mbs, dpOf(r));
    double loss = results[r]->value();
    if (stage == stageOfChunk(chunks - 1))
      EXPECT_NEAR(loss, want.loss, 1e-12 * std::abs(want.loss));
    else
      EXPECT_EQ(loss, 0.0);
    for (int64_t c = 0; c < chunks; ++c) {
      if (stageOfChunk(c) != stage)
        continue;
      StatusOr<HostTensor> grad = executors[r]->state("grad.w" + std::to_string(c));
      ASSERT_TRUE(grad.isOk());
      for (int64_t i = 0; i < kWidth; ++i)
        EXPECT_NEAR(grad->data<double>()[i], want.grads[c][i], 1e-12 * std::abs(want.grads[c][i]))
            << "grad.w" << c << "[" << i << "]";
    }
    // The functions ran in schedule order, each once.
    std::vector<std::string> order;
    for (const ScheduleStep &s : (*schedule)[stage])
      order.push_back(schedule::stepFunction(s));
    EXPECT_EQ(executors[r]->log, order);
    EXPECT_EQ(comms[r]->flushes, 1);
  }
  // Every message was received; each cut between stages carries `pieces` tensors each way per
  // micro-batch (none when both chunks share a stage: stages == 1, zbv's turn on the last stage).
  EXPECT_EQ(world.pending(), 0u);
  int64_t cuts = 0;
  for (int64_t c = 0; c + 1 < chunks; ++c)
    cuts += stageOfChunk(c) != stageOfChunk(c + 1);
  EXPECT_EQ(world.sent(), 2 * tc.pieces * cuts * mbs * tc.dp);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineRunnerTest,
    ::testing::Values(
        Case{ScheduleKind::oneFOneB, {2, 1, 4}, 1, 1},
        Case{ScheduleKind::oneFOneB, {3, 1, 5}, 2, 2},
        Case{ScheduleKind::oneFOneB, {3, 1, 2}, 1, 2, true},
        Case{ScheduleKind::gpipe, {2, 1, 3}, 2, 1},
        Case{ScheduleKind::gpipe, {3, 1, 3}, 1, 2, true},
        Case{ScheduleKind::interleaved, {2, 2, 4}, 2, 2},
        Case{ScheduleKind::interleaved, {2, 1, 2}, 1, 1},
        Case{ScheduleKind::interleaved, {3, 2, 6}, 1, 2, true},
        Case{ScheduleKind::interleaved, {3, 2, 3}, 2, 1},
        Case{ScheduleKind::interleaved, {1, 2, 3}, 2, 1},
        Case{ScheduleKind::oneFOneB, {1, 1, 2}, 1, 1},
        // Split backward: B sends, W keeps its inputs.
        Case{ScheduleKind::zbH1, {2, 1, 2}, 1, 1}, Case{ScheduleKind::zbH1, {3, 1, 5}, 2, 2},
        Case{ScheduleKind::zbH1, {4, 1, 8}, 1, 1, true}, Case{ScheduleKind::zbH2, {2, 1, 4}, 2, 2},
        Case{ScheduleKind::zbH2, {4, 1, 8}, 1, 1}, Case{ScheduleKind::zbH2, {3, 1, 3}, 1, 2, true},
        // V placement: chunks s and 2p - 1 - s on stage s.
        Case{ScheduleKind::zbv, {2, 2, 2, schedule::ChunkPlacement::vee}, 1, 1},
        Case{ScheduleKind::zbv, {3, 2, 6, schedule::ChunkPlacement::vee}, 2, 2},
        Case{ScheduleKind::zbv, {4, 2, 8, schedule::ChunkPlacement::vee}, 1, 1, true}),
    caseName);

// One rank, two chunks (stages == 1): activations stay on the rank.
struct SingleRank {
  ThreadWorld world{comm::Mesh{{"pp"}, {1}}};
  ThreadCommunicator comm{world, 0};
  FakeChunkExecutor executor{0, 1, 2, 1};
  PipelineRun run;
  SingleRank() {
    run.steps = (*schedule::buildSchedule(ScheduleKind::interleaved, {1, 2, 2}, nullptr))[0];
    run.chunks = 2;
    run.microBatches = 2;
    run.setDataInputs = [this](int64_t m) -> Status {
      HostTensor ids = HostTensor::zeros(DType::i64, {kWidth});
      RETURN_IF_ERROR(executor.setInput("input_ids", ids));
      RETURN_IF_ERROR(executor.setInput("labels", f64({kWidth}, labels(m, 0))));
      return executor.setInput("loss_normalizer", f64({}, {0.5}));
    };
  }
  std::string error() {
    StatusOr<double> result = runPipelinedMicroBatches(executor, comm, run);
    return result.isOk() ? "" : result.status().message();
  }
};

TEST(PipelineRunnerErrors, NamesTheFailingStep) {
  SingleRank s;
  s.executor.failOn("backward.c1", 2);
  const ScheduleStep *second = nullptr;
  int seen = 0;
  for (const ScheduleStep &step : s.run.steps)
    if (step.kind == StepKind::backward && step.chunk == 1 && ++seen == 2)
      second = &step;
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(s.error(), "backward of chunk 1, micro-batch " + std::to_string(second->microBatch) +
                           ": injected failure in 'backward.c1'");
}

TEST(PipelineRunnerErrors, DataInputErrorsNameTheStep) {
  SingleRank s;
  s.run.setDataInputs = [](int64_t m) { return Status::error("no data for " + std::to_string(m)); };
  EXPECT_EQ(s.error(), "forward of chunk 0, micro-batch 0: no data for 0 (setting the "
                       "micro-batch's data inputs)");
}

// A step kind the chunk's functions do not match (a split step on a whole backward) is refused
// before anything runs.
TEST(PipelineRunnerErrors, RefusesAStepKindTheProgramLacks) {
  SingleRank s;
  s.run.steps = {{StepKind::forward, 0, 0},
                 {StepKind::forward, 1, 0},
                 {StepKind::backwardInput, 1, 0},
                 {StepKind::backwardWeight, 1, 0},
                 {StepKind::backward, 0, 0}};
  s.run.microBatches = 1;
  EXPECT_EQ(s.error(), "input-gradient backward of chunk 1, micro-batch 0: the program has "
                       "'backward.c1', not 'backward_input.c1'");
  EXPECT_TRUE(s.executor.log.empty());
}

TEST(PipelineRunnerErrors, RejectsAMismatchedMeshOrProgram) {
  ThreadWorld world(comm::Mesh{{"pp", "dp"}, {2, 2}});
  ThreadCommunicator comm(world, 1);
  FakeChunkExecutor executor(0, 2, 4, 1);
  PipelineRun run;
  run.stages = 3;
  run.chunks = 3;
  EXPECT_EQ(runPipelinedMicroBatches(executor, comm, run).status().message(),
            "mesh axis 'pp' has size 2, the pipeline 3 stages");
  run.ppAxis = 2;
  EXPECT_EQ(runPipelinedMicroBatches(executor, comm, run).status().message(),
            "the pp axis index 2 is outside the communicator's mesh (2 axes)");
  // Rank 1 is stage 0 of a 2-stage, 4-chunk pipeline; this executor lacks chunk 2.
  FakeChunkExecutor twoChunks(0, 2, 2, 1);
  run = PipelineRun{};
  run.stages = 2;
  run.chunks = 4;
  run.microBatches = 2;
  run.steps = (*schedule::buildSchedule(ScheduleKind::interleaved, {2, 2, 2}, nullptr))[0];
  EXPECT_EQ(runPipelinedMicroBatches(twoChunks, comm, run).status().message(),
            "rank 1 (stage 0) has no function 'forward.c2'");
  // Stage 1 of a 6-chunk model in a 4-chunk pipeline: its chunk 3 is not the last chunk.
  ThreadCommunicator stage1(world, 2);
  FakeChunkExecutor wrongModel(1, 2, 6, 1);
  run.steps = (*schedule::buildSchedule(ScheduleKind::interleaved, {2, 2, 2}, nullptr))[1];
  EXPECT_EQ(runPipelinedMicroBatches(wrongModel, stage1, run).status().message(),
            "rank 2: 'forward.c3' must not have output 'act.c4' (or 'act.c4.<i>')");
}

TEST(PipelineRunnerErrors, ReceiveSizeMismatchIsReported) {
  // Stage 1 of two expects act.c1 of 3 elements; stage 0 (a 4-wide model) sends 4.
  ThreadWorld world(comm::Mesh{{"pp"}, {2}});
  world.setTimeout(std::chrono::milliseconds(2000));
  ThreadCommunicator c0(world, 0), c1(world, 1);
  FakeChunkExecutor e0(0, 2, 2, 1, 4), e1(1, 2, 2, 1, 3);
  auto schedule = *schedule::buildSchedule(ScheduleKind::oneFOneB, {2, 1, 1}, nullptr);
  PipelineRun r0, r1;
  for (auto [run, stage] : {std::pair(&r0, 0), std::pair(&r1, 1)}) {
    run->steps = schedule[stage];
    run->stages = 2;
    run->chunks = 2;
  }
  r0.setDataInputs = [&](int64_t) {
    return e0.setInput("input_ids", HostTensor::zeros(DType::i64, {4}));
  };
  r1.setDataInputs = [&](int64_t) -> Status {
    RETURN_IF_ERROR(e1.setInput("labels", HostTensor::zeros(DType::f64, {3})));
    return e1.setInput("loss_normalizer", HostTensor::zeros(DType::f64, {}));
  };
  std::optional<StatusOr<double>> result0;
  std::thread t([&] { result0 = runPipelinedMicroBatches(e0, c0, r0); });
  StatusOr<double> result1 = runPipelinedMicroBatches(e1, c1, r1);
  t.join();
  EXPECT_EQ(result1.status().message(),
            "forward of chunk 1, micro-batch 0: rank 1: recv from rank 0, tag 2: the message has "
            "32 bytes, the receiver expects 24 (receiving 'act.c1' from rank 0, tag 2)");
  // Stage 0 then waits in vain for the gradient.
  EXPECT_EQ(result0->status().message(),
            "backward of chunk 0, micro-batch 0: rank 0: recv from rank 1, tag 3 timed out "
            "(receiving 'grad.act.c1' from rank 1, tag 3)");
}

// A plan of mesh [pp = 2, dp = 2] whose programs (one per stage) hold `schedules`, with empty
// chunk functions: enough for the loader and pipelineRunForRank.
std::vector<uint8_t> pipelinePlan(const std::vector<std::vector<ScheduleStep>> &schedules,
                                  const char *ppName, bool withPipeline) {
  namespace fb = megac::plan;
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Program>> programs;
  for (size_t s = 0; s < schedules.size(); ++s) {
    std::vector<flatbuffers::Offset<fb::Function>> fns;
    std::vector<flatbuffers::Offset<fb::ScheduleStep>> steps;
    for (int64_t c = s; c < 4; c += 2)
      for (const char *kind : {"forward.c", "backward.c"})
        fns.push_back(fb::CreateFunctionDirect(b, (kind + std::to_string(c)).c_str()));
    for (const ScheduleStep &step : schedules[s])
      steps.push_back(fb::CreateScheduleStep(
          b, step.kind == StepKind::forward ? fb::StepKind::Forward : fb::StepKind::Backward,
          uint32_t(step.chunk), uint32_t(step.microBatch)));
    std::string name = "stage" + std::to_string(s);
    programs.push_back(fb::CreateProgramDirect(b, name.c_str(), 0, nullptr, nullptr, nullptr,
                                               nullptr, &fns, &steps));
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> axisNames = {b.CreateString(ppName),
                                                                     b.CreateString("dp")};
  std::vector<int64_t> axisSizes = {2, 2};
  auto mesh = fb::CreateMeshDirect(b, &axisNames, &axisSizes);
  std::vector<flatbuffers::Offset<fb::RankEntry>> ranks;
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int64_t> coords = {r / 2, r % 2};
    ranks.push_back(fb::CreateRankEntryDirect(b, uint32_t(r / 2), &coords));
  }
  auto pipeline = withPipeline ? fb::CreatePipelineDirect(b, 2, 2, 3, "interleaved-1f1b")
                               : flatbuffers::Offset<fb::Pipeline>();
  b.Finish(fb::CreatePlanDirect(b, uint32_t(fb::FormatVersion::Current), "megac test", mesh,
                                &programs, &ranks, "", 0, pipeline),
           "MPLN");
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

// Each stage's two chunks in GPipe order (every forward of both chunks, then every backward):
// a complete schedule that no generator makes for two chunks per stage.
std::vector<std::vector<ScheduleStep>> gpipeOverTwoChunks() {
  std::vector<std::vector<ScheduleStep>> schedules(2);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t c : {s, s + 2})
      for (int64_t m = 0; m < 3; ++m)
        schedules[s].push_back({StepKind::forward, c, m});
    for (int64_t c : {s + 2, s})
      for (int64_t m = 0; m < 3; ++m)
        schedules[s].push_back({StepKind::backward, c, m});
  }
  return schedules;
}

TEST(PipelineRunForRank, ReadsTheRanksScheduleFromThePlan) {
  // Steps unlike any generator's: they must be copied as they are.
  auto schedules = gpipeOverTwoChunks();
  StatusOr<LoadedPlan> plan = loadPlanFromBytes(pipelinePlan(schedules, "pp", true));
  ASSERT_TRUE(plan.isOk()) << plan.status().message();
  for (int rank = 0; rank < 4; ++rank) {
    StatusOr<PipelineRun> run = pipelineRunForRank(*plan, rank);
    ASSERT_TRUE(run.isOk()) << run.status().message();
    EXPECT_EQ(run->steps, schedules[rank / 2]) << "rank " << rank;
    EXPECT_EQ(run->stages, 2);
    EXPECT_EQ(run->chunks, 4);
    EXPECT_EQ(run->microBatches, 3);
    EXPECT_EQ(run->ppAxis, 0u);
    EXPECT_FALSE(run->setDataInputs);
  }
  EXPECT_EQ(pipelineRunForRank(*plan, 4).status().message(),
            "rank 4 is not in the plan's rank table (4 ranks)");

  StatusOr<LoadedPlan> noPipeline = loadPlanFromBytes(pipelinePlan({{}, {}}, "pp", false));
  ASSERT_TRUE(noPipeline.isOk()) << noPipeline.status().message();
  EXPECT_EQ(pipelineRunForRank(*noPipeline, 0).status().message(),
            "the plan has no pipeline (Plan.pipeline is absent)");
  StatusOr<LoadedPlan> noSchedule = loadPlanFromBytes(pipelinePlan({{}, {}}, "pp", true));
  ASSERT_TRUE(noSchedule.isOk()) << noSchedule.status().message();
  EXPECT_EQ(pipelineRunForRank(*noSchedule, 3).status().message(),
            "program 'stage1' (rank 3) has no pipeline schedule");
  StatusOr<LoadedPlan> noPpAxis = loadPlanFromBytes(pipelinePlan(schedules, "stages", true));
  ASSERT_TRUE(noPpAxis.isOk()) << noPpAxis.status().message();
  EXPECT_EQ(pipelineRunForRank(*noPpAxis, 0).status().message(),
            "the plan's pipeline has 2 stages but its mesh has no axis named 'pp'");
}

// The plan validator checks the whole schedule when the plan loads (the runner runs it as
// stored): a step missing, or a backward before its forward, is refused, naming the program.
TEST(PipelineRunForRank, APlanWithAMalformedScheduleDoesNotLoad) {
  auto missing = gpipeOverTwoChunks();
  missing[0].pop_back();
  StatusOr<LoadedPlan> plan = loadPlanFromBytes(pipelinePlan(missing, "pp", true));
  ASSERT_FALSE(plan.isOk());
  EXPECT_NE(
      plan.status().message().find(
          "program 'stage0': stage 0 schedule, never runs backward of chunk 0, micro-batch 2"),
      std::string::npos)
      << plan.status().message();
  auto early = gpipeOverTwoChunks();
  early[1].insert(early[1].begin(), {StepKind::backward, 3, 0});
  plan = loadPlanFromBytes(pipelinePlan(early, "pp", true));
  ASSERT_FALSE(plan.isOk());
  EXPECT_NE(plan.status().message().find(
                "program 'stage1': stage 1 schedule, step 0 (backward of chunk 3, micro-batch 0): "
                "runs before its forward"),
            std::string::npos)
      << plan.status().message();
}

} // namespace
} // namespace megac::runtime::train
